"""`ccrhost baseline capture` and `diff` of the platform file's settings:
section (issue 47, item 3): a known-good node's host baseline readings as
the exact baseline_* keys nhc-genconf would write, and diff naming exactly
the settings keys a faulted node differs by (expected, read, which file)."""

from __future__ import annotations

from dataclasses import replace

import yaml

from ccrhost.model import contract
from ccrhost.model.baseline import BaselineReading, CpuReading, MountReading
from ccrhost.model.status import FAIL, UNKNOWN
from ccrhost.model.verdict import Readings
from ccrhost.node.baseline_capture import capture_text, read_platform

MEM = 1961032704
MOUNTS = [MountReading("/proc", "proc", "proc", "rw,nosuid"), MountReading("/sys", "sysfs", "sysfs", "rw"),
          MountReading("/", "/dev/nvme0n1p1", "ext4", "rw,relatime"),
          MountReading("/dev/shm", "tmpfs", "tmpfs", "rw"), MountReading("/run", "tmpfs", "tmpfs", "rw"),
          MountReading("/run/user/0", "tmpfs", "tmpfs", "rw"), MountReading("/boot/efi", "/dev/nvme0n1p15", "vfat", "rw"),
          MountReading("/etc/hosts", "/dev/nvme0n1p1", "ext4", "rw"),
          MountReading("/sys/fs/cgroup", "cgroup2", "cgroup2", "rw"),
          MountReading("/mnt/scratch", "tmpfs", "tmpfs", "rw,relatime"),
          MountReading("/shared", "nfs01:/export", "nfs4", "rw,vers=4.2"),
          MountReading("/opt/sw", "nfs01:/sw", "nfs4", "ro,vers=4.2"),
          MountReading("/var/lib/docker/overlay2/x/merged", "overlay", "overlay", "rw"),
          MountReading("/snap/core/1", "/dev/loop0", "squashfs", "ro")]
CMDLINE = "BOOT_IMAGE=/vmlinuz root=UUID=1 ro iommu=on quiet iommu=pt init_on_alloc=0 hugepages=8 console=ttyS0"


def good_reading(**changes) -> BaselineReading:
    base = BaselineReading(
        cpu=CpuReading(online="0-191", possible="0-191", processors=192, sockets=2, cores=96,
                       models=["AMD EPYC 9V84 96-Core Processor"]),
        mem_total_kib=MEM, swap_total_kib=0, hugepages={"2048kB": 0, "1048576kB": 2}, mounts=list(MOUNTS),
        modules=["nvidia", "nvidia_peermem", "mlx5_core", "mlx5_ib", "ib_umad", "ib_uverbs", "ib_core", "ext4", "xfs"],
        cmdline=CMDLINE, clocksource="tsc", kernel="5.15.0-1061-azure", cuda="12.4.1", nccl="2.21.5",
        ofed="24.10-1.1.4.0")
    return replace(base, **changes)


SETTINGS = {
    "baseline_cpus_all_online": True, "baseline_cpu_sockets": 2, "baseline_cpu_cores": 96, "baseline_cpu_threads": 192,
    "baseline_cpu_model": "AMD EPYC 9V84 96-Core Processor", "baseline_memory_total_kib": MEM,
    "baseline_memory_tolerance_pct": 5, "baseline_swap_max_kib": 0, "baseline_hugepages": {"1048576kB": 2},
    # data mounts only: not /proc, /sys, /dev/shm, /run..., /boot/efi, a container's /etc/hosts, overlay, a snap
    "baseline_mounts": {"/": {"fstype": "ext4", "rw": True}, "/mnt/scratch": {"fstype": "tmpfs", "rw": True},
                        "/opt/sw": {"fstype": "nfs4", "rw": False}, "/shared": {"fstype": "nfs4", "rw": True}},
    "baseline_modules": ["nvidia", "nvidia_peermem", "ib_core", "ib_uverbs", "ib_umad", "mlx5_core", "mlx5_ib"],
    "baseline_cmdline": ["iommu=pt", "init_on_alloc=0"],  # the pins in force (the last iommu), not the rest
    "baseline_clocksource": "tsc", "baseline_kernel_min": "5.15.0-1061", "baseline_cuda_min": "12.4.1",
    "baseline_nccl_min": "2.21.5", "baseline_ofed_min": "24.10-1.1.4.0"}


def node(reading=None) -> Readings:
    return Readings(ports=[], gpus=[], baseline=reading if reading is not None else good_reading())


def test_capture_writes_the_exact_settings_a_good_node_reads():
    doc, notes = contract.capture(node(), "site", "t")
    assert doc["settings"] == SETTINGS
    assert not [n for n in notes if n.startswith("settings.")]


def test_a_captured_settings_section_loads_as_the_baseline_settings_model():
    from ccrhost.settings.baseline import BaselineSettings

    doc, _ = contract.capture(node(), "site", "t")
    assert BaselineSettings(**yaml.safe_load(yaml.safe_dump(doc["settings"]))).baseline_policy() is not None


