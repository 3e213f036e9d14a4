"""ccrhost slurm remediate without a cluster: the per-node decisions, the
reboot cap, the dry run, an operator's reason (the Slurm lab test is
tests/test_remediate_lab.py)."""

from __future__ import annotations

import json

import pytest
from test_actions import remap_pending_on_gpu2
from test_checks import H100, healthy

from ccrhost.fleet.remediate import RemediateOptions, remediate
from ccrhost.fleet.slurm_client import SlurmNode
from ccrhost.model.drain_reason import drain_reason
from ccrhost.model.verdict import evaluate

SSH = "ssh -o BatchMode=yes -o ConnectTimeout=10"  # --ssh's default
RESET = drain_reason(remap_pending_on_gpu2())  # "ccrhost: GPU 2 (...) ... [action reset_gpu gpu 2]"


class Cluster:
    """Fake ssh and Slurm: records every command; each node's GPU holders and check verdict."""

    def __init__(self, nodes, holders=None, passes=True, boots=None):
        self.nodes, self.holders, self.passes = nodes, holders or {}, passes
        self.boots = boots or {}  # node -> (BootTime, the time Slurm stamped on its reason)
        self.ran: list[tuple] = []

    def remote(self, address, command):
        self.ran.append((address, command))
        if "--query-compute-apps" in command:
            return 0, "\n".join(map(str, self.holders.get(address, [])))
        if " reset-gpu " in command:
            return 0, "GPU 00000000:38:00.0  was successfully reset.\nAll done."
        if " check " in command:
            v = evaluate(healthy(), H100) if self.passes else remap_pending_on_gpu2()
            return v.exit_code, json.dumps(v.to_dict())
        return 127, "unexpected"

    def slurm(self, *args):
        self.ran.append(args)
        if args[0] == "sinfo":
            node = self.nodes[args[3]]
            return 0, f"{node.state}|{node.reason}"
        if args[:3] == ("scontrol", "show", "node"):
            node = self.nodes[args[4]]
            boot, since = self.boots.get(node.name, ("2026-12-01T08:00:00", "2026-12-05T10:00:00"))
            # Slurm 23.02's -o layout, abridged: the reason last but for the fields after it
            return 0, (f"NodeName={node.name} Arch=x86_64 CoresPerSocket=1 State={node.state.upper()} "
                       f"BootTime={boot} SlurmdStartTime={boot} Reason={node.reason} [root@{since}] "
                       "Comment=(null)")
        return 0, ""


def node(name, reason, state="drained"):
    return SlurmNode(name, f"10.0.0.{name[-1]}", state, reason)


def run(cluster, **opts):
    return remediate(cluster.nodes, RemediateOptions(**opts), cluster.remote, cluster.slurm)


def test_an_idle_gpu_is_reset_checked_and_the_node_resumed():
    c = Cluster({"n1": node("n1", RESET)})
    [log] = run(c, enabled=("reset_gpu",))
    assert log.outcome == "resumed"
    assert log.steps == ["reset GPU 2: GPU 00000000:38:00.0  was successfully reset.", "check: OK", "resumed"]
    # through the node's ccrhost, which keeps the reset's time (issue 45 case 11)
    assert ("10.0.0.1", "/usr/local/bin/ccrhost reset-gpu --config /etc/ccrhost/check.yaml 2") in c.ran
    assert ("scontrol", "update", "NodeName=n1", "State=RESUME") in c.ran


def test_a_held_gpu_is_not_reset_and_a_failing_check_keeps_the_drain():
    c = Cluster({"n1": node("n1", RESET)}, holders={"10.0.0.1": [4242]})
    [log] = run(c, enabled=("reset_gpu",))
    assert log.steps == ["GPU 2 is held by pid 4242: not reset"] and log.outcome == "left drained"
    assert not any(x[1:2] == ("update",) or "reset-gpu" in str(x) for x in c.ran)
    c = Cluster({"n1": node("n1", RESET)}, passes=False)
    [log] = run(c, enabled=("reset_gpu",))
    assert log.steps[-1] == "stays drained: action now reset_gpu" and log.outcome == "left drained"
    assert not any("RESUME" in x for x in c.ran)


