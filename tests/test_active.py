"""The active-check runner: deadline and process-group kill, the state file, staleness."""

import json
import os
import sys
import time

import pytest

from ccrhost.model.active import ActiveResult, stale_message, stored_reasons
from ccrhost.node.active import load, run_tool, store


def result(**kw):
    base = dict(check="allreduce", mode="nvlink", status="OK", code=None, message="busbw 470 GB/s",
                measured_at=1000.0, valid_for=3600.0, value=470.0)
    return ActiveResult(**{**base, **kw})


def test_a_tool_that_finishes_gives_its_output_and_status():
    run = run_tool([sys.executable, "-c", "print('hello'); import sys; sys.exit(3)"], 10)
    assert run.rc == 3 and run.output == "hello\n" and not run.timed_out and run.missing is None


def test_a_hung_tool_is_killed_at_its_deadline_with_every_child(tmp_path):
    marker = tmp_path / "child.pid"
    # the tool starts a child that would outlive it, then hangs
    script = ("import subprocess, sys, time; "
              f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
              f"open({str(marker)!r}, 'w').write(str(p.pid)); print('started', flush=True); time.sleep(300)")
    start = time.monotonic()
    run = run_tool([sys.executable, "-c", script], 2)
    assert run.timed_out and run.rc is None and "started" in run.output
    assert time.monotonic() - start < 30
    child = int(marker.read_text())
    for _ in range(50):  # the kill is delivered; reaping by init can take a moment
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as f:
            if f.read().split()[2] == "Z":
                break
        time.sleep(0.1)
    else:
        pytest.fail(f"child {child} outlived the deadline")


def test_a_missing_tool_says_so():
    run = run_tool(["/nonexistent/all_reduce_perf"], 5)
    assert run.missing == "/nonexistent/all_reduce_perf not found" and run.rc is None


def test_results_are_stored_by_check_and_mode_and_read_back(tmp_path):
    path = str(tmp_path / "state" / "active.json")
    store(path, [result()])
    store(path, [result(mode="pair", status="FAIL", code="allreduce_slow", message="slow")])
    store(path, [result(measured_at=2000.0)])  # replaces nvlink, keeps pair
    back = load(path)
    assert set(back) == {"allreduce/nvlink", "allreduce/pair"}
    assert back["allreduce/nvlink"].measured_at == 2000.0 and back["allreduce/pair"].code == "allreduce_slow"
    assert not [p for p in os.listdir(tmp_path / "state") if p.endswith(".tmp")]


def test_a_damaged_state_file_is_refused_on_read_and_replaced_on_store(tmp_path):
    path = tmp_path / "active.json"
    path.write_text("{half")
    with pytest.raises(ValueError, match="active.json"):
        load(str(path))
    store(str(path), [result()])
    assert json.loads(path.read_text())["results"]["allreduce/nvlink"]["status"] == "OK"


def test_a_stale_result_and_a_fresh_results_reasons():
    r = result()
    assert not r.stale(1000.0 + 3600) and r.stale(1000.0 + 3601)
    assert r.stale(999.0)  # measured in the future: the clock moved
    assert stale_message("NVLink", r, 1000.0 + 3601) == \
        "NVLink: the stored result is 3601 s old, valid for 3600 s: run it again"
    assert stored_reasons(r) == []
    failed = result(status="FAIL", code="allreduce_wrong", message="wrong results")
    assert [(x.level, x.code, x.message) for x in stored_reasons(failed)] == [("FAIL", "allreduce_wrong", "wrong results")]


def test_a_stored_record_that_is_not_one_is_refused():
    with pytest.raises(ValueError):
        ActiveResult.from_dict({"check": "x"})
    with pytest.raises(ValueError):
        ActiveResult.from_dict({**result().to_dict(), "status": "GOOD"})
