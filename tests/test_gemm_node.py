"""The GEMM on a node (node/gemm.py) with a fake runner, the lab's
dcgmproftester12 read by the real parser, the stored result judged by the
node's verdict (gemm_slow, gemm_stale), and the measured CCR with a
measured compute."""

import runpy
import sys
from pathlib import Path

import pytest
from test_allreduce_ccr import with_pair
from test_checks import H100

from ccrhost.lab.gemm import peak
from ccrhost.lab.profile import ProfileError, load_profile, parse_fault, render_sysfs
from ccrhost.model import dcgm
from ccrhost.model.active import ActiveReading
from ccrhost.model.gemm import measured_compute
from ccrhost.model.verdict import Policy, Verdict, evaluate
from ccrhost.node import active
from ccrhost.node import gemm as node_gemm
from ccrhost.node.active import ToolRun
from ccrhost.node.formats import format_text
from ccrhost.probes import gemm as probe
from ccrhost.settings import HostSettings, validate_host

SHIMS = Path(__file__).resolve().parent.parent / "ccrhost" / "lab" / "shims"
NAMES = "NVIDIA H100 80GB HBM3\n" * 2
IDS = "0, 00000000:18:00.0, GPU-a\n1, 00000000:2A:00.0, GPU-b\n"


def ids(count):
    return "".join(f"{i}, 00000000:{0x18 + i:02X}:00.0, GPU-{i}\n" for i in range(count))


def lab_run(capsys, *args, faults=(), model="NVIDIA H100 80GB HBM3", count=2):
    """The lab shim run in this process on a node record of ``count`` GPUs."""
    sys.path.insert(0, str(SHIMS))
    try:
        import labkernel

        labkernel._node = {"faults": list(faults), "gpus": {"count": count, "model": model},
                           "gpu_fp16_tflops": peak(model), "gpu_bdfs": []}
        with pytest.raises(SystemExit) as done:
            sys.argv = ["dcgmproftester12", *args]
            runpy.run_path(str(SHIMS / "dcgmproftester12"), run_name="__main__")
    finally:
        sys.path.remove(str(SHIMS))
        labkernel._node = None
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


def test_the_lab_tool_prints_what_the_parser_reads(capsys):
    rc, out, _ = lab_run(capsys, "--no-dcgm-validation", "-t", "1004", "-d", "30")
    reading = probe.parse(out, "dcgmproftester12")
    assert rc == 0 and reading.format == "fmt" and reading.ticks == {0: 30, 1: 30}
    assert reading.tflops == {0: 604.0, 1: 604.0}  # 0.61 of H100 SXM's 989.5, at three digits
    assert out.splitlines()[1] == "Worker 0:0 [1004]: TensorEngineActive: generated ???, dcgm 0 (6.04e+05 gflops)."


def test_gemm_throttle_is_slow_only_under_sustained_load(capsys):
    short = probe.parse(lab_run(capsys, "-t", "1004", "-d", "30", "-i", "0", faults=["gemm_throttle=0:60"])[1])
    soak = probe.parse(lab_run(capsys, "-t", "1004", "-d", "600", faults=["gemm_throttle=0:60"])[1])
    assert short.tflops == {0: 604.0}
    assert soak.tflops == {0: 181.0, 1: 604.0}  # 540 of its 600 seconds at 30%


def test_the_gemm_throttle_fault_is_checked(tmp_path):
    hgx = load_profile("hgx-h100-8x400")
    render_sysfs(hgx, [parse_fault("n:gemm_throttle=0:60")[1]], tmp_path / "ok", 1)
    with pytest.raises(ProfileError, match="gemm_throttle=9: need INDEX"):
        render_sysfs(hgx, [parse_fault("n:gemm_throttle=9")[1]], tmp_path / "bad", 1)


def settings(tmp_path, **kw):
    return HostSettings(verify_dcgm=True, verify_gemm=True, verify_dcgm_state=str(tmp_path / "dcgm.json"), **kw)


def fake(tool_output, rc=0, calls=None, count=2):
    def run(argv, deadline, env):
        if calls is not None:
            calls.append((tuple(argv), deadline))
        if argv[0] == "bash":
            return ToolRun(tuple(argv), 0, f"@@tool dcgmproftester12\n{tool_output}@@rc {rc}\n", 0.1)
        return ToolRun(tuple(argv), 0, NAMES if argv[1] == "--query-gpu=name" else ids(count), 0.1)
    return run


def line(gpu, gflops):
    return f"Worker {gpu}:0 [1004]: TensorEngineActive:  generated ???, dcgm 0 ({gflops} gflops).\n"


def test_the_node_runs_the_gemm_on_the_gpus_it_reads_and_stores_it(tmp_path):
    calls = []
    s = settings(tmp_path)
    result = node_gemm.run_and_store(s, 30, fake(line(0, "6.04e+05") + line(1, "3.00e+05"), calls=calls),
                                     clock=lambda: 1000.0)
    argv, deadline = calls[-1]
    assert "-d 30 -i 0,1" in argv[2] and deadline == 30 + 60 + 5 + 15
    assert (result.check, result.mode, result.status, result.code, result.value) == ("gemm", "fp16", "FAIL",
                                                                                      "gemm_slow", 300.0)
    assert result.data == {"tflops": {"0": 604.0, "1": 300.0}, "seconds": 30, "tool": "dcgmproftester12"}
    assert result.message == ("GEMM (dcgmproftester12 field 1004, fp16): GPU 1 achieved 300.0 TFLOP/s, 0.30 of its "
                              "peak 989.5 TFLOP/s (H100 SXM fp16 dense, ccrhost/platforms/gpus.yaml: "
                              f"{result.reasons[0]['message'].split('gpus.yaml: ')[1]}")
    assert result.reasons[0]["gpu"] == 1
    assert active.load(s.verify_dcgm_state)["gemm/fp16"] == result


