"""The rack checks of rack-scale NVLink systems (GB200/GB300 NVL72, issue 49)
and Slurm's block topology from them: pure functions of the fleet's readings.

A rack is one NVLink domain: its trays must report one cluster UUID and
clique, run one driver, Fabric Manager and IMEX version, and be the trays
the inventory (``imex_rack``) puts in it. Each check names the odd tray
out. :func:`block_topology` writes Slurm's ``topology.conf`` for the
``topology/block`` plugin (one block per rack, failing trays left out).
The fleet paths (``ccrhost slurm verify``, the deploy's report) run them
through fleet/rack_report.py.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from ccrhost.fleet.slurm_client import hostlist
from ccrhost.model.gpu_health import GpuHealth
from ccrhost.model.imex import ZERO_UUID
from ccrhost.model.status import FAIL, UNKNOWN, Reason

VERSIONS = {"driver": "driver", "fabric_manager": "Fabric Manager", "imex": "IMEX"}


@dataclass
class Tray:
    host: str
    rack: str | None                               # the inventory's imex_rack; None: in no rack
    domains: frozenset[tuple[str, int]] | None = None  # its GPUs' (cluster UUID, clique); None: not read
    versions: dict[str, str | None] = field(default_factory=dict)  # VERSIONS key -> version; None: not read
    failing: bool = False                          # its own check FAILed: no block gets it


def tray(host: str, rack: str | None, gpus: list[GpuHealth] | None, failing: bool = False,
         **versions: str | None) -> Tray:
    """A tray from its GPU readings: the domains of the GPUs that report one (a GPU in none,
    a zero UUID or clique 0, is the node check's gpu_fabric_no_clique)."""
    domains = None
    if gpus:
        read = {(g.cluster_uuid, g.clique_id) for g in gpus
                if g.cluster_uuid is not None and g.clique_id is not None}
        if read:
            domains = frozenset(d for d in read if d[0] != ZERO_UUID and d[1] != 0)
    unknown = [k for k in versions if k not in VERSIONS]
    if unknown:
        raise ValueError(f"unknown version kind {unknown[0]!r}; allowed: {', '.join(VERSIONS)}")
    return Tray(host, rack, domains, dict(versions), failing)


def _domain(d: tuple[str, int]) -> str:
    return f"ClusterUUID {d[0]} clique {d[1]}"


def _majority(values: dict[str, object]):
    """The value more than half the hosts hold; None where none does."""
    if not values:
        return None
    value, n = Counter(values.values()).most_common(1)[0]
    return value if n * 2 > len(values) else None


def check_racks(trays: list[Tray]) -> dict[str, list[Reason]]:
    """Every tray's rack reasons (an empty list: nothing wrong), by host."""
    out: dict[str, list[Reason]] = {t.host: [] for t in trays}
    racks: dict[str, list[Tray]] = {}
    for t in trays:
        if t.rack is None:
            out[t.host].append(Reason(UNKNOWN, "rack_unreadable", f"{t.host}: in no rack: imex_rack is not set"))
        else:
            racks.setdefault(t.rack, []).append(t)
    # each rack's NVLink domain: the one most of its readable trays report
    held: dict[str, tuple[str, int] | None] = {}
    for name, members in sorted(racks.items()):
        single = {}
        for t in members:
            if not t.domains:
                out[t.host].append(Reason(UNKNOWN, "rack_unreadable",
                                          f"{t.host}: no GPU of it reported an NVLink domain (rack {name})"))
            elif len(t.domains) == 1:
                single[t.host] = next(iter(t.domains))
            else:
                out[t.host].append(Reason(FAIL, "rack_fabric_split", f"{t.host}: its GPUs report "
                                          f"{' and '.join(map(_domain, sorted(t.domains)))} (rack {name})"))
        held[name] = _majority(single)
        if held[name] is None and len(set(single.values())) > 1:
            # no odd tray can be named (a tie, or only part of the rack checked): said, nobody drained
            for host, d in sorted(single.items()):
                out[host].append(Reason(UNKNOWN, "rack_unreadable",
                                        f"rack {name}: no NVLink domain is held by most of its trays; {host} reports "
                                        f"{_domain(d)} (" + ", ".join(f"{h}: {_domain(x)}" for h, x in
                                                                      sorted(single.items()) if h != host) + ")"))
            continue
        owner = {d: r for r, d in held.items() if d is not None}
        for host, d in sorted(single.items()):
            if d == held[name]:
                continue
            if d in owner and owner[d] != name:
                out[host].append(Reason(FAIL, "rack_membership_mismatch",
                                        f"{host}: the inventory puts it in rack {name}, but it reports rack "
                                        f"{owner[d]}'s NVLink domain ({_domain(d)})"))
            else:
                out[host].append(Reason(FAIL, "rack_fabric_split",
                                        f"{host} is the odd tray out of rack {name}: it reports {_domain(d)}, the "
                                        f"others {_domain(held[name])}"))
    # two racks of the inventory that are one NVLink domain
    by_domain: dict[tuple[str, int], list[str]] = {}
    for name, d in held.items():
        if d is not None:
            by_domain.setdefault(d, []).append(name)
    for d, names in by_domain.items():
        if len(names) > 1:  # the inventory's fault (one rack named twice), not the trays': said, nobody drained
            for name in names:
                for t in racks[name]:
                    out[t.host].append(Reason(UNKNOWN, "rack_unreadable",
                                              f"{t.host}: racks {' and '.join(sorted(names))} of the inventory are "
                                              f"one NVLink domain ({_domain(d)}): fix imex_rack"))
    for name, members in sorted(racks.items()):
        _versions(name, members, out)
    return out


def _versions(name: str, members: list[Tray], out: dict[str, list[Reason]]) -> None:
    for kind, what in VERSIONS.items():
        read = {}
        for t in members:
            if kind not in t.versions:
                continue  # not asked for on this fleet
            if t.versions[kind] is None:
                out[t.host].append(Reason(UNKNOWN, "rack_unreadable", f"{t.host}: its {what} version was not read (rack {name})"))
            else:
                read[t.host] = t.versions[kind]
        if len(set(read.values())) < 2:
            continue
        common = _majority(read)
        if common is None:  # no odd tray can be named: said, nobody drained
            text = ", ".join(f"{h} {v}" for h, v in sorted(read.items()))
            for host in read:
                out[host].append(Reason(UNKNOWN, "rack_unreadable",
                                        f"rack {name}: no {what} version is held by most of its trays: {text}"))
            continue
        for host, v in sorted(read.items()):
            if v != common:
                out[host].append(Reason(FAIL, "rack_version_mismatch",
                                        f"{host} is the odd tray out of rack {name}: {what} {v}, the others {common}"))


# --- Slurm's topology/block ---------------------------------------------------------------

def _block_sizes(sizes: tuple[int, ...]) -> None:
    """topology.conf(5): each size a power of two larger than the one before."""
    for i, size in enumerate(sizes):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"BlockSizes {list(sizes)}: {size!r} is no whole number of nodes from 1")
        if i and (size <= sizes[i - 1] or size % sizes[i - 1] or (size // sizes[i - 1]) & (size // sizes[i - 1] - 1)):
            raise ValueError(f"BlockSizes {list(sizes)}: {size} is not a power of two times {sizes[i - 1]} "
                             "(topology.conf(5): successive sizes must be a power of two larger)")


def block_topology(trays: list[Tray], reasons: dict[str, list[Reason]] | None = None,
                   sizes: tuple[int, ...] = ()) -> tuple[str, list[str]]:
    """(topology.conf text, what was left out and why). One ``BlockName=<rack> Nodes=<hostlist>``
    line per rack of the inventory, without the trays that FAIL (their own check, or ``reasons``:
    the rack checks); ``sizes`` the ``BlockSizes=`` line, whose first (the planning base) every
    block must reach: a rack short of it after its failing trays are left out is left out whole.
    Without ``sizes``, where the blocks differ in size, the base is the smallest block: Slurm's own
    default, the first block's node count, makes slurmctld refuse the file where a later rack is
    smaller."""
    _block_sizes(tuple(sizes))
    left: list[str] = []
    blocks: dict[str, list[str]] = {}
    for t in trays:
        failing = t.failing or any(r.level == FAIL for r in (reasons or {}).get(t.host, ()))
        if t.rack is None:
            left.append(f"{t.host}: in no rack (imex_rack is not set)")
        elif failing:
            left.append(f"{t.host}: FAILs its checks (rack {t.rack})")
        else:
            blocks.setdefault(t.rack, []).append(t.host)
    lines = ["# Slurm topology/block (topology.conf(5)): one block per NVLink rack, written by ccrhost;",
             "# trays that FAIL their checks are left out."]
    for name in sorted(blocks):
        hosts = blocks[name]
        if sizes and len(hosts) < sizes[0]:
            left.append(f"rack {name}: {len(hosts)} trays pass, below the base block size {sizes[0]}: "
                        "the whole block is left out")
            continue
        lines.append(f"BlockName={name} Nodes={hostlist(hosts)}")
    written = [len(blocks[name]) for name in sorted(blocks) if not sizes or len(blocks[name]) >= sizes[0]]
    if not sizes and len(set(written)) > 1:
        # Without BlockSizes, Slurm takes the first block's node count as the planning base and
        # slurmctld will not start where a later block is smaller (24.05 on: "children count lower
        # than bblock_node_cnt", block_record.c; 23.11 wants every block equal and knows no
        # BlockSizes), as a rack is once its failing trays are left out: the base is the smallest
        # block, with the four levels above it that Slurm aggregates by default. Equal blocks
        # need no line, and every Slurm from 23.11 takes them.
        sizes = tuple(min(written) << level for level in range(5))
    if sizes and written:
        lines.append("BlockSizes=" + ",".join(map(str, sizes)))
    return "\n".join(lines) + "\n", left
