"""One verdict on every path, end to end on a 6-node Slurm lab: the deploy's
verification (deploys/verify.py), `ccrhost check` with the check.yaml that
deploys/slurm.py wrote (what the prolog and health check run) and
`ccrhost slurm verify` judge each node alike, status and reason codes, for
five different faults; the FAIL nodes are drained, the UNKNOWN one is not.
And a prolog that cannot read its node drains it with a reason that says so,
which `ccrhost slurm verify` reports instead of waiting on the node."""

import json
import subprocess
import sys
import time

import pytest
from conftest import in_node as conftest_in_node
from conftest import lab_inventory, node_address, run_pyinfra

from ccrhost.lab import slurm as lab_slurm
from ccrhost.model.topology import path_bridges
from ccrhost.model.verdict import Verdict

pytestmark = pytest.mark.lab

SLURM_NODES = 6
# no periodic health check (six nodes' checks every few seconds load the CI's two cores): the test runs
# the installed one itself where it needs what the health check does
SLURM_HEALTHCHECK_INTERVAL = 0
NODES = tuple(f"node{i}" for i in range(1, SLURM_NODES + 1))
FW = {"node5": {"verify_required_nic_fw": "99.0.0"}}  # a firmware requirement no NIC meets
RATE = "/sys/class/infiniband/mlx5_0/ports/1/rate"


def slurm(lab, *args, timeout=60):
    return lab_slurm.run(lab, *args, timeout=timeout)


def in_node(lab, node, *cmd):
    """As slurmd runs the prolog, with the PATH the installed scripts set."""
    return conftest_in_node(lab, node, *cmd, env=(f"PATH={lab_slurm.PATH}",), timeout=120)


def node_check(lab, node) -> dict:
    out = in_node(lab, node, lab_slurm.ccrhost_command(), "check", "--config", "/etc/ccrhost/check.yaml",
                  "--format", "json")
    assert out.returncode in (0, 1, 2, 3), out.stderr
    return json.loads(out.stdout)


def judged(doc: dict) -> tuple[str, list[str]]:
    return doc["status"], sorted(r["code"] for r in doc["reasons"] if r["level"] != "OK")


def wait_job(lab, job, want="RUNNING|None", timeout=60):
    deadline = time.monotonic() + timeout
    while (now := slurm(lab, "squeue", "-h", "-j", job, "-o", "%T|%r").stdout.strip()) != want:
        assert time.monotonic() < deadline, f"job {job}: {now}"
        time.sleep(0.2)


def verify(lab, tmp_path, *args, env=None, timeout=240):
    return subprocess.run(
        [sys.executable, "-m", "ccrhost", "slurm", "verify", "--ccrhost", lab_slurm.ccrhost_command(),
         "--report-dir", str(tmp_path / "report"), *args],
        capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
        env={**lab_slurm.client_env(lab), **(env or {})})


@pytest.fixture
def cluster(slurm_lab, tmp_path):
    """The shared cluster; afterwards: no job, no fault, every node idle."""
    lab = slurm_lab
    saved = {n: (lab.root(n) / RATE.lstrip("/")).read_text() for n in NODES}
    yield lab
    slurm(lab, "scancel", "--user=root")
    for node in lab.load().nodes:
        for fault in list(node.faults):
            lab.clear(node.name, fault)
        (lab.root(node.name) / RATE.lstrip("/")).write_text(saved[node.name])
    # undo node4's ACS redirect and node5's requirement: the lab's own settings again
    (tmp_path / "undo").mkdir(exist_ok=True)
    run_pyinfra("deploys/rdma.py", inventory=lab_inventory(tmp_path / "undo"))
    assert run_pyinfra("deploys/slurm.py", inventory=lab_inventory(tmp_path / "undo")).rc == 0
    # a health check started before the settings were restored may still drain a node with the old ones:
    # resume until every node is idle with no reason at all
    deadline = time.monotonic() + 90
    while (states := lab_slurm.node_states(lab)) != {n: ("idle", "none") for n in NODES}:
        assert time.monotonic() < deadline, states
        for node, (st, reason) in states.items():
            if "drain" in st:
                slurm(lab, "scontrol", "update", f"NodeName={node}", "State=RESUME")
        time.sleep(1)


