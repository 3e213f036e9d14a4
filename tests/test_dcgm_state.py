"""DCGM diag and nvbandwidth results as every path stores and judges them
(issue 45): stored by merging under a lock, a level-N FAIL standing until a
run at level N or above passes, DCGM 4.x's severity, the GPU named for the
history, a sweep's result judged with verify_dcgm off, a host engine that
lists its GPUs but exits 223, a malformed stored reason, and a prolog that
never runs nvbandwidth."""

import json
import multiprocessing
import subprocess
from pathlib import Path

from click.testing import CliRunner

from ccrhost.model import dcgm
from ccrhost.model import nvbandwidth as nvb
from ccrhost.model.active import ActiveReading, ActiveResult
from ccrhost.model.dcgm import GpuId, ToolAnswer, judge_diag
from ccrhost.model.history import serials
from ccrhost.node import active
from ccrhost.node import dcgm as node_dcgm
from ccrhost.node.active import ToolRun
from ccrhost.probes.dcgmi import parse_diag, parse_run_script, run_script
from ccrhost.probes.nvbandwidth import parse
from ccrhost.settings import HostSettings

FIX = Path(__file__).parent / "fixtures"
OK_ENGINE = ToolAnswer(0, "2 GPUs found.\n")


def result(level, status, at, valid_for=1000, message="m", reasons=()):
    code = None if status == "OK" else ("dcgm_test_failed" if status == "FAIL" else "dcgm_hostengine")
    return ActiveResult(dcgm.CHECK, f"level {level}", status, code, message, at, valid_for, reasons=reasons)


FAIL3 = result(3, "FAIL", 100.0, reasons=({"level": "FAIL", "code": "dcgm_test_failed", "gpu": 6,
                                           "message": "DCGM diag level 3: Stress test 'targeted_stress' failed on GPU 6"},))
NVB_FAIL = ActiveResult("nvbandwidth", "copy engine", "FAIL", "nvbandwidth_slow", "slow", 100.0, 1000,
                        reasons=({"level": "FAIL", "code": "nvbandwidth_slow", "message": "GPU 3 copies at 13.89"},))


def codes(path, now=200.0, required=True):
    return [(r.level, r.code) for r in dcgm.check_dcgm(node_dcgm.stored_reading(str(path), lambda: now, required))]


# -- case 3: every path stores by merging ----------------------------------------------

