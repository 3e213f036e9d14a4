"""The fabric across nodes, from each node's wiring reading (issue 48):
duplicate GUIDs, zero and duplicate LIDs, more than one subnet manager, the
cabling against the plan as CSV, a Slurm ``topology.conf`` (tree) and
Kubernetes node labels from the discovered leaves, and ``leaf_suspect``:
a fault traced to the switch many of whose nodes fail at once.

Pure: the readings are ``model.wiring.WiringReading`` (each node's stored
one); nothing here runs a command.
"""

from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass

from ccrhost.fleet.slurm_client import hostlist
from ccrhost.model.ports import natural_key
from ccrhost.model.wiring import NicWiring, RailPlan, WiringPolicy, WiringReading, compute_nics


@dataclass(frozen=True)
class Finding:
    """One fabric-wide problem: what, the message, and the nodes (and NICs) it is about."""
    kind: str          # "duplicate_guid", "duplicate_lid", "zero_lid", "several_sms", "leaf_suspect"
    message: str
    nodes: tuple[str, ...]
    code: str | None = None  # leaf_suspect: the fabric code its nodes failed


def _rails(reading: WiringReading, nics: list[tuple[str, int]] | None) -> list[tuple[int, NicWiring | None, str]]:
    order = nics if nics is not None else compute_nics([(n.device, n.port) for n in reading.nics.values()])
    return [(i, reading.nics.get(f"{d}/{p}"), f"{d}/{p}") for i, (d, p) in enumerate(order)]


# -- identifiers and the subnet manager ---------------------------------------------------

def _compute(reading: WiringReading, node: str, nics: dict[str, list[tuple[str, int]]] | None):
    """The node's compute ports' readings (all it read where ``nics`` does not say): a storage
    fabric's or an excluded device's ports are not this fabric's."""
    own = (nics or {}).get(node)
    keys = sorted(reading.nics, key=natural_key) if own is None else [f"{d}/{p}" for d, p in own]
    return [reading.nics[k] for k in keys if k in reading.nics]


def duplicate_guids(readings: dict[str, WiringReading],
                    nics: dict[str, list[tuple[str, int]]] | None = None) -> list[Finding]:
    """A node GUID on two nodes (or two devices of one): cloned or badly
    flashed NICs, which the subnet manager cannot tell apart (UFM fabric
    validation "duplicate GUIDs")."""
    seen: dict[str, set[tuple[str, str]]] = {}
    for node, reading in readings.items():
        for nic in _compute(reading, node, nics):
            if nic.node_guid:
                seen.setdefault(nic.node_guid, set()).add((node, nic.device))
    out = []
    for guid, where in sorted(seen.items()):
        if len(where) > 1:
            places = sorted(where, key=lambda x: (natural_key(x[0]), natural_key(x[1])))
            out.append(Finding("duplicate_guid", f"node GUID {guid} on " + ", ".join(f"{n} {d}" for n, d in places),
                               tuple(sorted({n for n, _ in places}, key=natural_key))))
    return out


def _ib_ports(readings: dict[str, WiringReading], nics: dict[str, list[tuple[str, int]]] | None = None):
    for node, reading in sorted(readings.items(), key=lambda kv: natural_key(kv[0])):
        for nic in _compute(reading, node, nics):
            if nic.link_layer == "InfiniBand":
                yield node, nic


def lid_problems(readings: dict[str, WiringReading],
                 nics: dict[str, list[tuple[str, int]]] | None = None) -> list[Finding]:
    """An InfiniBand port with LID 0 (no subnet manager has swept it) and a
    LID on two ports of one subnet (UFM fabric validation "zero or duplicate
    LIDs"); two subnets (GID prefixes) each number their own LIDs."""
    out, seen = [], {}
    for node, nic in _ib_ports(readings, nics):
        if nic.lid is None:
            continue
        if nic.lid == 0:
            out.append(Finding("zero_lid", f"{node} {nic.device} port {nic.port}: LID 0 (no subnet manager has "
                               "assigned it one)", (node,)))
            continue
        seen.setdefault((_prefix(nic), nic.lid), []).append((node, nic))
    for (_, lid), where in sorted(seen.items()):
        if len(where) > 1:
            out.append(Finding("duplicate_lid", f"LID {lid} on " + ", ".join(f"{n} {x.device} port {x.port}"
                                                                          for n, x in where),
                               tuple(dict.fromkeys(n for n, _ in where))))
    return out


