"""Incremental admission and tray isolation: the slow member is named in a
log2 number of runs, every other member is admitted, and an oracle that
breaks the one-slow-member assumption yields undecided, never a culprit."""

import math

import pytest

from ccrhost.fleet.admission import Finding, admission_plan, admit, isolate, replay


def names(n, prefix="n"):
    return [f"{prefix}{i:03d}" for i in range(n)]


class Slow:
    """The assumption holds: a group fails exactly when it holds a slow member.
    Keeps every call, to check the record lists exactly the runs made."""

    def __init__(self, *slow, fails=None):
        self.slow = set(slow)
        self.fails = fails or (lambda group: bool(self.slow & set(group)))
        self.calls = []

    def __call__(self, group):
        assert isinstance(group, tuple) and group, group
        self.calls.append(group)
        return not self.fails(group)


def bisect_runs(rec, step):
    return [r for r in rec.runs if r.step == step and r.purpose in ("halve", "confirm")]


# --- the plan --------------------------------------------------------------

@pytest.mark.parametrize("n, start, sizes", [
    (8, 2, [2, 4, 8]), (16, 2, [2, 4, 8, 16]), (65, 2, [2, 4, 8, 16, 32, 64, 65]),
    (10, 3, [3, 6, 10]), (1, 2, [1]), (2, 2, [2]), (0, 2, []), (5, 1, [1, 2, 4, 5]),
])
def test_the_plan_doubles_prefixes_of_one_order_then_takes_all(n, start, sizes):
    nodes = names(n)
    assert admission_plan(nodes, start) == [tuple(nodes[:s]) for s in sizes]


def test_the_plan_refuses_a_node_twice_and_a_start_below_one():
    with pytest.raises(ValueError, match="^node named more than once: b$"):
        admission_plan(["a", "b", "c", "b"])
    with pytest.raises(ValueError, match="^start must be at least 1, not 0$"):
        admission_plan(["a", "b"], 0)


# --- admit: one slow node ----------------------------------------------------

def step_of(n, pos, start=2):
    """(1-based step, the index of its first new node, its new-node count) for ``pos``."""
    prev = 0
    for i, group in enumerate(admission_plan(names(n), start), 1):
        if pos < len(group):
            return i, prev, len(group) - prev
        prev = len(group)