def test_the_deploys_remote_store_keeps_a_stored_fail_and_nvbandwidths(tmp_path):
    """operations/verify.py yields store_script for its level-1 result: run on the node it merges."""
    path = tmp_path / "state" / "dcgm.json"
    active.store(str(path), [FAIL3, NVB_FAIL])
    line = active.store_script(str(path), [result(1, "OK", 150.0)], path.read_text())
    run = subprocess.run(["bash", "-c", line], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    stored = json.loads(path.read_text())["results"]
    assert sorted(stored) == ["dcgm_diag/level 1", "dcgm_diag/level 3", "nvbandwidth/copy engine"]
    assert codes(path) == [("FAIL", "nvbandwidth_slow"), ("FAIL", "dcgm_test_failed")]


def test_a_remote_store_drops_an_entry_that_is_not_a_result_and_keeps_the_rest(tmp_path):
    path = tmp_path / "dcgm.json"
    path.write_text(json.dumps({"version": 1, "results": {"dcgm_diag/level 3": FAIL3.to_dict(),
                                                          "dcgm_diag/level 2": {"status": "GREAT"}}}))
    run = subprocess.run(["bash", "-c", active.store_script(str(path), [NVB_FAIL])], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert sorted(json.loads(path.read_text())["results"]) == ["dcgm_diag/level 3", "nvbandwidth/copy engine"]


def _store_many(path, name):
    for i in range(30):
        active.store(path, [ActiveResult("allreduce", name, "OK", None, "ok", float(i), 1000)])


def test_local_stores_that_race_lose_nothing(tmp_path):
    """The health check's NIC reading and a job's all-reduce write one file: each store is read-merge-write
    under the file's lock."""
    path = str(tmp_path / "active.json")
    procs = [multiprocessing.Process(target=_store_many, args=(path, f"mode{i}")) for i in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert sorted(active.load(path)) == [f"allreduce/mode{i}" for i in range(6)]


# -- case 4: a level-N FAIL stands until a level >= N run passes --------------------------

def test_a_newer_lower_level_pass_or_an_engine_that_did_not_answer_never_hides_a_level_3_fail(tmp_path):
    path = tmp_path / "dcgm.json"
    active.store(str(path), [FAIL3, result(1, "OK", 150.0)])  # the prolog's quick level 1 after the sweep's FAIL
    got = dcgm.check_dcgm(node_dcgm.stored_reading(str(path), lambda: 200.0))
    assert [(r.level, r.code, r.gpu) for r in got] == [("FAIL", "dcgm_test_failed", 6)]
    assert got[0].message.endswith("failed on GPU 6 (stands until a level 3 or higher diag passes)")
    active.store(str(path), [result(1, "UNKNOWN", 160.0, message="DCGM host engine not responding")])
    assert codes(path) == [("FAIL", "dcgm_test_failed"), ("UNKNOWN", "dcgm_hostengine")]
    active.store(str(path), [result(2, "OK", 170.0)])
    assert codes(path) == [("FAIL", "dcgm_test_failed")]
    # a level 3 (or 4) run that passes clears it
    active.store(str(path), [result(4, "OK", 180.0)])
    assert codes(path) == []


# -- case 5: DCGM 4.x's severity -----------------------------------------------------

def test_a_4x_fail_with_the_monitor_severity_is_the_warning_it_is_on_3x():
    raw = (FIX / "dcgm" / "dcgm4_memtest_temp_violation.json").read_text()
    status, reasons, _ = judge_diag(OK_ENGINE, ToolAnswer(226, raw), parse_diag(raw), 4, {})
    assert (status, [(r.level, r.code, r.gpu) for r in reasons]) == ("WARN", [("WARN", "dcgm_test_warn", 0)])
    assert reasons[0].message == (
        "DCGM diag level 4: Stress test 'memtest' warned on GPU 0: Temperature 1000 of GPU 0 exceeded "
        "user-specified maximum allowed temperature 90 (DCGM error 42) (DCGM said Fail, severity 1 monitor)")
    # the same warning as DCGM 3.x writes it ("Warn") is the same level
    doc = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Stress", "tests": [{"name": "memtest", "results": [
        {"gpu_id": "0", "status": "Warn", "warnings": [{"warning": "Temperature 1000 of GPU 0 exceeded", "error_id": 42,
                                                        "error_severity": 1}]}]}]}]}}
    assert judge_diag(OK_ENGINE, ToolAnswer(0, ""), parse_diag(json.dumps(doc)), 4, {})[0] == "WARN"
    # an isolate (or config: persistence mode) severity stays a failure
    for severity in (2, 5):
        isolate = raw.replace('"error_severity" : 1', f'"error_severity" : {severity}')
        assert judge_diag(OK_ENGINE, ToolAnswer(226, isolate), parse_diag(isolate), 4, {})[0] == "FAIL"


# -- case 9: the GPU's index reaches the history ------------------------------------------

