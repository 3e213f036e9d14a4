"""``ccrhost slurm remediate`` on the Slurm lab (issue 40): a failure leaves
its evidence bundle, named in the drain reason; a reset-fixable
GPU fault is reset (nvidia-smi -r over the node's emulated state) and the
node resumed; a GPU a process holds is not reset; a fault that returns after
each repair ends as "replace", naming the GPU's serial, and stays drained
through the health check's resume; an operator's drain reason is never
touched. One 2-node lab for the module."""

import json
import shlex
import subprocess
import sys
import time

import pytest
import yaml
from test_slurm import in_node, state, wait_for

from ccrhost.lab import slurm as lab_slurm

pytestmark = pytest.mark.lab
SLURM_NODES = 2
INTERVAL = lab_slurm.HEALTHCHECK_INTERVAL
# nvidia-smi -q, driver 550's layout: keys padded to column 42 (tests/fixtures/gpu/nvsmi_q_a40_550.txt)
PENDING = "    Remapped Rows\n" + "".join(f"{'        ' + key:<42}: {value}\n" for key, value in (
    ("Correctable Error", 0), ("Uncorrectable Error", 0))) + f"{'        Pending':<42}: "


def remediate_ssh(lab) -> str:
    return (f"ssh -i {lab.dir / 'client_key'} -o UserKnownHostsFile={lab.dir / 'known_hosts'} "
            "-o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=5 -l root")


def remediate(lab, *args):
    ssh = remediate_ssh(lab)
    run = subprocess.run([sys.executable, "-m", "ccrhost", "slurm", "remediate", "--ssh", ssh,
                          "--ccrhost", lab_slurm.ccrhost_command(), *args],
                         capture_output=True, text=True, timeout=180, env=lab_slurm.client_env(lab))
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def reset_file(lab, node):
    path = lab.root(node) / "run/ccrhost-lab/gpu_reset"
    return path.read_text().split() if path.exists() else []


def drained_with(lab, node, text):
    (st, reason), _ = wait_for(lab, node, lambda s, r: "drain" in s and text in r, timeout=6 * INTERVAL + 60)
    return reason


