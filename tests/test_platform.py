"""Platform files (ccrhost/platforms/, model/platform.py): each built-in
loads with a source on every figure; a site file extends and overrides one;
a bad file is refused naming the key and the value with nothing applied;
the judges take their figures, with their sources, from the resolved
platform, the fleet figure as well as the published one; the code tables
they replace are gone."""

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from ccrhost.model import allreduce as ar
from ccrhost.model import nvbandwidth as nvb
from ccrhost.model import platform as plat
from ccrhost.model.dcgm import GpuId
from ccrhost.model.slurm import check_config_text
from ccrhost.node import allreduce as node_ar
from ccrhost.probes.nccl_tests import run_result
from ccrhost.probes.nvbandwidth import parse
from ccrhost.settings import InventoryDataError, validate_all, validate_host

REPO = Path(__file__).resolve().parent.parent
H100 = "NVIDIA H100 80GB HBM3"
FIX = Path(__file__).parent / "fixtures"
AZURE_H100 = "Azure/azurehpc-health-checks conf/nd96isr_h100_v5.conf"


def site(tmp_path, text: str, name="site-h100.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


FLEET_SITE = """\
extends: hgx-h100-8x400
title: "Our H100 racks"
hardware:
  numa_nodes: 2
figures:
  nvbandwidth.device_to_device_memcpy_read_ce: null
fleet:
  allreduce.nvlink: {value: 471.2, unit: GB/s, source: "calibrated: median 480.1 - 3 x MAD 2.9 over 24 nodes",
                     date: "2026-12-06", nodes: 24, measured_under: {driver: "535.183.01"}}
  nvbandwidth.host_to_device_memcpy_ce: {value: 54, unit: GB/s, source: "calibrated over 24 nodes", date: 2026-12-06}
settings:
  verify_allreduce_retries: {value: 0, source: "site runbook", date: "2026-12"}
  verify_required_nvidia: "535.183.01"
"""


# -- the built-in files ----------------------------------------------------------------------

@pytest.mark.parametrize("name", plat.builtin_names())
def test_each_builtin_loads_and_every_figure_has_a_source(name):
    p = plat.resolve(name)
    assert p.name == name and p.origin[-1] == f"{name} (built-in)"
    for key, f in p.figures.items():
        assert f.unit == plat.FIGURE_UNITS[key] and f.value > 0 and f.source.strip(), key
    assert not p.fleet  # a built-in has no fleet: that is a site's own
    for want in p.nic_firmware.values():
        assert want["source"].strip()
    # its settings are settings keys, valid as the platform gives them
    validate_host("n", {"verify_profile": name})


def test_the_builds_the_issue_names_are_there_and_one_default_per_gpu_model():
    names = set(plat.builtin_names())
    assert {"hgx-h100-8x400", "hgx-h100-8x400-ib", "hgx-h200-8x400", "hgx-b200-8x400", "dgx-a100-8x200",
            "aws-p5-efa"} <= names
    defaults = [plat.resolve(n).hardware["gpu_model"] for n in names if plat.resolve(n).gpu_default]
    assert len(defaults) == len(set(defaults))
    assert plat.for_gpu(H100).name == "hgx-h100-8x400" and plat.for_gpu("NVIDIA H999") is None


def test_the_drifted_azure_figures_are_corrected():
    h100 = plat.resolve("hgx-h100-8x400")
    assert h100.figure("allreduce.loopback") is None  # removed by Azure on 2023-10-13 (PR #38)
    assert h100.figure("nvbandwidth.host_to_device_memcpy_ce").value == 48
    assert h100.figure("nvbandwidth.device_to_device_memcpy_read_ce").value == 335
    assert plat.resolve("hgx-h100-8x400-ib").figure("ib_write_bw.gpudirect").value == 380
    h200 = plat.resolve("hgx-h200-8x400")
    assert (h200.figure("allreduce.nvlink").value, h200.figure("ib_write_bw.gpudirect").value) == (431, 360)
    gb200 = plat.resolve("gb200-4x400-ib")
    assert all("open pull request #165" in f.source for f in gb200.figures.values())
    assert any("c674250" in n for n in h100.notes)


def test_the_compiled_platforms_are_what_the_yaml_files_say():
    committed = (REPO / "ccrhost/platforms" / plat.COMPILED).read_text()
    assert committed == plat.compiled_text(), "ccrhost/platforms/compiled.json is out of date: run python -m ccrhost.docs"


def test_the_old_code_tables_are_gone():
    found = subprocess.run(["git", "grep", "-nE", r"^(PLATFORMS|PROFILES|TABLE)\b.*=|def _p\(fp64|AZURE_H(100|200) =",
                            "--", "ccrhost/model"], cwd=REPO, capture_output=True, text=True).stdout
    assert found == ""
    assert not (REPO / "ccrhost/model/declared.py").exists()


# -- extends, overrides, settings -------------------------------------------------------------

def test_a_site_file_extends_a_builtin_and_overrides_any_part(tmp_path):
    path = site(tmp_path, FLEET_SITE)
    p = plat.resolve(path)
    assert p.origin == ("connectx (built-in)", "hgx-h100-8x400 (built-in)", path)
    assert p.title == "Our H100 racks" and p.name == "site-h100"
    assert p.hardware["numa_nodes"] == 2 and p.hardware["gpu_count"] == 8      # added, inherited
    assert "nvbandwidth.device_to_device_memcpy_read_ce" not in p.figures      # removed with null
    nvlink = p.figure("allreduce.nvlink")
    assert (nvlink.value, nvlink.platform) == (460, "hgx-h100-8x400")           # the built-in's, with its source
    assert p.fleet_figure("allreduce.nvlink").value == 471.2 and p.fleet_figure("allreduce.nvlink").nodes == 24
    assert p.nic_firmware["MAX_ACC_OUT_READ"]["values"] == [0, 44, 128]       # from connectx
    # another site file extends this one, by a path relative to itself
    (tmp_path / "rack7.yaml").write_text("extends: site-h100.yaml\nfleet:\n  allreduce.nvlink: null\n")
    rack = plat.resolve(str(tmp_path / "rack7.yaml"))
    assert rack.fleet_figure("allreduce.nvlink") is None and rack.fleet_figure("nvbandwidth.host_to_device_memcpy_ce")


def test_the_platforms_settings_are_defaults_the_hosts_own_keys_override(tmp_path):
    path = site(tmp_path, FLEET_SITE)
    s = validate_host("gpu01", {"verify_profile": path})
    assert (s.verify_allreduce_retries, s.verify_required_nvidia) == (0, "535.183.01")
    s = validate_host("gpu01", {"verify_profile": path, "verify_allreduce_retries": 2})
    assert s.verify_allreduce_retries == 2
    assert s.expectation().gpu_count == 8 and s.expectation().rail_local


def test_the_nic_firmware_profile_is_the_platforms_and_a_setting_overrides_it(tmp_path):
    path = site(tmp_path, "extends: hgx-h100-8x400\nnic_firmware:\n  MAX_ACC_OUT_READ: {values: [128], level: FAIL, "
                          "source: 'site: 128 on our CX-7'}\n")
    s = validate_host("gpu01", {"verify_profile": path, "verify_nic_firmware": True})
    assert s.nic_fw_profile()["MAX_ACC_OUT_READ"].values == (128,)
    s = validate_host("gpu01", {"verify_profile": path, "verify_nic_max_acc_out_read": (0,)})
    assert s.nic_fw_profile()["MAX_ACC_OUT_READ"].values == (0,)


@pytest.mark.parametrize("text, key, value, allowed", [
    ("extends: hgx-h100-8x400\nfigures:\n  allreduce.nvlink: {value: fast, unit: GB/s, source: x}\n",
     "verify_profile[figures.allreduce.nvlink.value]", "fast", "allowed: a number above 0"),
    ("extends: hgx-h100-8x400\nfigures:\n  allreduce.nvlink: {value: 400, unit: Gb/s, source: x}\n",
     "verify_profile[figures.allreduce.nvlink.unit]", "Gb/s", "allowed: GB/s"),
    ("extends: hgx-h100-8x400\nfleet:\n  allreduce.nvlnk: {value: 400, source: x}\n",
     "verify_profile[fleet.allreduce.nvlnk]", {"value": 400, "source": "x"}, "unknown figure; allowed: allreduce.nvlink"),
    ("extends: hgx-h100-8x400\nfigures:\n  allreduce.nvlink: {value: 470}\n",
     "verify_profile[figures.allreduce.nvlink.source]", None, "allowed: non-empty text"),
    ("extends: hgx-h999\n", "verify_profile[extends]", "hgx-h999", "allowed: a built-in platform (aws-p5-efa"),
    ("extends: hgx-h100-8x400\nhardware:\n  gpu_count: 0\n", "verify_profile[hardware.gpu_count]", 0,
     "allowed: a whole number from 1 to 64"),
    ("extends: hgx-h100-8x400\nsettings:\n  verify_allreduce_retrys: 1\n",
     "verify_profile[settings.verify_allreduce_retrys]", 1, "unknown settings key"),
    ("extends: hgx-h100-8x400\nsettings:\n  verify_allreduce_retries: 99\n",
     "verify_allreduce_retries", 99, "the default of platform"),
    ("extends: site-h100.yaml\n", "verify_profile[extends]", "site-h100.yaml", "a cycle"),
])
def test_a_bad_site_file_is_refused_naming_host_key_value_and_what_is_allowed(tmp_path, text, key, value, allowed):
    path = site(tmp_path, text)
    with pytest.raises(InventoryDataError) as exc:
        validate_all({"gpu01": {"verify_profile": path}, "gpu02": {"verify_profile": "hgx-h100-8x400"}})
    [error] = exc.value.errors  # the good host validates; the bad one is named, nothing is returned to apply
    assert (error.where, error.key, error.value) == ("gpu01", key, value)
    assert allowed in error.allowed
    if key.startswith("verify_profile["):
        assert path in error.allowed  # which file says so


def test_a_missing_file_is_named_with_why():
    with pytest.raises(InventoryDataError) as exc:
        validate_host("gpu01", {"verify_profile": "/etc/ccrhost/nowhere.yaml"})
    assert str(exc.value) == ("gpu01: verify_profile = '/etc/ccrhost/nowhere.yaml': the platform file cannot be "
                              "read: No such file or directory")


def test_the_resolved_platform_reaches_the_node_in_check_yaml_without_the_file(tmp_path):
    path = site(tmp_path, FLEET_SITE)
    settings = validate_host("gpu01", {"verify_profile": path})
    loaded = yaml.safe_load(check_config_text(settings))
    Path(path).unlink()  # the node has no site file: check.yaml carries the platform
    on_node = validate_host("gpu01", loaded)
    assert on_node.platform() == settings.platform()
    assert on_node.platform().fleet_figure("allreduce.nvlink").text() == (
        "fleet figure of site-h100: calibrated: median 480.1 - 3 x MAD 2.9 over 24 nodes, 2026-12-06")
    broken = {**loaded, "verify_platform": {**loaded["verify_platform"], "figures": {"allreduce.nvlink": {"value": -1}}}}
    with pytest.raises(InventoryDataError) as exc:
        validate_host("gpu01", broken)
    assert exc.value.errors[0].key == "verify_platform"
    assert "figures.allreduce.nvlink.value = -1: allowed: a number above 0" in exc.value.errors[0].allowed


# -- the judges take their figures from the platform ------------------------------------------

def at_busbw(busbw: float) -> str:
    return ("#  Rank  0 Group  0 Pid 1 on n device  0 [0x18] NVIDIA H100 80GB HBM3\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
            "busbw #wrong\n"
            f" 17179869184    4294967296     float     sum      -1  63000.0  272.70  {busbw:6.2f}      0  63000.0  "
            f"272.70  {busbw:6.2f}      0\n"
            "# Out of bounds values : 0 OK\n"
            f"# Avg bus bandwidth    : {busbw}\n")


def test_a_judge_using_a_platform_figure_names_its_source():
    platform = plat.resolve("hgx-h100-8x400")
    v = ar.judge_run(run_result(at_busbw(400.0), 0), "nvlink", ar.thresholds("nvlink", H100, [], None, platform))
    assert v.code == "allreduce_slow"
    assert v.message == ("single-node all-reduce over NVLink: busbw 400.0 GB/s at 17179869184 B, below 460 GB/s "
                         f"(published figure of hgx-h100-8x400: {AZURE_H100} (NCCL all_reduce 16G), main at 0e0a1ac, "
                         "2026-05)")


def test_a_fleet_figure_fails_a_node_that_passes_the_published_one(tmp_path):
    platform = plat.resolve(site(tmp_path, FLEET_SITE))
    figures = ar.thresholds("nvlink", H100, [], None, platform)
    assert [(f.busbw, f.fleet) for f in figures] == [(460, False), (471.2, True)]
    v = ar.judge_run(run_result(at_busbw(465.0), 0), "nvlink", figures)
    assert v.code == "allreduce_slow" and v.retry
    assert v.message == ("single-node all-reduce over NVLink: busbw 465.0 GB/s at 17179869184 B, below 471.2 GB/s "
                         "(fleet figure of site-h100: calibrated: median 480.1 - 3 x MAD 2.9 over 24 nodes, "
                         "2026-12-06)")
    below_both = ar.judge_run(run_result(at_busbw(400.0), 0), "nvlink", figures)
    assert "below 460 GB/s (published figure of hgx-h100-8x400" in below_both.message
    assert "and below 471.2 GB/s (fleet figure of site-h100" in below_both.message
    assert ar.judge_run(run_result(at_busbw(480.0), 0), "nvlink", figures).status == "OK"
    # the same without the fleet: the published figure passes it
    assert ar.judge_run(run_result(at_busbw(465.0), 0), "nvlink", figures[:1]).status == "OK"


def test_the_node_runner_judges_with_the_settings_platform(tmp_path):
    s = validate_host("n1", {"verify_allreduce": True, "verify_allreduce_state": str(tmp_path / "a.json"),
                             "verify_profile": site(tmp_path, FLEET_SITE)})
    r = node_ar.run_mode("nvlink", H100, 8, [], s, run=lambda argv, deadline, env: _tool(at_busbw(465.0)))
    assert (r.status, r.code, r.runs) == ("FAIL", "allreduce_slow", 1)  # retries 0: the platform's settings
    assert "fleet figure of site-h100" in r.message


def _tool(text):
    from ccrhost.node.active import ToolRun

    return ToolRun(("all_reduce_perf",), 0, text, 1.0)


def test_a_fleet_copy_figure_fails_a_gpu_that_passes_the_published_one(tmp_path):
    platform = plat.resolve(site(tmp_path, FLEET_SITE))
    text = (FIX / "nvbandwidth" / "v0.10_7gpu_ce.txt").read_text()
    gpus = {i: GpuId(i, f"00000000:{0x18 + i * 0x10:02X}:00.0", f"GPU-{i}") for i in range(7)}
    slow = text.replace(" 0     55.59     55.60     55.60     55.59     55.58     55.60     55.58",
                        " 0     55.59     55.60     55.60     50.00     55.58     55.60     55.58")
    status, reasons, _ = nvb.judge(parse(slow), H100, gpus, platform=platform)
    assert status == "FAIL"
    assert [r.message for r in reasons if r.code == "nvbandwidth_slow"] == [
        "nvbandwidth host to device: GPU 3 (00000000:48:00.0, GPU-3) copies at 50.00 GB/s, below 54 GB/s "
        "(fleet figure of site-h100: calibrated over 24 nodes, 2026-12-06)"]
    # device to device: the site removed the figure, so it is UNKNOWN, never a pass
    assert [r.code for r in reasons if r.level == "UNKNOWN"] == ["nvbandwidth_no_threshold"]
    # without the site file the published 48 passes the same GPU
    status, reasons, _ = nvb.judge(parse(slow), H100, gpus)
    assert status == "OK"


def test_the_figure_keys_are_the_ones_the_judges_read():
    keys = {f"allreduce.{m}" for m in (*ar.MODES, ar.RACK)} | {f"nvbandwidth.{t}" for t in nvb.TESTCASES}
    assert keys | {"ib_write_bw.gpudirect"} == set(plat.FIGURE_UNITS)
    assert re.fullmatch(r"[a-z0-9-]+", "hgx-h100-8x400")


def test_a_gpudirect_pair_below_the_platforms_ib_write_bw_figure_fails_naming_it(tmp_path):
    from ccrhost.model import datapath as dp

    path = site(tmp_path, "extends: hgx-h100-8x400-ib\nfleet:\n  ib_write_bw.gpudirect: {value: 390, unit: Gb/s, "
                          "source: 'calibrated over 16 nodes', date: '2026-12-06'}\n")
    policy = validate_host("gpu01", {"verify_profile": path}).policy()
    bw = dp.GpuDirectBandwidth(True, gbps={"GPU0-mlx5_0": 385.0, "GPU1-mlx5_1": 370.0},
                               expected={"GPU0-mlx5_0": 400.0, "GPU1-mlx5_1": 400.0})
    reasons = dp.check_gpudirect_bandwidth(bw, policy.measure_min_fraction, policy.gpudirect_figures)
    assert [r.message for r in reasons] == [
        "GPUDirect RDMA through GPU memory below 380 Gb/s (published figure of hgx-h100-8x400-ib: "
        f"{AZURE_H100} `check_ib_bw_gdr 380`, main at 0e0a1ac (replaced the IB-loopback all-reduce figure, "
        "PR #38), 2026-05): GPU1-mlx5_1 370 Gb/s",
        "GPUDirect RDMA through GPU memory below 390 Gb/s (fleet figure of site-h100: calibrated over 16 nodes, "
        "2026-12-06): GPU0-mlx5_0 385 Gb/s, GPU1-mlx5_1 370 Gb/s"]
    # the RoCE build has no published GPUDirect figure: only the fraction of the rate judges it
    assert validate_host("gpu01", {"verify_profile": "hgx-h100-8x400"}).policy().gpudirect_figures == ()


def test_the_node_check_keeps_the_platforms_figures_between_checks(tmp_path):
    from ccrhost.node import prepared

    path = site(tmp_path, "extends: hgx-h100-8x400-ib\nfleet:\n  ib_write_bw.gpudirect: {value: 390, unit: Gb/s, "
                          "source: 'calibrated over 16 nodes'}\n")
    text = check_config_text(validate_host("gpu01", {"verify_profile": path}))
    Path(path).unlink()
    settings = validate_host("gpu01", yaml.safe_load(text)).check_settings()  # what `ccrhost check` keeps
    given = prepared.inputs(text.encode(), {}, "gpu01")
    prepared.store(given, settings, str(tmp_path / "kept"))
    again = prepared.load(given, str(tmp_path / "kept"))
    assert again == settings
    assert [f.gbps for f in again.policy().gpudirect_figures] == [380.0, 390.0]
    assert again.expectation().gpu_model == H100


def test_the_slurm_gate_judges_with_the_platform_it_is_given(tmp_path):
    from ccrhost.fleet.slurm import nccl_options

    opts = nccl_options("nvlink,loopback", None, None, 20, None, None, 4, 29500, (), site(tmp_path, FLEET_SITE))
    assert [f.busbw for f in ar.thresholds("nvlink", H100, [], opts.min_busbw, opts.platform)] == [460, 471.2]
    assert nccl_options("nvlink", None, None, 20, None, None, 4, 29500, ()).platform is None  # each GPU's built-in


def test_azures_h100_sku_pins_the_host_as_its_nhc_file_does():
    """Azure's nd96isr_h100_v5.conf (check_hw_cpuinfo 2 96 96, check_hw_physmem
    1915071MB at 5%, check_hw_swap 0kB) as the SKU's settings defaults: 1915071MB
    is 1961032704 kB as NHC's nhc_common_parse_size multiplies (by 1024)."""
    from ccrhost.model.baseline import BaselineReading, CpuReading, check_baseline

    s = validate_host("gpu01", {"verify_profile": "azure-nd-h100-v5"})
    assert (s.baseline_cpu_sockets, s.baseline_cpu_cores, s.baseline_cpu_threads) == (2, 96, 96)
    assert (s.baseline_memory_total_kib, s.baseline_memory_tolerance_pct, s.baseline_swap_max_kib) == (1961032704, 5, 0)
    good = BaselineReading(cpu=CpuReading(sockets=2, cores=96, processors=96), mem_total_kib=1915000000,
                           swap_total_kib=0)
    assert check_baseline(good, s.baseline_policy()) == []
    short = BaselineReading(cpu=CpuReading(sockets=2, cores=96, processors=96), mem_total_kib=1800000000,
                            swap_total_kib=8388604, swaps=["/swap.img"])
    assert [r.code for r in check_baseline(short, s.baseline_policy())] == ["host_memory_short", "host_swap_on"]
    assert validate_host("gpu01", {"verify_profile": "azure-nd-h100-v5", "baseline_swap_max_kib": None}
                         ).baseline_swap_max_kib is None
