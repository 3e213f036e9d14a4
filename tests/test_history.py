"""A node's failure history (issue 40, layer 2): failures that come back
after each repair end as "replace", a drain no automatic resume lifts, and a
GPU that fails on a second node is named as the lemon."""

from __future__ import annotations

import json

from test_actions import remap_pending_on_gpu2
from test_checks import H100, healthy
from test_gpu_health import gpu as health
from test_node_check import scontrol  # noqa: F401  (the fixture)

from ccrhost.model import drain_reason as drain_text
from ccrhost.model.gpu_health import GpuHealthReading
from ccrhost.model.history import History, HistoryPolicy
from ccrhost.model.status import FAIL, OK
from ccrhost.model.verdict import Verdict, apply_fleet_rules, evaluate
from ccrhost.node import drain as node_drain
from ccrhost.node import formats
from ccrhost.node import history_file

SERIAL = "1650924060142"
POLICY = HistoryPolicy(replace_after=3, window_s=3600, entries=5)


def readings(remap_on: int | None, serials=None):
    r = healthy()
    serials = serials or {}
    r.gpu_health = GpuHealthReading(
        gpus=[health(i, remap_pending=i == remap_on, serial=serials.get(i, f"13222210175{i:02d}")) for i in range(8)],
        fabric_manager="active")
    return r


def check(path, now, remap_on, serials=None, policy=POLICY, boot=None) -> Verdict:
    """What run_check does around evaluate: read, judge, keep."""
    r = readings(remap_on, serials)
    r.history = history_file.read_history(str(path), now=now, boot=boot)
    from dataclasses import replace

    from ccrhost.model.verdict import Policy

    verdict = evaluate(r, H100, replace(Policy(), history=policy))
    history_file.keep_history(str(path), verdict, policy)
    return verdict


def test_a_fault_that_returns_after_each_repair_ends_as_replace_naming_the_serial(tmp_path):
    path = tmp_path / "history.json"
    serials = {2: SERIAL}
    t = 1000.0
    for episode in (1, 2):
        for _ in range(3):  # the health check sees it again and again while drained: one failure
            v = check(path, t, 2, serials)
            t += 60
            assert v.status == FAIL and v.action == "reset_gpu", episode
        assert check(path, t, None, serials).status == OK  # repaired
        t += 60
    stored = json.loads(path.read_text())
    assert [(e["codes"], e["action"], e["gpus"]) for e in stored["episodes"]] == \
        [(["gpu_row_remap_pending"], "reset_gpu", [SERIAL])] * 2
    third = check(path, t, 2, serials)
    assert third.action == "replace"
    [r] = [r for r in third.reasons if r.code == "node_repeat_failures"]
    assert r.message == (f"failed 3 times within 1 h (verify_replace_failures 3); GPU serial {SERIAL} each time: "
                         "replace, do not repair again")
    assert drain_text.drain_reason(third).startswith("ccrhost: node_repeat_failures,gpu_row_remap_pending: failed 3 times ")
    assert SERIAL in drain_text.drain_reason(third)


def test_failures_outside_the_window_do_not_count_and_the_list_is_bounded(tmp_path):
    path = tmp_path / "history.json"
    t = 0.0
    for _ in range(7):
        check(path, t, 2)
        check(path, t + 1, None)
        t += 4000  # more than the window apart: never three within it
    assert [e["time"] for e in json.loads(path.read_text())["episodes"]] == [4000.0 * i for i in range(2, 7)]
    assert check(path, t, 2).action == "reset_gpu"
    # no history kept (verify_replace_failures 0): never replace
    for i in range(5):
        check(tmp_path / "h0", i * 2, 2, policy=HistoryPolicy(0, 3600, 5))
        v = check(tmp_path / "h0", i * 2 + 1, None, policy=HistoryPolicy(0, 3600, 5))
    assert v.status == OK