def test_reset_resume_held_gpu_repeat_failures_replace_and_an_operators_drain(slurm_lab):
    lab = slurm_lab
    config = lab.root("node2") / "etc/ccrhost/check.yaml"
    original = config.read_text()
    settings = yaml.safe_load(original)
    settings.update(verify_history="/etc/ccrhost/history.json", verify_replace_failures=3,
                    verify_evidence_dir="/etc/ccrhost/evidence")
    config.write_text(yaml.safe_dump(settings))
    serial = json.loads((lab.dir / "nodes/node2/node.json").read_text())["gpu_serials"][2]
    sleeper = None
    try:
        # 1. a pending row remap on GPU 2: the health check drains with the action; a dry run changes nothing
        lab.fault("node2", "row_remap_pending=2")
        reason = drained_with(lab, "node2", "[action reset_gpu gpu 2]")
        assert reason.startswith("ccrhost: gpu_row_remap_pending: GPU 2 (0000:") and "row remapping pending" in reason
        # the evidence of this failure, named in the reason: the GPU as nvidia-smi -q -i 2 showed it then
        name = reason.split(" [evidence ")[1].split("]")[0]
        bundle = lab.root("node2") / "etc/ccrhost/evidence" / name
        shown = (bundle / "nvidia-smi-q-gpu2.txt").read_text()
        judged = json.loads((bundle / "verdict.json").read_text())
        assert shown.count("GPU 0000") == 1 and PENDING + "Yes\n" in shown, shown
        assert [r["code"] for r in judged["reasons"]] == ["gpu_row_remap_pending"]
        assert json.loads((bundle / "verdict.json").read_text())["action"] == "reset_gpu"
        out = remediate(lab, "--allow", "reset_gpu", "--dry-run")
        # the exact commands, as a real run runs them; none ran (the GPU was not reset, the node stays drained)
        ssh_cmd = remediate_ssh(lab)
        address = lab.node("node2").address
        wanted = [f"node2: would run: {shlex.join([*shlex.split(ssh_cmd), address, f'{lab_slurm.ccrhost_command()} {rest}'])}"
                  for rest in ("reset-gpu --config /etc/ccrhost/check.yaml 2", "check --config "
                               "/etc/ccrhost/check.yaml --format json")]
        lines = out.splitlines()
        accept = shlex.join(["ccrhost", "slurm", "accept", "--nodes", "node2", "--again", "node,soak", "--ccrhost",
                             lab_slurm.ccrhost_command(), "--config", "/etc/ccrhost/check.yaml"])
        assert lines[lines.index("node2: dry run") - 4:lines.index("node2: dry run")] == [
            wanted[0] + "   # if `nvidia-smi --query-compute-apps=pid --format=csv,noheader -i 2` there prints no "
                        "process", wanted[1],
            f"node2: would run: {accept}   # if the check says OK or WARN and the node keeps an acceptance "
            "certificate (its stages among these): resumes it only if it is certified again",
            "node2: would run: scontrol update NodeName=node2 State=RESUME   # if the check says OK or WARN and the "
            "drain reason is unchanged, where the node keeps no certificate"], out
        assert reset_file(lab, "node2") == [] and "drain" in state(lab, "node2")[0]
        # the real run: reset over the node's emulated state, check, resume
        out = remediate(lab, "--allow", "reset_gpu")
        assert "node2: reset GPU 2: GPU 00000000:" in out and "  was successfully reset.\n" in out, out
        assert out.rstrip().endswith("node2: resumed"), out
        assert reset_file(lab, "node2") == ["row_remap_pending=2"]  # the fault is still set: the reset cleared it
        assert wait_for(lab, "node2", lambda s, r: s == "idle")[0] == ("idle", "none")
        q = in_node(lab, "node2", "/usr/local/sbin/nvidia-smi", "-q").stdout
        assert q.count(PENDING + "Yes\n") == 0 and q.count(PENDING + "No\n") == 8 and f": {serial}\n" in q

        # 2. it comes back; a process holds the GPU: not reset, the node stays drained
        sleeper = subprocess.Popen(["nsenter", "-t", str(lab.node("node2").holder_pid), "-m", "-n", "-u", "--",
                                    "sleep", "600"])
        (lab.root("node2") / "run/ccrhost-lab/gpu_holders").write_text(f"2 {sleeper.pid}\n")
        lab.fault("node2", "row_remap_pending=2")
        drained_with(lab, "node2", "[action reset_gpu gpu 2]")
        refused = in_node(lab, "node2", "/usr/local/sbin/nvidia-smi", "-r", "-i", "2")
        assert refused.returncode == 255 and refused.stdout.startswith("Unable to reset this GPU because it's "
                                                                       "being used by some other process")
        out = remediate(lab, "--allow", "reset_gpu")
        assert f"node2: GPU 2 is held by pid {sleeper.pid}: not reset\nnode2: left drained\n" in out
        assert "drain" in state(lab, "node2")[0]
        sleeper.kill()
        sleeper.wait()
        out = remediate(lab, "--allow", "reset_gpu")
        assert "node2: reset GPU 2" in out and out.rstrip().endswith("node2: resumed"), out
        wait_for(lab, "node2", lambda s, r: s == "idle")

        # 3. a third time: replace, naming the serial; never lifted, even once the check passes
        lab.fault("node2", "row_remap_pending=2")
        reason = drained_with(lab, "node2", "ccrhost: node_repeat_failures,")
        assert reason.startswith(f"ccrhost: node_repeat_failures,gpu_row_remap_pending: failed 3 times within 168 h (verify_replace_failures 3); "
                                 f"GPU serial {serial} each time: replace, do not repair again"), reason
        assert reason.endswith("[action replace]")
        assert len(list((lab.root("node2") / "etc/ccrhost/evidence").iterdir())) == 3  # one per failure
        out = remediate(lab, "--allow", "reset_gpu", "--allow", "reboot")
        assert "node2: to be replaced: only an operator resumes it\n" in out
        lab.clear("node2", "row_remap_pending")
        log = lab.dir / "slurm/nodes/node2/slurmd.log"
        runs = log.read_text().count("health_check")
        time.sleep(3 * INTERVAL + 5)  # the health check ran on a node that now passes
        st, now = state(lab, "node2")
        assert "drain" in st and now == reason, (st, now, runs)
        history = json.loads((lab.root("node2") / "etc/ccrhost/history.json").read_text())
        assert [(e["codes"], e["action"], e["gpus"]) for e in history["episodes"]] == [
            (["gpu_row_remap_pending"], "reset_gpu", [serial])] * 2 + [
            (["gpu_row_remap_pending", "node_repeat_failures"], "replace", [serial])]

        # 4. an operator's drain is never touched, whatever is allowed
        lab_slurm.run(lab, "scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=hw ticket 42")
        out = remediate(lab, "--allow", "reset_gpu", "--allow", "reboot")
        assert "node1: reason 'hw ticket 42' is not ccrhost's: left alone\n" in out
        assert state(lab, "node1") == ("drained", "hw ticket 42")
    finally:
        if sleeper is not None and sleeper.poll() is None:
            sleeper.kill()
        config.write_text(original)
        for node in ("node1", "node2"):
            for fault in list(lab.node(node).faults):
                lab.clear(node, fault.split("=")[0])
            if "drain" in state(lab, node)[0]:
                lab_slurm.run(lab, "scontrol", "update", f"NodeName={node}", "State=RESUME")


