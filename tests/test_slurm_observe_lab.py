"""Observe mode on a 2-node Slurm lab (issue 46): with ``slurm_mode:
observe`` a faulted node runs a job and is never drained, and the drain
its prolog and health check would have set shows in their log, their
Prometheus textfile and `slurm verify`; in either mode a broken check.yaml
pushed to every node holds, drains and fails no job."""

import json
import subprocess
import sys
import time

import pytest
from conftest import heal_slurm_lab

from ccrhost.lab import slurm as lab_slurm
from ccrhost.model.slurm import integration_files
from ccrhost.settings import validate_host

pytestmark = pytest.mark.lab

SLURM_NODES = 2
NODES = ("node1", "node2")
INTERVAL = lab_slurm.HEALTHCHECK_INTERVAL
LOG, PROM = "/run/ccrhost/slurm.log", "/run/ccrhost/slurm.prom"


def install(lab, mode):
    data = {**lab_slurm.integration_data(lab, INTERVAL), "slurm_mode": mode, "slurm_log": LOG, "slurm_textfile": PROM}
    for node in lab.load().nodes:
        lab_slurm.install_integration(lab, node, integration_files(validate_host("lab", data)))


def told(lab, node, path):
    file = lab.root(node) / path.lstrip("/")
    return file.read_text() if file.exists() else ""


def wait_told(lab, node, path, text, timeout=4 * INTERVAL + 30):
    deadline = time.monotonic() + timeout
    while text not in told(lab, node, path):
        assert time.monotonic() < deadline, f"{node} {path}: no {text!r} in:\n{told(lab, node, path)}"
        time.sleep(0.2)


def test_observe_mode_runs_jobs_on_a_faulted_node_and_tells_the_drain_it_would_have_set(slurm_lab, tmp_path):
    lab = slurm_lab
    install(lab, "observe")
    try:
        lab.fault("node1", "port_down")
        run = lab_slurm.run(lab, "srun", "-w", "node1", "-n1", "-I10", "sh", "-c", "echo ran on $(hostname)")
        assert (run.returncode, run.stdout) == (0, "ran on node1\n"), run.stderr
        would = "would run: scontrol update NodeName=node1 State=DRAIN 'Reason=ccrhost: port_down,"
        log = told(lab, "node1", LOG)
        assert " node1 prolog job " in log and "mode=observe FAIL port_down,port_count" in log and would in log, log
        wait_told(lab, "node1", LOG, " node1 check mode=observe FAIL port_down,port_count")  # the health check
        prom = told(lab, "node1", PROM)
        assert 'ccrhost_slurm_would_drain{code="port_down"} 1' in prom and "ccrhost_slurm_observe 1" in prom, prom
        assert 'ccrhost_slurm_check_status{status="FAIL"} 1' in prom
        lab_slurm.wait_idle(lab, lab.load(), list(NODES), 30)
        assert lab_slurm.node_states(lab)["node1"] == ("idle", "none")
        # slurm verify judges it FAIL, and shows the drain the node's settings keep it from doing
        verify = subprocess.run(
            [sys.executable, "-m", "ccrhost", "slurm", "verify", "-w", "node[1-2]", "--ccrhost",
             lab_slurm.ccrhost_command(), "--report-dir", str(tmp_path / "report"), "--wait", "60"],
            capture_output=True, text=True, timeout=240, cwd=tmp_path, env=lab_slurm.client_env(lab))
        assert verify.returncode == 2, verify.stdout + verify.stderr
        assert ("node1: not done (dry run or slurm_mode observe): scontrol update NodeName=node1 State=DRAIN "
                "'Reason=ccrhost: port_down,") in verify.stderr, verify.stderr
        meta = json.loads((tmp_path / "report/ccr-report.json").read_text())
        assert meta["hosts"]["node1"]["status"] == "FAIL"
        lab_slurm.wait_idle(lab, lab.load(), list(NODES), 30)
        assert lab_slurm.node_states(lab)["node1"] == ("idle", "none")
    finally:
        heal_slurm_lab(lab)


def test_a_broken_check_yaml_on_every_node_holds_and_fails_no_job_in_enforce_mode(slurm_lab):
    lab = slurm_lab
    install(lab, "enforce")
    configs = {n: lab.root(n) / "etc/ccrhost/check.yaml" for n in NODES}
    saved = {n: c.read_text() for n, c in configs.items()}
    try:
        for config in configs.values():
            config.write_text("verify_min_ccr_fraction: 2\n")
        run = lab_slurm.run(lab, "srun", "-N2", "-I10", "hostname")
        assert run.returncode == 0 and sorted(run.stdout.split()) == list(NODES), run.stderr
        job = lab_slurm.run(lab, "sbatch", "--parsable", "-N2", "-o", "/dev/null", "--wrap", "hostname",
                            check=True).stdout.strip()
        deadline = time.monotonic() + 30
        while lab_slurm.run(lab, "squeue", "-h", "-j", job).stdout.strip():
            assert time.monotonic() < deadline
            time.sleep(0.2)
        shown = lab_slurm.run(lab, "scontrol", "show", "job", job, "-o").stdout
        assert "JobState=COMPLETED" in shown and "Restarts=0" in shown, shown
        for node in NODES:  # the health checks too: the alert, no drain
            wait_told(lab, node, PROM, 'ccrhost_slurm_own_fault{code="check_config"} 1')
            assert "OWN FAULT (check_config): not drained, no job held" in told(lab, node, LOG)
        lab_slurm.wait_idle(lab, lab.load(), list(NODES), 30)
        assert lab_slurm.node_states(lab) == {n: ("idle", "none") for n in NODES}
    finally:
        for node, config in configs.items():
            config.write_text(saved[node])
        heal_slurm_lab(lab)
