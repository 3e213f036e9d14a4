"""The platform file's ``settings:`` section as a known-good node reads it
(model/contract.py's ``settings`` reader): the host baseline keys
(settings/baseline.py) from the node's :class:`BaselineReading`, as
nhc-genconf writes its configuration, and how ``baseline diff`` judges
each (as model/baseline.py's check does: a minimum, a subset, a tolerance,
not plain equality). Pure.

What capture chooses, where a node reads more than a contract should pin:
- mounts: the data mounts only (:func:`data_mounts`), with type and rw;
- modules: those of :data:`MODULES` loaded (the GPU and RDMA stack);
- command line: the words of :data:`CMDLINE_PINS` in force.
"""

from __future__ import annotations

import re

from ccrhost.model.baseline import BaselineReading, MountReading, cmdline_words, cpu_list, kernel_number
from ccrhost.model.datapath import compare_versions
from ccrhost.model.observed import Observed

# Pseudo and container filesystems: no data lives on them (a tmpfs is judged by where it is mounted)
PSEUDO_FS = frozenset((
    "autofs", "binfmt_misc", "bpf", "cgroup", "cgroup2", "configfs", "debugfs", "devpts", "devtmpfs", "efivarfs",
    "fusectl", "fuse.lxcfs", "hugetlbfs", "mqueue", "nfsd", "nsfs", "overlay", "proc", "pstore", "ramfs",
    "rpc_pipefs", "securityfs", "selinuxfs", "squashfs", "sysfs", "tracefs"))
# The system's own trees: a mount under them is the OS's or a container runtime's, not data (/boot is the
# boot loader's; /etc's are a container's file bind mounts: /etc/hosts)
SYSTEM_TREES = ("/proc", "/sys", "/dev", "/run", "/var/run", "/var/lib/docker", "/var/lib/containerd",
                "/var/lib/kubelet", "/snap", "/boot", "/etc")
# settings/baseline.py MountPoint: a point it cannot name is not captured
_MOUNT_POINT = re.compile(r"^/[A-Za-z0-9_./@+-]{0,255}$")
_FSTYPE = re.compile(r"^[a-z0-9_.]{1,32}$")

# Modules ccrhost's checks rest on: the GPU driver, GPUDirect RDMA (peermem, gdrcopy), GPUDirect Storage,
# the RDMA core and user verbs/MAD (ib_umad: Fabric Manager's precheck on HGX B200), mlx5, EFA
MODULES = ("nvidia", "nvidia_uvm", "nvidia_peermem", "nvidia_fs", "gdrdrv", "ib_core", "ib_uverbs", "ib_umad",
           "rdma_ucm", "mlx5_core", "mlx5_ib", "efa")
# Kernel parameters the anchors pin (AMD's cluster validation: iommu=pt; NVIDIA's GB200 tuned profile:
# iommu.passthrough=1 init_on_alloc=0 numa_balancing=disable) and the others that change a GPU node's
# DMA, memory or power path; hugepage counts are baseline_hugepages' (a repeated word the kernel sums)
CMDLINE_PINS = ("iommu", "intel_iommu", "amd_iommu", "iommu.passthrough", "iommu.strict", "init_on_alloc",
                "numa_balancing", "transparent_hugepage", "default_hugepagesz", "pcie_aspm", "pci",
                "processor.max_cstate", "intel_idle.max_cstate", "mitigations")
# NHC's check_hw_physmem tolerance, as settings/baseline.py's default (Azure: 5% for H100, 3% for H200)
MEMORY_TOLERANCE_PCT = 5

# not a reading: written beside the memory total, never a difference
_TOLERANCE = Observed("ccrhost's default tolerance (NHC check_hw_physmem)", {"": MEMORY_TOLERANCE_PCT},
                      compare=lambda exp, sec: None)
_CPUINFO, _MEMINFO = "/proc/cpuinfo", "/proc/meminfo"
_CPUS = "/sys/devices/system/cpu/{online,possible}"


def _one(source: str, value, missing: str, compare=None) -> Observed:
    if value is None:
        return Observed(source, error=missing)
    return Observed(source, {"": value}, compare=compare)


