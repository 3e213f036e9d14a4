"""Host health: pure judges of the node's services, clock, memory errors,
kernel log, leftover GPU work and memlock (issue 47; docs/host-health.md).

The readings come from probes/host_health.py (one read in the node's
snapshot) and, for the kernel log, from the GPU health probe's one read of
it (probes/gpu_health.py keeps the lines these patterns match). What could
not be read is UNKNOWN with its own code, never a pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ccrhost.model.status import FAIL, UNKNOWN, WARN, Reason


@dataclass
class Unit:
    """One unit as ``systemctl show -p Id,LoadState,ActiveState,SubState,NRestarts,LimitMEMLOCK`` prints it."""
    name: str                    # the name asked for (Id= is the unit's own, with its suffix)
    load: str | None = None      # LoadState=: loaded, not-found, masked, error
    active: str | None = None    # ActiveState=: active, reloading, inactive, failed, activating, deactivating
    sub: str | None = None       # SubState=: running, dead, failed, auto-restart, ...
    restarts: int | None = None  # NRestarts= (services; systemd 235 on): automatic restarts since loaded
    memlock: str | None = None   # LimitMEMLOCK=: bytes, or "infinity"


@dataclass
class UnitsReading:
    units: dict[str, Unit] = field(default_factory=dict)  # asked name -> unit
    error: str | None = None                              # why systemctl could not be read
    # the restart counts the last reading kept (host_health_state), this boot; None: none kept
    previous: dict[str, int] | None = None
    note: str | None = None                               # why the previous reading was not used or kept


@dataclass
class TimeSync:
    source: str | None = None          # "chrony" (chronyc tracking) | "timesyncd" (timedatectl show)
    synchronised: bool | None = None   # None: neither answered
    detail: str | None = None          # the line it says so in ("Leap status : Not synchronised")
    error: str | None = None           # why neither could be read


@dataclass
class Edac:
    """/sys/devices/system/edac/mc/mc*/ce_count and ue_count."""
    controllers: dict[str, tuple[int, int]] = field(default_factory=dict)  # "mc0" -> (corrected, uncorrected)
    error: str | None = None  # no EDAC memory controller (driver not loaded), or a file that is no count


@dataclass
class KernelEvent:
    """Kernel-log lines of one fatal pattern, merged: their count and the latest."""
    kind: str                 # a key of PATTERNS
    count: int
    age_s: float | None       # the latest line's age; None: the log gives no time
    text: str                 # the latest line (its time stamp cut)


@dataclass
class GpuProcess:
    bus_id: str   # --query-compute-apps gpu_bus_id
    pid: int
    name: str
    memory: str   # as nvidia-smi prints it ("1024 MiB")


@dataclass
class GpuUse:
    """GPU memory and compute processes, read only where the node is known idle."""
    idle: str | None = None          # why it is known idle ("the prolog", "Slurm: State=IDLE"); None: not known
    job_gpus: tuple[int, ...] | None = None  # the prolog's SLURM_JOB_GPUS: only these are the job's to find idle
    memory_mib: dict[int, tuple[str, int]] = field(default_factory=dict)  # index -> (pci.bus_id, memory.used MiB)
    processes: list[GpuProcess] = field(default_factory=list)
    error: str | None = None         # why they could not be read on an idle node


@dataclass
class Memlock:
    prolog: bool = False             # read inside slurmd's prolog (SLURM_SCRIPT_CONTEXT=prolog_slurmd)
    own_kib: int | None = None       # ulimit -l there (soft): the prolog's, so the job's; None: unlimited
    error: str | None = None         # why the own limit could not be read


@dataclass
class HostHealthReading:
    units: UnitsReading = field(default_factory=UnitsReading)
    time: TimeSync = field(default_factory=TimeSync)
    edac: Edac = field(default_factory=Edac)
    gpu_use: GpuUse = field(default_factory=GpuUse)
    memlock: Memlock = field(default_factory=Memlock)
    error: str | None = None  # the whole probe's output could not be read


# The kernel log's fatal lines: kind -> (level, code, regular expression, what it is). Formats:
# kernel/watchdog.c "BUG: soft lockup - CPU#%d stuck for %us! [%s:%d]" (pr_fmt "watchdog: "; newer
# kernels "... for %u seconds!"); kernel/hung_task.c "INFO: task %s:%d blocked for more than %ld
# seconds."; mm/oom_kill.c "Out of memory: Killed process %d (%s) ..." (a memory cgroup's own OOM,
# "Memory cgroup out of memory: Killed process", is the job's limit, not the node's); fs/buffer.c
# "Buffer I/O error on dev %pg, logical block %llu, ..."; drivers/nvme/host/pci.c "I/O %d QID %d
# timeout, reset controller"; ext4 "Remounting filesystem read-only" (leptonai/gpud kmsg matchers).
PATTERNS = {
    "soft_lockup": (r"BUG: soft lockup - CPU#\d+ stuck for", "a soft lockup"),
    "hung_task": (r"INFO: task \S+ blocked for more than \d+ seconds", "a hung task"),
    "oom_kill": (r"(?<!cgroup )[Oo]ut of memory: Killed process \d+", "an OOM kill"),
    "io_error": (r"Buffer I/O error on dev |nvme\d*\S*: I/O (?:tag )?\d+ .*QID \d+ timeout, reset controller",
                 "an I/O error"),
    "fs_readonly": (r"Remounting filesystem read-only", "a filesystem remounted read-only"),
}


def _kernel_reason(kind: str, message: str) -> Reason:
    """Each kind's own code and level (literals, for tests/test_reasons.py's scan)."""
    if kind == "soft_lockup":
        return Reason(FAIL, "host_kernel_soft_lockup", message)
    if kind == "hung_task":
        return Reason(WARN, "host_kernel_hung_task", message)
    if kind == "oom_kill":
        return Reason(WARN, "host_kernel_oom_kill", message)
    if kind == "io_error":
        return Reason(FAIL, "host_kernel_io_error", message)
    return Reason(FAIL, "host_kernel_fs_readonly", message)


# what the log probe greps for (extended regular expression, no quote): the patterns' common words
LOG_GREP = ("soft lockup - CPU#|blocked for more than [0-9]+ seconds|ut of memory: Killed process"
            "|Buffer I/O error on dev|timeout, reset controller|Remounting filesystem read-only")
_COMPILED = {kind: re.compile(p[0]) for kind, p in PATTERNS.items()}


def match_kernel_line(text: str) -> str | None:
    """The kind of fatal line ``text`` is, or None."""
    return next((kind for kind, rx in _COMPILED.items() if rx.search(text)), None)


@dataclass(frozen=True)
class HostHealthPolicy:
    enabled: bool = True                                                      # host_health_enable
    units: tuple[str, ...] = ("slurmd",)                                      # host_health_units
    units_warn: tuple[str, ...] = ("nvidia-persistenced", "nvidia-dcgm")      # host_health_units_warn
    fabricmanager: str = "auto"                                               # host_health_fabricmanager
    restarts_max: int = 0                                                     # host_health_unit_restarts_max
    time_sync: bool = True                                                    # host_health_time_sync
    edac_corrected_warn: int = 0                                              # host_health_edac_corrected_warn
    edac_corrected_max: int = 9                                               # host_health_edac_corrected_max
    kernel_lookback_s: float | None = 24 * 3600                               # host_health_kernel_lookback_hours
    kernel_allow: tuple[str, ...] = ()                                        # host_health_kernel_allow
    idle_gpu_memory_mib: int = 15                                             # host_health_idle_gpu_memory_mib
    memlock_kib: int | None = None                                            # host_health_memlock_kib

    def watched(self, fabric: bool) -> dict[str, str]:
        """unit -> the level of its being down; ``fabric``: the GPUs report an NVLink fabric state."""
        out = {u: WARN for u in self.units_warn}
        out.update((u, FAIL) for u in self.units)
        if self.fabricmanager == "required" or (self.fabricmanager == "auto" and fabric):
            out["nvidia-fabricmanager"] = FAIL
        return out


def check_host_health(reading: HostHealthReading, policy: HostHealthPolicy, kernel: list[KernelEvent] | None,
                      kernel_error: str | None, fabric: bool = False) -> list[Reason]:
    """Every host-health reason. ``kernel``: the fatal lines of the GPU health
    probe's kernel-log read (None: not read); ``fabric``: the GPUs report an
    NVLink fabric state (NVSwitch systems need Fabric Manager)."""
    if not policy.enabled:
        return []
    if reading.error:
        return [Reason(UNKNOWN, "host_health_unreadable", f"cannot read the host's health: {reading.error}")]
    reasons = check_units(reading.units, policy, fabric)
    reasons += check_time(reading.time, policy)
    reasons += check_edac(reading.edac, policy)
    reasons += check_kernel(kernel, kernel_error, policy)
    reasons += check_gpu_use(reading.gpu_use, policy)
    reasons += check_memlock(reading.memlock, reading.units, policy)
    return reasons


def check_units(units: UnitsReading, policy: HostHealthPolicy, fabric: bool) -> list[Reason]:
    watched = policy.watched(fabric)
    if not watched:
        return []
    if units.error:
        return [Reason(UNKNOWN, "host_units_unreadable",
                       f"cannot read the state of {', '.join(watched)}: {units.error}")]
    reasons = []
    for name, level in watched.items():
        unit = units.units.get(name)
        if unit is None:
            reasons.append(Reason(UNKNOWN, "host_units_unreadable", f"systemctl printed nothing for {name}"))
            continue
        if unit.active not in ("active", "reloading"):
            state = "not found" if unit.load == "not-found" else f"{unit.active}/{unit.sub}"
            if level == FAIL:
                reasons.append(Reason(FAIL, "host_unit_inactive", f"systemd unit {name} is not active: {state}"))
            else:
                reasons.append(Reason(WARN, "host_unit_inactive_warn", f"systemd unit {name} is not active: {state}"))
        before = (units.previous or {}).get(name)
        if unit.restarts is not None and before is not None and unit.restarts - before > policy.restarts_max:
            reasons.append(Reason(WARN, "host_unit_flapping",
                                  f"systemd unit {name} restarted {unit.restarts - before} times since the last "
                                  f"reading (NRestarts {before} -> {unit.restarts}; more than "
                                  f"{policy.restarts_max} is flapping)"))
    return reasons


def check_time(sync: TimeSync, policy: HostHealthPolicy) -> list[Reason]:
    if not policy.time_sync:
        return []
    if sync.synchronised is None:
        return [Reason(UNKNOWN, "host_time_unknown",
                       f"cannot tell whether the clock is synchronised: {sync.error or 'neither chrony nor timesyncd'}")]
    if not sync.synchronised:
        return [Reason(WARN, "host_time_unsynced", f"the clock is not synchronised ({sync.source}: {sync.detail})")]
    return []


def check_edac(edac: Edac, policy: HostHealthPolicy) -> list[Reason]:
    if edac.error:
        return [Reason(UNKNOWN, "host_edac_unreadable", f"cannot read the memory error counts: {edac.error}")]
    ce = sum(c for c, _ in edac.controllers.values())
    ue = sum(u for _, u in edac.controllers.values())
    per = ", ".join(f"{mc} {c}/{u}" for mc, (c, u) in sorted(edac.controllers.items()) if c or u)
    reasons = []
    if ue:
        reasons.append(Reason(FAIL, "host_edac_uncorrected", f"{ue} uncorrected memory errors (EDAC corrected/"
                                                             f"uncorrected: {per})"))
    if ce > policy.edac_corrected_max:
        reasons.append(Reason(FAIL, "host_edac_corrected_high", f"{ce} corrected memory errors, more than "
                                                                f"{policy.edac_corrected_max} (EDAC: {per})"))
    elif ce > policy.edac_corrected_warn:
        reasons.append(Reason(WARN, "host_edac_corrected", f"{ce} corrected memory errors, more than "
                                                           f"{policy.edac_corrected_warn} (EDAC: {per})"))
    return reasons


def check_kernel(events: list[KernelEvent] | None, error: str | None, policy: HostHealthPolicy) -> list[Reason]:
    if events is None:
        return []
    if error:
        return [Reason(UNKNOWN, "host_kernel_unreadable", f"cannot read the kernel log's fatal lines: {error}")]
    allow = [re.compile(p) for p in policy.kernel_allow]
    reasons = []
    for e in events:
        if any(rx.search(e.text) for rx in allow):
            continue
        if policy.kernel_lookback_s is not None and e.age_s is not None and e.age_s > policy.kernel_lookback_s:
            continue
        ago = f"{e.age_s:.0f} s ago" if e.age_s is not None else "this boot"
        times = f"{e.count} times, latest" if e.count > 1 else "once,"
        reasons.append(_kernel_reason(e.kind, f"the kernel logged {PATTERNS[e.kind][1]} {times} {ago}: {e.text[:200]}"))
    return reasons


def check_gpu_use(use: GpuUse, policy: HostHealthPolicy) -> list[Reason]:
    if use.idle is None:
        return []
    if use.error:
        return [Reason(UNKNOWN, "host_gpu_use_unreadable",
                       f"cannot read GPU memory and processes on an idle node ({use.idle}): {use.error}")]
    mine = set(use.job_gpus) if use.job_gpus is not None else None
    reasons = []
    for index, (bus, mib) in sorted(use.memory_mib.items()):
        if mine is not None and index not in mine:
            continue
        procs = [p for p in use.processes if p.bus_id.lower().endswith(bus.lower()[-12:])]
        if mib <= policy.idle_gpu_memory_mib and not procs:
            continue
        held = ", ".join(f"pid {p.pid} {p.name} ({p.memory})" for p in procs[:3]) or "no process listed"
        reasons.append(Reason(FAIL, "host_gpu_leftover",
                              f"GPU {index} holds {mib} MiB on an idle node ({use.idle}; more than "
                              f"{policy.idle_gpu_memory_mib} MiB is a leftover process): {held}", gpu=index))
    return reasons


def check_memlock(memlock: Memlock, units: UnitsReading, policy: HostHealthPolicy) -> list[Reason]:
    want = "unlimited" if policy.memlock_kib is None else f"at least {policy.memlock_kib} KiB"
    reasons = []
    if memlock.prolog:
        if memlock.error:
            reasons.append(Reason(UNKNOWN, "host_memlock_unknown",
                                  f"cannot read the prolog's locked-memory limit: {memlock.error}"))
        elif _low(memlock.own_kib, policy.memlock_kib):
            reasons.append(Reason(FAIL, "host_memlock_low",
                                  f"the prolog's locked-memory limit (ulimit -l, what the job inherits) is "
                                  f"{memlock.own_kib} KiB; wanted {want}"))
    slurmd = units.units.get("slurmd")
    if units.error or slurmd is None or slurmd.load != "loaded":
        return reasons  # no slurmd under systemd: no LimitMEMLOCK that jobs inherit (its own state is judged)
    if slurmd.memlock is None:
        return reasons + [Reason(UNKNOWN, "host_memlock_unknown", "systemctl printed no LimitMEMLOCK for slurmd")]
    kib = None if slurmd.memlock == "infinity" else int(slurmd.memlock) // 1024
    if _low(kib, policy.memlock_kib):
        reasons.append(Reason(FAIL, "host_memlock_low",
                              f"slurmd's LimitMEMLOCK is {slurmd.memlock} ({kib} KiB), which its jobs inherit; "
                              f"wanted {want}"))
    return reasons


def _low(kib: int | None, wanted: int | None) -> bool:
    """``kib`` (None: unlimited) is below ``wanted`` (None: unlimited)."""
    if kib is None:
        return False
    return wanted is None or kib < wanted