def subnet_managers(readings: dict[str, WiringReading],
                    nics: dict[str, list[tuple[str, int]]] | None = None) -> list[Finding]:
    """More than one master subnet manager seen on one subnet: each port's
    master by its LID (``sminfo``'s when it says MASTER, else the port's
    ``sm_lid``), grouped by the subnet prefix of GID 0, so two fabrics with
    their own prefixes are two subnets (UFM fabric validation "SM not found
    or several masters")."""
    seen: dict[str, dict[int, set[str]]] = {}
    guids: dict[int, str] = {}
    for node, nic in _ib_ports(readings, nics):
        if nic.sm is not None and nic.sm.state == "SMINFO_MASTER":
            lid = nic.sm.lid
            guids[lid] = nic.sm.guid
        elif nic.sm_lid:
            lid = nic.sm_lid
        else:
            continue
        seen.setdefault(_prefix(nic), {}).setdefault(lid, set()).add(node)
    out = []
    for prefix, by_lid in sorted(seen.items()):
        if len(by_lid) > 1:
            text = "; ".join(f"the SM at LID {lid}" + (f" ({guids[lid]})" if lid in guids else "") +
                             f" seen by {', '.join(sorted(ns, key=natural_key))}" for lid, ns in sorted(by_lid.items()))
            nodes = sorted({n for ns in by_lid.values() for n in ns}, key=natural_key)
            out.append(Finding("several_sms", f"subnet {prefix}: {len(by_lid)} master subnet managers: {text}",
                               tuple(nodes)))
    return out


def _prefix(nic: NicWiring) -> str:
    gid = nic.gids.get(0)
    return ":".join(gid[0].split(":")[:4]) if gid else "?"


# -- the cabling against the plan --------------------------------------------------------

Plans = WiringPolicy | dict[str, WiringPolicy]  # one plan, or each node's own (its settings')


def plan_of(policy: Plans, node: str, rail: int) -> RailPlan | None:
    """The rail's entry of the node's plan (None: beyond the plan)."""
    own = policy.get(node, WiringPolicy()) if isinstance(policy, dict) else policy
    return own.rails[rail] if rail < len(own.rails) else None


def link_ok(nic: NicWiring | None, plan: RailPlan | None) -> bool:
    """The NIC was read, has a neighbour, and (where planned) it is the planned leaf and port."""
    if nic is None or nic.error or not nic.neighbours:
        return False
    n = nic.neighbours[0]
    return plan is None or (plan.leaf_matches(n) and plan.port_matches(n))


