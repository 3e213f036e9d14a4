"""mlx5_core's fatal kernel-log lines: a NIC whose driver logged one needs a
reset or replacement, whatever its counters say.

Read in the same kernel-log read as the XIDs and link-down lines
(``probes.gpu_health``), judged once from ``verdict.evaluate``. Patterns are
NVSentinel's syslog health monitor's fatal NIC driver patterns (REPLACE_VM;
shared/reference/active-checks.md), its test's verbatim lines
(``mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health
compromised - reached miss count``); the driver prints them with
``mlx5_core_err`` (drivers/net/ethernet/mellanox/mlx5/core: cmd.c wait_func,
health.c poll_health and print_health_info).
"""

from __future__ import annotations

from dataclasses import dataclass

from ccrhost.model.status import FAIL, Reason

# the pattern's name (NVSentinel's ErrorCode) -> the text that gives it away
FATAL = {
    "cmd_exec_timeout": "timeout. Will cause a leak of a command resource",
    "health_poll_failed": "health compromised - reached miss count",
    "unrecoverable_err": "unrecoverable hardware error",
}
_TEXT_MAX = 160


@dataclass
class NicLogEvent:
    pci: str                # "0000:41:00.0": the function mlx5_core names at the start of the line
    kind: str               # a key of FATAL
    age_s: float | None     # seconds before the reading of the latest such line (None: it had no time)
    text: str               # the latest such line after the address, as logged
    count: int = 1          # lines of this kind for this function since boot


def check_nic_log(events: list[NicLogEvent] | None, nic_names: dict[str, str]) -> list[Reason]:
    """A FAIL per NIC function and kind: judged for the whole boot, since what
    they ask for (a reset or a new NIC) is owed until the node restarts.
    ``nic_names``: PCI function -> RDMA device, where the data path read it."""
    reasons = []
    for e in events or ():
        name = nic_names.get(e.pci)
        where = f"NIC {name} ({e.pci})" if name else f"NIC at {e.pci}"
        when = f"{e.age_s:.0f} s ago" if e.age_s is not None else "this boot"
        times = f", {e.count} times this boot" if e.count > 1 else ""
        reasons.append(Reason(FAIL, "nic_fatal_log", f"{where}: mlx5_core logged a fatal error ({e.kind}) {when}"
                              f"{times}: {e.text[:_TEXT_MAX]}"))
    return reasons
