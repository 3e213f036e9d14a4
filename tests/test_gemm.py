"""GEMM throughput per GPU (issue 50): dcgmproftester's report lines on
verbatim samples (tests/fixtures/gemm/README.md names each one's source),
the refused ones naming their line, and the judge against the peak table."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ccrhost.model import gemm as model
from ccrhost.model.gemm import GemmPolicy, GemmReading, Peak, check_gemm, peaks
from ccrhost.model.status import FAIL, UNKNOWN
from ccrhost.probes import gemm as probe

FIXTURES = Path(__file__).parent / "fixtures" / "gemm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# -- the parsers, on each verbatim sample --------------------------------------------------------

def test_dcgm_3_3_5_fmt_lines_give_the_median_tick_in_tflops():
    reading = probe.parse(fixture("dcgm3.3.5_dcgmproftester12_a100_pcie.txt"), "dcgmproftester12")
    assert reading.tflops == {0: 190.0}      # 32 ticks, 1.78e+05 .. 1.97e+05 gflops, median 1.90e+05
    assert reading.ticks == {0: 32}
    assert (reading.format, reading.tool, reading.field_id, reading.error) == ("fmt", "dcgmproftester12", 1004, None)


def test_dcgm_2_stream_lines_without_the_full_stop_are_read():
    reading = probe.parse(fixture("dcgm2_dcgmproftester11_a100_userguide.txt"))
    assert reading.tflops == {0: pytest.approx(252.889)}   # median of the ten ticks, 252861.4 and 252917.0 gflops
    assert (reading.ticks, reading.format) == ({0: 10}, "stream")


def test_mig_slices_of_one_gpu_add_up():
    reading = probe.parse(fixture("dcgm2_dcgmproftester11_a100_mig_userguide.txt"))
    # worker 0:0 ticks 102659.5 107747.3 108107.6 108001.2 (median 107874.25), 0:1 102659.8 107787.3 108102.3 (107787.3)
    assert reading.tflops == {0: pytest.approx((107874.25 + 107787.3) / 1000, abs=1e-3)}
    assert reading.ticks == {0: 7}


def test_dcgm_2_0_lines_name_no_gpu_and_are_refused_naming_the_line():
    with pytest.raises(probe.GemmFormatError) as err:
        probe.parse(fixture("dcgm2.0_dcgmproftester_t4_legacy.txt"))
    assert str(err.value) == ("line 13: 'TensorEngineActive: generated ???, dcgm 0.000 (27334.5 gflops)' names no "
                              "GPU (DCGM 2.0's format): its throughput cannot be given to a GPU")


@pytest.mark.parametrize("name", ["dcgm4.2.3_dcgmproftester12_fp32_no_gflops.txt",
                                  "dcgm3.1.7_dcgmproftester11_runtests_error.txt"])
def test_output_with_no_report_line_is_refused(name):
    with pytest.raises(probe.GemmFormatError, match=r"^no 'Worker G:I \[1004\]: \.\.\. \(N gflops\)' line"):
        probe.parse(fixture(name))


@pytest.mark.parametrize("line, why", [
    ("Worker 0:0 [1004]: TensorEngineActive:  generated ???, dcgm 0 (612.5 TFLOPs).", "is not a dcgmproftester"),
    ("Worker 0:0 [1004]: TensorEngineActive:  generated ???, dcgm 0 (1.89e+05 gflops)", "is not a dcgmproftester"),
    ("Worker 0:0 [1004]: TensorEngineActive:  generated ???, dcgm 0 (nan gflops).", "is not a gflops figure"),
    ("Worker 0:0 [1004]: TensorEngineActive:  generated ???, dcgm 0 (-1.0e+05 gflops).", "is not a gflops figure"),
    ("Worker 0:0 [1007]: Fp32EngineActive:  generated ???, dcgm 0 (4.1e+04 gflops).", "reports field 1007"),
    ("achieved 612 gflops on GPU 0", "is not a dcgmproftester"),
])
def test_garbage_in_a_report_line_is_refused_naming_the_line(line, why):
    text = "Skipping CreateDcgmGroups() since DCGM validation is disabled\n" + line + "\n"
    with pytest.raises(probe.GemmFormatError) as err:
        probe.parse(text)
    assert str(err.value).startswith("line 2: ") and why in str(err.value)
    assert repr(line) in str(err.value)


def test_two_formats_in_one_output_are_refused():
    text = ("Worker 0:0 [1004]: TensorEngineActive:  generated ???, dcgm 0 (1.89e+05 gflops).\n"
            "Worker 1:0[1004]: TensorEngineActive: generated ???, dcgm 0.000 (189000.0 gflops)\n")
    with pytest.raises(probe.GemmFormatError, match="two formats"):
        probe.parse(text)


def test_several_gpus_each_get_their_own_figure():
    # the 3.2.5+ line with the source's two blanks, for GPUs 0 and 3
    text = "".join(f"Worker {g}:0 [1004]: TensorEngineActive:  generated ???, dcgm 0 ({v} gflops).\n"
                   for g, v in ((0, "6.10e+05"), (3, "3.00e+05"), (0, "6.20e+05"), (3, "3.10e+05"), (0, "6.30e+05")))
    assert probe.parse(text).tflops == {0: 620.0, 3: 305.0}


# -- the command and the run script -----------------------------------------------------------------

def test_the_command_is_bounded_by_timeout_and_names_field_duration_and_gpus():
    assert probe.command("dcgmproftester12", 30, [0, 1]) == [
        "timeout", "-k", "5", "90", "dcgmproftester12", "--no-dcgm-validation", "-t", "1004", "-d", "30", "-i", "0,1"]
    assert probe.binary_names(12) == ("dcgmproftester12",)
    assert probe.binary_names() == ("dcgmproftester13", "dcgmproftester12", "dcgmproftester11")


def _run(script: str, path: Path) -> list[str]:
    env = {"PATH": f"{path}:/usr/bin:/bin"}
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=30, check=True)
    return out.stdout.splitlines()


def test_the_run_script_finds_the_binary_and_reads_its_report(tmp_path):
    fake = tmp_path / "dcgmproftester12"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >{tmp_path}/args\n"
                    f"cat {FIXTURES / 'dcgm3.3.5_dcgmproftester12_a100_pcie.txt'}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    reading = probe.parse_run_script(_run(probe.run_script(1, [0]), tmp_path))
    assert (reading.tool, reading.tflops, reading.error) == ("dcgmproftester12", {0: 190.0}, None)
    assert (tmp_path / "args").read_text() == "--no-dcgm-validation -t 1004 -d 1 -i 0\n"


def test_the_run_script_says_when_no_binary_is_there(tmp_path):
    if any(os.access(Path(d) / b, os.X_OK) for d in ("/usr/bin", "/bin") for b in probe.BINARIES):
        pytest.skip("this machine has dcgmproftester")
    reading = probe.parse_run_script(_run(probe.run_script(1), tmp_path))
    assert reading.tool is None and reading.tflops == {}
    assert reading.error == "none of dcgmproftester13, dcgmproftester12, dcgmproftester11 is on PATH (command -v)"


@pytest.mark.parametrize("lines, error", [
    (["@@tool dcgmproftester12", "Worker 0:0 [1004]: TensorEngineActive:  generated ???, dcgm 0 (1.9e+05 gflops).",
      "@@rc 124"], "hung: killed by timeout at its deadline"),
    (["@@tool dcgmproftester12", "@@rc 137"], "hung: killed by timeout at its deadline"),
    (["@@tool dcgmproftester11", "Skipping CreateDcgmGroups() since DCGM validation is disabled",
      "2023-04-18 03:46:10.915 ERROR [2843478:2843478] Error 0 from RunTests(). Exiting.", "@@rc 1"],
     "exit 1: 2023-04-18 03:46:10.915 ERROR [2843478:2843478] Error 0 from RunTests(). Exiting."),
    (["@@tool dcgmproftester12", "Skipping CreateDcgmGroups() since DCGM validation is disabled"],
     "the run gave no exit status (cut off)"),
    (["@@tool dcgmproftester12", "@@rc 0"], "no 'Worker G:I [1004]: ... (N gflops)' line in dcgmproftester's output"),
])
def test_a_run_that_gave_nothing_usable_is_an_error_never_a_figure(lines, error):
    reading = probe.parse_run_script(lines)
    assert (reading.error, reading.tflops) == (error, {})


# -- the judge ----------------------------------------------------------------------------------------

H100 = "NVIDIA H100 80GB HBM3"
H100_SOURCE = "H100 SXM fp16 dense, ccrhost/platforms/gpus.yaml: nvidia.com/en-us/data-center/h100 (SXM column)"


def test_peaks_come_from_the_gpu_table_and_name_their_source():
    found, reasons = peaks({0: H100, 1: "NVIDIA A100-PCIE-40GB"})
    assert reasons == []
    assert found[0] == Peak(989.5, H100_SOURCE)
    assert found[1].tflops == 312.0 and "A100 PCIe fp16 dense" in found[1].source


def test_an_override_is_named_as_the_setting_and_an_unknown_model_is_unknown():
    found, reasons = peaks({0: "NVIDIA Mystery GPU", 1: H100}, override={"fp16": 900.0})
    assert found == {0: Peak(900.0, "setting verify_gpu_tflops.fp16"), 1: Peak(900.0, "setting verify_gpu_tflops.fp16")}
    found, reasons = peaks({0: "NVIDIA Mystery GPU"})
    assert found == {}
    assert [(r.level, r.code, r.gpu) for r in reasons] == [(UNKNOWN, "gemm_no_peak", 0)]
    assert reasons[0].message == ("GEMM: GPU 0: no peak to compare with: "
                                  "model 'NVIDIA Mystery GPU' is not in the peak-TFLOPS table")


def test_a_slow_gpu_fails_naming_its_figure_the_peak_and_its_source():
    table, _ = peaks({0: H100, 1: H100})
    reading = GemmReading("dcgmproftester12", tflops={0: 612.0, 1: 301.2}, ticks={0: 30, 1: 30}, format="fmt")
    reasons = check_gemm(reading, table, 0.4)
    assert [(r.level, r.code, r.gpu) for r in reasons] == [(FAIL, "gemm_slow", 1)]
    assert reasons[0].message == (
        "GEMM (dcgmproftester12 field 1004, fp16): GPU 1 achieved 301.2 TFLOP/s, 0.30 of its peak 989.5 TFLOP/s "
        f"({H100_SOURCE}), below 0.4")


def test_gpus_at_or_above_the_floor_give_no_reason():
    table, _ = peaks({0: H100})
    assert check_gemm(GemmReading("dcgmproftester12", tflops={0: 395.8}), table, 0.4) == []


def test_a_missing_tool_is_unknown_never_a_pass():
    table, _ = peaks({0: H100})
    reading = GemmReading(None, error="none of dcgmproftester13, dcgmproftester12, dcgmproftester11 is on PATH "
                                      "(command -v)")
    reasons = check_gemm(reading, table, 0.4)
    assert [(r.level, r.code, r.message) for r in reasons] == [
        (UNKNOWN, "gemm_unreadable", "GEMM: dcgmproftester: none of dcgmproftester13, dcgmproftester12, "
                                     "dcgmproftester11 is on PATH (command -v)")]


def test_an_expected_gpu_not_reported_is_unknown_and_one_without_a_peak_too():
    table, _ = peaks({0: H100, 1: H100})
    reasons = check_gemm(GemmReading("dcgmproftester12", tflops={0: 700.0, 2: 650.0}), table, 0.4)
    assert [(r.level, r.code, r.gpu, r.message) for r in reasons] == [
        (UNKNOWN, "gemm_unreadable", 1, "GEMM: dcgmproftester12 reported nothing for GPU 1"),
        (UNKNOWN, "gemm_no_peak", 2, "GEMM: GPU 2 achieved 650.0 TFLOP/s but no peak is known for it"),
    ]


def test_no_figures_or_no_peaks_prove_nothing():
    table, _ = peaks({0: H100})
    assert [r.code for r in check_gemm(GemmReading("dcgmproftester12"), table, 0.4)] == ["gemm_unreadable"]
    assert [r.code for r in check_gemm(GemmReading("dcgmproftester12", tflops={0: 700.0}), {}, 0.4)] == ["gemm_no_peak"]


def test_the_policy_default_and_the_field_precision():
    assert GemmPolicy() == GemmPolicy(min_fraction=0.4, duration_s=30, field_id=1004)
    assert model.PRECISION == {1004: "fp16"}


# -- odd output stays this node's error --------------------------------------------------------------

_LINES = [line for f in sorted(FIXTURES.glob("*.txt")) for line in f.read_text().splitlines()]


@given(st.lists(st.one_of(st.sampled_from(_LINES), st.text(max_size=80),
                          st.sampled_from(_LINES).map(lambda s: s.replace("gflops", "GFLOPS")),
                          st.sampled_from(_LINES).map(lambda s: s[: len(s) // 2])), max_size=40))
def test_mutated_output_gives_a_reading_or_the_probes_own_error(lines):
    try:
        reading = probe.parse("\n".join(lines))
    except probe.GemmFormatError as exc:
        assert str(exc)
    else:
        assert reading.tflops and all(v >= 0 for v in reading.tflops.values())
    run = probe.parse_run_script(["@@tool dcgmproftester12", *lines, "@@rc 0"])
    assert (run.error is None) == bool(run.tflops)
