"""`ccrhost slurm rollout` on a 6-node Slurm lab with a running job: the NIC
firmware profile is written for the next boot (deploys/nic_firmware.py),
then rolled through Slurm at most K=2 nodes at a time; the busy node is
rebooted only after its job ended; the nodes that verify are resumed; node4,
whose reboot does not fix it (an mlx5_core fatal line in its kernel log),
stays drained with its reason."""

import json
import re
import subprocess
import sys
import threading
import time
from datetime import datetime

import pytest
from conftest import in_node as node_run, lab_inventory, run_pyinfra

from ccrhost.lab import nicfw as lab_nicfw
from ccrhost.lab import slurm as lab_slurm
from ccrhost.model.slurm import integration_files
from ccrhost.settings import validate_host

pytestmark = pytest.mark.lab

SLURM_NODES = 6
K = 2
STATE = "/run/ccrhost/active.json"


def in_node(lab, node, *cmd):
    """As slurmd runs a program on the node (conftest.in_node: its clock too), with slurmd's PATH."""
    return node_run(lab, node, *cmd, env=(f"PATH={lab_slurm.PATH}",), timeout=120)


class Rebooting:
    """The most nodes at once in a reboot (requested, issued, or back DOWN before verification),
    and when the running job left the queue."""

    def __init__(self, lab, job):
        self.lab, self.job, self.most, self.stop = lab, job, 0, threading.Event()
        self.job_ended = None
        self.thread = threading.Thread(target=self.poll, daemon=True)

    def poll(self):
        while not self.stop.is_set():
            if self.job_ended is None and not lab_slurm.run(self.lab, "squeue", "-h", "-j", self.job).stdout.strip():
                self.job_ended = time.time()
            out = lab_slurm.run(self.lab, "sinfo", "-h", "-N", "-o", "%N|%T|%E").stdout.splitlines()
            now = {line.split("|")[0] for line in out if "ccrhost rollout:" in line.split("|", 2)[2]}
            self.most = max(self.most, len(now))
            time.sleep(0.2)


def test_rollout_applies_reboots_k_at_a_time_resumes_the_good_and_keeps_the_bad_drained(slurm_lab, tmp_path):
    lab = slurm_lab
    data = {**lab_slurm.integration_data(lab, lab_slurm.HEALTHCHECK_INTERVAL), "verify_nic_firmware": True,
            "verify_allreduce_state": STATE}
    for node in lab.load().nodes:
        lab_slurm.install_integration(lab, node, integration_files(validate_host("lab", data)))
    bdf = json.loads((lab.node_dir("node1") / "node.json").read_text())["nics"][0]["pci"]
    # every node runs ATS on (a WARN, jobs still run); the site's profile wants it off
    for i in range(1, SLURM_NODES + 1):
        assert in_node(lab, f"node{i}", "mlxconfig", "-d", bdf, "-y", "set", "ATS_ENABLED=1").returncode == 0
        lab.reboot(f"node{i}")
    lab_slurm.wait_idle(lab, lab.load(), [f"node{i}" for i in range(1, SLURM_NODES + 1)], 60)
    job = lab_slurm.run(lab, "sbatch", "--parsable", "-w", "node1", "-o", "/dev/null", "--wrap", "sleep 20",
                        check=True).stdout.strip()
    deadline = time.monotonic() + 30
    while lab_slurm.run(lab, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.3)
    applied = run_pyinfra("deploys/nic_firmware.py", inventory=lab_inventory(tmp_path, verify_allreduce_state=STATE),
                          timeout=300)
    assert applied.rc == 0 and "NIC firmware: reboot required (mlx5_0: ATS_ENABLED)" in applied.out, applied.out
    lab.fault("node4", "mlx5_fatal")  # its kernel log keeps a fatal NIC line: a reboot does not fix it

    watch = Rebooting(lab, job)
    watch.thread.start()
    try:
        run = subprocess.run(
            [sys.executable, "-m", "ccrhost", "slurm", "rollout", "-w", "node[1-6]", "-k", str(K), "-f", "2",
             "--ccrhost", lab_slurm.ccrhost_command(), "--wait", "120"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path, env=lab_slurm.client_env(lab))
    finally:
        watch.stop.set()
        watch.thread.join()
    assert run.returncode == 2, run.stdout + run.stderr
    lines = dict(line.split(": ", 1) for line in run.stdout.splitlines())
    assert {n: v.split(":")[0] for n, v in lines.items()} == {
        "node1": "OK", "node2": "OK", "node3": "OK", "node4": "FAIL", "node5": "OK", "node6": "OK"}, run.stdout
    assert 1 <= watch.most <= K, watch.most
    # the busy node was rebooted only after its job ended
    boot = re.search(r"BootTime=(\S+)", lab_slurm.run(lab, "scontrol", "show", "node", "-o", "node1").stdout).group(1)
    assert watch.job_ended is not None and datetime.strptime(boot, "%Y-%m-%dT%H:%M:%S").timestamp() >= \
        int(watch.job_ended) - 1, (boot, watch.job_ended)
    states = lab_slurm.node_states(lab)
    assert all(states[f"node{i}"][0] == "idle" for i in (1, 2, 3, 5, 6)), states
    assert "drain" in states["node4"][0] and states["node4"][1].startswith("ccrhost: nic_fatal_log"), states
    for i in range(1, SLURM_NODES + 1):  # the profile runs everywhere now, node4 included: its trouble is elsewhere
        fw = lab_nicfw.read_state(lab.node_dir(f"node{i}"), bdf)
        assert fw["current"]["ATS_ENABLED"] == fw["next"]["ATS_ENABLED"] == 0
