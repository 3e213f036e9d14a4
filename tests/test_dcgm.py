"""DCGM diag: both JSON shapes from verbatim fixtures, the verdict of a run
(host engine first, deadlines, excluded tests), and the stored result as the
node's check reads it."""

import json
from pathlib import Path

import pytest

from ccrhost.model import dcgm
from ccrhost.model.active import ActiveReading, ActiveResult
from ccrhost.model.dcgm import GpuId, ToolAnswer, judge_diag
from ccrhost.node import active
from ccrhost.node import dcgm as node_dcgm
from ccrhost.node.active import ToolRun
from ccrhost.probes.dcgmi import DcgmiFormatError, parse_diag, parse_gpu_ids
from ccrhost.settings import HostSettings

FIX = Path(__file__).parent / "fixtures" / "dcgm"
GPUS = {i: GpuId(i, f"00000000:{0x18 + i * 0x10:02X}:00.0", f"GPU-{i:08d}-aaaa") for i in range(4)}
OK_ENGINE = ToolAnswer(0, "2 GPUs found.\n")


def text(name):
    return (FIX / name).read_text()


def test_the_nvvs_3x_shape_gives_one_result_per_gpu_with_its_warnings():
    out = parse_diag(text("nvvs_per_gpu_3x.json"))
    assert out.shape == "3.x"
    stress = [r for r in out.results if r.test == "sm_stress"]
    assert [(r.gpu, r.status) for r in stress] == [(0, "Fail"), (1, "Pass"), (2, "Fail"), (3, "Fail")]
    assert stress[0].warnings and stress[0].error_ids
    deployment = [r for r in out.results if r.category == "Deployment"]
    assert {r.gpu for r in deployment} == {0, 1, 2, 3}  # "gpu_ids": "0,1,2,3": one result each
    assert [r.status for r in out.results if r.test == "memory"] == ["Skip", "Pass", "Pass", "Pass"]


def test_the_3x_failures_name_the_test_and_each_gpu_by_index_pci_and_uuid():
    status, reasons, _ = judge_diag(OK_ENGINE, ToolAnswer(0, ""), parse_diag(text("nvvs_per_gpu_3x.json")), 3, GPUS)
    # each "FAIL" carries error_severity 1 (DCGM_ERROR_MONITOR: can perform workload): judged a warning
    assert status == "WARN"
    assert [(r.code, r.gpu) for r in reasons] == [("dcgm_test_warn", 0), ("dcgm_test_warn", 2), ("dcgm_test_warn", 3)]
    first = reasons[0].message
    assert "Stress test 'sm_stress' warned on GPU 0 (00000000:18:00.0, GPU-00000000-aaaa)" in first
    assert first.endswith("(DCGM said Fail, severity 1 monitor)")
    assert "DCGM error" in first
    assert "GPU 2 (00000000:38:00.0" in reasons[1].message


def test_gcms_3x_level1_sample_fails_persistence_mode_and_warns_environment():
    status, reasons, _ = judge_diag(OK_ENGINE, ToolAnswer(0, ""), parse_diag(text("gcm_3x_level1_fail.json")), 1, {})
    assert status == "FAIL"
    assert [(r.level, r.code) for r in reasons] == [("FAIL", "dcgm_test_failed"), ("WARN", "dcgm_test_warn")]
    assert "Deployment test 'Persistence Mode' failed on all GPUs" in reasons[0].message
    assert "'Environment Variables' warned" in reasons[1].message


def test_the_4x_gb10_capture_fails_software_on_gpu_0_with_dcgms_words():
    raw = text("dcgm4_gb10_level1_fail.json")
    out = parse_diag(raw)
    assert out.shape == "4.x" and out.version == "4.2.3"
    assert [(r.test, r.gpu, r.status, r.error_ids) for r in out.results] == [("software", 0, "Fail", (29,))]
    # dcgmi exits 226 with a failed test: the report decides, not the exit status
    status, reasons, _ = judge_diag(OK_ENGINE, ToolAnswer(226, raw), out, 1, {0: GpuId(0, "0000000F:01:00.0", "GPU-x")})
    assert status == "FAIL"
    assert reasons[0].message.startswith("DCGM diag level 1: Deployment test 'software' failed on GPU 0 "
                                         "(0000000F:01:00.0, GPU-x): Persistence Mode: Persistence mode for GPU 0")


def test_a_failed_4x_summary_without_a_failing_gpu_is_one_result_for_no_gpu():
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Integration", "tests": [
        {"name": "pcie", "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"}],
         "test_summary": {"status": "Fail", "warnings": [{"warning": "bus error", "error_id": 3}]}}]}]}}
    out = parse_diag(json.dumps(doc))
    assert [(r.gpu, r.status) for r in out.results] == [(0, "Pass"), (None, "Fail")]


