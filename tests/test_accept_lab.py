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
node5's routes mended, a second run certifies it by re-running only the
stages it had not passed; the certified nodes run only their passive check.
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


def accept(lab, tmp_path, *args):
    run = subprocess.run(
        [sys.executable, "-m", "ccrhost", "slurm", "accept", "--nodes", "node[1-8]", "--ccrhost",
         lab_slurm.ccrhost_command(), "--report-dir", str(tmp_path / "report"), "--max-nodes", "8",
         "--soak-minutes", "5", "--mesh-timeout", "4", "--measure-seconds", "1", "--measure-ports", "2", "--nccl-iters", "5",
         "--nccl-timeout", "20", "--nccl-profile", LAB_PLATFORM, *args],
        capture_output=True, text=True, timeout=900, cwd=tmp_path, env=lab_slurm.client_env(lab))
    runs = len(list(tmp_path.glob("accept-*.log")))
    (tmp_path / f"accept-{runs + 1}.log").write_text(run.stderr)  # its progress, each line timed
    return run


def busy_job(lab) -> str:
    job = lab_slurm.run(lab, "sbatch", "--parsable", "-J", "someone-else", "-w", "node8", "--exclusive", "-o",
                        "/dev/null", "--wrap", "exec sleep 3600", check=True).stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while lab_slurm.run(lab, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline, "the other job did not start"
        time.sleep(0.3)
    return job


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
    other = busy_job(lab)
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

    # node5's routes mended: a second run re-runs what it had not passed; the certified ones only S0
    lab.clear("node5", FAULTS["node5"])
    run = accept(lab, tmp_path, "--reservation", "ccrhost-accept-test")
    said = run.stdout + run.stderr[-6000:]
    doc = report(tmp_path)
    assert doc["states"]["node5"] == "certified", said
    assert doc["ran"]["node5"] == ["check", "mesh", "pairs", "scale", "soak"], said
    assert all(doc["ran"][n] == ["check"] and doc["states"][n] == "certified" for n in CERTIFIED), doc["ran"]
    assert doc["states"]["node3"] == "failed" and doc["states"]["node7"] == "failed"
    states = lab_slurm.node_states(lab)
    assert {n for n, (st, _) in states.items() if st == "idle"} == {*CERTIFIED, "node5"}, states
