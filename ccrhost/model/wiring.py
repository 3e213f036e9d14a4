"""The fabric's wiring on one node: each compute NIC's first-hop neighbour
(the leaf switch and its port) against the site's fabric plan, two rails on
one leaf, the site's P_Key on InfiniBand ports and the RoCE v2 GID at the
configured index (issue 48).

Pure. The probe (``ccrhost.probes.wiring``) fills :class:`WiringReading`
from ``lldpctl -f json`` (Ethernet), ``smpquery -D`` over the direct route
``0,<port>`` (InfiniBand) and sysfs; the runner (``ccrhost.node.wiring``)
stores it as an active-check result with its time, as the NIC firmware
audit does, and :func:`check_stored_wiring` judges the stored reading and
its age. What could not be read is UNKNOWN, never a pass.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from ccrhost.model.active import ActiveResult, stale_message
from ccrhost.model.ports import natural_key
from ccrhost.model.status import FAIL, UNKNOWN, Reason

CHECK = "wiring"  # the active-check name the reading is stored under (ActiveResult.check)
ROCE_V2 = "RoCE v2"  # gid_attrs/types/<i> (drivers/infiniband/core/cache.c gid_type_str)


@dataclass(frozen=True)
class Neighbour:
    """The far end of one NIC port's cable, as LLDP or the SMP NodeInfo says."""
    source: str                 # "lldp" | "ib"
    name: str | None = None     # LLDP chassis SysName; IB NodeDescription of the switch
    guid: str | None = None     # IB node GUID ("0x" and 16 hex digits); LLDP chassis id value
    port: str | None = None     # LLDP port id value ("swp12", "Ethernet48"); IB NodeInfo LocalPort ("17")
    node_type: str | None = None  # IB NodeType ("Switch", "Channel Adapter"); None for LLDP

    @property
    def leaf(self) -> str:
        """The switch as a person names it: its name, else its GUID or chassis id."""
        return self.name or self.guid or "?"

    def port_number(self) -> int | None:
        """The port's number: IB LocalPort, or the number of an LLDP port name: ``swp12`` and a
        breakout's ``swp12s2`` are 12 (Cumulus), ``Ethernet48`` 48 (SONiC), else the last digit run."""
        name = self.port or ""
        m = re.fullmatch(r"(?:swp|eth|Ethernet)(\d+)(?:s\d+)?", name)
        found = [m.group(1)] if m else re.findall(r"[0-9]+", name)
        return int(found[-1]) if found else None


@dataclass
class NicWiring:
    """One compute NIC port: what sysfs says of it and its neighbour(s)."""
    device: str                             # /sys/class/infiniband/<device>
    port: int
    link_layer: str | None = None           # ports/<n>/link_layer
    netdev: str | None = None               # device/net/<if> (RoCE: where LLDP is read)
    neighbours: list[Neighbour] = field(default_factory=list)
    error: str | None = None                # why its neighbour could not be read (query failed)
    pkeys: list[int] | None = None          # ports/<n>/pkeys/* (non-zero); None: not read
    gids: dict[int, tuple[str, str | None]] = field(default_factory=dict)  # index -> (gid, type)
    node_guid: str | None = None            # /sys/class/infiniband/<dev>/node_guid, "0x" + 16 hex digits
    lid: int | None = None                  # ports/<n>/lid
    sm_lid: int | None = None               # ports/<n>/sm_lid
    sm: SmInfo | None = None                # sminfo over this port, where read
    state: str | None = None                # ports/<n>/state: "ACTIVE", "DOWN", ... (None: not read)


@dataclass(frozen=True)
class SmInfo:
    """``sminfo``'s one line (infiniband-diags sminfo.c)."""
    lid: int
    guid: str
    priority: int
    state: str    # "SMINFO_MASTER", "SMINFO_STANDBY", ...


@dataclass
class WiringReading:
    nics: dict[str, NicWiring] = field(default_factory=dict)  # "device/port" -> its reading
    lldp_error: str | None = None   # lldpctl missing, lldpd not running, or output it never prints
    error: str | None = None        # the whole probe's output could not be read


# -- the plan ---------------------------------------------------------------------