def test_three_paths_agree_node_by_node_and_only_fail_nodes_drain(cluster, tmp_path):
    lab = cluster
    # An allocation of every node while all are fit: the prolog passes, and the
    # health check (idle nodes only) stays out of what follows.
    job = slurm(lab, "sbatch", "--parsable", "-N6", "--exclusive", "-o", "/dev/null", "--wrap",
                "sleep 600").stdout.strip()
    wait_job(lab, job)

    lab.fault("node2", "port_down")                                   # a port
    lab.fault("node3", "gpu_missing")                                 # a GPU
    pair = Verdict.from_dict(node_check(lab, "node4")).readings.datapath.pairs[0]
    bridge = path_bridges(pair.gpu, pair.nic)[-1]                     # the data path: ACS redirect, as setpci sets it
    assert in_node(lab, "node4", "setpci", "-s", bridge, "ECAP_ACS+0x6.w=001d").returncode == 0
    (lab.root("node6") / RATE.lstrip("/")).write_text("400 Gb/sec (4X\n")  # an unreadable file, cut short
    # node5: a firmware requirement no NIC meets, deployed as a site would
    (tmp_path / "deploy").mkdir()
    deployed = run_pyinfra("deploys/slurm.py", inventory=lab_inventory(tmp_path / "deploy", per_node=FW))
    assert deployed.rc == 0, deployed.out

    checked = {n: judged(node_check(lab, n)) for n in NODES}
    assert checked["node1"] == ("OK", [])
    assert checked["node2"][0] == "FAIL" and "port_down" in checked["node2"][1]
    assert checked["node3"][0] == "FAIL" and "gpu_count" in checked["node3"][1]
    assert checked["node4"] == ("FAIL", ["acs_redirect"])
    assert checked["node5"] == ("FAIL", ["fw_required"])
    assert checked["node6"] == ("UNKNOWN", ["rdma_unreadable"])

    deploy = run_pyinfra("deploys/verify.py", inventory=lab_inventory(tmp_path, per_node=FW))
    hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    assert {n: judged(hosts[node_address(i)]) for i, n in enumerate(NODES, 1)} == checked, deploy.out

    (tmp_path / "slurm").mkdir()
    run = verify(lab, tmp_path / "slurm", env={"SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": "node[1-6]"})
    assert run.returncode == 2, run.stdout + run.stderr
    fleet = json.loads((tmp_path / "slurm/report/ccr-report.json").read_text())["hosts"]
    assert {n: judged(fleet[n]) for n in NODES} == checked
    # the node-level messages too: slurm verify shows the node's own reasons
    node6 = node_check(lab, "node6")
    assert fleet["node6"]["reasons"] == node6["reasons"]
    assert "/sys/class/infiniband/mlx5_0/ports/1/rate" in node6["reasons"][0]["message"]

    states = lab_slurm.node_states(lab)
    for node in ("node2", "node3", "node4", "node5"):
        assert "drain" in states[node][0] and states[node][1].startswith("ccrhost: "), (node, states[node])
    assert states["node5"][1].startswith("ccrhost: fw_required: NIC mlx5_0, mlx5_1")
    assert "99.0.0" in states["node5"][1]
    assert states["node1"] == ("allocated", "none")
    assert states["node6"] == ("allocated", "none")  # UNKNOWN: nobody saw a cause, so no drain