def test_a_history_that_is_not_ours_starts_afresh_and_says_so(tmp_path):
    path = tmp_path / "history.json"
    path.write_text('{"episodes": [{"time": "yesterday"}]}')
    v = check(path, 10.0, 2)
    assert v.status == FAIL and v.action == "reset_gpu"
    assert "is not a ccrhost failure history" in formats.format_text(v)
    assert len(json.loads(path.read_text())["episodes"]) == 1  # replaced by a good one
    unwritable = tmp_path / "file"
    unwritable.write_text("")
    v = check(unwritable / "history.json", 11.0, 2)
    assert "note: cannot keep the failure history in" in formats.format_text(v)


def test_the_replace_drain_is_never_lifted_by_the_health_check(scontrol, tmp_path):  # noqa: F811
    script, state, log = scontrol
    path = tmp_path / "history.json"
    t = 0.0
    for _ in range(2):
        check(path, t, 2, {2: SERIAL})
        check(path, t + 1, None, {2: SERIAL})
        t += 10
    third = check(path, t, 2, {2: SERIAL})
    assert node_drain.drain(third, node="gpu01", scontrol=str(script)).startswith("drained gpu01: ccrhost: node_repeat_failures,")
    state.write_text(drain_text.drain_reason(third) + " [root@2026-12-05T10:00:00]")
    healthy_now = check(path, t + 1, None, {2: SERIAL})
    assert healthy_now.status == OK
    said = node_drain.drain(healthy_now, node="gpu01", scontrol=str(script))
    assert said.startswith("gpu01 stays drained: 'ccrhost: node_repeat_failures,")
    assert log.read_text().count("\n") == 1 and "State=RESUME" not in log.read_text()


def test_a_gpu_serial_that_fails_on_a_second_node_is_the_lemon(tmp_path):
    # node1 failed with the board, which then moved to node2's slot 5 and failed there
    check(tmp_path / "n1", 0.0, 2, {2: SERIAL})
    check(tmp_path / "n1", 1.0, None, {2: "1322221099999"})  # the board left node1
    n1 = check(tmp_path / "n1", 2.0, None, {2: "1322221099999"})
    n2 = check(tmp_path / "n2", 3.0, 5, {5: SERIAL})
    n3 = check(tmp_path / "n3", 3.0, None)
    # the fleet side reads each node's JSON, history included
    verdicts = {h: Verdict.from_dict(json.loads(json.dumps(v.to_dict()))) for h, v in
                (("node1", n1), ("node2", n2), ("node3", n3))}
    apply_fleet_rules(verdicts)
    [lemon] = [r for r in verdicts["node2"].reasons if r.code == "gpu_lemon"]
    assert lemon.gpu == 5 and lemon.message == (f"GPU 5 serial {SERIAL} failed on node1 before it failed here: "
                                                "the board is the fault, replace it")
    assert verdicts["node2"].action == "replace"
    assert verdicts["node2"].to_dict()["reasons"][-1]["serial"] == SERIAL
    assert [r.code for r in verdicts["node1"].reasons] == [] and verdicts["node3"].status == OK


def test_run_check_keeps_the_history_at_the_setting(tmp_path, monkeypatch):
    from ccrhost.settings import validate_host

    settings = validate_host("n", {"verify_profile": "hgx-h100-8x400", "verify_history": str(tmp_path / "h.json")})
    assert settings.check_settings().verify_history == str(tmp_path / "h.json")
    assert validate_host("n", {}).verify_history is None  # opt-in: nothing is written where no one asked
    assert isinstance(History(), History)


def test_a_fault_still_there_after_each_reboot_is_a_return_and_ends_as_replace(tmp_path):
    # issue 45 case 10: the episode stayed open across reboots, so a node rebooted again and again never escalated
    path = tmp_path / "history.json"
    t = 0.0
    for boot in ("boot-1", "boot-2"):
        for _ in range(3):  # the health checks of one boot: one failure
            assert check(path, t, 2, boot=boot).action == "reset_gpu"
            t += 60
    assert [e["time"] for e in json.loads(path.read_text())["episodes"]] == [0.0, 180.0]
    assert json.loads(path.read_text())["boot"] == "boot-2"
    third = check(path, t, 2, boot="boot-3")  # rebooted again, and the fault is still there
    assert third.action == "replace"
    assert [r.code for r in third.reasons if r.code == "node_repeat_failures"] == ["node_repeat_failures"]
    # a history an older ccrhost kept names no boot: its open episode stays open (it may be this boot's)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"episodes": [{"time": 0.0, "codes": ["gpu_row_remap_pending"], "action": "reset_gpu"}],
                               "failing": True}))
    assert check(old, 60.0, 2, boot="boot-9").action == "reset_gpu"
    assert len(json.loads(old.read_text())["episodes"]) == 1


