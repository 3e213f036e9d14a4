"""nvbandwidth: the matrix report from a verbatim capture, the figures per
platform with their sources, and a GPU that copies at x4 speed named."""

from pathlib import Path

import pytest

from ccrhost.model import nvbandwidth as nvb
from ccrhost.model.dcgm import GpuId
from ccrhost.probes.nvbandwidth import NvbandwidthFormatError, parse

TEXT = (Path(__file__).parent / "fixtures" / "nvbandwidth" / "v0.10_7gpu_ce.txt").read_text()
GPUS = {i: GpuId(i, f"00000000:{0x18 + i * 0x10:02X}:00.0", f"GPU-{i}") for i in range(7)}


def test_the_v0_10_capture_gives_each_testcase_its_matrix_and_sum():
    m = parse(TEXT)
    h2d = m[nvb.H2D]
    assert h2d.columns == tuple(range(7)) and h2d.values[(0, 6)] == 55.58 and h2d.total == 389.15
    d2d = m[nvb.D2D]
    assert len(d2d.values) == 42 and (3, 3) not in d2d.values and d2d.values[(6, 5)] == 766.21
    assert m[nvb.D2H].description == "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)"


def test_a_healthy_h200_passes_its_azure_figures():
    status, reasons, summary = nvb.judge(parse(TEXT), "NVIDIA H200", GPUS)
    assert (status, reasons) == ("OK", []) and summary.startswith("nvbandwidth: 3 testcase(s)")


def test_a_gpu_copying_at_x4_speed_fails_naming_it_and_the_figures_source():
    # a x16 Gen5 link copies about 55 GB/s; at x4 a quarter of it
    text = TEXT.replace(" 0     55.59     55.60     55.60     55.59     55.58     55.60     55.58",
                        " 0     55.59     55.60     55.60     13.90     55.58     55.60     55.58")
    status, reasons, _ = nvb.judge(parse(text), "NVIDIA H100 80GB HBM3", GPUS)
    assert status == "FAIL"
    assert [r.message for r in reasons if r.code == "nvbandwidth_slow"] == [
        "nvbandwidth host to device: GPU 3 (00000000:48:00.0, GPU-3) copies at 13.90 GB/s, below 48 GB/s "
        "(published figure of hgx-h100-8x400: Azure/azurehpc-health-checks conf/nd96isr_h100_v5.conf "
        "`check_gpu_bw 48 335` (host-device), main at 0e0a1ac; was 52 until 2024-06, 2026-05)"]
    # H100's device-to-device figure is 335 (Azure, since 2024-06): the capture's pairs pass it
    assert [r.code for r in reasons if r.level == "UNKNOWN"] == []


def test_a_slow_pair_names_both_gpus_and_a_setting_overrides_the_figure():
    m = parse(TEXT)
    status, reasons, _ = nvb.judge(m, "NVIDIA H200", GPUS, overrides={nvb.D2D: 765.0})
    slow = [r.message for r in reasons]
    assert status == "FAIL" and "GPU 0 (00000000:18:00.0, GPU-0) from GPU 1 (00000000:28:00.0, GPU-1) copies at " \
        "764.71 GB/s, below 765 GB/s (setting verify_nvbandwidth_min_gbs.device_to_device_memcpy_read_ce)" in slow[0]


def test_a_missing_testcase_is_unknown_and_what_is_not_a_report_raises():
    m = {k: v for k, v in parse(TEXT).items() if k != nvb.D2H}
    status, reasons, _ = nvb.judge(m, "NVIDIA H200", GPUS)
    assert status == "UNKNOWN" and [r.code for r in reasons] == ["nvbandwidth_failed"]
    with pytest.raises(NvbandwidthFormatError):
        parse("nvbandwidth: command not found\n")