def test_an_unreadable_node_drains_in_its_prolog_with_the_reason_and_verify_goes_on(cluster, tmp_path):
    """And verify reports each node its own check drained with that check's
    codes, read from the drain reason (issue 35: it said drained_unknown,
    drained_fail), so its verdict equals the deploy's node by node."""
    lab = cluster
    # node6 cannot be read. The health check leaves it (UNKNOWN), so it stays
    # idle and usable, until a job's prolog meets it.
    (lab.root("node6") / RATE.lstrip("/")).write_text("fast\n")
    assert node_check(lab, "node6")["status"] == "UNKNOWN"
    # node4: ACS redirect on its data path, as setpci sets it; the health check drains it (FAIL)
    pair = Verdict.from_dict(node_check(lab, "node4")).readings.datapath.pairs[0]
    bridge = path_bridges(pair.gpu, pair.nic)[-1]
    assert in_node(lab, "node4", "setpci", "-s", bridge, "ECAP_ACS+0x6.w=001d").returncode == 0
    checked = {n: judged(node_check(lab, n)) for n in ("node4", "node6")}
    assert checked == {"node4": ("FAIL", ["acs_redirect"]), "node6": ("UNKNOWN", ["rdma_unreadable"])}
    told = {n: conftest_in_node(lab, n, "/etc/ccrhost/slurm-healthcheck.sh") for n in ("node4", "node6")}
    states = lab_slurm.node_states(lab)  # the health check, as slurmd runs it: node4 drained, node6 left idle
    assert "drain" in states["node4"][0] and states["node6"][0] == "idle", (
        states, {n: r.stdout + r.stderr for n, r in told.items()})
    assert lab_slurm.node_states(lab)["node4"][1].startswith("ccrhost: acs_redirect: ")
    started = time.monotonic()
    run = verify(lab, tmp_path, "--wait", "120")
    took = time.monotonic() - started
    assert run.returncode == 2, run.stdout + run.stderr
    st, reason = lab_slurm.node_states(lab)["node6"]
    assert "drain" in st
    assert reason.startswith("ccrhost: rdma_unreadable: UNKNOWN: cannot read /sys/class/infiniband and rdma_cm configfs: "
                             f"{RATE}: "), reason
    assert "node6 drained" in run.stderr or "node6 draining" in run.stderr
    hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    assert {n: hosts[n]["status"] for n in NODES} == {
        "node1": "OK", "node2": "OK", "node3": "OK", "node4": "FAIL", "node5": "OK", "node6": "UNKNOWN"}, \
        json.dumps({n: hosts[n]["reasons"] for n in NODES}) + run.stderr
    assert {n: judged(hosts[n]) for n in ("node4", "node6")} == checked
    assert reason.split(" [")[0] in hosts["node6"]["reasons"][0]["message"]
    assert took < 100  # the healthy nodes were checked without waiting out --wait on node6
    # the deploy's verification names the same codes
    (tmp_path / "deploy").mkdir()
    deploy = run_pyinfra("deploys/verify.py", inventory=lab_inventory(tmp_path / "deploy"))
    by_address = json.loads((tmp_path / "deploy/report/ccr-report.json").read_text())["hosts"]
    assert {n: judged(by_address[node_address(i)]) for i, n in ((4, "node4"), (6, "node6"))} == checked, deploy.out


def test_gpu_and_fabric_faults_are_judged_alike_by_the_three_paths(cluster, tmp_path):
    """Issues 25 and 29 on the fleet job: a GPU or lossless-fabric fault per
    node, live, and the deploy's verification, `ccrhost check` and `slurm
    verify` name the same node with the same codes. The fabric's rates come
    from each node's stored reading, so every path reads after one before it."""
    lab = cluster
    job = slurm(lab, "sbatch", "--parsable", "-N6", "--exclusive", "-o", "/dev/null", "--wrap",
                "sleep 600").stdout.strip()
    wait_job(lab, job)
    faults = {"node1": "pfc_storm", "node2": "rx_discards", "node3": "rnr_retry", "node4": "xid=48:3",
              "node5": "row_remap_failure"}
    for node, fault in faults.items():
        lab.fault(node, fault)
    for node in NODES:  # a first reading for the rates to start from
        node_check(lab, node)
    time.sleep(2.5)
    checked = {n: judged(node_check(lab, n)) for n in NODES}
    assert checked["node6"] == ("OK", [])
    for node, code in (("node1", "pause_storm"), ("node2", "netdev_rx_drops"), ("node3", "rdma_transport_failing"),
                       ("node4", "gpu_xid_critical"), ("node5", "gpu_row_remap_failure")):
        assert code in checked[node][1], (node, checked[node])

    time.sleep(2.5)
    (tmp_path / "deploy").mkdir()
    deploy = run_pyinfra("deploys/verify.py", inventory=lab_inventory(tmp_path / "deploy"))
    hosts = json.loads((tmp_path / "deploy/report/ccr-report.json").read_text())["hosts"]
    assert {n: judged(hosts[node_address(i)]) for i, n in enumerate(NODES, 1)} == checked, deploy.out

    time.sleep(2.5)
    (tmp_path / "slurm").mkdir()
    run = verify(lab, tmp_path / "slurm", env={"SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": "node[1-6]"})
    fleet = json.loads((tmp_path / "slurm/report/ccr-report.json").read_text())["hosts"]
    assert {n: judged(fleet[n]) for n in NODES} == checked, run.stdout + run.stderr
