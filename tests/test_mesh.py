"""The full RDMA mesh in groups (fleet/mesh.py): every pair once, no node
twice in a round, and pruning the nodes that fail their pairs."""

from itertools import combinations

import pytest

from ccrhost.fleet.mesh import Pruned, groups, plan, prune, pruned_reasons, rounds
from ccrhost.model.status import FAIL


def names(n: int) -> list[str]:
    return [f"node{i:02d}" for i in range(n)]


@pytest.mark.parametrize("n, expected_rounds", [(2, 1), (3, 3), (8, 7), (33, 34), (64, 63)])
def test_every_pair_once_and_no_node_twice_in_a_round(n, expected_rounds):
    nodes = names(n)
    schedule = rounds(nodes)
    tested = [frozenset(p) for r in schedule for p in r]
    assert len(tested) == len(set(tested)) == n * (n - 1) // 2
    assert set(tested) == {frozenset(p) for p in combinations(nodes, 2)}
    for r in schedule:
        busy = [node for pair in r for node in pair]
        assert len(busy) == len(set(busy)), r
    assert len(schedule) == expected_rounds


def test_groups_are_near_equal_and_at_most_the_size():
    assert [len(g) for g in groups(names(33))] == [16, 17]
    assert [len(g) for g in groups(names(64))] == [32, 32]
    assert [len(g) for g in groups(names(70))] == [23, 23, 24]
    assert sum(groups(names(70)), []) == names(70)
    assert groups([]) == []


def test_the_first_wave_stays_inside_the_groups_then_groups_meet():
    waves = plan(names(64))
    first, _ = groups(names(64))
    assert [w.groups for w in waves] == [[(0,), (1,)], [(0, 1)]]
    assert [len(w.rounds) for w in waves] == [31, 32]
    assert all((a in first) == (b in first) for r in waves[0].rounds for a, b in r)
    assert all((a in first) != (b in first) for r in waves[1].rounds for a, b in r)


def test_three_groups_meet_in_a_group_tournament():
    waves = plan(names(9), size=3)
    assert [w.groups for w in waves] == [[(0,), (1,), (2,)], [(1, 2)], [(0, 2)], [(0, 1)]]


def test_a_refused_group_size_or_a_node_twice():
    with pytest.raises(ValueError, match="group size 1"):
        groups(names(4), size=1)
    with pytest.raises(ValueError, match="named twice"):
        groups(["a", "b", "a"])


def all_pairs(nodes, bad=(), bad_pairs=()):
    out = {}
    for a, b in combinations(nodes, 2):
        out[(a, b)] = not (a in bad or b in bad or {a, b} in [set(p) for p in bad_pairs])
    return out


def test_a_bad_node_is_pruned_and_its_peers_stay():
    nodes = names(8)
    pruned = prune(all_pairs(nodes, bad=["node03"]))
    assert [(p.node, p.share, p.tested, len(p.failed)) for p in pruned] == [("node03", 1.0, 7, 7)]
    assert all("node03" in pair for pair in pruned[0].failed)


def test_a_node_that_failed_only_with_pruned_nodes_stays():
    # node01 fails with node00 and node02, both bad, and nothing else: 2 of 3 before they go
    nodes = names(4)
    results = all_pairs(nodes, bad=["node00", "node02"])
    assert [p.node for p in prune(results)] == ["node00", "node02"]


def test_below_the_threshold_nobody_is_pruned():
    nodes = names(5)
    results = all_pairs(nodes, bad_pairs=[("node00", "node01")])   # node00: 1 of 4 failed
    assert prune(results) == []
    assert [p.node for p in prune(results, threshold=0.25)] == ["node00", "node01"]


def test_exactly_half_prunes_and_ties_go_together():
    # two nodes, their one pair failed: nothing tells which is at fault
    assert [p.node for p in prune({("a", "b"): False})] == ["a", "b"]
    # c failed 2 of 4 (exactly the threshold) with peers that are otherwise clean
    results = all_pairs(["a", "b", "c", "d", "e"], bad_pairs=[("c", "a"), ("c", "b")])
    assert [(p.node, p.share) for p in prune(results)] == [("c", 0.5)]


def test_nothing_failed_prunes_nothing():
    assert prune(all_pairs(names(6))) == []
    assert prune({}) == []


def test_the_pruned_reason_names_share_threshold_and_peers():
    reasons = pruned_reasons([Pruned("node03", 0.75, 4, [("node01", "node03"), ("node03", "node04"),
                                                          ("node03", "node05")])])
    reason = reasons["node03"]
    assert (reason.level, reason.code) == (FAIL, "rdma_mesh_pruned")
    assert reason.message == ("failed 3 of 4 RDMA mesh pairs (75%; at least 50% prunes, AMD cvs "
                              "prune_failure_threshold): with node01, node04, node05")


@pytest.mark.parametrize("size", [2, 3, 5, 32])
def test_every_count_up_to_forty_covers_each_pair_once_within_the_rounds_bound(size):
    for n in range(41):
        nodes = names(n)
        schedule = rounds(nodes, size)
        tested = [frozenset(p) for r in schedule for p in r]
        assert sorted(tested, key=sorted) == sorted({frozenset(p) for p in combinations(nodes, 2)}, key=sorted)
        assert all(len({x for p in r for x in p}) == 2 * len(r) for r in schedule), n
        cut = groups(nodes, size)
        largest, count = max(map(len, cut), default=0), len(cut)
        assert len(schedule) <= largest * (count + count % 2), (n, size)
