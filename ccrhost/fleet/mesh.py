"""A full mesh of RDMA pair tests in groups, and pruning its bad nodes.

AMD cvs (shared/reference/acceptance.md) tests every pair of nodes in
groups of 32 (``nodes_per_full_mesh_group``), in waves, and prunes a node
that fails half its pairs (``prune_failure_threshold`` 0.5). Planning here
is pure: nodes in, rounds of pairs out, and results in, pruned nodes out.

Plan. The nodes, in inventory order, are cut into G groups of near-equal
size, at most ``size`` each. Wave 0 tests each group inside itself: a
round-robin tournament per group (circle method: fix the first node, turn
the others one place a round), m-1 rounds for m nodes (m rounds when m is
odd, one node resting each round); the groups are disjoint, so round t of
wave 0 is every group's round t at once. Then the groups meet each other
in a round-robin tournament of groups (G-1 group rounds, G when G is odd);
in each, the groups paired off test across: groups A (p nodes) and B
(q >= p nodes) take q rounds, round r pairing A[k] with B[(k + r) mod q],
so each node of A meets each of B once and no node twice in a round.
Every pair of nodes is tested exactly once and no node is in two pairs
of one round. Rounds: at most s (wave 0) + s per group round, s the
largest group: s * G for an even G, s * (G + 1) for an odd one; 64 nodes
in 2 groups of 32: 31 + 32 = 63, the n - 1 of one tournament over all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.model.status import FAIL, Reason

Pair = tuple[str, str]
GROUP_SIZE = 32            # AMD cvs nodes_per_full_mesh_group
PRUNE_THRESHOLD = 0.5      # AMD cvs prune_failure_threshold


def groups(nodes: list[str], size: int = GROUP_SIZE) -> list[list[str]]:
    """``nodes`` in order, cut into the fewest groups of at most ``size``,
    their sizes differing by one at most."""
    if size < 2:
        raise ValueError(f"group size {size}: a group needs two nodes")
    if len(set(nodes)) != len(nodes):
        raise ValueError("a node is named twice")
    count = -(-len(nodes) // size) if nodes else 0
    cuts = [len(nodes) * i // count for i in range(count + 1)] if count else [0]
    return [nodes[cuts[i]:cuts[i + 1]] for i in range(count)]


def tournament(items: list) -> list[list[tuple]]:
    """Round-robin rounds (circle method) over ``items``: every two meet
    once; an odd count rests one item a round."""
    ring = list(items) + ([None] if len(items) % 2 else [])
    n, rounds = len(ring), []
    for _ in range(n - 1):
        pairs = [(ring[i], ring[n - 1 - i]) for i in range(n // 2)]
        rounds.append([p for p in pairs if None not in p])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return rounds


def across(a: list[str], b: list[str]) -> list[list[Pair]]:
    """Rounds pairing every node of ``a`` with every node of ``b`` once."""
    small, big = (a, b) if len(a) <= len(b) else (b, a)
    return [[(small[k], big[(k + r) % len(big)]) for k in range(len(small))] for r in range(len(big))]


@dataclass(frozen=True)
class Wave:
    groups: list[tuple[int, ...]]      # (i,) inside group i; (i, j) across groups i and j
    rounds: list[list[Pair]]


def _merge(parts: list[list[list[Pair]]]) -> list[list[Pair]]:
    """Disjoint sets of nodes run their round t at the same time."""
    return [[p for part in parts if t < len(part) for p in part[t]] for t in range(max(map(len, parts), default=0))]


def plan(nodes: list[str], size: int = GROUP_SIZE) -> list[Wave]:
    cut = groups(nodes, size)
    waves = [Wave([(i,) for i in range(len(cut))], _merge([tournament(g) for g in cut]))] if nodes else []
    for meeting in tournament(list(range(len(cut)))):
        waves.append(Wave(meeting, _merge([across(cut[i], cut[j]) for i, j in meeting])))
    return [w for w in waves if w.rounds and any(w.rounds)]


def rounds(nodes: list[str], size: int = GROUP_SIZE) -> list[list[Pair]]:
    """Every round of every wave, in order."""
    return [r for w in plan(nodes, size) for r in w.rounds]


@dataclass(frozen=True)
class Pruned:
    node: str
    share: float                       # the share of its pairs it failed when pruned
    tested: int                        # its pairs with nodes not pruned before it
    failed: list[Pair] = field(default_factory=list)


def prune(results: dict[Pair, bool], threshold: float = PRUNE_THRESHOLD) -> list[Pruned]:
    """Nodes that failed at least ``threshold`` of their pairs (True: the
    pair passed), worst first. Repeatedly the worst node at or above the
    threshold is pruned (all tied at the worst at once) and every share is
    counted again without its pairs, so a node whose failures were only with
    pruned nodes stays in; a node whose pairs were all with pruned nodes has
    nothing left against it and stays too."""
    out: list[Pruned] = []
    gone: set[str] = set()
    while True:
        tested: dict[str, int] = {}
        failed: dict[str, list[Pair]] = {}
        for pair, ok in results.items():
            if gone.intersection(pair):
                continue
            for node in pair:
                tested[node] = tested.get(node, 0) + 1
                if not ok:
                    failed.setdefault(node, []).append(pair)
        shares = {n: len(failed.get(n, [])) / t for n, t in tested.items()}
        worst = max(shares.values(), default=0.0)
        if not failed or worst < threshold:
            return out
        for node in sorted(n for n, s in shares.items() if s == worst):
            out.append(Pruned(node, worst, tested[node], failed[node]))
            gone.add(node)


def pruned_reasons(pruned: list[Pruned], threshold: float = PRUNE_THRESHOLD) -> dict[str, Reason]:
    """Each pruned node's FAIL ``rdma_mesh_pruned``, naming the pairs it failed."""
    out = {}
    for p in pruned:
        peers = ", ".join(b if a == p.node else a for a, b in p.failed)
        out[p.node] = Reason(FAIL, "rdma_mesh_pruned",
                             f"failed {len(p.failed)} of {p.tested} RDMA mesh pairs ({p.share:.0%}; at least "
                             f"{threshold:.0%} prunes, AMD cvs prune_failure_threshold): with {peers}")
    return out