def test_not_enabled_operator_replace_and_measured_drains_are_left_alone():
    nodes = {"n1": node("n1", RESET), "n2": node("n2", "hw ticket 42"),
             "n3": node("n3", "ccrhost: node_repeat_failures: failed 3 times within 168 h [action replace]"),
             "n4": node("n4", "ccrhost: measured_slow: ports mlx5_0/1 measured below 90% [action investigate]"),
             "n5": node("n5", "ccrhost: port mlx5_0/1 is DOWN/Disabled [action reseat_cable]"),
             "n6": node("n6", RESET, state="draining"), "n7": node("n7", None, state="idle")}
    c = Cluster(nodes)
    logs = {log.node: log.steps for log in run(c, enabled=())}
    assert logs == {
        "n1": ["action reset_gpu is not enabled for automation (--allow nothing): left drained for a person"],
        "n2": ["reason 'hw ticket 42' is not ccrhost's: left alone"],
        "n3": ["to be replaced: only an operator resumes it"],
        "n4": ["drained by a measurement (ib_write_bw or the all-reduce gate): `ccrhost slurm verify --measure` or "
               "`--nccl` lifts it"],
        "n5": ["action reseat_cable is not enabled for automation (--allow nothing): left drained for a person"]}
    assert c.ran == []  # nothing ran anywhere


def test_reboots_stay_within_the_cap_and_the_dry_run_touches_nothing():
    reboot = "ccrhost: GPU 7 (0000:88:00.0) fell off the bus [action reboot gpu 7]"
    nodes = {"n1": node("n1", reboot), "n2": node("n2", reboot), "n3": node("n3", reboot),
             "n4": node("n4", None, state="reboot_issued"), "n5": node("n5", RESET)}
    c = Cluster(nodes)
    logs = {log.node: log.steps for log in run(c, enabled=("reboot", "reset_gpu"), max_reboots=2, dry_run=True)}
    assert logs == {"n1": ["would run: scontrol reboot n1   # a later run checks it and resumes it if it passes"],
                    "n2": ["not rebooted: 2 node(s) rebooting already (--max-reboots 2)"],
                    "n3": ["not rebooted: 2 node(s) rebooting already (--max-reboots 2)"],
                    "n5": [f"would run: {SSH} 10.0.0.5 '/usr/local/bin/ccrhost reset-gpu --config "
                           "/etc/ccrhost/check.yaml 2'   # if `nvidia-smi --query-compute-apps=pid "
                           "--format=csv,noheader -i 2` there prints no process",
                           f"would run: {SSH} 10.0.0.5 '/usr/local/bin/ccrhost check --config "
                           "/etc/ccrhost/check.yaml --format json'",
                           "would run: ccrhost slurm accept --nodes n5 --again node,soak --ccrhost /usr/local/bin/ccrhost "
                           "--config /etc/ccrhost/check.yaml   # if the check says OK or WARN and the node keeps an "
                           "acceptance certificate (its stages among these): resumes it only if it is certified again",
                           "would run: scontrol update NodeName=n5 State=RESUME   # if the check says OK or WARN and "
                           "the drain reason is unchanged, where the node keeps no certificate"]}
    assert [x for x in c.ran if x[:3] != ("scontrol", "show", "node")] == []  # read, never changed
    logs = {log.node: (log.steps, log.outcome) for log in run(c, enabled=("reboot",), max_reboots=2)}
    assert logs["n1"] == (["rebooting (scontrol reboot); a later run checks it and resumes it if it passes"],
                          "rebooting")
    assert [x for x in c.ran if x[:2] == ("scontrol", "reboot")] == [("scontrol", "reboot", "n1")]


def test_a_node_that_booted_after_its_drain_is_checked_and_resumed_not_rebooted_again():
    reboot = "ccrhost: gpu_fell_off_bus: GPU 7 (0000:88:00.0) fell off the bus [action reboot gpu 7]"
    nodes = {"n1": node("n1", reboot), "n2": node("n2", reboot)}
    c = Cluster(nodes, boots={"n1": ("2026-12-05T10:05:00", "2026-12-05T10:00:00")})
    logs = {log.node: (log.steps, log.outcome) for log in run(c, enabled=("reboot",), max_reboots=1)}
    assert logs["n1"] == (["booted at 2026-12-05T10:05:00, after its drain at 2026-12-05T10:00:00: the reboot is done",
                           "check: OK", "resumed"], "resumed")
    # n1 came back, so the one reboot the cap allows goes to n2
    assert logs["n2"][1] == "rebooting"
    assert [x for x in c.ran if x[:2] == ("scontrol", "reboot")] == [("scontrol", "reboot", "n2")]
    assert ("scontrol", "update", "NodeName=n1", "State=RESUME") in c.ran
    # and one whose failure came back after the reboot (a newer reason) is rebooted again, not resumed
    c = Cluster({"n1": node("n1", reboot)}, boots={"n1": ("2026-12-05T10:05:00", "2026-12-05T10:09:00")})
    assert [(log.steps, log.outcome) for log in run(c, enabled=("reboot",))] == [
        (["rebooting (scontrol reboot); a later run checks it and resumes it if it passes"], "rebooting")]