def data_mounts(mounts: list[MountReading]) -> dict[str, MountReading]:
    """Mount point -> its mount (the last one of a point: the one a path reaches), for the data
    mounts: not a pseudo filesystem, not under the system's trees, a point the settings can name."""
    out = {}
    for m in mounts:
        if (m.fstype in PSEUDO_FS or not _FSTYPE.match(m.fstype) or not _MOUNT_POINT.match(m.path)
                or any(m.path == t or m.path.startswith(t + "/") for t in SYSTEM_TREES)):
            out.pop(m.path, None)
            continue
        out[m.path] = m
    return out


def _mount_spec(m: MountReading) -> dict:
    # rw false is "either": a mount a good node has read-only (a software tree) stays allowed so
    return {"fstype": m.fstype, "rw": not m.read_only}


def _compare_mounts(mounts: list[MountReading]):
    mounted = {m.path: m for m in mounts}

    def compare(expected, section):
        wrong = {}
        for path, want in sorted((expected or {}).items()):
            want = want if isinstance(want, dict) else {}
            have = mounted.get(path)
            if have is None:
                wrong[path] = "not mounted"
            elif (want.get("fstype") not in (None, have.fstype)) or (want.get("rw", True) and have.read_only):
                wrong[path] = _mount_spec(have)
        return wrong or None
    return compare


def _at_least(read):
    def compare(expected, section):
        result = compare_versions(read, str(expected))
        return None if result is not None and result >= 0 else read
    return compare


def _pins_in_force(cmdline: str) -> list[str]:
    words = cmdline_words(cmdline)
    return [key if words[key] is None else f"{key}={words[key]}" for key in CMDLINE_PINS if key in words]


def _compare_cmdline(cmdline: str):
    have = cmdline_words(cmdline)

    def compare(expected, section):
        wrong = {}
        for word in expected or ():
            key, sep, value = str(word).partition("=")
            if key not in have:
                wrong[word] = "absent"
            elif (value if sep else None) != have[key]:
                wrong[word] = key if have[key] is None else f"{key}={have[key]}"
        return wrong or None
    return compare


def _within(read: int):
    def compare(expected, section):
        tol = section.get("baseline_memory_tolerance_pct", MEMORY_TOLERANCE_PCT)
        return None if abs(read - expected) <= float(tol) / 100 * expected else read
    return compare


