"""The wiring reading on this node: probe, store, read back by age.

The neighbour queries are MAD round trips and an lldpd query (each bounded
by its own timeout), and the cabling changes only when someone recables:
as the NIC firmware audit (``ccrhost.node.nicfw``), the reading is stored
as an active-check result (``ccrhost.node.active``'s state file) with its
time and ``wiring_valid_for``, and every path judges the stored reading and
its age (``ccrhost.model.wiring.check_stored_wiring``); a stale one is
UNKNOWN, never its old neighbours. The health check (``ccrhost check
--refresh-nic``) reads it again when :func:`due`; the prolog never does.
"""

from __future__ import annotations

import time

from ccrhost.model.active import ActiveResult
from ccrhost.model.plain import plain
from ccrhost.model.status import OK, UNKNOWN
from ccrhost.model.wiring import CHECK, StoredWiring, WiringReading, reading_from_dict
from ccrhost.node import active

MODE = "node"  # one reading per node: the key is wiring/node


def result(reading: WiringReading, valid_for: float, now: float) -> ActiveResult:
    """The stored result: its status says only whether it was read; the
    verdict on the neighbours is made when it is judged, against the plan
    of that time."""
    status, code = (OK, None) if reading.error is None else (UNKNOWN, "wiring_unreadable")
    message = "read" if reading.error is None else reading.error
    return ActiveResult(CHECK, MODE, status, code, message, now, valid_for, data=plain(reading))


def run_and_store(path: str, valid_for: float, devices: tuple[str, ...] = (), read=None,
                  clock=time.time) -> ActiveResult:
    """Probe (``read``: the probe's ``read_local``) and store."""
    if read is None:
        from ccrhost.probes.wiring import read_local as read
    stored = result(read(devices), valid_for, clock())
    active.store(path, [stored])
    return stored


def stored_reading(path: str, clock=time.time) -> StoredWiring:
    """What every path judges: the stored result and the time it is read back, never a new probe."""
    now = clock()
    stored, error = active.read_stored(path, (CHECK,), now)
    return StoredWiring(now, stored.get(f"{CHECK}/{MODE}"), error)


def due(path: str, valid_for: float, clock=time.time) -> bool:
    """Read again: none stored, the last read failed, past half its validity
    (so a reading is renewed before the prolog would find it stale), or a
    reading with any port not fully read or without a neighbour (lldpd not up
    yet at boot, a cable being fixed): such a node is read at every health
    check until its reading is whole, a good one only as its age asks."""
    stored = stored_reading(path, clock)
    if stored.error or stored.result is None:
        return True
    try:
        result = ActiveResult.from_dict(stored.result)
        reading = reading_from_dict(result.data or {})
    except (ValueError, TypeError):
        return True
    age = result.age(stored.read_at)
    return result.status != OK or age >= valid_for / 2 or age < 0 or not whole(reading)


def whole(reading: WiringReading) -> bool:
    """Every port read, and each with a neighbour."""
    return (reading.error is None and reading.lldp_error is None
            and all(n.error is None and n.neighbours for n in reading.nics.values()
                    if n.link_layer in ("Ethernet", "InfiniBand")))
