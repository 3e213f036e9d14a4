"""The host baseline: each parser from the file's verbatim format, each judge
from a reading, the settings that switch them on, and the verdict they join."""

import json
import subprocess

import pytest

from ccrhost.model import baseline as hb
from ccrhost.model.status import FAIL, UNKNOWN, WARN, Reason
from ccrhost.probes import baseline as probe
from ccrhost.settings import InventoryDataError, validate_host

# fs/proc/cpuinfo.c (x86 show_cpuinfo), two sockets, two cores each, SMT on: the four fields the probe keeps
CPUINFO = """\
processor\t: 0
model name\t: AMD EPYC 9V84 96-Core Processor
physical id\t: 0
core id\t\t: 0
processor\t: 1
model name\t: AMD EPYC 9V84 96-Core Processor
physical id\t: 0
core id\t\t: 1
processor\t: 2
model name\t: AMD EPYC 9V84 96-Core Processor
physical id\t: 1
core id\t\t: 0
processor\t: 3
model name\t: AMD EPYC 9V84 96-Core Processor
physical id\t: 1
core id\t\t: 1
processor\t: 4
model name\t: AMD EPYC 9V84 96-Core Processor
physical id\t: 0
core id\t\t: 0
""".splitlines()
# fs/proc/meminfo.c: the label padded to 16 characters, the value to 8, " kB"
MEMINFO = ["MemTotal:       1961032704 kB", "MemFree:        1820000000 kB", "SwapTotal:       8388604 kB",
           "HugePages_Total:       0"]
# mm/swapfile.c swap_show
SWAPS = ["Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority",
         "/swapfile                               file\t\t8388604\t\t0\t\t-2"]
MOUNTS = ["/dev/nvme0n1p1 / ext4 rw,relatime,discard 0 0",
          "/dev/md0 /mnt/nvme xfs ro,relatime,attr2,inode64 0 0",
          "server:/home /home nfs4 rw,relatime,vers=4.2 0 0", "/dev/sdb /data\\040set ext4 rw 0 0"]
# stat -f -c '%S %b %a %c %d %n'
STATFS = ["4096 1000 40 65536 64000 /", "4096 2000 1500 100 2 /mnt/nvme"]
VERSION_JSON = ['{', '   "cuda" : {', '      "name" : "CUDA SDK",', '      "version" : "12.4.1"', '   },',
                '   "cuda_cccl" : {', '      "name" : "CUDA C++ Core Compute Libraries",',
                '      "version" : "12.4.127"', '   }', '}']


def dump(*raw: str, **sections) -> list[str]:
    """The probe's output: each section's marker and lines, then ``raw`` lines."""
    out = []
    for tag, lines in sections.items():
        out += [f"@@{tag}", *lines]
    return out + list(raw)


# --- parsers ----------------------------------------------------------------------

def test_cpuinfo_counts_processors_sockets_cores_and_models():
    cpu = probe.parse_cpuinfo(CPUINFO)
    assert (cpu.processors, cpu.sockets, cpu.cores, cpu.models) == (5, 2, 4, ["AMD EPYC 9V84 96-Core Processor"])
    # Arm's cpuinfo names no physical id or model name: those are not known, never 0
    arm = probe.parse_cpuinfo(["processor\t: 0", "BogoMIPS\t: 2000.00", "CPU implementer\t: 0x41"])
    assert (arm.processors, arm.sockets, arm.cores, arm.models) == (1, None, None, [])


def test_arm_sockets_and_cores_come_from_the_sysfs_topology():
    # grep -H . .../cpu*/topology/physical_package_id .../cpu*/topology/core_id, two sockets of two cores
    topology = [f"/sys/devices/system/cpu/cpu{n}/topology/physical_package_id:{n // 2}" for n in range(4)] + \
               [f"/sys/devices/system/cpu/cpu{n}/topology/core_id:{n % 2}" for n in range(4)]
    arm = ["processor\t: 0", "BogoMIPS\t: 2000.00", "processor\t: 1", "processor\t: 2", "processor\t: 3"]
    r = probe.parse_baseline_dump(dump(cpuinfo=arm, topology=topology))
    assert (r.cpu.processors, r.cpu.sockets, r.cpu.cores) == (4, 2, 4)
    assert probe.parse_topology(["grep: /sys/devices/system/cpu/cpu0/topology/core_id: No such file"]) == (None, None)
    # x86 names them in cpuinfo: the topology is not read
    assert "@@topology" not in subprocess.run(["sh", "-c", probe.command()], capture_output=True,
                                              text=True).stdout or "physical id" not in open("/proc/cpuinfo").read()