CASES = [(n, pos) for n in (8, 16, 64, 65)
         for pos in sorted({0, 1, 2, 3, 4, 8, 32, 33, n // 2, n - 2, n - 1} & set(range(n)))]


@pytest.mark.parametrize("n, pos", CASES)
def test_admit_names_the_one_slow_node_in_a_log2_search_and_admits_the_rest(n, pos):
    nodes = names(n)
    oracle = Slow(nodes[pos])
    rec = admit(nodes, oracle)
    step, first_new, k = step_of(n, pos)
    plan = admission_plan(nodes)

    assert rec.culprits == (Finding(nodes[pos], step, len(plan[step - 1])),)
    assert rec.undecided == ()
    assert rec.admitted == tuple(x for x in nodes if x != nodes[pos])
    # every step of 8, 16, 64 and 65 adds a power of two of new nodes: the search
    # takes log2(k) halvings, plus a confirming run when the node is the second of the last pair
    assert k & (k - 1) == 0
    rel = pos - first_new
    found = bisect_runs(rec, step)
    assert len(found) == (0 if k == 1 else int(math.log2(k)) + rel % 2)
    assert len(found) <= math.ceil(math.log2(k)) + 1
    # each bisection run is the last passing group plus some of the step's new nodes
    passing = tuple(x for x in nodes[:first_new] if x != nodes[pos])
    for r in found:
        assert r.group[:len(passing)] == passing and set(r.group[len(passing):]) <= set(nodes[first_new:first_new + k])
    # no bisection in any other step; the step reruns without the culprit unless
    # nothing is left of it (k 1) or that group already passed as a half (k 2, the second node)
    assert all(r.purpose in ("step", "retry") for r in rec.runs if r.step != step)
    retry = 0 if k == 1 or (k == 2 and rel == 1) else 1
    assert [r.purpose for r in rec.runs].count("retry") == retry
    assert len(rec.runs) == len(plan) + len(found) + retry
    # the record is exactly the runs made, in order, none twice
    assert [r.group for r in rec.runs] == oracle.calls
    assert [r.passed for r in rec.runs] == [nodes[pos] not in g for g in oracle.calls]
    assert len(set(oracle.calls)) == len(oracle.calls)


def test_admit_worked_example_last_node_of_eight():
    nodes = names(8)
    rec = admit(nodes, Slow("n007"))
    assert [(r.group, r.passed, r.purpose, r.step) for r in rec.runs] == [
        (tuple(nodes[:2]), True, "step", 1),
        (tuple(nodes[:4]), True, "step", 2),
        (tuple(nodes), False, "step", 3),
        (tuple(nodes[:6]), True, "halve", 3),                     # the first half of n004..n007 is clean
        (tuple(nodes[:4]) + ("n006",), True, "halve", 3),         # so is n006
        (tuple(nodes[:4]) + ("n007",), False, "confirm", 3),      # n007 presumed, then shown
        (tuple(nodes[:7]), True, "retry", 3),
    ]
    assert rec.culprits == (Finding("n007", 3, 8),) and rec.admitted == tuple(nodes[:7])


def test_a_slow_node_in_the_first_pair_is_run_alone_against_the_empty_group():
    rec = admit(names(8), Slow("n000"))
    assert [(r.group, r.passed, r.purpose) for r in rec.runs[:3]] == [
        (("n000", "n001"), False, "step"), (("n000",), False, "halve"), (("n001",), True, "retry")]
    assert rec.culprits == (Finding("n000", 1, 2),)
    assert rec.admitted == tuple(names(8)[1:])


@pytest.mark.parametrize("pos", range(24))
def test_uneven_steps_stay_within_the_log2_bound(pos):
    # start 3 gives steps of 3, 3, 6 and 12 new nodes: halves of unequal size
    nodes = names(24)
    rec = admit(nodes, Slow(nodes[pos]), start=3)
    step, _, k = step_of(24, pos, start=3)
    assert [c.node for c in rec.culprits] == [nodes[pos]]
    assert rec.admitted == tuple(x for x in nodes if x != nodes[pos])
    assert math.floor(math.log2(k)) <= len(bisect_runs(rec, step)) <= math.ceil(math.log2(k)) + 1


# --- admit: none, two, contradictions ---------------------------------------

@pytest.mark.parametrize("n", [8, 16, 64, 65])
def test_no_slow_node_means_one_run_per_step_and_no_bisection(n):
    nodes = names(n)
    rec = admit(nodes, Slow())
    assert [(r.group, r.passed, r.purpose) for r in rec.runs] == [(g, True, "step") for g in admission_plan(nodes)]
    assert rec.admitted == tuple(nodes) and rec.culprits == () and rec.undecided == ()


def test_two_slow_nodes_in_different_steps_are_both_found():
    nodes = names(16)
    rec = admit(nodes, Slow("n003", "n012"))
    assert rec.culprits == (Finding("n003", 2, 4), Finding("n012", 4, 16))
    assert rec.admitted == tuple(x for x in nodes if x not in ("n003", "n012"))
    assert len(bisect_runs(rec, 2)) == 1 + 1 and len(bisect_runs(rec, 4)) == 3 + 0


def test_two_slow_nodes_in_one_step_are_found_by_rerunning_it():
    nodes = names(16)
    rec = admit(nodes, Slow("n009", "n014"))
    assert rec.culprits == (Finding("n009", 4, 16), Finding("n014", 4, 16))
    assert rec.admitted == tuple(x for x in nodes if x not in ("n009", "n014"))
    assert [r.passed for r in rec.runs if r.purpose == "retry"] == [False, True]


def test_a_group_that_fails_while_every_half_passes_is_undecided_never_a_culprit():
    nodes = names(8)
    oracle = Slow(fails=lambda g: len(g) == 8)  # only the whole group fails
    rec = admit(nodes, oracle)
    assert rec.culprits == ()
    assert rec.undecided == tuple(Finding(x, 3, 8) for x in nodes[4:])
    assert rec.admitted == tuple(nodes[:4])
    assert [(r.group, r.passed, r.purpose) for r in bisect_runs(rec, 3)] == [
        (tuple(nodes[:6]), True, "halve"), (tuple(nodes[:4]) + ("n006",), True, "halve"),
        (tuple(nodes[:4]) + ("n007",), True, "confirm")]


def test_two_nodes_slow_only_together_are_undecided_and_later_steps_go_on():
    nodes = names(16)
    rec = admit(nodes, Slow(fails=lambda g: {"n004", "n007"} <= set(g)))
    assert rec.culprits == ()
    assert [u.node for u in rec.undecided] == nodes[4:8]
    # the next step grows from the last passing group, without the undecided nodes
    assert rec.runs[-1] == type(rec.runs[-1])(tuple(nodes[:4] + nodes[8:]), True, "step", 4)
    assert rec.admitted == tuple(nodes[:4] + nodes[8:])


def test_a_size_limit_on_64_nodes_is_undecided_not_blamed_on_a_node():
    nodes = names(64)
    rec = admit(nodes, Slow(fails=lambda g: len(g) > 40))
    assert rec.culprits == ()
    assert [u.node for u in rec.undecided] == nodes[32:]
    assert rec.admitted == tuple(nodes[:32])
    assert len(bisect_runs(rec, 6)) <= math.ceil(math.log2(32)) + 1


def test_an_oracle_answer_that_is_not_a_bool_is_refused():
    with pytest.raises(TypeError, match=r"^run\(n000, n001\) returned None, not True or False$"):
        admit(names(4), lambda g: None)


def test_a_recorded_admission_replays_run_for_run():
    nodes = names(64)
    rec = admit(nodes, Slow("n040", "n005"))
    assert admit(nodes, replay(rec.runs)) == rec
    with pytest.raises(KeyError, match="no recorded run of n000, n001"):
        admit(nodes, replay(()))


def test_admitting_nobody_runs_nothing():
    rec = admit([], Slow())
    assert rec.runs == () and rec.admitted == ()


# --- isolate: a rack of 18 trays ----------------------------------------------

TRAYS = names(18, "tray")


def is_rack_without_some(group):
    return group == tuple(t for t in TRAYS if t in set(group))


@pytest.mark.parametrize("pos", range(18))
def test_isolate_names_the_slow_tray_of_18_in_a_log2_search(pos):
    oracle = Slow(TRAYS[pos])
    rec = isolate(TRAYS, oracle)
    assert rec.culprit == TRAYS[pos] and rec.undecided == ()
    assert rec.runs[0].group == tuple(TRAYS) and not rec.runs[0].passed
    # 1 + 4 or 5 halvings (18 -> 9 -> 4 or 5 -> ...) + a confirming run when presumed
    assert 1 + math.floor(math.log2(18)) <= len(rec.runs) <= 1 + math.ceil(math.log2(18)) + 1
    assert all(is_rack_without_some(r.group) for r in rec.runs)
    assert [r.group for r in rec.runs] == oracle.calls
    # the named tray: some run without it passed and the same group with it failed
    ok = {r.group for r in rec.runs if r.passed}
    bad = {r.group for r in rec.runs if not r.passed}
    assert any(tuple(t for t in TRAYS if t in set(g) | {TRAYS[pos]}) in bad for g in ok | {()})


@pytest.mark.parametrize("pos, count", [(0, 5), (8, 7), (9, 5), (17, 7)])
def test_isolate_run_counts_by_position(pos, count):
    assert len(isolate(TRAYS, Slow(TRAYS[pos])).runs) == count


def test_isolate_worked_example_tray_0():
    rec = isolate(TRAYS, Slow("tray000"))
    base = tuple(TRAYS[9:])
    assert [(r.group, r.passed, r.purpose) for r in rec.runs] == [
        (tuple(TRAYS), False, "rack"),
        (base, True, "without"),                      # clean without the first nine: the fault is there
        (tuple(TRAYS[:4]) + base, False, "halve"),
        (tuple(TRAYS[:2]) + base, False, "halve"),
        (("tray000",) + base, False, "halve"),
    ]


def test_a_healthy_rack_is_run_once():
    rec = isolate(TRAYS, Slow())
    assert [(r.group, r.passed, r.purpose) for r in rec.runs] == [(tuple(TRAYS), True, "rack")]
    assert rec.culprit is None and rec.undecided == ()


def test_a_rack_that_fails_only_whole_is_undecided_never_a_tray():
    # every half passes: no tray is the one
    rec = isolate(TRAYS, Slow(fails=lambda g: len(g) == 18))
    assert rec.culprit is None
    assert rec.undecided == tuple(TRAYS[:9])  # the rack passed without these, but with each one back too
    assert len(rec.runs) <= 1 + math.ceil(math.log2(18)) + 1


def test_two_slow_trays_in_different_halves_are_undecided():
    rec = isolate(TRAYS, Slow("tray003", "tray012"))
    assert rec.culprit is None and rec.undecided == tuple(TRAYS)  # no run without trays ever passed
    assert rec.runs[-1].purpose == "confirm" and not rec.runs[-1].passed


def test_two_slow_trays_in_one_half_name_one_of_them():
    rec = isolate(TRAYS, Slow("tray003", "tray005"))
    assert rec.culprit == "tray003"


def test_a_rack_of_one_failing_tray_names_it_without_running_an_empty_rack():
    oracle = Slow("tray000")
    rec = isolate(["tray000"], oracle)
    assert rec.culprit == "tray000" and oracle.calls == [("tray000",)]


def test_isolate_refuses_a_tray_twice_and_replays():
    with pytest.raises(ValueError, match="^tray named more than once: t1$"):
        isolate(["t1", "t2", "t1"], Slow())
    rec = isolate(TRAYS, Slow("tray011"))
    assert isolate(TRAYS, replay(rec.runs)) == rec


def test_two_nodes_slow_together_across_steps_blame_the_one_that_completed_a_passing_group():
    # n001 passed in every group up to 4; adding n007 to that group fails it: the evidence names n007
    nodes = names(8)
    rec = admit(nodes, Slow(fails=lambda g: {"n001", "n007"} <= set(g)))
    assert rec.culprits == (Finding("n007", 3, 8),)
    assert rec.runs[-2] == type(rec.runs[-2])(tuple(nodes[:4]) + ("n007",), False, "confirm", 3)
