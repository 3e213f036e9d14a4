"""The all-reduce gate: thresholds, one run's verdict, retries, the stored
result in the node's verdict (ccrhost check), staleness, settings."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from nccl_report import at_busbw  # noqa: E402

from ccrhost.model import allreduce as ar  # noqa: E402
from ccrhost.model.status import FAIL, OK, UNKNOWN  # noqa: E402
from ccrhost.model.verdict import Readings, evaluate  # noqa: E402
from ccrhost.node import allreduce as node_ar  # noqa: E402
from ccrhost.node.active import ToolRun  # noqa: E402
from ccrhost.probes.nccl_tests import run_result  # noqa: E402
from ccrhost.settings import InventoryDataError, validate_host  # noqa: E402

FIX = Path(__file__).parent / "fixtures" / "nccl"
H100 = "NVIDIA H100 80GB HBM3"


def fixture_run(name, rc=0, **kw):
    return run_result((FIX / name).read_text(), rc, **kw)


# -- thresholds -------------------------------------------------------------------

@pytest.mark.parametrize("gpu, mode, figure", [
    (H100, "nvlink", 460), ("NVIDIA H200", "nvlink", 431), ("NVIDIA GB200", "nvlink", 432),
    ("NVIDIA GB200", "loopback", 48)])
def test_platform_figures_with_their_source(gpu, mode, figure):
    got = ar.threshold(mode, gpu, [])
    assert got.busbw == figure and "Azure" in got.source and got.source.startswith("published figure of ")


def test_a_platform_the_table_lacks_has_no_figure_unless_set():
    assert ar.threshold("nvlink", "NVIDIA A100-SXM4-80GB", []) is None
    assert ar.threshold("loopback", "NVIDIA H200", []) is None  # the anchors give none: never invented
    # Azure removed its H100 IB-loopback figure (40) on 2023-10-13 (PR #38): no current source, no figure
    assert ar.threshold("loopback", H100, []) is None
    assert ar.threshold("nvlink", "NVIDIA A100-SXM4-80GB", [], {"nvlink": 230}).busbw == 230


def test_the_pair_figure_comes_from_the_nodes_own_nics():
    assert ar.threshold("pair", H100, [400.0] * 8).busbw == 368.0
    assert ar.threshold("pair", H100, [200.0] * 4).busbw == 92.0
    assert "nccl-tests #290" in ar.threshold("pair", H100, [400.0]).source
    assert ar.threshold("pair", H100, []) is None


# -- one run ------------------------------------------------------------------------

def test_busbw_is_judged_at_the_largest_size_not_the_average():
    figure = ar.threshold("pair", H100, [400.0] * 4)  # 184 GB/s; the average of this run is 70.7
    v = ar.judge_run(fixture_run("all_reduce_h100_2node.txt"), "pair", figure)
    assert v.status == OK and v.busbw == 338.82 and "at 8589934592 B" in v.message


def test_below_threshold_fails_and_may_be_retried():
    v = ar.judge_run(fixture_run("all_reduce_h100_2node.txt"), "pair", ar.threshold("pair", H100, [400.0] * 8))
    assert (v.status, v.code, v.retry) == (FAIL, "allreduce_slow", True)
    assert "338.8 GB/s" in v.message and "below 368 GB/s" in v.message


def test_wrong_results_fail_at_once_before_the_failure_lines_they_cause():
    v = ar.judge_run(fixture_run("all_reduce_gh200_wrong.txt", rc=1), "pair", ar.Figure(1, "x"))
    assert (v.status, v.code, v.retry) == (FAIL, "allreduce_wrong", False)
    assert "128 elements" in v.message


def test_a_launch_failure_is_unknown_naming_why():
    v = ar.judge_run(fixture_run("all_reduce_gh200_busy.txt", rc=1), "nvlink", ar.Figure(1, "x"))
    assert (v.status, v.code) == (UNKNOWN, "allreduce_failed")
    assert "CUDA-capable device(s) is/are busy or unavailable" in v.message


def test_an_nccl_warn_is_unknown():
    v = ar.judge_run(fixture_run("all_reduce_warn_excerpt.txt", rc=0), "nvlink", ar.Figure(1, "x"))
    assert (v.status, v.code) == (UNKNOWN, "allreduce_nccl_warn") and "Could not find a path" in v.message


def test_missing_and_hung_runs_are_unknown():
    missing = ar.judge_run(run_result("", None, missing="all_reduce_perf not found"), "nvlink", ar.Figure(1, "x"))
    assert (missing.status, missing.code, missing.message) == (
        UNKNOWN, "allreduce_missing", "single-node all-reduce over NVLink: all_reduce_perf not found")
    hung = ar.judge_run(run_result("# nThread 1 nGpus 8\n", None, timed_out=True), "nvlink", ar.Figure(1, "x"))
    assert (hung.status, hung.code) == (UNKNOWN, "allreduce_hang")


def test_no_rows_and_a_bad_exit_is_unknown_never_a_number():
    v = ar.judge_run(run_result("bash: all_reduce_perf: Permission denied\n", 126), "nvlink", ar.Figure(1, "x"))
    assert (v.status, v.code, v.busbw) == (UNKNOWN, "allreduce_failed", None)
    assert "exit 126" in v.message and "Permission denied" in v.message


# -- retries, through the node runner --------------------------------------------------

def settings(tmp_path, **kw):
    return validate_host("n1", {"verify_allreduce": True, "verify_allreduce_state": str(tmp_path / "active.json"),
                                **kw})


def scripted(outputs):
    """A run() that gives each output in turn and records the argv and env."""
    calls = []

    def run(argv, deadline, env):
        calls.append((argv, deadline, env))
        text = outputs[len(calls) - 1]
        return ToolRun(tuple(argv), 0, text, 1.0)

    return run, calls


def test_a_healthy_node_that_falls_short_once_passes_on_the_second_run(tmp_path):
    run, calls = scripted([at_busbw(300.0), at_busbw(470.0), at_busbw(470.0)])
    r = node_ar.run_mode("nvlink", H100, 8, [], settings(tmp_path), run=run, clock=lambda: 5000.0)
    assert (r.status, r.runs, r.value, r.code) == (OK, 2, 470.0, None)
    argv, deadline, env = calls[0]
    assert argv[-2:] == ["-g", "8"] and argv[1:5] == ["-b", "16G", "-e", "16G"] and deadline == 71
    assert env == {"NCCL_DEBUG": "WARN"}


def test_a_node_below_threshold_in_every_run_fails_after_its_retries(tmp_path):
    run, calls = scripted([at_busbw(300.0)] * 5)
    r = node_ar.run_mode("nvlink", H100, 8, [], settings(tmp_path, verify_allreduce_retries=2), run=run)
    assert (r.status, r.code, r.runs) == (FAIL, "allreduce_slow", 3) and len(calls) == 3


def test_wrong_results_are_never_retried_into_a_pass(tmp_path):
    run, calls = scripted([at_busbw(470.0, wrong=5), at_busbw(470.0)])
    r = node_ar.run_mode("nvlink", H100, 8, [], settings(tmp_path), run=run)
    assert (r.status, r.code, r.runs) == (FAIL, "allreduce_wrong", 1) and len(calls) == 1


def test_the_loopback_mode_turns_nvlink_and_shared_memory_off(tmp_path):
    run, calls = scripted([at_busbw(45.0)])
    r = node_ar.run_mode("loopback", H100, 8, [], settings(tmp_path, verify_allreduce_min_busbw={"loopback": 40.0}),
                         run=run)
    assert r.status == OK
    assert calls[0][2] == {"NCCL_DEBUG": "WARN", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}


# -- stored, then judged by the node's verdict -----------------------------------------

def test_stored_results_are_judged_by_the_node_verdict_and_go_stale(tmp_path):
    s = settings(tmp_path, verify_allreduce_valid_for=600, verify_allreduce_min_busbw={"loopback": 40.0})
    run, _ = scripted([at_busbw(470.0), at_busbw(20.0), at_busbw(20.0), at_busbw(20.0)])
    node_ar.run_and_store(s, H100, 8, [], run=run, clock=lambda: 1000.0)
    doc = json.loads((tmp_path / "active.json").read_text())
    assert set(doc["results"]) == {"allreduce/nvlink", "allreduce/loopback"}

    fresh = node_ar.stored_reading(s.allreduce_state, clock=lambda: 1300.0)
    v = evaluate(Readings([], [], allreduce=fresh))
    got = [(r.level, r.code) for r in v.reasons if r.code.startswith("allreduce")]
    assert got == [(FAIL, "allreduce_slow")]  # loopback 20 < 40; nvlink passed

    stale = node_ar.stored_reading(s.allreduce_state, clock=lambda: 1601.0)
    v = evaluate(Readings([], [], allreduce=stale))
    got = sorted((r.level, r.code) for r in v.reasons if r.code.startswith("allreduce"))
    assert got == [(UNKNOWN, "allreduce_stale"), (UNKNOWN, "allreduce_stale")]


def test_a_damaged_state_file_is_unknown(tmp_path):
    s = settings(tmp_path)
    (tmp_path / "active.json").write_text("not json")
    v = evaluate(Readings([], [], allreduce=node_ar.stored_reading(s.allreduce_state)))
    assert [(r.level, r.code) for r in v.reasons if r.code.startswith("allreduce")] == [
        (UNKNOWN, "allreduce_unreadable")]


def test_the_readings_round_trip_through_the_checks_json():
    from ccrhost.model.verdict import readings_from_dict

    reading = ar.AllReduceReading(10.0, {"pair": {"check": "allreduce", "mode": "pair", "status": "OK", "code": None,
                                                  "message": "m", "measured_at": 9.0, "valid_for": 60.0,
                                                  "value": 300.0}})
    back = readings_from_dict(Readings([], [], allreduce=reading).to_dict())
    assert back.allreduce == reading and ar.pair_busbw(back.allreduce) == 300.0


# -- settings ----------------------------------------------------------------------------

def test_settings_refuse_an_unknown_mode_and_a_foreign_state_file():
    with pytest.raises(InventoryDataError, match="verify_allreduce_min_busbw"):
        validate_host("n1", {"verify_allreduce_min_busbw": {"tree": 100}})
    with pytest.raises(InventoryDataError, match="verify_allreduce_modes"):
        validate_host("n1", {"verify_allreduce_modes": ["pair"]})
    with pytest.raises(InventoryDataError, match="verify_allreduce_state"):
        validate_host("n1", {"verify_allreduce_state": "/etc/passwd"})
    with pytest.raises(InventoryDataError, match="verify_allreduce_max_bytes"):
        validate_host("n1", {"verify_allreduce_max_bytes": "16T"})


def test_ccrhost_check_judges_the_stored_results_only_when_the_gate_is_on(tmp_path):
    from ccrhost.node.check import run_check
    from ccrhost.model.gpus import GpuProbe
    from ccrhost.model.rdma import RdmaReading

    s = settings(tmp_path)
    run, _ = scripted([at_busbw(470.0), at_busbw(47.0)])
    node_ar.run_and_store(s, H100, 8, [], run=run, clock=lambda: 1000.0)  # measured long ago: stale now
    codes = {r.code for r in run_check(s.check_settings(), gather=lambda: (RdmaReading(), GpuProbe([], None))).reasons}
    assert "allreduce_stale" in codes
    off = validate_host("n1", {"verify_allreduce_state": str(tmp_path / "active.json")})
    codes = {r.code for r in run_check(off, gather=lambda: (RdmaReading(), GpuProbe([], None))).reasons}
    assert not any(c.startswith("allreduce") for c in codes)