def test_what_cannot_be_read_is_left_out_saying_why_never_guessed():
    reading = good_reading(cuda=None, nccl=None, ofed=None, ofed_missing=True, mounts=None,
                           cpu=CpuReading(online="0-3", possible="0-3", processors=4, models=["A", "B", "A"]))
    doc, notes = contract.capture(node(reading), "site", "t")
    assert {"baseline_cuda_min", "baseline_nccl_min", "baseline_ofed_min", "baseline_mounts", "baseline_cpu_sockets",
            "baseline_cpu_cores"}.isdisjoint(doc["settings"])
    assert doc["settings"]["baseline_cpu_model"] == "A"
    assert "settings.baseline_cpu_model: model 1 read otherwise than the rest ('A')" in notes
    assert "settings.baseline_cuda_min: not read (no CUDA toolkit version read): left out" in notes
    assert "settings.baseline_mounts: not read (not read): left out" in notes
    doc, notes = contract.capture(node(BaselineReading(error="timed out after 20 s")), "site", "t")
    assert doc["settings"] == {} and "settings.baseline_swap_max_kib: not read (timed out after 20 s): left out" in notes


def platform(tmp_path):
    text, _ = capture_text(node(), "node1", "site", "2026-12-06")
    path = tmp_path / "site.yaml"
    path.write_text(text)
    expected, where = read_platform(str(path))
    return str(path), expected, where


def test_diff_names_exactly_the_settings_keys_that_differ(tmp_path):
    path, expected, where = platform(tmp_path)
    assert contract.diff(expected, where, node()) == []
    mounts = [m if m.path != "/mnt/scratch" else replace(m, options="ro,relatime") for m in MOUNTS
              if m.path != "/shared"]
    faulted = good_reading(
        cpu=CpuReading(online="0-190", possible="0-191", processors=191, sockets=2, cores=96,
                       models=["AMD EPYC 9V84 96-Core Processor"]),
        mem_total_kib=MEM * 7 // 8, swap_total_kib=8388604, hugepages={"2048kB": 0}, mounts=mounts,
        modules=["nvidia", "mlx5_core", "mlx5_ib", "ib_umad", "ib_uverbs", "ib_core"], cmdline=CMDLINE + " iommu=nopt",
        clocksource="hpet", kernel="5.15.0-1060-azure", cuda="12.2.0", nccl="2.21.5", ofed=None, ofed_missing=True)
    found = {d.key: (d.expected, d.read) for d in contract.diff(expected, where, node(faulted))}
    assert found == {
        "settings.baseline_cpus_all_online": (True, {"online": "0-190", "possible": "0-191"}),
        "settings.baseline_cpu_threads": (192, 191),
        "settings.baseline_memory_total_kib": (MEM, MEM * 7 // 8),
        "settings.baseline_swap_max_kib": (0, 8388604),
        "settings.baseline_hugepages": ({"1048576kB": 2}, {"1048576kB": "absent"}),
        "settings.baseline_mounts": (SETTINGS["baseline_mounts"], {"/mnt/scratch": {"fstype": "tmpfs", "rw": False},
                                                                 "/shared": "not mounted"}),
        "settings.baseline_modules": (SETTINGS["baseline_modules"], {"nvidia_peermem": "not loaded"}),
        "settings.baseline_cmdline": (["iommu=pt", "init_on_alloc=0"], {"iommu=pt": "iommu=nopt"}),
        "settings.baseline_clocksource": ("tsc", "hpet"),
        "settings.baseline_kernel_min": ("5.15.0-1061", "5.15.0-1060"),
        "settings.baseline_cuda_min": ("12.4.1", "12.2.0"),
        "settings.baseline_ofed_min": ("24.10-1.1.4.0", "none (no ofed_info: the upstream stack)")}
    diffs = contract.diff(expected, where, node(faulted))
    assert {d.where for d in diffs} == {path} and {d.level for d in diffs} == {FAIL}
    [swap] = [d for d in diffs if d.key == "settings.baseline_swap_max_kib"]
    assert swap.text() == f"settings.baseline_swap_max_kib: expected 0 ({path}), read 8388604 (/proc/meminfo (SwapTotal, kB))"


def test_diff_judges_each_key_as_its_check_does_not_by_equality(tmp_path):
    _, expected, where = platform(tmp_path)
    # within the memory tolerance, less swap, more hugepages, an extra mount, module and pin, newer versions
    better = good_reading(mem_total_kib=MEM * 97 // 100, hugepages={"1048576kB": 4},
                          mounts=[*MOUNTS, MountReading("/data", "/dev/md0", "xfs", "rw")],
                          modules=[*good_reading().modules, "nvidia_fs"], cmdline=CMDLINE + " mitigations=off",
                          kernel="6.8.0-1010-azure", cuda="12.6.0", nccl="2.23.4", ofed="25.01-0.6.0.0")
    assert contract.diff(expected, where, node(better)) == []
    over = contract.diff(expected, where, node(good_reading(mem_total_kib=MEM * 106 // 100)))
    assert [d.key for d in over] == ["settings.baseline_memory_total_kib"]
    # a site that widens the tolerance in its own file: the diff takes it
    site = tmp_path / "ours.yaml"
    site.write_text("extends: site.yaml\nsettings:\n  baseline_memory_tolerance_pct: 10\n")
    expected, where = read_platform(str(site))
    assert contract.diff(expected, where, node(good_reading(mem_total_kib=MEM * 106 // 100))) == []


def test_a_settings_key_that_cannot_be_read_is_unknown_never_a_match(tmp_path):
    _, expected, where = platform(tmp_path)
    found = contract.diff(expected, where, node(good_reading(cuda=None, mounts=None)))
    assert {d.key: d.level for d in found} == {"settings.baseline_cuda_min": UNKNOWN,
                                              "settings.baseline_mounts": UNKNOWN}
    unread = contract.diff(expected, where, node(BaselineReading(error="timed out")))
    assert {d.level for d in unread} == {UNKNOWN} and len(unread) == len(SETTINGS) - 1  # the tolerance is no reading
