"""The lab node's host files (ccrhost/lab/host.py): rendered in the kernel's formats, read back by the
host baseline's own parsers, each fault changing what it names; a value the node cannot have writes nothing."""

import pytest

from ccrhost.lab import host
from ccrhost.lab.profile import Fault, ProfileError
from ccrhost.model import baseline as hb
from ccrhost.probes import baseline as probe


def rendered(tmp_path, *faults: str) -> hb.BaselineReading:
    (tmp_path / "boot").mkdir(parents=True, exist_ok=True)
    (tmp_path / "boot" / "cmdline").write_text("BOOT_IMAGE=/boot/vmlinuz ro quiet intel_iommu=on iommu=pt\n")
    host.render(tmp_path, [Fault(kind=k, value=v or None) for k, _, v in (f.partition("=") for f in faults)])
    sysfs, boot = tmp_path / "image" / "sys", tmp_path / "boot"

    def text(path):
        return path.read_text().splitlines()

    lines = ["@@online", *text(sysfs / "devices/system/cpu/online"),
             "@@possible", *text(sysfs / "devices/system/cpu/possible"), "@@cpuinfo", *text(boot / "cpuinfo"),
             "@@meminfo", *text(boot / "meminfo"), "@@swaps", *text(boot / "swaps"), "@@cmdline", *text(boot / "cmdline"),
             "@@clocksource", *text(sysfs / "devices/system/clocksource/clocksource0/current_clocksource"),
             "@@hugepages", *(f"{p.parent.name.removeprefix('hugepages-')} {p.read_text().strip()}"
                              for p in sorted((sysfs / "kernel/mm/hugepages").glob("*/nr_hugepages")))]
    return probe.parse_baseline_dump(lines)


POLICY = hb.BaselinePolicy(cpus_all_online=True, cpu_sockets=1, cpu_threads=host.cpus(), cpu_model=host.CPU_MODEL,
                           memory_total_kib=host.MEM_TOTAL_KIB, swap_max_kib=0, hugepages=(("2048kB", 0),),
                           cmdline=("iommu=pt",), clocksource="tsc")


def test_a_healthy_node_reads_as_its_build(tmp_path):
    r = rendered(tmp_path)
    assert hb.check_baseline(r, POLICY) == []
    assert r.hugepages == {"1048576kB": 0, "2048kB": 0} and r.swaps == []


@pytest.mark.skipif(host.cpus() < 2, reason="a CPU to take offline besides CPU 0")
def test_each_fault_changes_the_files_it_names(tmp_path):
    codes = {f: {x.code for x in hb.check_baseline(rendered(tmp_path / f, f), POLICY)}
             for f in ("cpu_offline", "memory_short", "swap_on", "cmdline_wrong")}
    assert codes == {"cpu_offline": {"host_cpus_offline", "host_cpu_topology"}, "memory_short": {"host_memory_short"},
                     "swap_on": {"host_swap_on"}, "cmdline_wrong": {"host_cmdline"}}
    assert (tmp_path / "cpu_offline/image/sys/devices/system/cpu" / f"cpu{host.cpus() - 1}/online").read_text() == "0\n"
    assert rendered(tmp_path / "m", "memory_short=1000").mem_total_kib == 1000
    assert rendered(tmp_path / "s", "swap_on=4096").swap_total_kib == 4096
    assert rendered(tmp_path / "c", "cmdline_wrong=iommu=off").cmdline.endswith(" iommu=pt iommu=off")
    rendered(tmp_path / "ro", "mount_readonly")
    assert (tmp_path / "ro/boot/scratch_readonly").exists()


def test_the_kernel_formats(tmp_path):
    rendered(tmp_path, "swap_on")
    meminfo = (tmp_path / "boot/meminfo").read_text().splitlines()
    assert meminfo[0] == "MemTotal:       1961032704 kB" and "SwapTotal:       8388604 kB" in meminfo
    assert (tmp_path / "boot/swaps").read_text() == ("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
                                                      "/swapfile                               file\t\t8388604\t\t0\t\t-2\n")
    assert (tmp_path / "boot/cpuinfo").read_text().startswith(
        f"processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: {host.CPU_MODEL}\nphysical id\t: 0\n")


@pytest.mark.parametrize("fault", ["cpu_offline=0", "cpu_offline=9999", "cpu_offline=x", "memory_short=0",
                                   "memory_short=9999999999999", "swap_on=x", "mount_readonly=/data",
                                   "cmdline_wrong=a b"])
def test_a_value_the_node_cannot_have_writes_nothing(tmp_path, fault):
    with pytest.raises(ProfileError, match=f"fault {fault.partition('=')[0]}="):
        rendered(tmp_path, fault)
    assert not (tmp_path / "image").exists() and sorted(p.name for p in (tmp_path / "boot").iterdir()) == ["cmdline"]


def test_the_cuda_toolkit_is_on_the_nodes_own_usr_local(tmp_path):
    rendered(tmp_path)
    written = (tmp_path / "usrlocal/upper/cuda/version.json").read_text().splitlines()
    assert probe.parse_cuda(written, []) == host.CUDA_VERSION
