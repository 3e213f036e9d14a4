"""The NIC firmware audit on this node: query each compute NIC, store.

``mlxconfig`` (or ``mstconfig``) takes seconds per device, so it runs in the
health check (``ccrhost check --refresh-nic``), the deploy and sweeps, never
in the prolog: each NIC's reading is stored as an active-check result
(``ccrhost.node.active``, the same state file and runner as the all-reduce
gate) with its time, and every path judges the stored reading and its age
(``ccrhost.model.nicfw.check_nic_firmware``).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from ccrhost.model.nicfw import CHECK, NicFwReading
from ccrhost.node import active

if TYPE_CHECKING:
    from ccrhost.model.active import ActiveResult
    from ccrhost.model.nicfw import NicFirmware

# Only the health check and the deploy query and store (the probes are
# imported there); the prolog's check reads the stored results alone.


def result(nic: NicFirmware, valid_for: float, now: float) -> ActiveResult:
    """One NIC's stored result: its status says whether it was read (the
    verdict on the values is made when it is judged, against the profile
    of that time)."""
    from ccrhost.model.active import ActiveResult
    from ccrhost.model.plain import plain
    from ccrhost.model.status import OK, UNKNOWN

    status, code = (OK, None) if not (nic.missing or nic.error) else \
        (UNKNOWN, "nic_fw_tool_missing" if nic.missing else "nic_fw_unreadable")
    message = "read" if status == OK else (nic.error or "neither mlxconfig nor mstconfig is installed")
    return ActiveResult(CHECK, nic.device, status, code, message, now, valid_for, data=plain(nic))


def bdf_of(device: str, sys: str = "/sys") -> str | None:
    path = os.path.realpath(f"{sys}/class/infiniband/{device}/device")
    name = os.path.basename(path)
    return name if ":" in name else None


def query(devices: list[str], run=None, which=None, firmware: bool = True,
          optics: bool = False) -> list[NicFirmware]:
    """Each RDMA device's firmware settings (and with ``optics`` its module
    and BER), through the first tool found."""
    import shutil

    from ccrhost.model.nicfw import NicFirmware
    from ccrhost.probes import mlxlink
    from ccrhost.probes import nicfw as probe

    which = which or shutil.which

    run = run or active.run_tool
    tool = next((t for t in probe.TOOLS if which(t)), None)
    link = next((t for t in mlxlink.TOOLS if which(t)), None)
    out = []
    for device in devices:
        bdf = bdf_of(device)
        if not firmware:
            nic = NicFirmware(device, bdf, tool)
        elif tool is None or bdf is None:
            nic = probe.reading(device, bdf, tool, "", None, missing=tool is None)
        else:
            ran = run([tool, "-d", bdf, "-e", "q"], probe.DEADLINE)
            nic = probe.reading(device, bdf, tool, ran.output, ran.rc, missing=bool(ran.missing),
                                timed_out=ran.timed_out)
        if optics:
            if link is None or bdf is None:
                nic = probe.link_reading(nic, link, "", None, missing=link is None)
            else:
                ran = run([link, "-d", bdf, "-m", "-c"], probe.DEADLINE)
                nic = probe.link_reading(nic, link, ran.output, ran.rc, missing=bool(ran.missing),
                                         timed_out=ran.timed_out)
        out.append(nic)
    return out


def run_and_store(path: str, devices: list[str], valid_for: float, run=None, clock=time.time,
                  which=None, firmware: bool = True, optics: bool = False) -> list[ActiveResult]:
    now = clock()
    results = [result(nic, valid_for, now) for nic in query(devices, run, which, firmware, optics)]
    active.store(path, results)
    return results


def stored_reading(path: str, clock=time.time) -> NicFwReading:
    """What every path judges: the stored results and their age, never a new query."""
    now = clock()
    stored, error = active.read_stored(path, (CHECK,), now)
    return NicFwReading(now, {r.mode: r.to_dict() for r in stored.values()}, error)