def boot_time(lab, node) -> str:
    from ccrhost.fleet.slurm_client import node_fields

    return node_fields(lab_slurm.run(lab, "scontrol", "show", "node", "-o", node).stdout).get("BootTime", "")


def test_a_reboot_fixable_fault_is_rebooted_within_the_cap_and_the_node_resumed(slurm_lab):
    """Xid 79 (fell off the bus) on both nodes: the health check drains each with [action reboot gpu 7];
    remediate reboots one at a time (--max-reboots 1) through Slurm's RebootProgram (the lab's BMC power-
    cycles the node, which ends the Xid), and a later run finds each booted after its drain, checks it and
    resumes it: never a second reboot of a node that came back fit."""
    lab = slurm_lab
    nodes = ("node1", "node2")
    def config(n):  # under the node's current root: a reboot gives it a new one
        return lab.root(n) / "etc/ccrhost/check.yaml"

    originals = {n: config(n).read_text() for n in nodes}
    for n in nodes:  # both nodes fail one code: the drain cap (10% per code) would hold the second
        config(n).write_text(yaml.safe_dump({**yaml.safe_load(originals[n]), "slurm_drain_cap_share": 1.0}))
    before = {}
    for n in nodes:  # a node that registered a moment ago shows BootTime=None for a while
        wait_for(lab, n, lambda s, r: boot_time(lab, n) not in ("", "None"))
        before[n] = boot_time(lab, n)
    bmc = lab.dir / "slurm/ctld/bmc.log"
    seen = len(bmc.read_text()) if bmc.exists() else 0
    try:
        for n in nodes:
            lab.fault(n, "xid=79:7")
        for n in nodes:
            assert drained_with(lab, n, "[action reboot gpu 7]").startswith("ccrhost: gpu_")
        out = remediate(lab, "--allow", "reboot", "--max-reboots", "1")
        assert "node1: rebooting (scontrol reboot); a later run checks it and resumes it if it passes\n" in out, out
        assert "node2: not rebooted: 1 node(s) rebooting already (--max-reboots 1)\n" in out, out
        # Slurm runs the RebootProgram, the node boots again (a new BootTime) and registers, still drained
        deadline = time.monotonic() + 120
        while boot_time(lab, "node1") == before["node1"] or "reboot" in state(lab, "node1")[0]:
            assert time.monotonic() < deadline, (state(lab, "node1"), boot_time(lab, "node1"))
            time.sleep(0.5)
        assert "xid=79:7" not in lab.node("node1").faults and "xid=79:7" in lab.node("node2").faults
        assert boot_time(lab, "node2") == before["node2"]  # the cap held: node2 was not rebooted meanwhile
        out = remediate(lab, "--allow", "reboot", "--max-reboots", "1")
        if "node1:" in out:  # else its own health check found it fit and resumed it first
            assert "node1: booted at " in out and "node1: resumed\n" in out and "node1: rebooting" not in out, \
                (out, lab_slurm.run(lab, "scontrol", "show", "node", "-o", "node1").stdout, before)
        assert "node2: rebooting (scontrol reboot)" in out, out
        deadline = time.monotonic() + 120
        while boot_time(lab, "node2") == before["node2"] or "reboot" in state(lab, "node2")[0]:
            assert time.monotonic() < deadline, (state(lab, "node2"), boot_time(lab, "node2"))
            time.sleep(0.5)
        out = remediate(lab, "--allow", "reboot", "--max-reboots", "1")
        assert "rebooting" not in out, out
        for n in nodes:
            assert wait_for(lab, n, lambda s, r: s == "idle", timeout=60)[0] == ("idle", "none")
        # each node was rebooted exactly once
        log = bmc.read_text()[seen:]
        assert log.count("rebooted node1") == 1 and log.count("rebooted node2") == 1, log
    finally:
        for n in nodes:
            config(n).write_text(originals[n])
            for fault in list(lab.node(n).faults):
                lab.clear(n, fault.split("=")[0])
            if "drain" in state(lab, n)[0]:
                lab_slurm.run(lab, "scontrol", "update", f"NodeName={n}", "State=RESUME")