def test_meminfo_swaps_mounts_statfs_and_hugepages_parse_their_verbatim_lines():
    assert probe.parse_meminfo(MEMINFO) == {"MemTotal": 1961032704, "MemFree": 1820000000, "SwapTotal": 8388604,
                                            "HugePages_Total": 0}
    assert probe.parse_swaps(SWAPS) == ["/swapfile"] and probe.parse_swaps(SWAPS[:1]) == []
    mounts = probe.parse_mounts(MOUNTS)
    assert [(m.path, m.fstype, m.read_only) for m in mounts] == [
        ("/", "ext4", False), ("/mnt/nvme", "xfs", True), ("/home", "nfs4", False), ("/data set", "ext4", False)]
    assert probe.parse_statfs(STATFS + ["stat: cannot read file system information for '/x'"]) == {
        "/": (4096, 1000, 40, 65536, 64000), "/mnt/nvme": (4096, 2000, 1500, 100, 2)}
    assert probe.parse_hugepages(["2048kB 5128", "1048576kB 2", "junk"]) == {"2048kB": 5128, "1048576kB": 2}


def test_versions_parse_from_their_files_and_commands():
    assert probe.parse_cuda(VERSION_JSON, []) == "12.4.1"
    assert probe.parse_cuda([], ["CUDA Version 10.2.89"]) == "10.2.89"
    assert probe.parse_cuda(["{not json"], ["CUDA Version 10.2.89"]) is None  # a broken json is not read past
    assert probe.parse_nccl(["/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5"]) == "2.21.5"
    assert probe.parse_nccl(["/usr/lib/x86_64-linux-gnu/libnccl.so.2"]) is None  # a link readlink did not resolve
    assert probe.parse_ofed(["MLNX_OFED_LINUX-23.10-5.1.4.0:"]) == "23.10-5.1.4.0"
    assert probe.parse_ofed(["MLNX_OFED_LINUX-5.8-1.1.2.1"]) == "5.8-1.1.2.1"


def test_the_dump_joins_statfs_to_its_mount_and_absent_sections_stay_unknown():
    r = probe.parse_baseline_dump(dump(online=["0-3"], possible=["0-7"], cpuinfo=CPUINFO, meminfo=MEMINFO,
                                       mounts=MOUNTS, statfs=STATFS, ofed_missing=[],
                                       *["@@sysctl kernel.numa_balancing", "1", "@@sysctl vm.swappiness"]))
    assert (r.cpu.online, r.cpu.possible, r.mem_total_kib, r.swap_total_kib) == ("0-3", "0-7", 1961032704, 8388604)
    root = r.mounts[0]
    assert (root.block_size, root.blocks, root.blocks_avail, root.inodes, root.inodes_free) == (4096, 1000, 40,
                                                                                              65536, 64000)
    assert r.mounts[2].blocks is None  # not asked for
    assert r.sysctl == {"kernel.numa_balancing": "1"}  # an unreadable sysctl prints nothing: absent
    assert r.hugepages is None and r.modules is None and r.cmdline is None and r.kernel is None
    assert r.ofed_missing and r.ofed is None


