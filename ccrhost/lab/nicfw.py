"""Each lab NIC's emulated firmware configuration (what ``mlxconfig`` reads
and writes), kept on the node's disk so it survives reboots as a NIC's flash does.

State per NIC, ``<node dir>/firmware/<bdf>.marshal``: the parameter table
(name, aliases, range, factory default), and the Current and Next Boot
values. The shims (``shims/labfw.py``: ``mlxconfig``, ``mstconfig``) read and
write it; a set writes Next Boot; a boot (:func:`prepare`, from
``ccrhost lab reboot`` and the lab slurmd's RebootProgram) makes Next Boot
Current. Parameter names and value forms are mlxconfig's
(shared/reference/active-checks.md §3); the set is a subset of a ConnectX-7's.
"""

from __future__ import annotations

import marshal
from pathlib import Path

from ccrhost.lab.profile import Fault, ProfileError

BOOL = {"False": 0, "True": 1}
# name -> (aliases or None for a number, lowest, highest, factory default)
PARAMS: dict[str, tuple[dict | None, int, int, int]] = {
    "SRIOV_EN": (BOOL, 0, 1, 0),
    "NUM_OF_VFS": (None, 0, 127, 0),
    "LINK_TYPE_P1": ({"IB": 1, "ETH": 2}, 1, 2, 2),
    "ROCE_CC_PRIO_MASK_P1": (None, 0, 255, 255),
    "CNP_802P_PRIO_P1": (None, 0, 7, 6),
    "CNP_DSCP_P1": (None, 0, 63, 48),
    "PCI_WR_ORDERING": ({"per_mkey": 0, "force_relax": 1}, 0, 1, 0),
    "ATS_ENABLED": (BOOL, 0, 1, 0),
    "ADVANCED_PCI_SETTINGS": (BOOL, 0, 1, 0),
    "MAX_ACC_OUT_READ": (None, 0, 255, 0),  # listed only while ADVANCED_PCI_SETTINGS is on
    # wider than mlxconfig's value column: printed with a single space before the next (mlxconfig_host.db)
    "PCI_ATOMIC_MODE": ({"PCI_ATOMIC_DISABLED_EXT_ATOMIC_ENABLED": 0,
                         "PCI_ATOMICS_ENABLED_EXT_ATOMICS_ENABLED_SERIALIZED": 1,
                         "PCI_ATOMICS_ENABLED_EXT_ATOMICS_DISABLED": 2,
                         "PCI_ATOMICS_ENABLED_EXT_ATOMICS_ENABLED_NONCOHERENT": 3,
                         "PCI_ATOMICS_ENABLED_EXT_ATOMICS_ENABLED": 4}, 0, 4, 0),
}
# A lab node's NICs were configured at install the way the operator's profile
# wants (ADVANCED_PCI_SETTINGS on); every other value is the factory default.
INSTALLED = {"ADVANCED_PCI_SETTINGS": 1}
# The faults' defaults: one reason each.
WRONG_DEFAULT = ("MAX_ACC_OUT_READ", 64)
PENDING_DEFAULT = ("MAX_ACC_OUT_READ", 128)


def parse_value(name: str, text: str) -> int:
    """A value as ``mlxconfig set`` takes it: a number or an alias."""
    if name not in PARAMS:
        raise ProfileError(f"unknown firmware parameter {name!r}; known: {', '.join(PARAMS)}")
    aliases, lo, hi, _ = PARAMS[name]
    by_alias = {k.lower(): v for k, v in (aliases or {}).items()}
    if text.lower() in by_alias:
        return by_alias[text.lower()]
    if text.isdigit() and lo <= int(text) <= hi:
        return int(text)
    raise ProfileError(f"{name}={text}: allowed {', '.join(aliases) if aliases else f'{lo}..{hi}'}")


def _fault_target(fault: Fault, nics: list[dict], default: tuple[str, int]) -> tuple[str, str, int]:
    """``[DEV[:PARAM=VALUE]]`` -> (bdf, param, value); the first NIC by default."""
    dev, _, setting = (fault.value or "").partition(":")
    nic = next((n for n in nics if n["name"] == dev), None) if dev else next(iter(nics), None)
    if nic is None or not nic.get("pci"):
        raise ProfileError(f"fault {fault}: no NIC named {dev!r} with a PCI function")
    if not setting:
        return nic["pci"], default[0], default[1]
    name, eq, text = setting.partition("=")
    if not eq:
        raise ProfileError(f"fault {fault}: expected [DEV[:PARAM=VALUE]]")
    return nic["pci"], name, parse_value(name, text)


def state_path(ndir: Path, bdf: str) -> Path:
    return ndir / "firmware" / f"{bdf}.marshal"


def prepare(ndir: Path, nics: list[dict], faults: list[Fault]) -> None:
    """At power-on: a NIC seen for the first time gets its installed state
    (with the ``nicfw_wrong`` and ``nicfw_pending`` faults); a NIC already
    known loads its Next Boot values, which become Current."""
    changes: dict[str, list[tuple[str, str, int]]] = {}
    for f in faults:  # every value validated before any file is written
        if f.kind in ("nicfw_wrong", "nicfw_pending"):
            bdf, name, value = _fault_target(f, nics, WRONG_DEFAULT if f.kind == "nicfw_wrong" else PENDING_DEFAULT)
            changes.setdefault(bdf, []).append((f.kind, name, value))
    for nic in nics:
        bdf = nic.get("pci")
        if not bdf:
            continue  # an EFA device: no ConnectX firmware
        path = state_path(ndir, bdf)
        if path.exists():
            state = marshal.loads(path.read_bytes())
            state["current"] = dict(state["next"])
        else:
            values = {name: spec[3] for name, spec in PARAMS.items()}
            values.update(INSTALLED)
            values["LINK_TYPE_P1"] = 2 if nic.get("ethernet") else 1
            state = {"params": {name: list(spec[:3]) + [spec[3]] for name, spec in PARAMS.items()},
                     "current": dict(values), "next": dict(values)}
            for kind, name, value in changes.get(bdf, []):
                state["next"][name] = value
                if kind == "nicfw_wrong":
                    state["current"][name] = value
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(marshal.dumps(state))


def read_state(ndir: Path, bdf: str) -> dict | None:
    """A NIC's firmware state (for tests: what the tool wrote)."""
    path = state_path(ndir, bdf)
    return marshal.loads(path.read_bytes()) if path.exists() else None