def test_diag_and_nvbandwidth_reasons_carry_the_gpu_so_its_serial_reaches_the_history():
    raw = (FIX / "dcgm" / "dcgm4_gb10_level1_fail.json").read_text()
    _, reasons, _ = judge_diag(OK_ENGINE, ToolAnswer(226, raw), parse_diag(raw), 1, {})
    assert [r.gpu for r in reasons] == [0]
    assert serials(reasons, {0: "1652123456789"}) == ["1652123456789"]
    text = (FIX / "nvbandwidth" / "v0.10_7gpu_ce.txt").read_text()
    slow = text.replace(" 0     55.59     55.60     55.60     55.59     55.58     55.60     55.58",
                        " 0     55.59     55.60     55.60     13.90     55.58     55.60     55.58")
    _, reasons, _ = nvb.judge(parse(slow), "NVIDIA H100 80GB HBM3", {})
    assert [r.gpu for r in reasons if r.code == "nvbandwidth_slow"] == [3]
    # a slow pair names its GPU only where one GPU is in every slow pair
    m = parse(text)
    pairs = {k: v for k, v in m[nvb.D2D].values.items()}
    pairs.update({(3, 1): 100.0, (5, 3): 100.0})
    m[nvb.D2D] = nvb.Matrix(nvb.D2D, "", m[nvb.D2D].columns, pairs)
    _, reasons, _ = nvb.judge(m, "NVIDIA H200", {})
    assert [r.gpu for r in reasons if r.code == "nvbandwidth_slow"] == [3, 3]


# -- case 9a: what a sweep stored is judged with verify_dcgm off --------------------------

def test_with_verify_dcgm_off_the_check_still_judges_a_stored_fail_and_only_a_stale_pass_says_nothing(tmp_path):
    path = tmp_path / "dcgm.json"
    kept = HostSettings(verify_dcgm=False, verify_dcgm_state=str(path)).check_settings()
    assert kept.dcgm_state == str(path) and kept.verify_dcgm is False
    active.store(str(path), [FAIL3])
    assert codes(path, required=False) == [("FAIL", "dcgm_test_failed")]
    assert codes(path, now=5000.0, required=False) == [("UNKNOWN", "dcgm_stale")]  # an old FAIL still holds
    active.store(str(path), [result(3, "OK", 150.0)])
    assert codes(path, now=5000.0, required=False) == []
    assert codes(path, now=5000.0, required=True) == [("UNKNOWN", "dcgm_stale")]


# -- case 21: a host engine that lists its GPUs but exits 223 -----------------------------

DISCOVERY_223 = """2 GPUs found.
+--------+----------------------------------------------------------------------+
| GPU ID | Device Information                                                   |
+--------+----------------------------------------------------------------------+
| 0      | Name: NVIDIA H100 80GB HBM3                                          |
| 1      | Name: NVIDIA H100 80GB HBM3                                          |
+--------+----------------------------------------------------------------------+
Error: Cannot get NvSwitch list from remote node. Return: This request is serviced by a module of DCGM that is not currently loaded
"""


def test_an_engine_that_lists_every_gpu_but_exits_223_answered_and_the_diag_runs(tmp_path):
    assert dcgm.engine_answered(ToolAnswer(223, DISCOVERY_223))
    assert not dcgm.engine_answered(ToolAnswer(255, "Error: unable to establish a connection to the specified host"))
    raw = (FIX / "dcgm" / "dcgm4_gb10_level1_fail.json").read_text()
    status, reasons, _ = judge_diag(ToolAnswer(223, DISCOVERY_223), ToolAnswer(226, raw), parse_diag(raw), 1, {})
    assert (status, [r.code for r in reasons]) == ("FAIL", ["dcgm_test_failed"])
    calls = []

    def run(argv, deadline, env):
        calls.append(argv[1])
        out = {"discovery": (223, DISCOVERY_223), "diag": (226, raw)}.get(argv[1], (0, "0, 0000000F:01:00.0, GPU-x\n"))
        return ToolRun(tuple(argv), out[0], out[1], 0.1)

    s = HostSettings(verify_dcgm=True, verify_dcgm_state=str(tmp_path / "dcgm.json"))
    assert node_dcgm.run_level(s, 1, run=run).code == "dcgm_test_failed"
    assert calls == ["discovery", "--query-gpu=index,pci.bus_id,uuid", "diag"]


