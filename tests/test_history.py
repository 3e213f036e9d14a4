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


def check(path, now, remap_on, serials=None, policy=POLICY) -> Verdict:
    """What run_check does around evaluate: read, judge, keep."""
    r = readings(remap_on, serials)
    r.history = history_file.read_history(str(path), now=now)
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