def test_excluded_tests_and_categories_are_not_judged():
    out = parse_diag(text("gcm_3x_level1_fail.json"))
    assert judge_diag(OK_ENGINE, ToolAnswer(0, ""), out, 1, {}, exclude=("persistence mode", "Environment Variables"))[0] == "OK"
    assert judge_diag(OK_ENGINE, ToolAnswer(0, ""), out, 1, {}, exclude=("Deployment",))[0] == "UNKNOWN"  # nothing judged


@pytest.mark.parametrize("raw", ["", "Error: unable to connect", "{not json", '{"other": {}}'])
def test_what_is_not_a_report_raises(raw):
    with pytest.raises(DcgmiFormatError):
        parse_diag(raw)


def test_a_host_engine_that_does_not_answer_is_unknown_and_never_a_gpu_fail():
    hung = ToolAnswer(None, "", timed_out=True)
    status, reasons, summary = judge_diag(hung, None, None, 2, GPUS, engine_deadline=10)
    assert (status, [r.code for r in reasons]) == ("UNKNOWN", ["dcgm_hostengine"])
    assert summary.startswith("DCGM host engine not responding")
    refused = ToolAnswer(255, "Error: unable to establish a connection to the specified host: localhost\n")
    assert judge_diag(refused, None, None, 2, GPUS)[1][0].code == "dcgm_hostengine"


def test_a_diag_killed_at_its_deadline_is_a_hang_and_a_missing_dcgmi_says_so():
    assert judge_diag(OK_ENGINE, ToolAnswer(None, "", True), None, 3, GPUS, deadline=3600)[1][0].code == "dcgm_hang"
    missing = judge_diag(ToolAnswer(None, "", missing="dcgmi not found"), None, None, 1, GPUS)
    assert (missing[0], missing[1][0].code) == ("UNKNOWN", "dcgm_missing")


def test_gpu_ids_come_from_nvidia_smis_csv():
    ids = parse_gpu_ids("0, 00000000:18:00.0, GPU-abc\n1, 00000000:2A:00.0, GPU-def\nNo devices were found\n")
    assert ids[1] == GpuId(1, "00000000:2A:00.0", "GPU-def") and len(ids) == 2


# -- the runner and the stored result ------------------------------------------------

def fake_run(outputs, calls):
    def run(argv, deadline, env):
        calls.append((tuple(argv), deadline))
        key = argv[1]
        rc, out, timed_out = outputs[key]
        return ToolRun(tuple(argv), rc, out, 0.1, timed_out)
    return run


def settings(tmp_path, **kw):
    return HostSettings(verify_dcgm=True, verify_dcgm_state=str(tmp_path / "dcgm.json"), **kw)


def test_the_runner_asks_the_engine_first_then_runs_the_level_under_its_deadline(tmp_path):
    calls = []
    run = fake_run({"discovery": (0, "1 GPU found.", False),
                    "--query-gpu=index,pci.bus_id,uuid": (0, "0, 0000000F:01:00.0, GPU-x\n", False),
                    "diag": (226, text("dcgm4_gb10_level1_fail.json"), False)}, calls)
    s = settings(tmp_path, verify_dcgm_timeouts={1: 42})
    result = node_dcgm.run_and_store(s, 1, run=run, clock=lambda: 1000.0)
    assert [c[0][1] for c in calls] == ["discovery", "--query-gpu=index,pci.bus_id,uuid", "diag"]
    assert calls[0][1] == 10 and calls[2] == (("dcgmi", "diag", "-r", "1", "-j"), 42.0)
    assert (result.status, result.code, result.mode) == ("FAIL", "dcgm_test_failed", "level 1")
    stored = active.load(s.verify_dcgm_state)
    assert stored["dcgm_diag/level 1"].reasons[0]["message"].startswith("DCGM diag level 1: Deployment test 'software'")


def test_a_hung_engine_never_starts_the_diag(tmp_path):
    calls = []
    run = fake_run({"discovery": (None, "", True)}, calls)
    result = node_dcgm.run_level(settings(tmp_path), 2, run=run)
    assert [c[0][1] for c in calls] == ["discovery"]
    assert (result.status, result.code) == ("UNKNOWN", "dcgm_hostengine")


