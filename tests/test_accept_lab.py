"""`ccrhost slurm accept` end to end on an 8-node Slurm lab (issue 50).

node1-7 arrive drained ("new node"); node8 runs someone's job all along.
Faults, each caught by one stage and invisible before it:
- node3: GPU 0 slows after 60 s of sustained load (gemm_throttle): S1's 30 s
  GEMM passes, the 5-minute soak (S5) FAILs gemm_slow;
- node5: cannot reach node1, node2, node4 and node6 (unreachable routes):
  every node-local stage passes, the full mesh (S2) prunes it;
- node7: halves its ring edge in groups of 4 or more (group_slow=4): its
  pairs pass, incremental admission (S4) bisects the group to it.
The run certifies exactly node1, node2, node4 and node6, resumes only them,
drains the others naming the stage and code, and never touches node8. With
node5's routes mended, a second run (node5 with node1 and node2 as partners)
certifies it by re-running only the stages it had not passed; node2, given
another GPU board meanwhile (a repair's: a new UUID), runs every stage again,
and node1 only its passive check.

The mesh's runner is proven alone on the same lab first (one lab for the
module): the full mesh (fleet/slurm_mesh) prunes exactly the node cut from
its peers, in the rounds its plan gives, each failed pair in perftest's words.
The scale stage's bisection is proven here by node7 (its pair passes in S3,
S4 names it); its unit tests (tests/test_scale.py) cover the rest.
"""

import json
import math
import subprocess
import sys
import time

import pytest
from conftest import heal_slurm_lab, lab_ssh

from ccrhost.lab import slurm as lab_slurm
from ccrhost.lab.inventory import LAB_PLATFORM

pytestmark = pytest.mark.lab

SLURM_NODES = 8
SLURM_HEALTHCHECK_INTERVAL = 0
FAULTS = {"node3": "gemm_throttle=0", "node5": "unreachable=node1+node2+node4+node6", "node7": "group_slow=4"}
CERTIFIED = ["node1", "node2", "node4", "node6"]


def cut(lab, node: str) -> list[str]:
    """The peers ``node``'s unreachable fault cuts: the addresses of its policy rules (lab/reach.py)."""
    out = subprocess.run(["ip", "-n", lab.node(node).netns, "rule", "show", "table", "18000"],
                         capture_output=True, text=True, check=True).stdout
    return sorted({line.split(" to ")[1].split()[0] for line in out.splitlines() if " to " in line})


def hold(lab, nodes: list[str], name: str = "ccrhost-test") -> str:
    """A running exclusive job on ``nodes`` (its prologs passed)."""
    job = lab_slurm.run(lab, "sbatch", "--parsable", "-J", name, "-w", ",".join(nodes), "-N",
                        str(len(nodes)), "--exclusive", "-o", "/dev/null", "--wrap", "exec sleep 3600",
                        check=True).stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while lab_slurm.run(lab, "squeue", "-h", "-j", job, "-o", "%T|%r").stdout.strip() != "RUNNING|None":
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.3)
    return job


def test_mesh_prunes_exactly_the_node_that_reaches_no_peer(slurm_lab, monkeypatch):
    """S2 alone on five nodes: node2 cut from node3-5 over the fabric; its pairs with them fail for real from
    either end, its pair with node1 passes, Slurm still reaches it. Five nodes take five rounds."""
    from ccrhost.fleet.slurm_job import Progress
    from ccrhost.fleet.slurm_mesh import MeshOptions, run_mesh

    lab = slurm_lab
    nodes = [f"node{i}" for i in range(1, 6)]
    monkeypatch.setenv("SLURM_CONF", lab_slurm.client_env(lab)["SLURM_CONF"])
    addresses = {n: lab.node(n).address for n in nodes}
    try:
        assert lab.fault("node2", "unreachable=node3+node4+node5") == ["unreachable=node3+node4+node5"]
        assert cut(lab, "node2") == sorted(f"{addresses[n]}" for n in ("node3", "node4", "node5"))
        job = hold(lab, nodes)
        say = Progress()
        # timeout 4: a healthy pair takes well under a second; a cut pair waits it out once a round
        got = run_mesh(job, addresses, dict.fromkeys(nodes, "mlx5_0"), MeshOptions(timeout=4, iters=100), say)
        assert got.rounds == 5 and len(got.pairs) == 10
        assert [p.node for p in got.pruned] == ["node2"]
        assert {n: [(r.level, r.code) for r in rs] for n, rs in got.reasons.items()} == {
            "node1": [], "node2": [("FAIL", "rdma_mesh_pruned")], "node3": [], "node4": [], "node5": []}
        assert got.reasons["node2"][0].message == (
            "failed 3 of 4 RDMA mesh pairs (75%; at least 50% prunes, AMD cvs prune_failure_threshold): "
            "with node3, node4, node5")
        states = {frozenset((p.server, p.client)): p.state for p in got.pairs}
        assert {k: v for k, v in states.items() if v != "pass"} == {
            frozenset(("node2", n)): "failed" for n in ("node3", "node4", "node5")}
        passed = [p.reading for p in got.pairs if p.state == "pass"]
        assert {(r.iterations, r.p99 < 4.2) for r in passed} == {(100, True)}
        # node2's own connects fail at once in perftest's words; a peer's connect to node2 waits for its timeout
        for p in got.pairs:
            if p.state == "failed":
                words = ("Unable to init the socket connection" if p.client == "node2"
                         else "ib_write_lat timed out after 4 s")
                assert f"client {p.client}: " in p.reasons[0].message and words in p.reasons[0].message, p
    finally:
        heal_slurm_lab(lab)
    assert cut(lab, "node2") == []


