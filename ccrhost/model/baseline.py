"""The host baseline: what the node's host reads (CPUs, memory, swap,
hugepages, mounts, modules, kernel command line, sysctls, clocksource,
versions) judged against what its build must have (settings/baseline.py).

Pure functions from a :class:`BaselineReading` (probes/baseline.py reads
it, in the node's one snapshot) to reasons, which ``verdict.evaluate``
joins with the rest. A value that could not be read is UNKNOWN
``host_baseline_unreadable``, never a pass; a check whose key is empty is
not judged at all. docs/host-baseline.md lists each check and its code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.model.datapath import compare_versions
from ccrhost.model.status import FAIL, UNKNOWN, WARN, Reason


# --- what the probe reads (probes/baseline.py); None: not read ---------------

@dataclass
class CpuReading:
    online: str | None = None      # /sys/devices/system/cpu/online: a CPU list, "0-95"
    possible: str | None = None    # /sys/devices/system/cpu/possible
    processors: int | None = None  # /proc/cpuinfo: its `processor` entries (the online CPUs)
    # /proc/cpuinfo: distinct `physical id`; where it has none (Arm), the online CPUs'
    # /sys/devices/system/cpu/cpuN/topology/physical_package_id
    sockets: int | None = None
    cores: int | None = None       # likewise: distinct (`physical id`, `core id`), or (physical_package_id, core_id)
    models: list[str] = field(default_factory=list)  # /proc/cpuinfo: distinct `model name`, in order


@dataclass
class MountReading:
    path: str        # /proc/self/mounts field 2 (octal escapes decoded)
    device: str      # field 1
    fstype: str      # field 3
    options: str     # field 4: rw or ro first
    # statvfs(path) via `stat -f` (None: not read): block size, blocks, available to users, inodes, free inodes
    block_size: int | None = None
    blocks: int | None = None
    blocks_avail: int | None = None
    inodes: int | None = None
    inodes_free: int | None = None

    @property
    def read_only(self) -> bool:
        return "ro" in self.options.split(",")


@dataclass
class BaselineReading:
    error: str | None = None  # the probe could not be read at all: everything judged is UNKNOWN
    cpu: CpuReading = field(default_factory=CpuReading)
    mem_total_kib: int | None = None   # /proc/meminfo MemTotal (kB)
    swap_total_kib: int | None = None  # /proc/meminfo SwapTotal (kB)
    swaps: list[str] = field(default_factory=list)  # /proc/swaps: the swap areas in use (Filename column)
    # size -> /sys/kernel/mm/hugepages/hugepages-<size>/nr_hugepages; None: that folder not read
    hugepages: dict[str, int] | None = None
    mounts: list[MountReading] | None = None  # /proc/self/mounts (+ statvfs); None: not read
    modules: list[str] | None = None   # /sys/module and modules.builtin of the running kernel; None: not read
    cmdline: str | None = None         # /proc/cmdline
    sysctl: dict[str, str] = field(default_factory=dict)  # name -> /proc/sys/<name with / for .>, those asked for
    clocksource: str | None = None     # /sys/devices/system/clocksource/clocksource0/current_clocksource
    kernel: str | None = None          # /proc/sys/kernel/osrelease (uname -r)
    cuda: str | None = None            # /usr/local/cuda/version.json "cuda" version, else version.txt
    nccl: str | None = None            # the version in libnccl.so.2's resolved file name
    ofed: str | None = None            # `ofed_info -s`, without its MLNX_OFED_LINUX- prefix and colon
    ofed_missing: bool = False         # no ofed_info: the upstream (inbox) stack


# --- what the build must have (settings/baseline.py) ----------------------------

@dataclass(frozen=True)
class Mount:
    path: str
    fstype: str | None = None
    rw: bool = True
    min_free_pct: float | None = None
    min_free_inodes_pct: float | None = None


@dataclass(frozen=True)
class BaselinePolicy:
    cpus_all_online: bool = False
    cpu_sockets: int | None = None
    cpu_cores: int | None = None
    cpu_threads: int | None = None
    cpu_model: str | None = None
    memory_total_kib: int | None = None
    memory_tolerance_pct: float = 5
    swap_max_kib: int | None = None
    hugepages: tuple[tuple[str, int], ...] = ()
    mounts: tuple[Mount, ...] = ()
    modules: tuple[str, ...] = ()
    cmdline: tuple[str, ...] = ()
    sysctl: tuple[tuple[str, str], ...] = ()
    clocksource: str | None = None
    kernel_min: str | None = None
    cuda_min: str | None = None
    nccl_min: str | None = None
    ofed_min: str | None = None

    def any(self) -> bool:
        """Whether anything is judged at all (a pin of 0, swap_max_kib's swap off, is one)."""
        return any(v is not None and v is not False and v != () for k, v in self.__dict__.items()
                   if k != "memory_tolerance_pct")

    def ask(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(sysctl names, mount points): what the probe must read for this policy beyond its fixed files."""
        return tuple(name for name, _ in self.sysctl), tuple(m.path for m in self.mounts)


# --- judging ---------------------------------------------------------------------

def cpu_list(text: str) -> set[int] | None:
    """The CPUs of a kernel CPU list (``0-3,8-11``; an empty line is none);
    None for anything else."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            return None
        cpus.update(range(int(lo), int(hi if sep else lo) + 1))
    return cpus


def _ranges(cpus: set[int]) -> str:
    """{0, 1, 2, 5} -> ``0-2,5``: the kernel's own list format."""
    out, items = [], sorted(cpus)
    for cpu in items:
        if out and out[-1][1] == cpu - 1:
            out[-1][1] = cpu
        else:
            out.append([cpu, cpu])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def _unreadable(what: str, source: str) -> Reason:
    return Reason(UNKNOWN, "host_baseline_unreadable", f"{what} is not known: {source} could not be read")


def check_cpus(cpu: CpuReading, policy: BaselinePolicy) -> list[Reason]:
    reasons = []
    if policy.cpus_all_online:
        online, possible = (cpu_list(x) if x is not None else None for x in (cpu.online, cpu.possible))
        if online is None or possible is None:
            reasons.append(_unreadable("whether every CPU is online", "/sys/devices/system/cpu/online or possible"))
        elif possible - online:
            off = possible - online
            reasons.append(Reason(FAIL, "host_cpus_offline", f"CPUs {_ranges(off)} are offline: {len(online)} of "
                                  f"{len(possible)} possible CPUs online ({cpu.online.strip()})"))
    for what, want, have in (("CPU sockets", policy.cpu_sockets, cpu.sockets),
                             ("physical cores", policy.cpu_cores, cpu.cores),
                             ("CPU threads", policy.cpu_threads, cpu.processors)):
        if want is None:
            continue
        if have is None:
            reasons.append(_unreadable(f"the number of {what}", "/proc/cpuinfo"))
        elif have != want:
            reasons.append(Reason(FAIL, "host_cpu_topology", f"{have} {what}, expected {want} (/proc/cpuinfo)"))
    if policy.cpu_model is not None:
        if not cpu.models:
            reasons.append(_unreadable("the CPU model", "/proc/cpuinfo (model name)"))
        elif cpu.models != [policy.cpu_model]:
            found = ", ".join(repr(m) for m in cpu.models)
            reasons.append(Reason(FAIL, "host_cpu_model", f"CPU model {found}, expected {policy.cpu_model!r}"))
    return reasons


def check_memory(reading: BaselineReading, policy: BaselinePolicy) -> list[Reason]:
    reasons = []
    want = policy.memory_total_kib
    if want is not None:
        have, tol = reading.mem_total_kib, policy.memory_tolerance_pct
        if have is None:
            reasons.append(_unreadable("the memory total", "/proc/meminfo (MemTotal)"))
        elif have < want * (1 - tol / 100):
            reasons.append(Reason(FAIL, "host_memory_short", f"MemTotal {have} kB is {1 - have / want:.1%} below "
                                  f"the expected {want} kB (tolerance {tol:g}%)"))
        elif have > want * (1 + tol / 100):
            reasons.append(Reason(WARN, "host_memory_over", f"MemTotal {have} kB is {have / want - 1:.1%} above "
                                  f"the expected {want} kB (tolerance {tol:g}%)"))
    if policy.swap_max_kib is not None:
        swap = reading.swap_total_kib
        if swap is None:
            reasons.append(_unreadable("the swap in use", "/proc/meminfo (SwapTotal)"))
        elif swap > policy.swap_max_kib:
            areas = f" ({', '.join(reading.swaps)})" if reading.swaps else ""
            reasons.append(Reason(FAIL, "host_swap_on", f"SwapTotal {swap} kB{areas}, at most "
                                  f"{policy.swap_max_kib} kB allowed"))
    for size, count in policy.hugepages:
        have = None if reading.hugepages is None else reading.hugepages.get(size, 0)
        if have is None:
            reasons.append(_unreadable(f"the {size} hugepages", "/sys/kernel/mm/hugepages"))
        elif size not in reading.hugepages:
            reasons.append(Reason(FAIL, "host_hugepages", f"this kernel has no {size} hugepages "
                                  f"(/sys/kernel/mm/hugepages/hugepages-{size}), {count} wanted"))
        elif have < count:
            reasons.append(Reason(FAIL, "host_hugepages", f"{have} hugepages of {size}, expected {count}"))
    return reasons


def _pct(part: int, whole: int) -> float:
    return 100.0 * part / whole


def check_mounts(reading: BaselineReading, policy: BaselinePolicy) -> list[Reason]:
    if not policy.mounts:
        return []
    if reading.mounts is None:
        return [_unreadable("the required mounts", "/proc/self/mounts")]
    reasons = []
    # the last mount of a point is the one a path reaches (a mount over a mount)
    mounted = {m.path: m for m in reading.mounts}
    for want in policy.mounts:
        have = mounted.get(want.path)
        if have is None:
            reasons.append(Reason(FAIL, "host_mount_missing", f"{want.path} is not mounted"))
            continue
        if want.fstype is not None and have.fstype != want.fstype:
            reasons.append(Reason(FAIL, "host_mount_type", f"{want.path} is {have.fstype} ({have.device}), "
                                  f"expected {want.fstype}"))
        if want.rw and have.read_only:
            reasons.append(Reason(FAIL, "host_mount_readonly", f"{want.path} ({have.fstype} {have.device}) is "
                                  f"mounted read-only ({have.options})"))
        if want.min_free_pct is None and want.min_free_inodes_pct is None:
            continue
        if have.blocks is None:
            reasons.append(_unreadable(f"the free space of {want.path}", f"statvfs({want.path})"))
            continue
        if want.min_free_pct is not None and have.blocks:
            free = _pct(have.blocks_avail, have.blocks)
            if free < want.min_free_pct:
                reasons.append(Reason(FAIL, "host_mount_full", f"{want.path} has {free:.1f}% free "
                                      f"({have.blocks_avail * have.block_size // 2**20} MiB), at least "
                                      f"{want.min_free_pct:g}% required"))
        if want.min_free_inodes_pct is not None and have.inodes:  # 0 inodes: a filesystem without counts
            free = _pct(have.inodes_free, have.inodes)
            if free < want.min_free_inodes_pct:
                reasons.append(Reason(FAIL, "host_mount_inodes", f"{want.path} has {free:.1f}% of its inodes "
                                      f"free ({have.inodes_free}), at least {want.min_free_inodes_pct:g}% required"))
    return reasons


def cmdline_words(cmdline: str) -> dict[str, str | None]:
    """key -> value of the last word with that key (None for a bare flag), as
    the kernel reads its parameters: a later word overrides an earlier one.
    Double quotes group a value with spaces (``foo="a b"``)."""
    words, word, quoted = [], "", False
    for ch in cmdline.strip():
        if ch == '"':
            quoted = not quoted
        elif ch.isspace() and not quoted:
            if word:
                words.append(word)
            word = ""
        else:
            word += ch
    if word:
        words.append(word)
    out: dict[str, str | None] = {}
    for w in words:
        key, sep, value = w.partition("=")
        out[key] = value if sep else None
    return out


def check_kernel(reading: BaselineReading, policy: BaselinePolicy) -> list[Reason]:
    reasons = []
    if policy.modules:
        if reading.modules is None:
            reasons.append(_unreadable("the kernel modules", "/sys/module"))
        else:
            have = set(reading.modules)
            missing = [m for m in policy.modules if m.replace("-", "_") not in have]
            if missing:
                reasons.append(Reason(FAIL, "host_module_missing", f"kernel modules not loaded: {', '.join(missing)}"))
    if policy.cmdline:
        if reading.cmdline is None:
            reasons.append(_unreadable("the kernel command line", "/proc/cmdline"))
        else:
            have = cmdline_words(reading.cmdline)
            for word in policy.cmdline:
                key, sep, value = word.partition("=")
                if key not in have:
                    reasons.append(Reason(FAIL, "host_cmdline", f"the kernel command line lacks {word}"))
                elif (value if sep else None) != have[key]:
                    now = key if have[key] is None else f"{key}={have[key]}"
                    reasons.append(Reason(FAIL, "host_cmdline", f"the kernel command line has {now}, expected {word}"))
    for name, want in policy.sysctl:
        have = reading.sysctl.get(name)
        if have is None:
            reasons.append(_unreadable(f"sysctl {name}", f"/proc/sys/{name.replace('.', '/')}"))
        elif have.split() != want.split():
            reasons.append(Reason(FAIL, "host_sysctl", f"sysctl {name} is {have.strip()!r}, expected {want!r}"))
    if policy.clocksource is not None:
        if reading.clocksource is None:
            reasons.append(_unreadable("the clocksource",
                                       "/sys/devices/system/clocksource/clocksource0/current_clocksource"))
        elif reading.clocksource != policy.clocksource:
            reasons.append(Reason(WARN, "host_clocksource", f"clocksource {reading.clocksource}, expected "
                                  f"{policy.clocksource}"))
    return reasons


def kernel_number(release: str) -> str:
    """``5.15.0-1061-azure`` -> ``5.15.0-1061``: the release up to its first word."""
    parts = []
    for part in release.strip().replace("_", "-").split("-"):
        if not part.replace(".", "").isdigit():
            break
        parts.append(part)
    return "-".join(parts)


def _pin(code: str, what: str, need: str | None, have: str | None, shown: str | None, source: str) -> list[Reason]:
    """``code`` where ``have`` is older than the pin ``need``; UNKNOWN where it was not read or is no number."""
    if need is None:
        return []
    if not have:
        return [_unreadable(f"the {what} version", source)]
    order = compare_versions(have, need)
    if order is None:
        return [Reason(UNKNOWN, "host_baseline_unreadable", f"the {what} version {shown!r} is not a version "
                       f"number to compare with {need}")]
    return [Reason(FAIL, code, f"{what} {shown} is older than the {need} required")] if order < 0 else []


def check_versions(reading: BaselineReading, policy: BaselinePolicy) -> list[Reason]:
    kernel = kernel_number(reading.kernel) if reading.kernel else None
    reasons = [*_pin("host_kernel_version", "kernel", policy.kernel_min, kernel, reading.kernel,
                     "/proc/sys/kernel/osrelease"),
               *_pin("host_cuda_version", "CUDA", policy.cuda_min, reading.cuda, reading.cuda,
                     "/usr/local/cuda/version.json or version.txt"),
               *_pin("host_nccl_version", "NCCL", policy.nccl_min, reading.nccl, reading.nccl,
                     "libnccl.so.2 (ldconfig -p)")]
    if policy.ofed_min is not None and reading.ofed_missing:
        reasons.append(Reason(FAIL, "host_ofed_version", f"no MLNX_OFED/DOCA-OFED (no ofed_info: the upstream "
                              f"stack), {policy.ofed_min} or newer required"))
    else:
        reasons += _pin("host_ofed_version", "MLNX_OFED/DOCA-OFED", policy.ofed_min, reading.ofed, reading.ofed,
                        "ofed_info -s")
    return reasons


def kept(reading: BaselineReading, policy: BaselinePolicy) -> BaselineReading:
    """``reading`` with only the mounts and modules ``policy`` asks about: what a verdict keeps and
    prints (a container host's mount table runs to hundreds of lines, every check's JSON would carry it)."""
    from dataclasses import replace

    wanted = {m.path for m in policy.mounts}
    names = {m.replace("-", "_") for m in policy.modules}
    return replace(reading,
                   mounts=None if reading.mounts is None else [m for m in reading.mounts if m.path in wanted],
                   modules=None if reading.modules is None else [m for m in reading.modules if m in names])


def check_baseline(reading: BaselineReading | None, policy: BaselinePolicy | None) -> list[Reason]:
    """Every baseline reason of the node; none when nothing is judged."""
    if policy is None or reading is None:
        return []
    if reading.error is not None:
        return [Reason(UNKNOWN, "host_baseline_unreadable", f"the host baseline is not known: {reading.error}")]
    return [*check_cpus(reading.cpu, policy), *check_memory(reading, policy), *check_mounts(reading, policy),
            *check_kernel(reading, policy), *check_versions(reading, policy)]