def baseline_keys(reading: BaselineReading | None) -> dict[str, Observed]:
    """Each baseline_* key this node gives, in settings/baseline.py's order."""
    keys = ("baseline_cpus_all_online", "baseline_cpu_sockets", "baseline_cpu_cores", "baseline_cpu_threads",
            "baseline_cpu_model", "baseline_memory_total_kib", "baseline_memory_tolerance_pct",
            "baseline_swap_max_kib", "baseline_hugepages", "baseline_mounts", "baseline_modules", "baseline_cmdline",
            "baseline_clocksource", "baseline_kernel_min", "baseline_cuda_min", "baseline_nccl_min",
            "baseline_ofed_min")
    if reading is None or reading.error is not None:
        why = "the host baseline was not read" if reading is None else reading.error
        # no memory total to write the tolerance beside
        return {k: Observed("the host baseline", error=why) for k in keys if k != "baseline_memory_tolerance_pct"}
    cpu, out = reading.cpu, {}
    online, possible = (cpu_list(x) if x is not None else None for x in (cpu.online, cpu.possible))
    if online is None or possible is None:
        out["baseline_cpus_all_online"] = Observed(_CPUS, error="the CPU lists could not be read")
    else:
        shown = {"online": cpu.online.strip(), "possible": cpu.possible.strip()}
        out["baseline_cpus_all_online"] = Observed(
            _CPUS, {"": possible <= online}, compare=lambda exp, sec: None if not exp or possible <= online else shown)
    out["baseline_cpu_sockets"] = _one(f"{_CPUINFO} (physical id)", cpu.sockets, "no socket read")
    out["baseline_cpu_cores"] = _one(f"{_CPUINFO} (physical id, core id)", cpu.cores, "no core read")
    out["baseline_cpu_threads"] = _one(f"{_CPUINFO} (processor)", cpu.processors, "no processor read")
    # several models: each a part, the capture's note names the odd ones and diff the ones that differ
    out["baseline_cpu_model"] = (Observed(f"{_CPUINFO} (model name)", {"": cpu.models[0]} if len(cpu.models) == 1
                                          else {f"model {i}": m for i, m in enumerate(cpu.models)})
                                 if cpu.models else Observed(f"{_CPUINFO} (model name)", error="no model name read"))
    mem = reading.mem_total_kib
    out["baseline_memory_total_kib"] = _one(f"{_MEMINFO} (MemTotal, kB)", mem, "MemTotal not read",
                                            _within(mem) if mem is not None else None)
    out["baseline_memory_tolerance_pct"] = _TOLERANCE
    swap = reading.swap_total_kib
    out["baseline_swap_max_kib"] = _one(f"{_MEMINFO} (SwapTotal, kB)", swap, "SwapTotal not read",
                                        lambda exp, sec: None if swap <= exp else swap)
    if reading.hugepages is None:
        out["baseline_hugepages"] = Observed("/sys/kernel/mm/hugepages", error="not read")
    else:
        pages = reading.hugepages

        def hugepages(exp, sec):
            short = {size: pages.get(size, "absent") for size, n in sorted((exp or {}).items())
                     if pages.get(size, -1) < n}
            return short or None
        out["baseline_hugepages"] = Observed("/sys/kernel/mm/hugepages/hugepages-*/nr_hugepages",
                                             {"": {s: n for s, n in sorted(pages.items()) if n}}, compare=hugepages)
    if reading.mounts is None:
        out["baseline_mounts"] = Observed("/proc/self/mounts", error="not read")
    else:
        out["baseline_mounts"] = Observed(
            "/proc/self/mounts (data mounts)",
            {"": {p: _mount_spec(m) for p, m in sorted(data_mounts(reading.mounts).items())}},
            compare=_compare_mounts(reading.mounts))
    if reading.modules is None:
        out["baseline_modules"] = Observed("/sys/module", error="not read")
    else:
        loaded = set(reading.modules)

        def modules(exp, sec):
            missing = {m: "not loaded" for m in exp or () if str(m).replace("-", "_") not in loaded}
            return missing or None
        out["baseline_modules"] = Observed("/sys/module, modules.builtin",
                                           {"": [m for m in MODULES if m in loaded]}, compare=modules)
    if reading.cmdline is None:
        out["baseline_cmdline"] = Observed("/proc/cmdline", error="not read")
    else:
        out["baseline_cmdline"] = Observed("/proc/cmdline", {"": _pins_in_force(reading.cmdline)},
                                           compare=_compare_cmdline(reading.cmdline))
    out["baseline_clocksource"] = _one("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                                       reading.clocksource, "not read")
    kernel = kernel_number(reading.kernel) if reading.kernel else None
    out["baseline_kernel_min"] = _one("/proc/sys/kernel/osrelease", kernel or None, "no kernel release read",
                                      _at_least(kernel))
    out["baseline_cuda_min"] = _one("/usr/local/cuda/version.json or version.txt", reading.cuda,
                                    "no CUDA toolkit version read", _at_least(reading.cuda))
    out["baseline_nccl_min"] = _one("libnccl.so.2 (ldconfig -p)", reading.nccl, "no libnccl.so.2 found",
                                    _at_least(reading.nccl))
    if reading.ofed_missing:
        # nothing to capture; a pin FAILS such a node, as host_ofed_version does
        out["baseline_ofed_min"] = Observed("ofed_info -s (absent: the upstream stack)",
                                            compare=lambda exp, sec: "none (no ofed_info: the upstream stack)")
    else:
        out["baseline_ofed_min"] = _one("ofed_info -s", reading.ofed, "no ofed_info version read",
                                        _at_least(reading.ofed))
    return {k: out[k] for k in keys}