def cabling_csv(readings: dict[str, WiringReading], policy: Plans,
                nics: dict[str, list[tuple[str, int]]] | None = None, every: bool = False) -> str:
    """The cabling diff: one row per NIC whose link is not as planned (every
    NIC with ``every``): node, NIC, rail, expected leaf, found leaf:port."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["node", "nic", "rail", "expected_leaf", "found_leaf_port"])
    for node in sorted(readings, key=natural_key):
        reading = readings[node]
        for rail, nic, name in _rails(reading, (nics or {}).get(node)):
            plan = plan_of(policy, node, rail)
            if not every and link_ok(nic, plan):
                continue
            if reading.error or nic is None:
                found = "unreadable"
            elif nic.error:
                found = f"unreadable: {nic.error}"
            elif not nic.neighbours:
                found = "no neighbour"
            else:
                n = nic.neighbours[0]
                found = f"{n.leaf}:{n.port or '?'}"
            w.writerow([node, name, rail, plan.describe() if plan else "", found])
    return out.getvalue()


def captured_plan(readings: dict[str, WiringReading],
                  nics: dict[str, list[tuple[str, int]]] | None = None) -> tuple[list[dict], list[str]]:
    """The fabric plan a known-good fleet shows: for each rail, the leaves
    (GUIDs, LLDP chassis ids) its NICs reach, as ``wiring_rails`` entries.
    A leaf seen on several rails is put on the rail most of its sightings
    are on; the others are named (a swapped cable, or a fleet that is not
    rail-optimised), as are rails no node has a neighbour on."""
    seen: dict[str, dict[int, list[str]]] = {}  # leaf id -> rail -> "node:NIC"
    rails = 0
    for node in sorted(readings, key=natural_key):
        for rail, nic, name in _rails(readings[node], (nics or {}).get(node)):
            rails = max(rails, rail + 1)
            if nic is None or nic.error or not nic.neighbours or not nic.neighbours[0].guid:
                continue
            seen.setdefault(nic.neighbours[0].guid.lower(), {}).setdefault(rail, []).append(f"{node}:{name}")
    plan: list[list[str]] = [[] for _ in range(rails)]
    notes = []
    names: dict[str, str] = {}  # leaf id -> its name, for ids a plan cannot take as GUIDs
    for node in readings:
        for nic in readings[node].nics.values():
            for n in nic.neighbours[:1]:
                if n.guid and n.name:
                    names.setdefault(n.guid.lower(), n.name)
    for leaf, by_rail in sorted(seen.items()):
        rail = max(sorted(by_rail), key=lambda r: len(by_rail[r]))
        plan[rail].append(leaf)
        for other, where in sorted(by_rail.items()):
            if other != rail:
                notes.append(f"leaf {leaf} is rail {rail}'s (by {len(by_rail[rail])} NIC(s)) but rail {other} "
                             f"reaches it at {', '.join(where)}: left out of rail {other}")
    entries = []
    for rail, leaves in enumerate(plan):
        if not leaves:
            notes.append(f"rail {rail}: no node has a neighbour on it: give its leaf by hand")
        if all(_GUID_OR_MAC.fullmatch(x) for x in leaves):
            entries.append({"leaf_guids": leaves})
            continue
        # LLDP chassis ids that are no MAC (subtype local, ifname): the leaves by name instead
        named = sorted({names.get(x, x) for x in leaves})
        pattern = named[0] if len(named) == 1 else os.path.commonprefix(named) + "*"
        if len(named) > 1:
            notes.append(f"rail {rail}: leaves {', '.join(named)} have no MAC or GUID chassis id: the pattern "
                         f"{pattern!r} stands for them; check that it matches no other rail's leaf")
        entries.append({"leaf": pattern})
    return entries, notes


_GUID_OR_MAC = re.compile(r"0x[0-9a-f]{1,16}|([0-9a-f]{2}:){5}[0-9a-f]{2}")  # what settings/wiring.py's Guid takes


# -- Slurm topology.conf (topology/tree) and Kubernetes labels -------------------------------

def slurm_name(leaf: str) -> str:
    """A switch name Slurm takes: the leaf's name with what is not a letter,
    digit, ``_``, ``.`` or ``-`` made ``_``, at most 64 characters
    (topology.conf(5): "cannot be longer than 64 characters")."""
    return (re.sub(r"[^A-Za-z0-9_.-]", "_", leaf) or "_")[:64]


def node_leaves(readings: dict[str, WiringReading], policy: Plans,
                nics: dict[str, list[tuple[str, int]]] | None = None) -> dict[str, list[tuple[int, str]]]:
    """Each node's good links (rail, leaf): a link that fails (unread, no
    neighbour, not the planned leaf or port) is left out."""
    out = {}
    for node, reading in readings.items():
        if reading.error:
            out[node] = []
            continue
        good = []
        for rail, nic, _ in _rails(reading, (nics or {}).get(node)):
            plan = plan_of(policy, node, rail)
            if link_ok(nic, plan):
                good.append((rail, nic.neighbours[0].leaf))
        out[node] = good
    return out


def topology_conf(readings: dict[str, WiringReading], policy: Plans,
                  nics: dict[str, list[tuple[str, int]]] | None = None, root: str = "fabric",
                  spines: dict[str, tuple[str, ...]] | None = None) -> str:
    """A topology/tree ``topology.conf``: ``SwitchName=<leaf> Nodes=<hostlist>``
    per leaf, ``SwitchName=<spine> Switches=<leaves>`` above them (``spines``:
    spine name -> fnmatch patterns of its leaves; the leaves no spine names,
    and the spines, go under ``root``, so one switch reaches every node).

    A node is placed under the leaf of its lowest rail whose link is good:
    Slurm warns "Multiple leaf switches contain nodes" for a node under
    two leaves, and in a rail-optimised fabric one rail's leaf stands for
    the node's group. A node without a good link is left out (a comment
    names it): Slurm schedules it alone until it is recabled."""
    import fnmatch

    leaves: dict[str, list[str]] = {}
    names: dict[str, str] = {}     # Slurm name -> leaf
    slurm_of: dict[str, str] = {}  # leaf -> Slurm name
    left_out = []
    for node, good in sorted(node_leaves(readings, policy, nics).items(), key=lambda kv: natural_key(kv[0])):
        if not good:
            left_out.append(node)
            continue
        leaf = good[0][1]
        name = slurm_of.get(leaf)
        if name is None:  # one Slurm name per leaf; two leaves that read the same once get two
            name = slurm_name(leaf)
            if name in names:
                name = slurm_name(f"{name[:55]}_{len(names)}")
            names[name], slurm_of[leaf] = leaf, name
        leaves.setdefault(name, []).append(node)
    lines = ["# topology.conf (topology/tree) from the nodes' discovered leaves (ccrhost fleet/wiring.py)"]
    for name in sorted(leaves, key=natural_key):
        if names[name] != name:
            lines.append(f"# {name}: {names[name]}")
        lines.append(f"SwitchName={name} Nodes={hostlist(leaves[name])}")
    under_root = set(leaves)
    spine_lines = []
    for spine, patterns in sorted((spines or {}).items()):
        mine = sorted((n for n in leaves if any(fnmatch.fnmatchcase(names[n], p) for p in patterns)), key=natural_key)
        if mine:
            spine_lines.append(f"SwitchName={slurm_name(spine)} Switches={hostlist(mine)}")
            under_root -= set(mine)
            under_root.add(slurm_name(spine))
    lines += spine_lines
    if len(under_root) > 1 or spine_lines:
        lines.append(f"SwitchName={slurm_name(root)} Switches={hostlist(under_root)}")
    if left_out:
        lines.append(f"# left out, no good link: {hostlist(left_out)}")
    return "\n".join(lines) + "\n"


LEAF_LABEL = "network.topology.nvidia.com/leaf"  # NVIDIA topograph's leaf key (docs/engines/k8s.md)


def label_value(text: str) -> str:
    """A Kubernetes label value: at most 63 characters of ``[A-Za-z0-9_.-]``,
    beginning and ending with a letter or digit."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def node_labels(readings: dict[str, WiringReading], policy: Plans,
                nics: dict[str, list[tuple[str, int]]] | None = None) -> dict[str, dict[str, str]]:
    """node -> labels: topograph's leaf key (the same leaf as topology.conf's)
    and ``ccrhost/rail<N>-leaf`` for each good link; none for a failing one."""
    out = {}
    for node, good in node_leaves(readings, policy, nics).items():
        labels = {f"ccrhost/rail{rail}-leaf": label_value(leaf) for rail, leaf in good}
        if good:
            labels[LEAF_LABEL] = label_value(good[0][1])
        out[node] = labels
    return out


