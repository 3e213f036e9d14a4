"""The drain cap: how many nodes ccrhost drains for one reason code.

One fleet-wide cause (a driver update that hangs nvidia-smi, a bad config
pushed everywhere) makes every node fail the same way; draining them all
takes the cluster down for what is most likely ccrhost's or the site's
own mistake. So a new drain is allowed while, for at least one of the
verdict's FAIL or UNKNOWN codes, fewer nodes than the cap carry a
ccrhost drain naming that code (drained within the window). Past it the
node is kept from jobs without being drained (the prolog's ``--hold``),
and everything says that the cap held.

Where the count lives: in Slurm itself. Every node reads the drains from
slurmctld (one ``sinfo``, only when it is about to drain), so nodes share
the count without a controller of ccrhost's. Nodes that fail at the same
moment (a job's prologs start together) race; each checks again after its
drain and lifts it when it is not among the first ``limit`` by drain time
(then node name), so they agree on who stays drained. What is left is a
node whose second look comes before another's drain is visible: it keeps
its drain, so the cap may be passed by the nodes that drain within the
same instant.

UNKNOWN codes have their own, smaller share (``slurm_drain_cap_unknown_share``):
a node that cannot be read is the likeliest sign of a fleet-wide cause, so
those drains are capped first. Pure: readings in, decision out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ccrhost.model.status import FAIL, UNKNOWN


@dataclass(frozen=True)
class DrainCap:
    nodes: int | None = None            # slurm_drain_cap_nodes
    share: float | None = 0.1           # slurm_drain_cap_share
    unknown_share: float | None = 0.05  # slurm_drain_cap_unknown_share
    window: float = 3600                # slurm_drain_cap_window, seconds
    textfile: str | None = None         # slurm_drain_cap_textfile: the Prometheus textfile it writes

    def limit(self, level: str, population: int) -> int | None:
        """The most nodes drained for one code of ``level`` among
        ``population`` nodes; never under 1 (one bad node always drains);
        None: no cap."""
        share = self.unknown_share if level == UNKNOWN else self.share
        limits = [self.nodes] if self.nodes else []
        if share:
            limits.append(max(1, math.floor(share * population)))
        return min(limits) if limits else None


@dataclass(frozen=True)
class Drained:
    """A node with a ccrhost drain, as Slurm shows it."""
    name: str
    codes: tuple[str, ...]
    since: float | None  # epoch seconds of the reason (sinfo %H); None: not shown


@dataclass(frozen=True)
class CodeCount:
    code: str
    level: str
    rank: int            # this node's place among the nodes drained for the code (1: the first)
    limit: int | None


@dataclass(frozen=True)
class CapDecision:
    held: bool                     # no code has room: the node is not (or no longer) drained
    counts: tuple[CodeCount, ...]
    population: int

    def text(self) -> str:
        parts = [f"{c.code}: {c.rank - 1} other node(s) drained, cap {c.limit}" for c in self.counts]
        return "; ".join(parts) + f" (of {self.population} nodes, per slurm_drain_cap_*)"


def drain_codes(reasons) -> list[tuple[str, str]]:
    """(code, level) of the reasons a drain rests on (FAIL, UNKNOWN), each once."""
    seen: dict[str, str] = {}
    for r in reasons:
        if r.level in (FAIL, UNKNOWN) and r.code not in seen:
            seen[r.code] = r.level
    return list(seen.items())


def decide(node: str, codes: list[tuple[str, str]], drained: list[Drained], population: int, cap: DrainCap,
           now: float) -> CapDecision:
    """Whether ``node`` may be (or stay) drained for ``codes``. ``drained``:
    the nodes of its partitions with a ccrhost drain; when ``node`` is among
    them (the look after its own drain), only those drained before it, by
    time then name, count against it; before, every one does."""
    mine = next((d for d in drained if d.name == node), None)
    key = None if mine is None else (mine.since if mine.since is not None else now, mine.name)
    counts = []
    for code, level in codes:
        ahead = 0
        for d in drained:
            if d.name == node or code not in d.codes:
                continue
            if d.since is not None and now - d.since > cap.window:
                continue  # an old drain: not part of a storm now
            if key is None or (d.since if d.since is not None else now, d.name) < key:
                ahead += 1
        counts.append(CodeCount(code, level, ahead + 1, cap.limit(level, population)))
    held = bool(counts) and all(c.limit is not None and c.rank > c.limit for c in counts)
    return CapDecision(held, tuple(counts), population)