def test_node_fields_reads_the_reason_whole_and_its_time():
    from ccrhost.fleet.slurm_client import node_fields

    line = ("NodeName=node2 Arch=x86_64 State=IDLE+DRAIN BootTime=2026-12-05T18:20:11 "
            "Reason=ccrhost: xid: MAX_ACC_OUT_READ=64 on mlx5_0 [action reboot gpu 7] [root@2026-12-05T18:21:00] "
            "Comment=(null)")
    fields = node_fields(line)
    assert fields["BootTime"] == "2026-12-05T18:20:11" and fields["ReasonTime"] == "2026-12-05T18:21:00"
    assert fields["State"] == "IDLE+DRAIN"


def test_dcgm_diag_runs_on_the_repaired_node_before_its_check():
    c = Cluster({"n1": node("n1", RESET)})
    logs = run(c, enabled=("reset_gpu",), dcgm_level=2, dry_run=True)
    assert logs[0].would_run == [
        f"{SSH} 10.0.0.1 '/usr/local/bin/ccrhost reset-gpu --config /etc/ccrhost/check.yaml 2'",
        f"{SSH} 10.0.0.1 '/usr/local/bin/ccrhost dcgm --config /etc/ccrhost/check.yaml --level 2'",
        f"{SSH} 10.0.0.1 '/usr/local/bin/ccrhost check --config /etc/ccrhost/check.yaml --format json'",
        "ccrhost slurm accept --nodes n1 --again node,soak --ccrhost /usr/local/bin/ccrhost --config "
        "/etc/ccrhost/check.yaml",
        "scontrol update NodeName=n1 State=RESUME"]
    assert c.ran == []
    # --no-accept: the check's way out only, its condition as ever
    assert run(c, enabled=("reset_gpu",), dry_run=True, accept=False)[0].steps[-1] == (
        "would run: scontrol update NodeName=n1 State=RESUME   # if the check says OK or WARN and the drain reason "
        "is unchanged")
    logs = run(c, enabled=("reset_gpu",), dcgm_level=2)
    on_node = [cmd for _, cmd in (x for x in c.ran if len(x) == 2)]
    diag = on_node.index("/usr/local/bin/ccrhost dcgm --config /etc/ccrhost/check.yaml --level 2")
    assert on_node[diag + 1].startswith("/usr/local/bin/ccrhost check ")  # the check judges what the diag stored
    assert logs[0].steps[1] == "dcgm diag level 2 (exit 127): unexpected" and logs[0].outcome == "resumed"


# -- issue 46: progress as each node finishes, an exit code that says a repair failed, --json

def _cli(monkeypatch, cluster):
    """The CLI's entry, run over the fake cluster, and the events in order: each
    command on a node (``ran on ADDRESS``) and each node's end (``done NODE``)."""
    from ccrhost.cli import entry
    from ccrhost.fleet import remediate as rem

    events = []
    real = rem.remediate
    monkeypatch.setattr("ccrhost.fleet.slurm.list_nodes", lambda partition, nodelist: cluster.nodes)
    monkeypatch.setattr(rem, "remediate", lambda nodes, opts, done=None: real(
        nodes, opts, cluster.remote, cluster.slurm, lambda log: (events.append(f"done {log.node}"), done(log))))
    remote = cluster.remote

    def recorded(address, command):
        events.append(f"ran on {address}")
        return remote(address, command)
    cluster.remote = recorded
    return entry, events