@dataclass(frozen=True)
class RailPlan:
    """Where one rail's NIC must be cabled (one entry of ``wiring_rails``)."""
    leaf: str | None = None              # fnmatch pattern of the leaf's name
    guids: tuple[str, ...] = ()          # or the leaf's node GUIDs (IB) / chassis ids (LLDP), lower case
    ports: tuple[int, int] | None = None  # the leaf ports it may use, inclusive

    def describe(self) -> str:
        where = f"leaf {self.leaf}" if self.leaf else f"leaf GUID {' or '.join(self.guids)}"
        return where + (f" port {self.ports[0]}-{self.ports[1]}" if self.ports else "")

    def leaf_matches(self, n: Neighbour) -> bool:
        if self.leaf is not None:
            return n.name is not None and fnmatch.fnmatchcase(n.name, self.leaf)
        ids = {g.lower() for g in self.guids}
        return bool(n.guid and n.guid.lower() in ids)

    def port_matches(self, n: Neighbour) -> bool:
        if self.ports is None:
            return True
        number = n.port_number()
        return number is not None and self.ports[0] <= number <= self.ports[1]


@dataclass(frozen=True)
class WiringPolicy:
    enabled: bool = False                 # wiring_enable
    rails: tuple[RailPlan, ...] = ()      # wiring_rails, by rail index
    distinct_leaves: bool = True          # wiring_distinct_leaves
    pkey: int | None = None               # wiring_pkey (0x8000 set: full membership asked)
    gid_index: int | None = None          # wiring_gid_index