def test_an_ok_run_names_the_lowest_gpu_and_a_missing_tool_is_unknown(tmp_path):
    ok = node_gemm.run(settings(tmp_path), 30, fake(line(0, "6.04e+05") + line(1, "6.00e+05")), clock=lambda: 1.0)
    assert (ok.status, ok.value) == ("OK", 600.0)
    assert ok.message == ("GEMM (dcgmproftester12 field 1004, fp16, 30 s): 2 GPU(s) at or above 0.4 of their peak; "
                          "lowest GPU 1 600.0 TFLOP/s (0.61 of 989.5)")

    def missing(argv, deadline, env):
        out = "@@missing\n" if argv[0] == "bash" else NAMES if argv[1] == "--query-gpu=name" else IDS
        return ToolRun(tuple(argv), 0, out, 0.1)
    gone = node_gemm.run(settings(tmp_path), 30, missing)
    assert (gone.status, gone.code, gone.data) == ("UNKNOWN", "gemm_unreadable", None)


def test_the_floor_is_a_setting():
    s = validate_host("n", {"verify_gemm": True, "verify_gemm_seconds": 600, "verify_gemm_min_fraction": 0.7})
    assert (s.verify_gemm, s.verify_gemm_seconds, s.verify_gemm_min_fraction) == (True, 600, 0.7)
    d = validate_host("n", {})
    assert (d.verify_gemm, d.verify_gemm_seconds, d.verify_gemm_min_fraction) == (False, 30, 0.4)


def stored(tmp_path, status="OK", measured_at=100.0, tflops=(604.0, 604.0)):
    s = settings(tmp_path)
    lines = "".join(line(g, f"{t * 1000:#.3g}") for g, t in enumerate(tflops))
    result = node_gemm.run_and_store(s, 30, fake(lines, count=len(tflops)), clock=lambda: measured_at)
    assert result.status == status
    return s


def test_the_check_judges_a_stored_gemm_result_and_its_age(tmp_path):
    from ccrhost.node import dcgm as node_dcgm

    s = stored(tmp_path, "FAIL", tflops=(181.0, 604.0))
    codes = [(r.code, r.gpu) for r in dcgm.check_dcgm(node_dcgm.stored_reading(s.verify_dcgm_state, lambda: 200.0))]
    assert codes == [("gemm_slow", 0)]
    stale = dcgm.check_dcgm(node_dcgm.stored_reading(s.verify_dcgm_state, lambda: 100.0 + 86401))
    assert [(r.level, r.code) for r in stale] == [("UNKNOWN", "gemm_stale")]
    assert stale[0].message.startswith("GEMM (fp16): the stored result is 86401 s old")


def reading_of(path, now):
    from ccrhost.node import dcgm as node_dcgm

    return node_dcgm.stored_reading(path, lambda: now)


def test_measured_compute_is_the_sum_of_a_fresh_ok_or_fail_result(tmp_path):
    s = stored(tmp_path, "FAIL", tflops=(181.0, 604.0))
    assert measured_compute(reading_of(s.verify_dcgm_state, 200.0)) == 785.0
    assert measured_compute(reading_of(s.verify_dcgm_state, 100.0 + 86401)) is None  # stale
    assert measured_compute(ActiveReading(0.0, {})) is None and measured_compute(None) is None
    unknown = {"gemm/fp16": {"check": "gemm", "mode": "fp16", "status": "UNKNOWN", "code": "gemm_unreadable",
                             "message": "x", "measured_at": 0.0, "valid_for": 60.0,
                             "data": {"tflops": {"0": 1.0}}}}
    assert measured_compute(ActiveReading(1.0, unknown)) is None


def test_the_measured_ccr_uses_the_measured_compute_and_says_so(tmp_path):
    s = stored(tmp_path, tflops=(604.0,) * 8)
    readings = with_pair(368.0)
    readings.dcgm = reading_of(s.verify_dcgm_state, 200.0)
    v = evaluate(readings, H100)
    assert v.ccr.tflops == 8 * 989.5 and v.ccr.compute is None  # the nominal CCR unchanged
    m = v.measured_ccr
    assert (m.tflops, m.compute, m.bandwidth_gbps) == (8 * 604.0, "measured", 2944.0)
    assert abs(m.ccr - (2944e9 / 8) / (4 * 8 * 604.0e12)) < 1e-12
    assert "measured CCR" in format_text(v) and "F 4832.0 TFLOPS measured compute" in format_text(v)
    assert Verdict.from_dict(v.to_dict()).measured_ccr == m
    # stale, or a precision the FP16 GEMM does not measure: the nominal compute, said so
    readings.dcgm = reading_of(s.verify_dcgm_state, 100.0 + 86401)
    assert evaluate(readings, H100).measured_ccr.compute == "nominal"
    readings.dcgm = reading_of(s.verify_dcgm_state, 200.0)
    fp8 = evaluate(readings, H100, Policy(precision="fp8")).measured_ccr
    assert fp8.compute == "nominal"
