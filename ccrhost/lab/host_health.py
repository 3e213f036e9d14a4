"""The lab's host health emulation (issue 47; docs/host-health.md): the
faults that change a node's services, clock, memory errors, kernel log,
GPU processes and memlock, and the /sys files they render. The shims
(shims/systemctl, chronyc, labkernel.host_lines, nvidia-smi) read the
same faults from the node's record, so a fault is emulated state, never a
canned answer."""

from __future__ import annotations

FAULTS = {
    "unit_down": "UNIT: that systemd unit (e.g. nvidia-fabricmanager) has failed (systemctl: ActiveState=failed)",
    "unit_flapping": "UNIT: that systemd unit restarts twice a second (systemctl: NRestarts rises)",
    "gpu_leftover": "[INDEX]: a leftover process of an earlier job holds 1024 MiB of GPU INDEX (default 0) "
                    "(nvidia-smi --query-compute-apps, memory.used)",
    "memlock_low": "[KIB]: slurmd's LimitMEMLOCK is KIB (default 8192, systemd's default 8 MiB), what its prolog "
                   "and jobs get",
    "edac_uncorrected": "[N]: memory controller mc0 counted N (default 1) uncorrected errors (EDAC ue_count)",
    "kernel_soft_lockup": "the kernel log has a soft lockup (watchdog: BUG: soft lockup - CPU#3 stuck for 23s!)",
    "time_unsynced": "chronyd is not synchronised (chronyc tracking: Leap status : Not synchronised)",
}
LIVE = tuple(FAULTS)
# the units a lab node runs (systemctl shows every other name as not-found)
UNITS = ("slurmd", "nvidia-persistenced", "nvidia-dcgm", "nvidia-fabricmanager", "chronyd", "nvidia-imex")
MEMLOCK_DEFAULT_KIB = 8192


def _values(faults, kind: str) -> list[str | None]:
    return [f.value for f in faults if f.kind == kind]


def refused(faults) -> str | None:
    """Why a value is one the emulation cannot render (lab/profile.py raises it as the other faults'), or None."""
    for kind in ("unit_down", "unit_flapping"):
        for value in _values(faults, kind):
            if value not in UNITS:
                return f"fault {kind}={value}: need a unit of the lab's nodes ({', '.join(UNITS)})"
    for kind in ("gpu_leftover", "memlock_low", "edac_uncorrected"):
        for value in _values(faults, kind):
            if value is not None and not value.isdigit():
                return f"fault {kind}={value}: need a whole number"
    return None


def sys_files(faults) -> dict[str, str]:
    """The EDAC counters under /sys (boot writes them; a live fault rewrites them)."""
    ue = sum(int(v or 1) for v in _values(faults, "edac_uncorrected"))
    files = {}
    for mc in ("mc0", "mc1"):
        files[f"devices/system/edac/mc/{mc}/ce_count"] = "0\n"
        files[f"devices/system/edac/mc/{mc}/ue_count"] = f"{ue if mc == 'mc0' else 0}\n"
    return files


def slurmd_memlock_kib(faults: list[str]) -> int | None:
    """slurmd's locked-memory limit (KiB) under the node's faults (as node records keep them:
    "KIND=VALUE" strings); None: unlimited (LimitMEMLOCK=infinity)."""
    for fault in faults:
        kind, _, value = fault.partition("=")
        if kind == "memlock_low":
            return int(value or MEMLOCK_DEFAULT_KIB)
    return None


def lab_memlock_kib() -> int | None:
    """The locked-memory limit (KiB) the lab machine can give its slurmd and
    prologs: its own hard limit, which a sandboxed root cannot raise (8 MiB on
    the CI machines); None: unlimited. The lab's settings expect it
    (host_health_memlock_kib), so a lab node is not failed for its machine."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    return None if hard == resource.RLIM_INFINITY else hard // 1024
