"""The rollout's loop against a fake Slurm: batches of at most K, a failure
count that stops the rollout before the next batch, a node that never comes
back counted as failed and left as Slurm has it."""

import json
import subprocess

import pytest

from ccrhost.fleet import rollout as ro


def fake(monkeypatch, bad=(), lost=()):
    calls, boots = [], {}

    def run_slurm(*args, **kw):
        calls.append(args)
        if args[:2] == ("scontrol", "reboot"):
            for n in args[-1].split(","):
                boots[n] = "after"

    monkeypatch.setattr(ro, "run_slurm", run_slurm)
    monkeypatch.setattr(ro, "show", lambda n: {"BootTime": "never" if n in lost else boots.get(n, "before"),
                                               "State": "DOWN+DRAIN+REBOOT_ISSUED" if n in lost else "DOWN"})
    monkeypatch.setattr(ro, "verify", lambda n, *a: ("FAIL", "stays drained") if n in bad else ("OK", "resumed"))
    monkeypatch.setattr(ro.time, "sleep", lambda s: None)
    return calls


def test_batches_of_k_and_a_stop_after_f_failures(monkeypatch):
    calls = fake(monkeypatch, bad={"n2", "n3"})
    out = ro.rollout([f"n{i}" for i in range(1, 8)], 2, 2, "fw", "ccrhost", "/etc/ccrhost/check.yaml", say=lambda m: None)
    reboots = [c[-1] for c in calls if c[:2] == ("scontrol", "reboot")]
    assert reboots == ["n1,n2", "n3,n4"]  # two failures after the second batch: no third
    assert [(o.node, o.status) for o in out] == [("n1", "OK"), ("n2", "FAIL"), ("n3", "FAIL"), ("n4", "OK"),
                                                ("n5", "NOT_DONE"), ("n6", "NOT_DONE"), ("n7", "NOT_DONE")]
    assert all(c[2:4] == ("ASAP", "nextstate=DOWN") and c[4] == "reason=ccrhost rollout: fw"
               for c in calls if c[:2] == ("scontrol", "reboot"))
    assert ro.exit_code(out) == 2 and ro.exit_code(out[:1]) == 0


def test_a_node_that_never_comes_back_counts_as_failed(monkeypatch):
    fake(monkeypatch, lost={"n1"})
    out = ro.rollout(["n1", "n2"], 2, 1, "fw", "ccrhost", "c", wait=0, say=lambda m: None)
    assert [(o.node, o.status) for o in out] == [("n2", "OK"), ("n1", "FAIL")]
    assert "did not come back within 0 s: left as Slurm has it (DOWN+DRAIN+REBOOT_ISSUED)" in out[1].note


# -- which nodes (issue 46): only those that owe a reboot, never another's drain or a DOWN node --

def node(name, state="idle", reason=None):
    return ro.SlurmNode(name, f"10.0.0.{name[-1]}", state, reason)


def verdict_json(*codes):
    from ccrhost.model.status import WARN, Reason
    from ccrhost.model.verdict import unjudged

    v = unjudged(WARN, "x", "x")
    v.reasons = [Reason(WARN, c, f"NIC mlx5_0: {c} message") for c in codes]
    return json.dumps(v.to_dict(), default=str)


def test_select_takes_only_the_nodes_that_owe_a_reboot_and_says_why_it_skipped_the_others():
    nodes = {n.name: n for n in [
        node("n1"),                                             # pending: taken
        node("n2", "drained", "hw: bad PSU, ticket 42"),        # an operator's drain: left alone, even pending
        node("n3", "down", "Not responding"),                   # DOWN: skipped with a note
        node("n4"),                                             # nothing pending
        node("n5", "drained", "ccrhost: nic_fw_pending: x [action reboot]"),  # ccrhost's own drain, pending
        node("n6", "drained", "ccrhost: gpu_lemon: GPU 2 [action replace gpu 2]"),  # for a person to lift
        node("n7"),                                             # cannot be asked
        node("n8", "mixed@"),                                   # hm: any state with a job runs is asked
    ]}
    answers = {"n1": (0, verdict_json("nic_fw_pending")), "n2": (0, verdict_json("nic_fw_pending")),
               "n4": (0, verdict_json()), "n5": (0, verdict_json("nic_fw_pending")),
               "n7": (255, "ssh: connect to host 10.0.0.7 port 22: No route to host"),
               "n8": (0, verdict_json("nic_fw_unreadable"))}
    asked = []

    def remote(address, command):
        asked.append(address)
        # --active-when-busy: a node under a job is asked too (its reboot waits for the job; issue 46 gates
        # --refresh-nic on a busy node, where the stored reading may predate the deploy's write)
        assert command == ("/usr/local/bin/ccrhost check --config /etc/ccrhost/check.yaml --refresh-nic "
                           "--active-when-busy --format json")
        return answers[f"n{address[-1]}"]

    query = ro.pending_query(remote, "/usr/local/bin/ccrhost", "/etc/ccrhost/check.yaml")
    take, skipped, owed = ro.select(nodes, query)
    assert take == ["n1", "n5"]
    assert owed["n1"] == "NIC mlx5_0: nic_fw_pending message"
    why = {o.node: o.note for o in skipped}
    assert all(o.status == "SKIPPED" for o in skipped)
    assert why["n2"] == "drained by someone else (hw: bad PSU, ticket 42): its reason and drain are left alone"
    assert why["n3"].startswith("DOWN (down) (Not responding): not rebooted, left as it is")
    assert why["n4"] == "owes no reboot (no NIC firmware setting pending)"
    assert why["n6"].startswith("ccrhost's drain (ccrhost: gpu_lemon")
    assert why["n7"].startswith("cannot tell whether it owes a reboot: cannot reach it: ssh: connect")
    assert why["n8"].startswith("cannot tell whether it owes a reboot: its NIC firmware settings were not read")
    assert sorted(asked) == ["10.0.0.1", "10.0.0.4", "10.0.0.5", "10.0.0.7", "10.0.0.8"]  # never n2, n3, n6


