"""The all-reduce gate end to end on an 8-node Slurm lab: the lab's
all_reduce_perf moves real bytes between nodes over their shaped links,
and `ccrhost slurm verify --nccl` names exactly the bad nodes.

Faults: node2's link is slow (invisible to every passive check), node3
corrupts data, node4 hangs, node6 has no all_reduce_perf. Pairs: (1,2),
(3,4), (5,6), (7,8); only (7,8) is good, so isolation takes three rounds.
"""

import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest
from conftest import heal_slurm_lab

from ccrhost.lab import slurm as lab_slurm

pytestmark = pytest.mark.lab

SLURM_NODES = 8
FAULTS = {"node2": "link_slow=80", "node3": "allreduce_wrong", "node4": "allreduce_hang",
          "node6": "allreduce_missing"}


@pytest.fixture
def faulty(slurm_lab):
    lab = slurm_lab
    for node, fault in FAULTS.items():
        lab.fault(node, fault)
    try:
        yield lab
    finally:
        heal_slurm_lab(lab)


def test_slurm_verify_nccl_names_exactly_the_bad_nodes(faulty, tmp_path):
    lab = faulty
    run = subprocess.run(
        [sys.executable, "-m", "ccrhost", "slurm", "verify", "--ccrhost", lab_slurm.ccrhost_command(),
         "--report-dir", str(tmp_path / "report"), "--nccl", "--nccl-iters", "5", "--nccl-timeout", "30",
         "--nccl-retries", "1"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path, env=lab_slurm.client_env(lab))
    assert run.returncode == 2, run.stdout + run.stderr[-4000:]
    hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    assert {h: v["status"] for h, v in hosts.items()} == {
        "node1": "OK", "node2": "FAIL", "node3": "FAIL", "node4": "UNKNOWN", "node5": "OK", "node6": "UNKNOWN",
        "node7": "OK", "node8": "OK"}, run.stderr[-4000:]

    def reasons(node):
        return {r["code"]: r["message"] for r in hosts[node]["reasons"]}

    slow = reasons("node2")
    assert "allreduce_slow" in slow and "ccr_measured_low" in slow
    assert "[node2: slow with node1 and with known-good node" in slow["allreduce_slow"]
    assert set(reasons("node1")) <= {"gpu_pcie_gen"}  # its partner is cleared by a known-good node
    assert "allreduce_wrong" in reasons("node3")
    assert reasons("node4").keys() >= {"allreduce_hang"} and not any(
        r["level"] == "FAIL" for r in hosts["node4"]["reasons"])
    assert reasons("node6").keys() >= {"allreduce_missing"} and not any(
        r["level"] == "FAIL" for r in hosts["node6"]["reasons"])
    # measured beside nominal, from the pair's ring busbw over the real lab link
    good = hosts["node7"]
    assert good["measured_ccr"] is not None and good["ccr"] is not None
    assert 368 * 8 <= good["measured_ccr"]["bandwidth_gbps"] <= 400 * 8
    assert hosts["node2"]["measured_ccr"]["bandwidth_gbps"] < 200 * 8
    assert "all-reduce pair round 1: 4 pair(s): node1+node2, node3+node4, node5+node6, node7+node8" in run.stderr
    suite = ET.parse(tmp_path / "report/ccr-report.xml").getroot()
    assert suite.get("failures") == "2" and suite.get("skipped") == "2"

    time.sleep(2 * lab_slurm.HEALTHCHECK_INTERVAL + 3)  # the health checks ran: a measured drain stays
    states = lab_slurm.node_states(lab)
    assert states["node2"][0] == "drained" and states["node3"][0] == "drained"
    assert states["node2"][1].startswith("ccrhost: measured: two-node ring all-reduce")
    assert {n: states[n][0] for n in ("node1", "node4", "node5", "node6", "node7", "node8")} == dict.fromkeys(
        ("node1", "node4", "node5", "node6", "node7", "node8"), "idle")


def test_the_deploys_verification_runs_the_single_node_modes_and_stores_them(faulty, tmp_path):
    """The pyinfra path: deploys/verify.py with verify_allreduce runs the single-node modes on every host
    (pairs need a launcher: slurm verify --nccl). The slow link is a pair's to find; the rest as on Slurm."""
    from conftest import lab_inventory, node_address, run_pyinfra

    lab = faulty
    report_dir = tmp_path / "report"
    inventory = lab_inventory(tmp_path, verify_report_dir=str(report_dir), verify_allreduce=True,
                              verify_allreduce_timeout=20, verify_allreduce_retries=1, verify_allreduce_iters=5,
                              verify_allreduce_state="/run/ccrhost/active.json")
    run = run_pyinfra("deploys/verify.py", inventory=inventory, timeout=600)
    assert "Traceback" not in run.out, run.out[-4000:]
    hosts = json.loads((report_dir / "ccr-report.json").read_text())["hosts"]
    status = {n: hosts[node_address(i)]["status"] for i, n in enumerate(
        ["node1", "node2", "node3", "node4", "node5", "node6", "node7", "node8"], start=1)}
    assert status == {"node1": "OK", "node2": "OK", "node3": "FAIL", "node4": "UNKNOWN", "node5": "OK",
                      "node6": "UNKNOWN", "node7": "OK", "node8": "OK"}, run.out[-4000:]
    codes = {n: {r["code"] for r in hosts[node_address(i)]["reasons"]} for i, n in enumerate(
        ["node1", "node2", "node3", "node4", "node5", "node6", "node7", "node8"], start=1)}
    assert "allreduce_wrong" in codes["node3"]
    assert "allreduce_hang" in codes["node4"] and "allreduce_missing" in codes["node6"]
    # stored on each node, with its time and validity, for the prolog and `ccrhost check`
    stored = json.loads((lab.root("node3") / "run/ccrhost/active.json").read_text())["results"]
    assert set(stored) == {"allreduce/nvlink", "allreduce/loopback"}
    assert stored["allreduce/nvlink"]["code"] == "allreduce_wrong" and stored["allreduce/nvlink"]["valid_for"] == 86400
    healthy = json.loads((lab.root("node1") / "run/ccrhost/active.json").read_text())["results"]
    assert healthy["allreduce/nvlink"]["status"] == "OK" and 460 <= healthy["allreduce/nvlink"]["value"] <= 476
    assert healthy["allreduce/loopback"]["status"] == "OK" and 40 <= healthy["allreduce/loopback"]["value"] <= 47