def test_the_deploys_remote_run_goes_on_to_the_diag_after_exit_223(tmp_path):
    fake = tmp_path / "dcgmi"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = discovery ]; then cat <<'EOF'\n" + DISCOVERY_223 +
                    "EOF\nexit 223; fi\necho '{\"DCGM Diagnostic\": {\"test_categories\": []}}'\n")
    fake.chmod(0o755)
    out = subprocess.run(["sh", "-c", run_script(str(fake), 1, 5, 30)], capture_output=True, text=True).stdout
    engine, _, diag = parse_run_script(out.splitlines())
    assert engine.rc == 223 and diag is not None and diag.rc == 0 and "DCGM Diagnostic" in diag.output
    hung = tmp_path / "hung"
    hung.write_text("#!/bin/sh\necho 'Error: Unable to connect to host engine. Host engine connection invalid/disconnected.'\n"
                    "exit 255\n")
    hung.chmod(0o755)
    out = subprocess.run(["sh", "-c", run_script(str(hung), 1, 5, 30)], capture_output=True, text=True).stdout
    assert parse_run_script(out.splitlines())[2] is None


# -- case 12 (part): a malformed stored reason ------------------------------------------

def test_a_malformed_reason_in_the_state_file_is_dropped_with_a_note_and_the_next_store_drops_it(tmp_path):
    path = tmp_path / "dcgm.json"
    bad = {**result(2, "FAIL", 100.0).to_dict(), "reasons": ["not a reason"]}
    path.write_text(json.dumps({"version": 1, "results": {"dcgm_diag/level 2": bad,
                                                          "nvbandwidth/copy engine": NVB_FAIL.to_dict()}}))
    got = dcgm.check_dcgm(node_dcgm.stored_reading(str(path), lambda: 200.0))
    assert [(r.level, r.code) for r in got] == [("WARN", "active_result_dropped"), ("FAIL", "nvbandwidth_slow")]
    assert got[0].message == ("DCGM diag result dcgm_diag/level 2: not a stored active-check result: "
                              "a malformed reason 'not a reason': dropped, not judged")
    active.store(str(path), [result(1, "OK", 150.0)])
    assert sorted(json.loads(path.read_text())["results"]) == ["dcgm_diag/level 1", "nvbandwidth/copy engine"]
    assert codes(path) == [("FAIL", "nvbandwidth_slow")]


# -- case 13 (part): the prolog's quick step never runs nvbandwidth -------------------------

def test_the_prologs_quick_diag_never_runs_nvbandwidth(tmp_path, monkeypatch):
    from ccrhost.cli import main
    from ccrhost.model.slurm import SLURM_PROLOG, integration_files
    from ccrhost.node import nvbandwidth

    s = HostSettings(verify_dcgm=True, verify_dcgm_level_prolog=1, verify_nvbandwidth=True)
    prolog = next(text for path, text, _ in integration_files(s) if path == SLURM_PROLOG)
    step = next(line for line in prolog.splitlines() if " dcgm " in line)
    assert "--level 1 --no-nvbandwidth" in step, step
    ran = []
    monkeypatch.setattr(node_dcgm, "run_and_store", lambda settings, level: ran.append("diag") or result(1, "OK", 1.0))
    monkeypatch.setattr(nvbandwidth, "run_and_store", lambda settings: ran.append("nvbandwidth") or NVB_FAIL)
    config = tmp_path / "check.yaml"
    config.write_text(f"verify_dcgm: true\nverify_nvbandwidth: true\nverify_dcgm_state: {tmp_path}/dcgm.json\n")
    CliRunner().invoke(main, ["dcgm", "--config", str(config), "--level", "1", "--no-nvbandwidth"])
    assert ran == ["diag"]
    CliRunner().invoke(main, ["dcgm", "--config", str(config), "--level", "1"])
    assert ran == ["diag", "diag", "nvbandwidth"]  # elsewhere verify_nvbandwidth still runs it