def test_a_drain_is_stamped_once_per_failure_not_at_every_check(scontrol, tmp_path):  # noqa: F811
    # issue 45 case 10: the reason's messages change (an XID's age), so every check rewrote it and Slurm
    # restamped it: old drains looked new to the drain cap, and remediate saw no boot after the drain
    from dataclasses import replace

    script, state, log = scontrol
    path = tmp_path / "history.json"
    first = check(path, 0.0, 2, boot="b1")
    assert node_drain.drain(first, node="gpu01", scontrol=str(script)).startswith("drained gpu01: ")
    stamped = drain_text.drain_reason(first) + " [root@2026-12-05T10:00:00]"
    state.write_text(stamped)
    later = check(path, 600.0, 2, boot="b1")
    later = replace(later, reasons=[replace(r, message=r.message + " (10 min later)") for r in later.reasons])
    assert drain_text.drain_reason(later) != drain_text.drain_reason(first)
    assert node_drain.drain(later, node="gpu01", scontrol=str(script)) == f"gpu01 stays drained: {drain_text.drain_reason(first)}"
    assert log.read_text().count("\n") == 1  # the first drain only
    # after a reboot the fault is back: a new failure, stamped anew (remediate reads it as newer than the boot)
    returned = check(path, 1200.0, 2, boot="b2")
    assert node_drain.drain(returned, node="gpu01", scontrol=str(script)).startswith("drained gpu01: ")
    assert log.read_text().count("\n") == 2
    # other codes are another drain
    state.write_text(stamped)
    other = check(tmp_path / "h2", 0.0, None)
    other = replace(other, status="FAIL", reasons=[replace(r, code="gpu_ecc_uncorrectable", level="FAIL")
                                                    for r in first.reasons])
    assert node_drain.drain(other, node="gpu01", scontrol=str(script)).startswith("drained gpu01: ")


def test_the_history_lock_never_follows_a_planted_link(tmp_path):
    # issue 45 case 12: with fs.protected_symlinks 0, root's open of <history>.lock created the link's target
    path = tmp_path / "history.json"
    victim = tmp_path / "elsewhere" / "victim"
    victim.parent.mkdir()
    (tmp_path / "history.json.lock").symlink_to(victim)
    with history_file.locked(str(path)) as lock:
        assert lock.fd is None  # no lock: never a file the link names
    assert not victim.exists()
    assert check(path, 0.0, 2).status == FAIL and json.loads(path.read_text())["failing"]  # the history is still kept


def test_a_bundle_kept_after_the_drain_is_named_once(scontrol, tmp_path):  # noqa: F811
    # the prolog drains without a bundle (it keeps none: issue 45 case 13); the health check's bundle is named
    from dataclasses import replace

    script, state, log = scontrol
    path = tmp_path / "history.json"
    first = check(path, 0.0, 2, boot="b1")
    state.write_text(drain_text.drain_reason(first) + " [root@2026-12-05T10:00:00]")
    later = replace(check(path, 60.0, 2, boot="b1"), evidence="/var/lib/ccrhost/evidence/20261205T100100Z")
    assert node_drain.drain(later, node="gpu01", scontrol=str(script)).startswith("drained gpu01: ")
    assert "[evidence 20261205T100100Z]" in log.read_text()
    state.write_text(drain_text.drain_reason(later) + " [root@2026-12-05T10:01:00]")
    again = replace(check(path, 120.0, 2, boot="b1"), evidence="/var/lib/ccrhost/evidence/20261205T100100Z")
    assert node_drain.drain(again, node="gpu01", scontrol=str(script)).startswith("gpu01 stays drained: ")
    assert log.read_text().count("\n") == 1