def test_force_takes_the_list_unasked_but_still_skips_another_s_drain_and_a_down_node():
    nodes = {n.name: n for n in [node("n1"), node("n2", "drained", "maint"), node("n3", "down*")]}
    take, skipped, _ = ro.select(nodes, lambda n: pytest.fail("asked"), force=True)
    assert take == ["n1"] and [o.node for o in skipped] == ["n2", "n3"]


def test_a_dry_run_prints_the_exact_commands_and_runs_none(monkeypatch):
    calls = fake(monkeypatch)
    said = []
    out = ro.rollout(["n1", "n2", "n3"], 2, 1, "fw", "ccrhost", "/c.yaml", say=said.append, dry_run=True,
                     owed={"n1": "ATS pending"})
    assert calls == []
    assert [(o.node, o.status) for o in out] == [("n1", "DRY_RUN"), ("n2", "DRY_RUN"), ("n3", "DRY_RUN")]
    assert out[0].note == "would be rebooted and verified (ATS pending)"
    assert said[0] == "would run: scontrol reboot ASAP nextstate=DOWN 'reason=ccrhost rollout: fw' n1,n2"
    assert ("would run:   scontrol create reservation ReservationName=ccrhost-rollout-n1 Nodes=n1 Users=root "
            "StartTime=now Duration=60 Flags=MAINT,IGNORE_JOBS") in said
    assert "would run: scontrol reboot ASAP nextstate=DOWN 'reason=ccrhost rollout: fw' n3" in said
    assert ro.exit_code(out) == 0


def test_a_check_past_its_timeout_leaves_the_node_drained_not_verified_and_the_rollout_goes_on(monkeypatch):
    calls = []

    def run_slurm(*args, timeout=60, check=True):
        calls.append(args)
        if args[0] == "srun":
            raise ro.SlurmError(f"srun ...: no answer within {timeout:g} s")
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(ro, "run_slurm", run_slurm)
    status, note = ro.verify("n1", "ccrhost", "/c.yaml", 5)
    assert (status, note) == ("UNKNOWN", "not verified (its check ran past 5 s): left drained")
    writes = [c for c in calls if c[0] == "scontrol"]
    # drained again before its reservation goes: it is never back in service without an OK
    assert writes[-2] == ("scontrol", "update", "NodeName=n1", "State=DRAIN",
                          "Reason=ccrhost rollout: not verified: its check ran past 5 s")
    assert writes[-1] == ("scontrol", "delete", "ReservationName=ccrhost-rollout-n1")
    # and a not-verified node is no failure that stops the rollout
    fake(monkeypatch)
    monkeypatch.setattr(ro, "verify", lambda n, *a: ("UNKNOWN", "not verified") if n == "n1" else ("OK", "resumed"))
    out = ro.rollout(["n1", "n2"], 1, 1, "fw", "ccrhost", "c", say=lambda m: None)
    assert [(o.node, o.status) for o in out] == [("n1", "UNKNOWN"), ("n2", "OK")] and ro.exit_code(out) == 2
    doc = json.loads(ro.to_json(out, False))
    assert doc["exit_code"] == 2 and doc["nodes"][0] == {"node": "n1", "status": "UNKNOWN", "note": "not verified",
                                                         "actions": []}


def test_force_needs_an_explicit_list():
    from click.testing import CliRunner

    from ccrhost.cli import main

    run = CliRunner().invoke(main, ["slurm", "rollout", "-p", "gpu", "--force"])
    assert run.exit_code == 2 and "--force takes an explicit list of nodes: --nodes" in run.output