def test_each_node_is_printed_as_it_finishes_and_a_failed_repair_exits_2(monkeypatch, capsys):
    c = Cluster({"n1": node("n1", RESET), "n2": node("n2", RESET)}, passes=False)
    entry, events = _cli(monkeypatch, c)
    printed = []
    monkeypatch.setattr("click.echo", lambda message=None, err=False, **kw: printed.append((message, err)))
    with pytest.raises(SystemExit) as done:
        entry(["slurm", "remediate", "--allow", "reset_gpu"])
    assert done.value.code == 2
    # n1's lines are out before anything runs on n2
    assert events.index("done n1") < events.index("ran on 10.0.0.2")
    assert printed[:4] == [("n1: reset GPU 2: GPU 00000000:38:00.0  was successfully reset.", False),
                           ("n1: check: FAIL (GPU 2 (0000:38:00.0) has a row remapping pending: the GPU needs a reset)", False),
                           ("n1: stays drained: action now reset_gpu", False),
                           ("n1: left drained: FAILED", False)]


def test_nothing_failed_exits_0_and_a_node_left_alone_is_no_failure(monkeypatch, capsys):
    c = Cluster({"n1": node("n1", RESET), "n2": node("n2", "hw ticket 42")})
    entry, _ = _cli(monkeypatch, c)
    with pytest.raises(SystemExit) as done:
        entry(["slurm", "remediate", "--allow", "reset_gpu"])
    assert done.value.code == 0
    assert capsys.readouterr().out.splitlines()[-2:] == ["n2: reason 'hw ticket 42' is not ccrhost's: left alone",
                                                         "n2: left drained"]


def test_json_is_one_document_on_stdout_with_the_progress_on_stderr(monkeypatch, capsys):
    c = Cluster({"n1": node("n1", RESET), "n2": node("n2", "hw ticket 42")}, passes=False)
    entry, _ = _cli(monkeypatch, c)
    with pytest.raises(SystemExit) as done:
        entry(["slurm", "remediate", "--allow", "reset_gpu", "--json"])
    assert done.value.code == 2
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["exit_code"] == 2 and doc["dry_run"] is False
    assert [(n["node"], n["outcome"], n["failed"]) for n in doc["nodes"]] == [("n1", "left drained", True),
                                                                              ("n2", "left drained", False)]
    assert doc["nodes"][0]["steps"][-1] == "stays drained: action now reset_gpu"
    assert "n1: left drained: FAILED\n" in err


def test_a_failed_reset_leaves_the_node_drained_and_says_so():
    class Refused(Cluster):
        def remote(self, address, command):
            if " reset-gpu " in command:
                self.ran.append((address, command))
                return 255, "Unable to reset this GPU because it's being used by some other process"
            return super().remote(address, command)

    c = Refused({"n1": node("n1", RESET)})
    [log] = run(c, enabled=("reset_gpu",))
    assert log.steps == ["reset of GPU 2 (ccrhost reset-gpu: nvidia-smi -r -i 2) failed (exit 255): Unable to reset "
                         "this GPU because it's being used by some other process"]
    assert log.outcome == "left drained" and not any(" check " in str(x) for x in c.ran)