# -- faults traced to the switch ----------------------------------------------------------------

@dataclass(frozen=True)
class Failure:
    node: str
    code: str        # the fabric reason code it failed (link_flap, pause_storm, allreduce_slow, ...)
    at: float        # seconds since the epoch


def leaf_suspect(failures: list[Failure], leaves: dict[str, list[tuple[int, str]]], now: float,
                 window_s: float, fraction: float, min_nodes: int = 2) -> list[Finding]:
    """Leaves where, for one code, at least ``fraction`` of the nodes cabled
    to the leaf (and at least ``min_nodes``) failed within ``window_s``
    before ``now``: the switch, not the nodes, is the likely fault.
    ``leaves``: :func:`node_leaves` (every good link counts: a node on a leaf
    through any rail is that leaf's)."""
    members: dict[str, set[str]] = {}
    for node, good in leaves.items():
        for _, leaf in good:
            members.setdefault(leaf, set()).add(node)
    recent: dict[str, set[str]] = {}
    for f in failures:
        if 0 <= now - f.at <= window_s:
            recent.setdefault(f.code, set()).add(f.node)
    out = []
    for code in sorted(recent):
        for leaf in sorted(members, key=natural_key):
            nodes = members[leaf]
            failing = sorted(nodes & recent[code], key=natural_key)
            if len(failing) >= min_nodes and len(failing) >= fraction * len(nodes):
                out.append(Finding("leaf_suspect", f"leaf {leaf}: {len(failing)} of its {len(nodes)} nodes failed "
                                   f"{code} in the last {window_s:g} s: {', '.join(failing)}", tuple(failing), code))
    return out