def accept(lab, tmp_path, *args, nodes="node[1-8]"):
    run = subprocess.run(
        [sys.executable, "-m", "ccrhost", "slurm", "accept", "--nodes", nodes, "--ccrhost",
         lab_slurm.ccrhost_command(), "--report-dir", str(tmp_path / "report"), "--max-nodes", "8",
         "--soak-minutes", "5", "--mesh-timeout", "4", "--measure-seconds", "1", "--measure-ports", "2", "--nccl-iters", "5",
         "--nccl-timeout", "20", "--nccl-profile", LAB_PLATFORM, *args],
        capture_output=True, text=True, timeout=900, cwd=tmp_path, env=lab_slurm.client_env(lab))
    runs = len(list(tmp_path.glob("accept-*.log")))
    (tmp_path / f"accept-{runs + 1}.log").write_text(run.stderr)  # its progress, each line timed
    return run


@pytest.fixture
def new_nodes(slurm_lab):
    lab = slurm_lab
    for node, fault in FAULTS.items():
        lab.fault(node, fault)
    lab_slurm.run(lab, "scontrol", "update", "NodeName=node[1-7]", "State=DRAIN", "Reason=new node", check=True)
    try:
        yield lab
    finally:
        for node in lab.load().nodes:  # stored results and certificates: the next module's lab starts clean
            lab_ssh(lab, node.name, "rm -f /var/lib/ccrhost/dcgm.json /var/lib/ccrhost/certificate.json")
        lab_slurm.run(lab, "scontrol", "delete", "ReservationName=ccrhost-accept-test")
        heal_slurm_lab(lab)


def report(tmp_path):
    return json.loads((tmp_path / "report" / "accept.json").read_text())


def failed_at(doc, node):
    stage = next(s for s in doc["certificates"][node]["stages"].values() if s["status"] not in ("OK", "WARN", "SKIPPED"))
    return stage["stage"], {r["code"] for r in stage["reasons"] if r["level"] == stage["status"]}