def compute_nics(ports: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The compute NIC ports in rail order: by device name as people sort
    them (mlx5_2 before mlx5_10), then port; ``ports`` are the node's
    compute ports (the verdict's, EFA and rdma_exclude_devices left out)."""
    return sorted(set(ports), key=lambda dp: (natural_key(dp[0]), dp[1]))


def _where(nic: NicWiring) -> str:
    return f"NIC {nic.device} port {nic.port}" + (f" ({nic.netdev})" if nic.netdev else "")


def _found(n: Neighbour) -> str:
    return f"{n.leaf}" + (f" port {n.port}" if n.port else "")


def check_wiring(reading: WiringReading, policy: WiringPolicy, nics: list[tuple[str, int]]) -> list[Reason]:
    """Every wiring reason of one node. ``nics``: its compute NIC ports in
    rail order (:func:`compute_nics`); rail i is ``policy.rails[i]``."""
    if not policy.enabled:
        return []
    if reading.error:
        return [Reason(UNKNOWN, "wiring_unreadable", f"cannot read the fabric's wiring: {reading.error}")]
    reasons: list[Reason] = []
    leaves: dict[str, list[tuple[int, NicWiring]]] = {}
    for rail, (device, port) in enumerate(nics):
        nic = reading.nics.get(f"{device}/{port}")
        if nic is None:
            reasons.append(Reason(UNKNOWN, "wiring_unreadable", f"NIC {device} port {port}: the wiring probe "
                                  "printed nothing for it", nic=device, port=port))
            continue
        plan = policy.rails[rail] if rail < len(policy.rails) else None
        reasons += _neighbour_reasons(nic, rail, plan, reading.lldp_error, leaves)
        reasons += _pkey_reasons(nic, policy.pkey)
        reasons += _gid_reasons(nic, policy.gid_index)
    if policy.distinct_leaves:
        reasons += _shared_leaf_reasons(leaves, policy.rails)
    return _no_lldp_anywhere(reading, nics, reasons)


def _no_lldp_anywhere(reading: WiringReading, nics: list[tuple[str, int]], reasons: list[Reason]) -> list[Reason]:
    """Not one LLDP frame on any of two or more Ethernet compute ports while lldpd runs: the host
    sees none at all (a NIC firmware LLDP agent takes them, or the switches send none), which
    says nothing of the cables: UNKNOWN, not a FAIL per port."""
    eth = [reading.nics.get(f"{d}/{p}") for d, p in nics]
    eth = [n for n in eth if n is not None and n.link_layer == "Ethernet" and not n.error]
    silent = [r for r in reasons if r.code == "wiring_no_neighbour" and any(r.nic == n.device for n in eth)]
    if len(eth) < 2 or len(silent) != len(eth):
        return reasons
    names = ", ".join(n.netdev or n.device for n in eth)
    return [r for r in reasons if r not in silent] + [Reason(
        UNKNOWN, "wiring_unreadable", f"lldpd runs but has no LLDP neighbour on any compute port ({names}): a NIC "
        "firmware LLDP agent may take the frames, or the switches send none; the cabling is not known")]


def _neighbour_reasons(nic: NicWiring, rail: int, plan: RailPlan | None, lldp_error: str | None,
                       leaves: dict) -> list[Reason]:
    where = _where(nic)
    ib = nic.link_layer == "InfiniBand"
    if not ib and lldp_error:
        return [Reason(UNKNOWN, "wiring_unreadable", f"{where}: its LLDP neighbour cannot be read: {lldp_error}",
                       nic=nic.device, port=nic.port)]
    if ib and nic.state is not None and nic.state != "ACTIVE" and not nic.neighbours:
        # no link, so no directed route: the cable (or the switch port) is gone, not the query
        return [Reason(FAIL, "wiring_no_neighbour", f"{where} (rail {rail}): the port is {nic.state}: no switch at "
                       "the end of its cable", nic=nic.device, port=nic.port)]
    if nic.error:
        return [Reason(UNKNOWN, "wiring_unreadable", f"{where}: its neighbour cannot be read: {nic.error}",
                       nic=nic.device, port=nic.port)]
    if not nic.neighbours:
        how = "the subnet management query found no switch" if ib else "lldpd has no LLDP neighbour on it"
        return [Reason(FAIL, "wiring_no_neighbour", f"{where} (rail {rail}): {how}", nic=nic.device, port=nic.port)]
    # two LLDP neighbours on one port: a hub or a cable into a second switch; judged by the first
    n = nic.neighbours[0]
    leaves.setdefault(n.guid or n.name or "?", []).append((rail, nic))
    if plan is None:
        return []
    if plan.leaf is not None and n.name is None:  # the plan names leaves; only the switch's GUID was read
        return [Reason(UNKNOWN, "wiring_unreadable", f"{where} (rail {rail}): the name of its switch ({n.guid}) "
                       "was not read, and the plan names leaves", nic=nic.device, port=nic.port)]
    if not (plan.leaf_matches(n) and plan.port_matches(n)):
        return [Reason(FAIL, "wiring_wrong_rail", f"{where} (rail {rail}) must reach {plan.describe()}; it reaches "
                       f"{_found(n)}", nic=nic.device, port=nic.port)]
    return []


def _shared_leaf_reasons(leaves: dict[str, list[tuple[int, NicWiring]]], rails: tuple[RailPlan, ...]) -> list[Reason]:
    reasons = []
    for nics in leaves.values():
        if len(nics) < 2:
            continue
        plans = {rails[r] if r < len(rails) else None for r, _ in nics}
        if len(plans) == 1 and None not in plans:
            continue  # the plan puts these rails on one leaf itself
        first = nics[0][1].neighbours[0]
        names = ", ".join(f"{nic.device} (rail {r})" for r, nic in nics)
        reasons.append(Reason(FAIL, "wiring_shared_leaf", f"NICs {names} all reach leaf {first.leaf}: each rail "
                              "must reach a leaf of its own", nic=nics[0][1].device))
    return reasons


def pkey_wanted(found: list[int], wanted: int) -> bool:
    """``wanted`` is in the table: its 15-bit key, and full membership
    (bit 0x8000) where ``wanted`` asks for it: keys match on their low 15
    bits, the top bit is the membership type (shared/reference/topology.md)."""
    base = wanted & 0x7FFF
    return any((k & 0x7FFF) == base and (k & 0x8000 or not wanted & 0x8000) for k in found)


def _pkey_reasons(nic: NicWiring, wanted: int | None) -> list[Reason]:
    if wanted is None or nic.link_layer != "InfiniBand":
        return []
    where = _where(nic)
    if nic.pkeys is None:
        return [Reason(UNKNOWN, "wiring_unreadable", f"{where}: its P_Key table was not read",
                       nic=nic.device, port=nic.port)]
    if pkey_wanted(nic.pkeys, wanted):
        return []
    table = ", ".join(f"0x{k:04x}" for k in nic.pkeys) or "empty"
    limited = [k for k in nic.pkeys if (k & 0x7FFF) == (wanted & 0x7FFF)]
    how = " (only as a limited member)" if limited else ""
    return [Reason(FAIL, "wiring_pkey_missing", f"{where}: the site's P_Key 0x{wanted:04x} is not in its P_Key "
                   f"table{how}: {table}", nic=nic.device, port=nic.port)]


def _gid_reasons(nic: NicWiring, index: int | None) -> list[Reason]:
    if index is None or nic.link_layer != "Ethernet":
        return []
    entry = nic.gids.get(index)
    if entry is not None and entry[1] == ROCE_V2:
        return []
    if entry is not None and entry[1] is None:
        return [Reason(UNKNOWN, "wiring_unreadable", f"{_where(nic)}: GID index {index} holds {entry[0]}, whose type "
                       "(gid_attrs/types) was not read", nic=nic.device, port=nic.port)]
    have = ", ".join(f"{i}: {t or '?'}" for i, (_, t) in sorted(nic.gids.items()) if t == ROCE_V2) or "none"
    what = "no GID" if entry is None else f"{entry[0]} of type {entry[1] or 'unknown'}"
    return [Reason(FAIL, "wiring_gid_missing", f"{_where(nic)}: GID index {index} holds {what}, not a RoCE v2 GID "
                   f"(RoCE v2 GIDs at: {have})", nic=nic.device, port=nic.port)]


# -- the stored reading -------------------------------------------------------------

@dataclass
class StoredWiring:
    """The stored result (``ActiveResult`` dict) and when it was read back."""
    read_at: float
    result: dict | None = None   # None: none stored
    error: str | None = None     # the state file could not be read


def reading_from_dict(data: dict) -> WiringReading:
    """A stored :class:`WiringReading` (``plain`` dicts); ``ValueError`` when it is not one."""
    try:
        nics = {}
        for key, n in (data.get("nics") or {}).items():
            sm = n.get("sm")
            nics[key] = NicWiring(
                str(n["device"]), int(n["port"]), n.get("link_layer"), n.get("netdev"),
                [Neighbour(str(x["source"]), x.get("name"), x.get("guid"), x.get("port"), x.get("node_type"))
                 for x in n.get("neighbours") or ()],
                n.get("error"), None if n.get("pkeys") is None else [int(k) for k in n["pkeys"]],
                {int(i): (str(g[0]), g[1]) for i, g in (n.get("gids") or {}).items()},
                n.get("node_guid"), n.get("lid"), n.get("sm_lid"),
                None if sm is None else SmInfo(int(sm["lid"]), str(sm["guid"]), int(sm["priority"]), str(sm["state"])),
                n.get("state"))
        return WiringReading(nics, data.get("lldp_error"), data.get("error"))
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
        raise ValueError(f"not a stored wiring reading: {exc!r}") from None


def check_stored_wiring(stored: StoredWiring | None, policy: WiringPolicy, nics: list[tuple[str, int]]) -> list[Reason]:
    """Reasons from the stored reading: past its validity UNKNOWN as stale,
    never its old neighbours; none stored UNKNOWN."""
    if stored is None or not policy.enabled:
        return []
    if stored.error:
        return [Reason(UNKNOWN, "wiring_unreadable", f"the stored wiring reading: {stored.error}")]
    if stored.result is None:
        return [Reason(UNKNOWN, "wiring_never_read", "no stored wiring reading: the wiring probe has not run "
                       "on this node")]
    try:
        result = ActiveResult.from_dict(stored.result)
        reading = reading_from_dict(result.data or {})
    except (ValueError, TypeError) as exc:  # TypeError: from_dict of an entry that lacks "code"
        return [Reason(UNKNOWN, "wiring_unreadable", f"the stored wiring reading: {exc}")]
    if result.stale(stored.read_at):
        return [Reason(UNKNOWN, "wiring_stale", stale_message("the fabric's wiring", result, stored.read_at,
                                                              "the stored wiring reading", "read it again"))]
    return check_wiring(reading, policy, nics)


def gids_from_ports(gids) -> dict[int, tuple[str, str | None]]:
    """A port's GIDs as the RDMA probe keeps them (``model.rdma.GidEntry``), for :attr:`NicWiring.gids`."""
    return {g.index: (g.gid, g.type) for g in gids}
