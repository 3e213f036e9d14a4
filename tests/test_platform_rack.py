"""The rack-scale and Blackwell platform files (issue 49): gb200-nvl72,
gb300-nvl72, hgx-b300-8x800 beside hgx-b200-8x400: loading, extends, their
figures, and how the all-reduce and nvbandwidth judges take (or lack) them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ccrhost.model import allreduce as ar
from ccrhost.model import nvbandwidth as nvb
from ccrhost.model import platform as plat
from ccrhost.model.dcgm import GpuId
from ccrhost.probes.nccl_tests import run_result
from ccrhost.probes.nvbandwidth import parse
from ccrhost.settings import validate_host

FIX = Path(__file__).parent / "fixtures"
NEW = ("gb200-nvl72", "gb300-nvl72", "hgx-b300-8x800")


@pytest.mark.parametrize("name", NEW)
def test_each_new_file_loads_and_every_figure_has_a_source(name):
    p = plat.resolve(name)
    assert p.hardware["source"].strip() and p.notes
    for key, f in p.figures.items():
        assert f.source.strip() and f.unit == plat.FIGURE_UNITS[key], key
    for key, entry in p.settings.items():
        assert entry["source"].strip(), key
    validate_host("n", {"verify_profile": name})


def test_gb200_nvl72_extends_the_tray_and_keeps_its_sourced_figures():
    p = plat.resolve("gb200-nvl72")
    assert p.origin == ("connectx (built-in)", "gb200-4x400-ib (built-in)", "gb200-nvl72 (built-in)")
    hw = p.hardware
    assert (hw["gpu_model"], hw["gpu_count"], hw["numa_nodes"], hw["nvlinks_per_gpu"], hw["nvlink_gbs"],
            hw["nic_count"], hw["nic_gbps"]) == ("NVIDIA GB200", 4, 34, 18, 53.125, 4, 400)
    # the figures are gb200-4x400-ib's own, each saying it comes from an open pull request; the rack's
    # all-reduce is held to the tray's NVLink gate (docs/rack.md)
    assert {k: (f.value, f.platform) for k, f in p.figures.items()} == {
        "allreduce.nvlink": (432, "gb200-4x400-ib"), "allreduce.loopback": (48, "gb200-4x400-ib"),
        "ib_write_bw.gpudirect": (360, "gb200-4x400-ib"), "allreduce.rack": (432, "gb200-nvl72")}
    assert all("open pull request #165" in f.source for f in p.figures.values())
    assert not p.gpu_default and plat.for_gpu("NVIDIA GB200").name == "gb200-4x400-ib"


def test_the_trays_carry_nvidias_tuned_profile_and_imex():
    s = validate_host("n", {"verify_profile": "gb200-nvl72"})
    assert s.baseline_cmdline == ("iommu.passthrough=1", "init_on_alloc=0", "numa_balancing=disable")
    assert s.baseline_hugepages == {"2048kB": 5128, "1048576kB": 2}
    assert s.imex_enable is True
    assert "nodewright-packages" in plat.resolve("gb200-nvl72").settings["baseline_hugepages"]["source"]
    # the host's own value wins over the platform's default
    assert validate_host("n", {"verify_profile": "gb300-nvl72", "imex_enable": False}).imex_enable is False


def test_gb300_and_b300_declare_their_hardware_and_no_figure():
    gb300, b300 = plat.resolve("gb300-nvl72"), plat.resolve("hgx-b300-8x800")
    assert (gb300.hardware["gpu_model"], gb300.hardware["gpu_count"], gb300.hardware["nic_gbps"]) == \
        ("NVIDIA GB300", 4, 800)
    assert "nvlink_gbs" not in gb300.hardware and "numa_nodes" not in gb300.hardware
    assert (b300.hardware["gpu_model"], b300.hardware["gpu_count"], b300.hardware["nic_count"]) == \
        ("NVIDIA B300 SXM6 AC", 8, 8)
    assert gb300.figures == {} and b300.figures == {}
    assert plat.for_gpu("NVIDIA GB300").name == "gb300-nvl72"
    assert plat.for_gpu("NVIDIA B300 SXM6 AC").name == "hgx-b300-8x800"


def test_nvlink_gbs_is_checked_like_the_other_hardware(tmp_path):
    bad = tmp_path / "site.yaml"
    bad.write_text("extends: gb200-nvl72\nhardware:\n  nvlink_gbs: fast\n")
    with pytest.raises(plat.PlatformError, match="hardware.nvlink_gbs = 'fast': allowed: a rate in GB/s per NVLink"):
        plat.resolve(str(bad))


# -- the judges: a sourced figure where the platform has one, else UNKNOWN naming the figure -----------

def _run():
    return run_result((FIX / "nccl" / "all_reduce_h100_2node.txt").read_text(), 0)


def test_gb200_all_reduce_takes_the_platform_figure():
    gb200 = plat.resolve("gb200-nvl72")
    figures = ar.thresholds("nvlink", "NVIDIA GB200", [400.0] * 4, platform=gb200)
    assert [(f.busbw, f.fleet) for f in figures] == [(432, False)]
    assert figures[0].source.startswith("published figure of gb200-4x400-ib: Azure/azurehpc-health-checks")
    # with no platform named, the GPU's default (gb200-4x400-ib) gives the same figure
    assert ar.thresholds("nvlink", "NVIDIA GB200", [400.0] * 4)[0].busbw == 432
    v = ar.judge_run(_run(), "nvlink", figures)
    assert v.code == "allreduce_slow" and "below 432 GB/s (published figure of gb200-4x400-ib" in v.message


@pytest.mark.parametrize("name, gpu", [("hgx-b200-8x400", "NVIDIA B200"), ("gb300-nvl72", "NVIDIA GB300"),
                                       ("hgx-b300-8x800", "NVIDIA B300 SXM6 AC")])
def test_no_all_reduce_figure_is_unknown_naming_the_figure(name, gpu):
    figures = ar.thresholds("nvlink", gpu, [400.0] * 8, platform=plat.resolve(name))
    assert figures == []
    v = ar.judge_run(_run(), "nvlink", figures)
    assert (v.status, v.code) == ("UNKNOWN", "allreduce_no_threshold")
    assert "(no figure allreduce.nvlink in its platform file): set verify_allreduce_min_busbw" in v.message


@pytest.mark.parametrize("name, gpu", [("hgx-b200-8x400", "NVIDIA B200"), ("gb200-nvl72", "NVIDIA GB200")])
def test_no_copy_figure_is_unknown_naming_each_testcase(name, gpu):
    text = (FIX / "nvbandwidth" / "v0.10_7gpu_ce.txt").read_text()
    gpus = {i: GpuId(i, f"00000000:{0x18 + i * 0x10:02X}:00.0", f"GPU-{i}") for i in range(7)}
    status, reasons, _ = nvb.judge(parse(text), gpu, gpus, platform=plat.resolve(name))
    assert status == "UNKNOWN"
    assert [r.message for r in reasons] == [
        f"nvbandwidth {nvb.TEXT[tc]}: no threshold is known for {gpu} (no figure nvbandwidth.{tc} in its platform "
        f"file): set verify_nvbandwidth_min_gbs.{tc}" for tc in nvb.TESTCASES]