def test_accept_certifies_exactly_the_healthy_nodes_and_a_second_run_reruns_only_what_failed(new_nodes, tmp_path):
    lab = new_nodes
    other = hold(lab, ["node8"], "someone-else")
    run = accept(lab, tmp_path, "--reservation", "ccrhost-accept-test")
    said = run.stdout + run.stderr
    assert run.returncode == 2, said
    doc = report(tmp_path)
    assert {n: s for n, s in doc["states"].items()} == {
        **dict.fromkeys(CERTIFIED, "certified"), "node3": "failed", "node5": "failed", "node7": "failed"}, said
    assert list(doc["untouched"]) == ["node8"] and "running a job" in doc["untouched"]["node8"]
    # each fault caught by its stage, with its code
    assert failed_at(doc, "node3") == ("soak", {"gemm_slow"}), said
    assert failed_at(doc, "node5") == ("mesh", {"rdma_mesh_pruned"}), said
    assert failed_at(doc, "node7") == ("scale", {"allreduce_scale_slow"}), said
    node3 = doc["certificates"]["node3"]["stages"]
    assert node3["node"]["status"] == "OK"  # the short GEMM passed: slow only under sustained load
    pruned = next(r["message"] for r in doc["certificates"]["node5"]["stages"]["mesh"]["reasons"])
    assert "with node1, node2, node4, node6" in pruned, pruned
    assert doc["details"]["mesh"]["pruned"] == ["node5"]
    # node7 joined a passing group of 4 at step 3 (6 nodes): that step's 2 new nodes bisected in at most
    # ceil(log2 2) + 1 runs beyond the step's own
    runs = doc["details"]["scale"]["runs"]
    step3 = [r for r in runs if r["step"] == 3]
    assert [len(r["group"]) for r in runs if r["purpose"] == "step"] == [2, 4, 6], runs
    assert len(step3) - 1 <= math.ceil(math.log2(2)) + 1, runs
    assert "node7" not in doc["details"]["scale"]["admitted"]
    assert doc["certificates"]["node7"]["stages"]["pairs"]["status"] == "OK"  # its pairs pass; a large group not
    # the measured CCR pairs the measured bandwidth with the measured compute
    pairs = doc["certificates"]["node1"]["stages"]["pairs"]["figures"]
    assert pairs["measured_ccr"] and pairs["gemm_tflops_sum"] and pairs["compute"] == "measured", (pairs, said)
    # only certified nodes are back in service; the others drained naming stage and code; node8 untouched
    states = lab_slurm.node_states(lab)
    assert {n for n, (st, _) in states.items() if st == "idle"} == set(CERTIFIED), states
    for node, code in (("node3", "gemm_slow"), ("node5", "rdma_mesh_pruned"), ("node7", "allreduce_scale_slow")):
        st, reason = states[node]
        assert "drain" in st and reason.startswith("ccrhost:") and code in reason, (node, states[node])
    assert lab_slurm.run(lab, "squeue", "-h", "-j", other, "-o", "%T|%N").stdout.strip() == "RUNNING|node8"
    assert "No reservations" in lab_slurm.run(lab, "scontrol", "show", "reservation").stdout
    # the certificate on the node, read by its own check
    check = lab_ssh(lab, "node1", f"{lab_slurm.ccrhost_command()} check --config /etc/ccrhost/check.yaml "
                                  "--format json")
    cert = json.loads(check.stdout)["certificate"]
    assert cert["state"] == "certified", cert
    # issued under node1's GPUs, as its nvidia-smi names them
    uuids = lab_ssh(lab, "node1", "nvidia-smi --query-gpu=uuid --format=csv,noheader").stdout.split()
    assert doc["certificates"]["node1"]["versions"]["gpus"] == ",".join(sorted(uuids)), doc["certificates"]["node1"]
    # and its NICs (every one of the lab's eight carries compute traffic), as sysfs names them
    guids = lab_ssh(lab, "node1", "cat /sys/class/infiniband/*/node_guid").stdout.split()
    assert len(guids) == 8 and doc["certificates"]["node1"]["versions"]["nics"] == ",".join(sorted(guids))

    # a repair put another board in node2's GPU slot 1: the same node name, another GPU, so what its stages
    # proved no longer holds
    lab.fault("node2", "gpu_serial=1:1650923099999")
    check = lab_ssh(lab, "node2", f"{lab_slurm.ccrhost_command()} check --config /etc/ccrhost/check.yaml "
                                  "--format json")
    cert = json.loads(check.stdout)["certificate"]
    assert cert["state"] == "expired" and list(cert["expired_stage"]["versions_changed"]) == ["gpus"], cert

    # node5's routes mended: a second run with two certified nodes as its partners re-runs what node5 had
    # not passed (S1 holds) and every stage on node2; node1 runs only its passive check
    lab.clear("node5", FAULTS["node5"])
    run = accept(lab, tmp_path, "--reservation", "ccrhost-accept-test", nodes="node[1-2,5]")
    said = run.stdout + run.stderr[-6000:]
    assert run.returncode == 0, said
    doc = report(tmp_path)
    assert doc["states"] == dict.fromkeys(("node1", "node2", "node5"), "certified"), said
    assert doc["ran"] == {"node1": ["check"], "node2": ["check", "node", "mesh", "pairs", "scale", "soak"],
                          "node5": ["check", "mesh", "pairs", "scale", "soak"]}, said
    states = lab_slurm.node_states(lab)
    assert {n for n, (st, _) in states.items() if st == "idle"} == {*CERTIFIED, "node5"}, states
