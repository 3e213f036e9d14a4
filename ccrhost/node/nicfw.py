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


# The budget (``ccrhost check --budget``): a NIC's query starts only with this
# many seconds per tool left, beyond RESERVE for judging and the drain after it.
PER_TOOL = 5
RESERVE = 5


def query(devices: list[str], run=None, which=None, firmware: bool = True,
          optics: bool = False, deadline: float | None = None, monotonic=time.monotonic,
          skipped: list[str] | None = None) -> list[NicFirmware]:
    """Each RDMA device's firmware settings (and with ``optics`` its module
    and BER), through the first tool found. ``deadline`` (a ``monotonic``
    time): a device whose tools cannot finish before it is not queried, nor
    is one whose query the deadline cut short; both are added to ``skipped``
    and left out, so their stored readings stay."""
    import shutil

    from ccrhost.model.nicfw import NicFirmware
    from ccrhost.probes import mlxlink
    from ccrhost.probes import nicfw as probe

    which = which or shutil.which

    run = run or active.run_tool
    tool = next((t for t in probe.TOOLS if which(t)), None)
    link = next((t for t in mlxlink.TOOLS if which(t)), None)
    tools = int(bool(firmware and tool)) + int(bool(optics and link))
    out = []
    for device in devices:
        bdf = bdf_of(device)
        left = None if deadline is None else deadline - monotonic() - RESERVE
        if left is not None and bdf is not None and tools and left < PER_TOOL * tools:
            if skipped is not None:
                skipped.append(device)
            continue
        limit = probe.DEADLINE if left is None else min(probe.DEADLINE, left)
        cut = False  # the budget, not the tool's own deadline, ended a query
        if not firmware:
            nic = NicFirmware(device, bdf, tool)
        elif tool is None or bdf is None:
            nic = probe.reading(device, bdf, tool, "", None, missing=tool is None)
        else:
            ran = run([tool, "-d", bdf, "-e", "q"], limit)
            cut = ran.timed_out and limit < probe.DEADLINE
            nic = probe.reading(device, bdf, tool, ran.output, ran.rc, missing=bool(ran.missing),
                                timed_out=ran.timed_out)
        if optics and not cut:
            if link is None or bdf is None:
                nic = probe.link_reading(nic, link, "", None, missing=link is None)
            else:
                if left is not None:
                    limit = max(1.0, min(probe.DEADLINE, deadline - monotonic() - RESERVE))
                ran = run([link, "-d", bdf, "-m", "-c"], limit)
                cut = ran.timed_out and limit < probe.DEADLINE
                nic = probe.link_reading(nic, link, ran.output, ran.rc, missing=bool(ran.missing),
                                         timed_out=ran.timed_out)
        if cut:
            if skipped is not None:
                skipped.append(device)
            continue
        out.append(nic)
    return out


def run_and_store(path: str, devices: list[str], valid_for: float, run=None, clock=time.time,
                  which=None, firmware: bool = True, optics: bool = False, deadline: float | None = None,
                  monotonic=time.monotonic, skipped: list[str] | None = None) -> list[ActiveResult]:
    now = clock()
    results = [result(nic, valid_for, now) for nic in query(devices, run, which, firmware, optics, deadline,
                                                             monotonic, skipped)]
    active.store(path, results)
    return results


def stored_reading(path: str, clock=time.time) -> NicFwReading:
    """What every path judges: the stored results and their age, never a new query."""
    now = clock()
    stored, error = active.read_stored(path, (CHECK,), now)
    return NicFwReading(now, {active.mode_of(k, d): d for k, d in stored.items()}, error)