def test_the_snippet_runs_here_and_reads_this_machine():
    out = subprocess.run(["sh", "-c", probe.command(("kernel.ostype",), ("/",))], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    r = probe.parse_baseline_dump(out)
    meminfo = open("/proc/meminfo").read()
    assert f"MemTotal: {r.mem_total_kib} kB" in " ".join(meminfo.split())
    assert r.cpu.online == open("/sys/devices/system/cpu/online").read().strip()
    assert r.sysctl == {"kernel.ostype": "Linux"} and r.cmdline == open("/proc/cmdline").read().strip()
    assert next(m for m in reversed(r.mounts) if m.path == "/").blocks > 0


# --- judges -----------------------------------------------------------------------

def reading(**kw) -> hb.BaselineReading:
    r = probe.parse_baseline_dump(dump("@@sysctl kernel.numa_balancing", "1", online=["0-4"], possible=["0-4"], cpuinfo=CPUINFO, meminfo=MEMINFO,
                                       swaps=SWAPS, hugepages=["2048kB 0"], mounts=MOUNTS, statfs=STATFS,
                                       modules=["mlx5_core", "ib_uverbs"],
                                       cmdline=["BOOT_IMAGE=/vmlinuz ro iommu=pt quiet iommu=nopt"],
                                       clocksource=["hpet"],
                                       kernel=["5.15.0-1061-azure"], cuda_json=VERSION_JSON,
                                       nccl=["/usr/lib/libnccl.so.2.18.3"], ofed=["MLNX_OFED_LINUX-23.10-5.1.4.0:"]))
    for key, value in kw.items():
        setattr(r, key, value)
    return r


def judged(settings: dict, r=None) -> list[tuple[str, str, str]]:
    policy = validate_host("n", settings).baseline_policy()
    return [(x.level, x.code, x.message) for x in hb.check_baseline(r or reading(), policy)]


def test_no_key_no_policy_nothing_judged():
    assert validate_host("n", {}).baseline_policy() is None
    assert validate_host("n", {}).policy().baseline is None
    assert hb.check_baseline(reading(), None) == []


def test_cpus_offline_topology_and_model():
    r = reading()
    r.cpu.online = "0-2,4"
    assert judged({"baseline_cpus_all_online": True}, r) == [
        (FAIL, "host_cpus_offline", "CPUs 3 are offline: 4 of 5 possible CPUs online (0-2,4)")]
    assert judged({"baseline_cpus_all_online": True}) == []
    assert judged({"baseline_cpu_sockets": 2, "baseline_cpu_cores": 4, "baseline_cpu_threads": 5}) == []
    assert judged({"baseline_cpu_sockets": 1, "baseline_cpu_threads": 96}) == [
        (FAIL, "host_cpu_topology", "2 CPU sockets, expected 1 (/proc/cpuinfo)"),
        (FAIL, "host_cpu_topology", "5 CPU threads, expected 96 (/proc/cpuinfo)")]
    assert judged({"baseline_cpu_model": "Intel Xeon"}) == [
        (FAIL, "host_cpu_model", "CPU model 'AMD EPYC 9V84 96-Core Processor', expected 'Intel Xeon'")]
    r.cpu.online = "0-x"
    assert judged({"baseline_cpus_all_online": True}, r)[0][:2] == (UNKNOWN, "host_baseline_unreadable")


def test_memory_within_tolerance_short_fails_over_warns():
    assert judged({"baseline_memory_total_kib": 2_000_000_000}) == []  # 1.95% short, within 5%
    assert judged({"baseline_memory_total_kib": 2_100_000_000}) == [
        (FAIL, "host_memory_short", "MemTotal 1961032704 kB is 6.6% below the expected 2100000000 kB (tolerance 5%)")]
    assert judged({"baseline_memory_total_kib": 1_800_000_000, "baseline_memory_tolerance_pct": 3})[0][:2] == (
        WARN, "host_memory_over")
    assert judged({"baseline_memory_total_kib": 1}, reading(mem_total_kib=None)) == [
        (UNKNOWN, "host_baseline_unreadable", "the memory total is not known: /proc/meminfo (MemTotal) could not "
         "be read")]


def test_swap_on_names_its_area_and_swap_off_passes():
    assert judged({"baseline_swap_max_kib": 0}) == [
        (FAIL, "host_swap_on", "SwapTotal 8388604 kB (/swapfile), at most 0 kB allowed")]
    assert judged({"baseline_swap_max_kib": 0}, reading(swap_total_kib=0, swaps=[])) == []
    assert judged({"baseline_swap_max_kib": 9_000_000}) == []


def test_hugepages_fewer_or_a_size_the_kernel_lacks_fail_and_no_folder_is_unknown():
    assert judged({"baseline_hugepages": {"2048kB": 4, "1048576kB": 2}}) == [
        (FAIL, "host_hugepages", "this kernel has no 1048576kB hugepages "
         "(/sys/kernel/mm/hugepages/hugepages-1048576kB), 2 wanted"),
        (FAIL, "host_hugepages", "0 hugepages of 2048kB, expected 4")]
    assert judged({"baseline_hugepages": {"2048kB": 0}}) == []
    assert judged({"baseline_hugepages": {"2048kB": 4}}, reading(hugepages=None))[0][:2] == (
        UNKNOWN, "host_baseline_unreadable")


def test_mounts_each_fault_its_own_code():
    mounts = {"/": {"fstype": "ext4", "min_free_pct": 5, "min_free_inodes_pct": 5},
              "/mnt/nvme": {"fstype": "ext4", "min_free_inodes_pct": 5},
              "/scratch": {}, "/home": {"min_free_pct": 1}}
    assert judged({"baseline_mounts": mounts}) == [  # in the order of the mount points
        (FAIL, "host_mount_full", "/ has 4.0% free (0 MiB), at least 5% required"),
        (UNKNOWN, "host_baseline_unreadable", "the free space of /home is not known: statvfs(/home) could not be "
         "read"),
        (FAIL, "host_mount_type", "/mnt/nvme is xfs (/dev/md0), expected ext4"),
        (FAIL, "host_mount_readonly", "/mnt/nvme (xfs /dev/md0) is mounted read-only (ro,relatime,attr2,inode64)"),
        (FAIL, "host_mount_inodes", "/mnt/nvme has 2.0% of its inodes free (2), at least 5% required"),
        (FAIL, "host_mount_missing", "/scratch is not mounted")]
    assert judged({"baseline_mounts": {"/mnt/nvme": {"rw": False}}}) == []
    assert judged({"baseline_mounts": {"/": {}}}, reading(mounts=None))[0][:2] == (UNKNOWN, "host_baseline_unreadable")


def test_modules_cmdline_sysctl_and_clocksource():
    assert judged({"baseline_modules": ["ib_umad", "mlx5-core"]}) == [
        (FAIL, "host_module_missing", "kernel modules not loaded: ib_umad")]
    # the last value of a key is the one in force; a flag asked for as a bare word
    assert judged({"baseline_cmdline": ["iommu=pt", "quiet", "init_on_alloc=0"]}) == [
        (FAIL, "host_cmdline", "the kernel command line has iommu=nopt, expected iommu=pt"),
        (FAIL, "host_cmdline", "the kernel command line lacks init_on_alloc=0")]
    assert hb.cmdline_words('a=1 dyndbg="file x.c +p" b') == {"a": "1", "dyndbg": "file x.c +p", "b": None}
    assert judged({"baseline_sysctl": {"kernel.numa_balancing": "0", "vm.swappiness": "10"}}) == [
        (FAIL, "host_sysctl", "sysctl kernel.numa_balancing is '1', expected '0'"),
        (UNKNOWN, "host_baseline_unreadable", "sysctl vm.swappiness is not known: /proc/sys/vm/swappiness could not "
         "be read")]
    assert judged({"baseline_sysctl": {"kernel.numa_balancing": "1"}, "baseline_clocksource": "tsc"}) == [
        (WARN, "host_clocksource", "clocksource hpet, expected tsc")]


def test_version_pins_are_the_oldest_allowed():
    pins = {"baseline_kernel_min": "5.15.0-1062", "baseline_cuda_min": "12.4", "baseline_nccl_min": "2.21",
            "baseline_ofed_min": "24.10"}
    assert judged(pins) == [
        (FAIL, "host_kernel_version", "kernel 5.15.0-1061-azure is older than the 5.15.0-1062 required"),
        (FAIL, "host_nccl_version", "NCCL 2.18.3 is older than the 2.21 required"),
        (FAIL, "host_ofed_version", "MLNX_OFED/DOCA-OFED 23.10-5.1.4.0 is older than the 24.10 required")]
    assert judged({"baseline_ofed_min": "5.8"}, reading(ofed=None, ofed_missing=True)) == [
        (FAIL, "host_ofed_version", "no MLNX_OFED/DOCA-OFED (no ofed_info: the upstream stack), 5.8 or newer "
         "required")]
    assert judged({"baseline_cuda_min": "12.0"}, reading(cuda=None)) == [
        (UNKNOWN, "host_baseline_unreadable", "the CUDA version is not known: /usr/local/cuda/version.json or "
         "version.txt could not be read")]


def test_a_probe_that_could_not_run_is_one_unknown():
    assert judged({"baseline_swap_max_kib": 0}, hb.BaselineReading(error="it hung")) == [
        (UNKNOWN, "host_baseline_unreadable", "the host baseline is not known: it hung")]


# --- settings and the one verdict -----------------------------------------------------

def test_settings_refuse_what_the_probe_could_not_read_safely():
    for key, value in (("baseline_sysctl", {"kernel.x; rm -rf /": "0"}), ("baseline_mounts", {"/a b": {}}),
                       ("baseline_cmdline", ["a b"]), ("baseline_hugepages", {"2M": 1}),
                       ("baseline_mounts", {"/x": {"fstyp": "ext4"}}), ("baseline_cpu_sockets", 0)):
        with pytest.raises(InventoryDataError, match=key):
            validate_host("n", {key: value})
    s = validate_host("n", {"baseline_sysctl": {"vm.swappiness": "10", "kernel.numa_balancing": "0"},
                            "baseline_mounts": {"/b": {}, "/a": {}}})
    assert s.baseline_ask() == (("kernel.numa_balancing", "vm.swappiness"), ("/a", "/b"))
    assert "'@@sysctl kernel.numa_balancing'; cat /proc/sys/kernel/numa_balancing;" in probe.command(*s.baseline_ask())


def test_the_reasons_join_the_one_verdict_and_round_trip_through_the_json():
    from ccrhost.model.verdict import Readings, Verdict, evaluate

    settings = validate_host("n", {"baseline_swap_max_kib": 0})
    readings = Readings(ports=[], gpus=[], baseline=reading())
    verdict = evaluate(readings, settings.expectation(), settings.policy())
    assert Reason(FAIL, "host_swap_on", "SwapTotal 8388604 kB (/swapfile), at most 0 kB allowed") in verdict.reasons
    again = Verdict.from_dict(json.loads(json.dumps(verdict.to_dict())))
    assert again.readings.baseline == readings.baseline and again.reasons == verdict.reasons


def test_ccrhost_check_reads_the_baseline_only_where_a_key_asks():
    from ccrhost.model.gpus import GpuProbe
    from ccrhost.node.check import run_check
    from ccrhost.probes.rdma import RdmaReading

    asked = []

    def gather_baseline():
        asked.append(True)
        return reading()

    plain = run_check(validate_host("n", {}), gather=lambda: (RdmaReading(), GpuProbe()),
                      gather_baseline=gather_baseline)
    assert not asked and plain.readings.baseline is None
    swap = run_check(validate_host("n", {"baseline_swap_max_kib": 0}), gather=lambda: (RdmaReading(), GpuProbe()),
                     gather_baseline=gather_baseline)
    assert asked and "host_swap_on" in {r.code for r in swap.reasons}
    # the verdict keeps only the mounts and modules asked about: a container host's mount table is long
    mounts = run_check(validate_host("n", {"baseline_mounts": {"/mnt/nvme": {}}, "baseline_modules": ["ib_umad"]}),
                       gather=lambda: (RdmaReading(), GpuProbe()), gather_baseline=gather_baseline)
    assert [m.path for m in mounts.readings.baseline.mounts] == ["/mnt/nvme"] and mounts.readings.baseline.modules == []
    assert {r.code for r in mounts.reasons} >= {"host_mount_readonly", "host_module_missing"}


def test_every_code_explains():
    from ccrhost.model.reasons import REGISTRY, SOURCES

    codes = {c for c in REGISTRY if SOURCES[c] == "baseline.yaml"}
    assert codes == {"host_baseline_unreadable", "host_cpus_offline", "host_cpu_topology", "host_cpu_model",
                     "host_memory_short", "host_memory_over", "host_swap_on", "host_hugepages", "host_mount_missing",
                     "host_mount_type", "host_mount_readonly", "host_mount_full", "host_mount_inodes",
                     "host_module_missing", "host_cmdline", "host_sysctl", "host_clocksource", "host_kernel_version",
                     "host_cuda_version", "host_nccl_version", "host_ofed_version"}
    out = subprocess.run([__import__("sys").executable, "-m", "ccrhost", "explain", "host_swap_on"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "swapoff -a" in out.stdout


def test_the_deploy_judges_the_snapshots_baseline_and_a_probe_without_output_is_unknown():
    from ccrhost.operations.verify import node_verdict
    from ccrhost.probes import node

    settings = validate_host("n", {"baseline_swap_max_kib": 0, "baseline_mounts": {"/mnt/nvme": {}},
                                   "host_health_enable": False})
    snap = node.parse_snapshot(["@@@ rdma", "@@@ baseline", *dump(meminfo=MEMINFO, swaps=SWAPS, mounts=MOUNTS)])
    verdict = node_verdict(snap, settings)
    assert [(r.code, r.message) for r in verdict.reasons if r.code.startswith("host_")] == [
        ("host_swap_on", "SwapTotal 8388604 kB (/swapfile), at most 0 kB allowed"),
        ("host_mount_readonly", "/mnt/nvme (xfs /dev/md0) is mounted read-only (ro,relatime,attr2,inode64)")]
    assert [m.path for m in verdict.readings.baseline.mounts] == ["/mnt/nvme"]  # the rest of the table not kept
    silent = node_verdict(node.parse_snapshot(["@@@ rdma"]), settings)
    assert [(r.level, r.code, r.message) for r in silent.reasons if r.code.startswith("host_")] == [
        (UNKNOWN, "host_baseline_unreadable", "the host baseline is not known: no output from the baseline probe")]
    assert not [r for r in node_verdict(snap, validate_host("n", {})).reasons if r.code.startswith("host_")]