def test_the_dry_run_prints_each_command_exactly_one_a_line_and_runs_none(monkeypatch, capsys):
    """Issue 46: `remediate --dry-run` prints the commands a run would run, as it would run them (the
    operator's --ssh, the node's address, the command; scontrol's), and only reads Slurm."""
    reboot = "ccrhost: GPU 7 (0000:88:00.0) fell off the bus [action reboot gpu 7]"
    c = Cluster({"n1": node("n1", reboot), "n2": node("n2", RESET), "n3": node("n3", "hw ticket 42")})
    entry, events = _cli(monkeypatch, c)
    with pytest.raises(SystemExit) as done:
        entry(["slurm", "remediate", "--allow", "reset_gpu", "--allow", "reboot", "--dry-run", "--dcgm-level", "1",
               "--ssh", "ssh -p 2222", "--ccrhost", "/opt/ccr host/ccrhost"])
    assert done.value.code == 0
    assert capsys.readouterr().out.splitlines() == [
        "n1: would run: scontrol reboot n1   # a later run checks it and resumes it if it passes",
        "n1: dry run",
        "n2: would run: ssh -p 2222 10.0.0.2 ''\"'\"'/opt/ccr host/ccrhost'\"'\"' reset-gpu --config "
        "/etc/ccrhost/check.yaml 2'   # if `nvidia-smi --query-compute-apps=pid --format=csv,noheader -i 2` there "
        "prints no process",
        "n2: would run: ssh -p 2222 10.0.0.2 ''\"'\"'/opt/ccr host/ccrhost'\"'\"' dcgm --config "
        "/etc/ccrhost/check.yaml --level 1'",
        "n2: would run: ssh -p 2222 10.0.0.2 ''\"'\"'/opt/ccr host/ccrhost'\"'\"' check --config "
        "/etc/ccrhost/check.yaml --format json'",
        "n2: would run: ccrhost slurm accept --nodes n2 --again node,soak --ccrhost '/opt/ccr host/ccrhost' --config "
        "/etc/ccrhost/check.yaml   # if the check says OK or WARN and the node keeps an acceptance certificate (its "
        "stages among these): resumes it only if it is certified again",
        "n2: would run: scontrol update NodeName=n2 State=RESUME   # if the check says OK or WARN and the drain "
        "reason is unchanged, where the node keeps no certificate",
        "n2: dry run",
        "n3: reason 'hw ticket 42' is not ccrhost's: left alone",
        "n3: dry run"]
    # nothing ran on a node; Slurm was only read (n1's boot time against its drain)
    assert not [e for e in events if e.startswith("ran on")]
    assert c.ran == [("scontrol", "show", "node", "-o", "n1")]
    # each printed command is the one a real run runs: the shell's words are the run's arguments
    import shlex
    from ccrhost.fleet.remediate import RemediateOptions, check_command
    line = "ssh -p 2222 10.0.0.2 ''\"'\"'/opt/ccr host/ccrhost'\"'\"' check --config /etc/ccrhost/check.yaml --format json'"
    assert shlex.split(line) == ["ssh", "-p", "2222", "10.0.0.2",
                                 check_command(RemediateOptions(ccrhost="/opt/ccr host/ccrhost"))]


def certified_healthy():
    """A healthy check's verdict whose node keeps an acceptance certificate (every stage passed)."""
    import time
    from dataclasses import replace

    from ccrhost.model import certificate as cm
    from ccrhost.model.certificate_view import StoredCertificate

    cert = None
    for stage in cm.STAGES:
        cert = cm.record(cert, "n1", cm.StageResult(stage, "OK", time.time()), 86400, {}, cm.STAGES)
    v = evaluate(healthy(), H100)
    return replace(v, readings=replace(v.readings, certificate=StoredCertificate(
        time.time(), "/var/lib/ccrhost/certificate.json", data=cert.to_dict())))


class CertifiedCluster(Cluster):
    def remote(self, address, command):
        if " check " in command:
            self.ran.append((address, command))
            v = certified_healthy()
            return v.exit_code, json.dumps(v.to_dict())
        return super().remote(address, command)


def test_a_repaired_node_with_a_certificate_returns_only_through_the_stages_its_failure_concerns():
    asked = []

    def accept(names, again):
        asked.append((names, again))
        return {"n1": "certified", "n2": "failed"}

    c = CertifiedCluster({"n1": node("n1", RESET), "n2": node("n2", RESET)})
    logs = remediate(c.nodes, RemediateOptions(enabled=("reset_gpu",)), c.remote, c.slurm, accept=accept)
    # the reset's code (a pending row remap) is a GPU's: S1 node-local and the soak, one run for both nodes
    assert asked == [(["n1", "n2"], ("node", "soak"))]
    by = {log.node: log for log in logs}
    assert by["n1"].outcome == "resumed" and not by["n1"].failed
    assert by["n1"].steps[-1] == "accepted again (node, soak): certified, resumed"
    assert by["n2"].failed and by["n2"].steps[-1] == "acceptance (node, soak): failed: stays drained"
    # remediate itself resumes neither: the acceptance run does, only the certified one
    assert not any(a[:2] == ("scontrol", "update") and "State=RESUME" in a for a in c.ran)


def test_without_a_certificate_or_with_accept_off_the_node_returns_as_ever():
    c = CertifiedCluster({"n1": node("n1", RESET)})
    [log] = remediate(c.nodes, RemediateOptions(enabled=("reset_gpu",), accept=False), c.remote, c.slurm,
                      accept=lambda *a: pytest.fail("accept ran"))
    assert log.outcome == "resumed" and ("scontrol", "update", "NodeName=n1", "State=RESUME") in c.ran
    c = Cluster({"n1": node("n1", RESET)})
    [log] = remediate(c.nodes, RemediateOptions(enabled=("reset_gpu",)), c.remote, c.slurm,
                      accept=lambda *a: pytest.fail("accept ran"))
    assert log.outcome == "resumed"
