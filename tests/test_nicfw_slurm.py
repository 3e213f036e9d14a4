"""The NIC firmware audit on the real Slurm paths of a 3-node Slurm lab, the
integration installed with verify_nic_firmware as deploys/slurm.py writes it:
the HealthCheckProgram (`ccrhost check --refresh-nic --drain`) queries the
lab's mlxconfig and stores the readings, and drains the node whose firmware
runs a wrong value with a reason naming the code; the prolog lets a node
whose setting is only pending a reboot (WARN) run a job, judging the stored
reading; `ccrhost slurm verify --refresh-nic` reports each node alike."""

import json
import subprocess
import sys
import time

import pytest
from conftest import in_node as node_run

from ccrhost.lab import slurm as lab_slurm
from ccrhost.model.slurm import integration_files
from ccrhost.settings import validate_host

pytestmark = pytest.mark.lab

SLURM_NODES = 3
# no periodic health check: with --refresh-nic it queries eight NICs a node every few seconds, a steady
# load on the CI's two cores; the tests run the installed health check as slurmd would, when they need it
SLURM_HEALTHCHECK_INTERVAL = 0
HEALTHCHECK = "/etc/ccrhost/slurm-healthcheck.sh"
STATE = "/run/ccrhost/active.json"


def in_node(lab, node, *cmd):
    """As slurmd runs a program on the node (conftest.in_node: its clock too), with slurmd's PATH."""
    return node_run(lab, node, *cmd, env=(f"PATH={lab_slurm.PATH}",), timeout=120)


def test_health_check_drains_the_wrong_node_and_the_prolog_lets_a_pending_one_run(slurm_lab, tmp_path):
    lab = slurm_lab
    data = {**lab_slurm.integration_data(lab, lab_slurm.HEALTHCHECK_INTERVAL), "verify_nic_firmware": True,
            "verify_allreduce_state": STATE}
    files = integration_files(validate_host("lab", data))
    assert any("--refresh-nic" in content for path, content, _ in files if path.endswith("healthcheck.sh"))
    for node in lab.load().nodes:
        lab_slurm.install_integration(lab, node, files)
    bdf = json.loads((lab.node_dir("node2") / "node.json").read_text())["nics"][0]["pci"]
    wrong = in_node(lab, "node2", "mlxconfig", "-d", bdf, "-y", "set", "MAX_ACC_OUT_READ=64")
    assert wrong.returncode == 0, wrong.stdout
    lab.reboot("node2")  # the value is now running; slurmd starts again
    pending = in_node(lab, "node3", "mlxconfig", "-d", bdf, "-y", "set", "ATS_ENABLED=1")
    assert pending.returncode == 0, pending.stdout
    set_at = time.time()

    lab_slurm.wait_idle(lab, lab.load(), ["node2"], 60)  # slurmd back after the reboot
    told = in_node(lab, "node2", HEALTHCHECK)  # the health check, as slurmd runs it on an idle node
    states = lab_slurm.node_states(lab)
    assert states["node2"][1].startswith("ccrhost: nic_fw_wrong"), (states, told.stdout, told.stderr)
    assert "MAX_ACC_OUT_READ is 64" in states["node2"][1]
    assert "drain" in states["node2"][0]

    # node3's health check queries and stores its reading, taken after the set
    told = in_node(lab, "node3", HEALTHCHECK)
    results = json.loads((lab.root("node3") / STATE.lstrip("/")).read_text())["results"].values()
    assert results and min(r["measured_at"] for r in results) >= set_at, (list(results), told.stderr)
    job = lab_slurm.run(lab, "srun", "-w", "node3", "-t", "1", "cat", STATE, timeout=60)
    assert job.returncode == 0, job.stderr  # the prolog: WARN runs
    stored = json.loads(job.stdout)["results"]
    assert {k.split("/")[0] for k in stored} == {"nic_fw"} and len(stored) == 8
    prolog = in_node(lab, "node3", lab_slurm.ccrhost_command(), "check", "--config", "/etc/ccrhost/check.yaml",
                     "--format", "json")  # what the prolog runs: the stored readings only
    doc = json.loads(prolog.stdout)
    assert (doc["status"], [r["code"] for r in doc["reasons"]]) == ("WARN", ["nic_fw_pending"]), doc["reasons"]
    assert "drain" not in lab_slurm.node_states(lab)["node3"][0]

    run = subprocess.run(
        [sys.executable, "-m", "ccrhost", "slurm", "verify", "--ccrhost", lab_slurm.ccrhost_command(),
         "--report-dir", str(tmp_path / "report"), "-w", "node1,node3", "--refresh-nic"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, env=lab_slurm.client_env(lab))
    assert run.returncode == 1, run.stdout + run.stderr
    hosts = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    got = {h: (v["status"], [r["code"] for r in v["reasons"]]) for h, v in hosts.items()}
    assert got == {"node1": ("OK", []), "node3": ("WARN", ["nic_fw_pending"])}, got


def test_check_refresh_nic_queries_no_nic_on_a_node_running_a_job(slurm_lab):
    """Issue 46: `ccrhost check --refresh-nic` ran mlxconfig on a node whatever ran there. Now, as slurmd
    would run it on node1 while a job with no GPU process runs there: no query, the stored readings stay
    as they were, and the verdict says why (UNKNOWN node_busy, naming the job; drained for nothing)."""
    lab = slurm_lab
    data = {**lab_slurm.integration_data(lab, lab_slurm.HEALTHCHECK_INTERVAL), "verify_nic_firmware": True,
            "verify_allreduce_state": STATE}
    for node in lab.load().nodes:
        lab_slurm.install_integration(lab, node, integration_files(validate_host("lab", data)))
    path = lab.root("node1") / STATE.lstrip("/")
    told = in_node(lab, "node1", HEALTHCHECK)  # node1's health check (an idle node) stores a first reading
    assert path.exists(), (told.stdout, told.stderr)
    job = lab_slurm.run(lab, "sbatch", "--parsable", "-J", "no-gpu", "-w", "node1", "-o", "/dev/null",
                        "--wrap", "exec sleep 600", check=True).stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while lab_slurm.run(lab, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() != "RUNNING":
            assert time.monotonic() < deadline, lab_slurm.node_states(lab)
            time.sleep(0.3)
        before = path.read_text()
        run = in_node(lab, "node1", lab_slurm.ccrhost_command(), "check", "--config", "/etc/ccrhost/check.yaml",
                      "--format", "json", "--refresh-nic")
        doc = json.loads(run.stdout)
        busy = [r["message"] for r in doc["reasons"] if r["code"] == "node_busy"]
        assert busy == [f"the NIC firmware query (--refresh-nic) not run: a Slurm job is running on the node (Slurm "
                        f"job {job} no-gpu (root, RUNNING)); drain the node first, or set verify_active_when_busy: "
                        "true to run it anyway"], doc["reasons"]
        assert doc["status"] == "UNKNOWN" and path.read_text() == before  # nothing queried, nothing stored
        assert "drain" not in lab_slurm.node_states(lab)["node1"][0]
    finally:
        lab_slurm.run(lab, "scancel", job)
