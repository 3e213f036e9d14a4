"""`ccrhost slurm rollout` on a 6-node Slurm lab (issues 39, 46): it reboots
only the nodes whose own check names a NIC firmware setting pending the
next boot, at most K=2 at a time; an operator's drain, a DOWN node and a
node that owes nothing are skipped and said so; the busy node is rebooted
only after its job ended; the nodes that verify are resumed; node3, whose
reboot does not fix it (an mlx5_core fatal line in its kernel log), stays
drained with its reason. A dry run first lists the same nodes and changes
nothing."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime

import pytest
from conftest import in_node as node_run

from ccrhost.lab import nicfw as lab_nicfw
from ccrhost.lab import slurm as lab_slurm
from ccrhost.model.slurm import integration_files
from ccrhost.settings import validate_host

pytestmark = pytest.mark.lab

SLURM_NODES = 6
# no periodic health check (six nodes' checks every few seconds load the CI's two cores): the test runs
# the installed one itself where it needs what the health check does
SLURM_HEALTHCHECK_INTERVAL = 0
K = 2
PENDING = ("node1", "node2", "node3", "node4")  # node4: pending too, but an operator drained it
OPERATOR = "hw: PSU ticket 7"


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


def rollout(lab, tmp_path, *args):
    ssh = (f"ssh -i {lab.dir / 'client_key'} -o UserKnownHostsFile={lab.dir / 'known_hosts'} "
           "-o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=5 -l root")
    return subprocess.run(
        [sys.executable, "-m", "ccrhost", "slurm", "rollout", "-w", "node[1-6]", "-k", str(K), "-f", "2",
         "--ccrhost", lab_slurm.ccrhost_command(), "--ssh", ssh, "--wait", "120", "--json", *args],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=lab_slurm.client_env(lab))


def boot_times(lab):
    out = lab_slurm.run(lab, "scontrol", "show", "node", "-o").stdout
    return dict(re.findall(r"NodeName=(\S+) .*?BootTime=(\S+)", out))


def rebooted(before: dict, after: dict) -> list[str]:
    """The nodes whose BootTime moved by more than a few seconds: slurmd reports its boot time as the
    clock less the uptime, which moves by a second between registrations on a loaded machine."""
    def at(text):
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    return [n for n in after if n not in before or abs(at(after[n]) - at(before[n])) > 5]


def test_rollout_reboots_only_the_pending_nodes_k_at_a_time_and_leaves_anothers_drain_and_a_down_node(
        slurm_lab, tmp_path):
    lab = slurm_lab
    data = {**lab_slurm.integration_data(lab, lab_slurm.HEALTHCHECK_INTERVAL), "verify_nic_firmware": True}
    for node in lab.load().nodes:
        lab_slurm.install_integration(lab, node, integration_files(validate_host("lab", data)))
    bdf = json.loads((lab.node_dir("node1") / "node.json").read_text())["nics"][0]["pci"]
    # the pending nodes run ATS on; the site's profile (off) is written for their next boot
    for node in PENDING:
        assert in_node(lab, node, "mlxconfig", "-d", bdf, "-y", "set", "ATS_ENABLED=1").returncode == 0
        lab.reboot(node)
    lab_slurm.wait_idle(lab, lab.load(), [f"node{i}" for i in range(1, SLURM_NODES + 1)], 60)
    for node in PENDING:
        assert in_node(lab, node, "mlxconfig", "-d", bdf, "-y", "set", "ATS_ENABLED=0").returncode == 0
    lab_slurm.run(lab, "scontrol", "update", "NodeName=node4", "State=DRAIN", f"Reason={OPERATOR}", check=True)
    # node5 is DOWN for good: its slurmd is gone (with it running, ReturnToService=2 would bring it back)
    os.kill(next(n for n in lab.load().nodes if n.name == "node5").slurmd_pid, signal.SIGKILL)
    lab_slurm.run(lab, "scontrol", "update", "NodeName=node5", "State=DOWN", "Reason=cabling", check=True)
    job = lab_slurm.run(lab, "sbatch", "--parsable", "-w", "node1", "-o", "/dev/null", "--wrap", "sleep 20",
                        check=True).stdout.strip()
    deadline = time.monotonic() + 30
    while lab_slurm.run(lab, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.3)
    lab.fault("node3", "mlx5_fatal")  # its kernel log keeps a fatal NIC line: a reboot does not fix it
    # its health check, as slurmd runs it, drains it (ccrhost's drain: the rollout still takes it)
    told = node_run(lab, "node3", "/etc/ccrhost/slurm-healthcheck.sh")
    assert "drain" in lab_slurm.node_states(lab)["node3"][0], (lab_slurm.node_states(lab), told.stdout, told.stderr)

    def slurm_view():  # node1's job may end meanwhile, Slurm may revive node5 (below): else nothing may change
        return {n: ("" if n == "node1" else st, r) for n, (st, r) in lab_slurm.node_states(lab).items() if n != "node5"}

    def node5_down():
        # Slurm itself may return node5 to service now and then (ReturnToService=2, though its slurmd is
        # gone): it is DOWN again when the rollout looks at it
        while "down" not in lab_slurm.node_states(lab)["node5"][0]:
            lab_slurm.run(lab, "scontrol", "update", "NodeName=node5", "State=DOWN", "Reason=cabling", check=True)
            time.sleep(0.5)

    # the dry run: asks every node it may take, lists the pending ones, changes nothing
    node5_down()
    before, booted = slurm_view(), boot_times(lab)
    dry = rollout(lab, tmp_path, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    outcome = {n["node"]: (n["status"], n["note"]) for n in json.loads(dry.stdout)["nodes"]}
    assert {n: s for n, (s, _) in outcome.items()} == {
        "node1": "DRY_RUN", "node2": "DRY_RUN", "node3": "DRY_RUN", "node4": "SKIPPED", "node5": "SKIPPED",
        "node6": "SKIPPED"}, dry.stdout
    assert "firmware setting pending reboot: ATS_ENABLED is " in outcome["node1"][1], outcome["node1"]
    assert outcome["node4"][1] == f"drained by someone else ({OPERATOR}): its reason and drain are left alone"
    assert outcome["node5"][1].startswith("DOWN (down") and ": not rebooted, left as it is" in outcome["node5"][1], \
        lab_slurm.run(lab, "scontrol", "show", "node", "-o", "node5").stdout
    assert outcome["node6"][1] == "owes no reboot (no NIC firmware setting pending)"
    assert json.loads(dry.stdout)["nodes"][0]["actions"][0] == \
        "scontrol reboot ASAP nextstate=DOWN 'reason=ccrhost rollout: NIC firmware settings' node1,node2"
    assert slurm_view() == before and not rebooted(booted, boot_times(lab))

    watch = Rebooting(lab, job)
    watch.thread.start()
    node5_down()
    try:
        run = rollout(lab, tmp_path)
    finally:
        watch.stop.set()
        watch.thread.join()
    assert run.returncode == 2, run.stdout + run.stderr
    outcome = {n["node"]: (n["status"], n["note"]) for n in json.loads(run.stdout)["nodes"]}
    assert {n: s for n, (s, _) in outcome.items()} == {
        "node1": "OK", "node2": "OK", "node3": "FAIL", "node4": "SKIPPED", "node5": "SKIPPED",
        "node6": "SKIPPED"}, run.stdout
    assert outcome["node5"][1].startswith("DOWN (down"), outcome["node5"]
    assert 1 <= watch.most <= K, watch.most
    after = boot_times(lab)
    assert rebooted(booted, after) == ["node1", "node2", "node3"]  # only they rebooted
    # the busy node was rebooted only after its job ended
    assert watch.job_ended is not None and datetime.strptime(after["node1"], "%Y-%m-%dT%H:%M:%S").timestamp() >= \
        int(watch.job_ended) - 1, (after["node1"], watch.job_ended)
    states = lab_slurm.node_states(lab)
    assert states["node1"][0] == states["node2"][0] == states["node6"][0] == "idle", states
    assert "drain" in states["node3"][0] and states["node3"][1].startswith("ccrhost: nic_fatal_log"), states
    assert states["node4"] == ("drained", OPERATOR), states  # the operator's drain and reason, untouched
    assert not states["node5"][1].startswith("ccrhost"), states  # never rebooted (above), never given our reason
    for node in ("node1", "node2", "node3"):
        fw = lab_nicfw.read_state(lab.node_dir(node), bdf)
        assert fw["current"]["ATS_ENABLED"] == fw["next"]["ATS_ENABLED"] == 0
    fw = lab_nicfw.read_state(lab.node_dir("node4"), bdf)
    assert (fw["current"]["ATS_ENABLED"], fw["next"]["ATS_ENABLED"]) == (1, 0)  # still owed: never rebooted