def test_the_check_reads_the_newest_stored_result_and_its_age(tmp_path):
    path = tmp_path / "dcgm.json"
    bad = ActiveResult(dcgm.CHECK, "level 4", "FAIL", "dcgm_test_failed", "m", 100.0, 1000,
                       reasons=({"level": "FAIL", "code": "dcgm_test_failed", "message": "memtest failed on GPU 3"},))
    active.store(str(path), [bad])
    reading = node_dcgm.stored_reading(str(path), clock=lambda: 200.0)
    assert [r.message for r in dcgm.check_dcgm(reading)] == ["memtest failed on GPU 3"]
    # a later level 4 pass speaks for the GPUs now (a lower level's would not: test_dcgm_state.py)
    active.store(str(path), [ActiveResult(dcgm.CHECK, "level 4", "OK", None, "passed", 150.0, 1000)])
    assert dcgm.check_dcgm(node_dcgm.stored_reading(str(path), clock=lambda: 200.0)) == []
    stale = dcgm.check_dcgm(node_dcgm.stored_reading(str(path), clock=lambda: 5000.0))
    assert [(r.level, r.code) for r in stale] == [("UNKNOWN", "dcgm_stale")]
    assert "4850 s old, valid for 1000 s" in stale[0].message


def test_an_unreadable_state_file_is_unknown(tmp_path):
    path = tmp_path / "dcgm.json"
    path.write_text("{")
    assert [r.code for r in dcgm.check_dcgm(node_dcgm.stored_reading(str(path)))] == ["dcgm_unreadable"]
    assert dcgm.check_dcgm(ActiveReading(0.0, {})) == []
    # one entry that is not a result is dropped with a note, never the whole reading's verdict
    bad = dcgm.check_dcgm(ActiveReading(0.0, {"dcgm_diag/level 2": {"status": "GREAT"}}))
    assert [(r.level, r.code) for r in bad] == [("WARN", "active_result_dropped")]
    assert bad[0].message.startswith("DCGM diag result dcgm_diag/level 2:")


def test_the_level_deadlines_survive_the_nodes_check_yaml_and_bad_ones_are_refused():
    import yaml

    from ccrhost.model.slurm import check_config
    from ccrhost.settings import InventoryDataError, validate_host

    text = yaml.safe_dump(check_config(HostSettings(verify_dcgm=True, verify_dcgm_timeouts={3: 8})))
    assert validate_host("n", yaml.safe_load(text)).verify_dcgm_timeouts == {3: 8}  # "3" in YAML is level 3
    with pytest.raises(InventoryDataError, match=r"verify_dcgm_timeouts\[5\] = 5: allowed: 1, 2, 3 or 4"):
        validate_host("n", {"verify_dcgm_timeouts": {5: 60}})


def test_the_check_reads_nvbandwidth_beside_the_diag(tmp_path):
    path = str(tmp_path / "dcgm.json")
    slow = {"level": "FAIL", "code": "nvbandwidth_slow", "message": "nvbandwidth host to device: GPU 3 copies at 13.89"}
    active.store(path, [ActiveResult(dcgm.CHECK, "level 2", "OK", None, "passed", 100.0, 1000),
                        ActiveResult("nvbandwidth", "copy engine", "FAIL", "nvbandwidth_slow", "m", 100.0, 1000,
                                     reasons=(slow,))])
    assert [r.code for r in dcgm.check_dcgm(node_dcgm.stored_reading(path, clock=lambda: 200.0))] == \
        ["nvbandwidth_slow"]
    assert [r.code for r in dcgm.check_dcgm(node_dcgm.stored_reading(path, clock=lambda: 2000.0))] == \
        ["nvbandwidth_stale", "dcgm_stale"]


def test_the_slurm_step_gives_back_every_result_the_node_printed_or_says_why_not():
    import base64

    from ccrhost.fleet.slurm_dcgm import DcgmOptions, parse_step, step_script

    results = [ActiveResult(dcgm.CHECK, "level 2", "OK", None, "passed", 1.0, 10).to_dict(),
               ActiveResult("nvbandwidth", "copy engine", "OK", None, "ok", 1.0, 10).to_dict()]
    body = base64.encodebytes(json.dumps(results).encode()).decode().splitlines()  # 76-character lines
    got = parse_step(["@@dcgm", *body, "@@end"])
    assert [(r.check, r.mode) for r in got] == [("dcgm_diag", "level 2"), ("nvbandwidth", "copy engine")]
    said = base64.b64encode(b"Error: --config: no such file").decode()
    assert parse_step(["@@dcgm", said, "@@end"]) == "ccrhost dcgm printed no result: Error: --config: no such file"
    assert parse_step(["srun: error: node down"]) == "the step printed no result"
    assert "dcgm --config /etc/ccrhost/check.yaml --level 3 --format json" in step_script(
        "/usr/local/bin/ccrhost", "/etc/ccrhost/check.yaml", "--level", "3")
    assert "dcgm --config /c.yaml --gemm-only --gemm-seconds 5 --format json" in step_script("ccrhost", "/c.yaml",
                                                                                              "--gemm-only", "--gemm-seconds", "5")
    assert DcgmOptions(level=1).step_timeout > 300 and DcgmOptions(level=1, timeout=99).step_timeout == 99
