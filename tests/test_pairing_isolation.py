"""Isolation when no host is known good after the first round (issue 45
case 15): a suspect is paired with a host whose pair never ran, or two
unresolved hosts that were never paired together, so one bad host does not
take a healthy partner down with it."""

import sys
from pathlib import Path

from ccrhost.fleet.allreduce import AllReducePair, pair_fleet
from ccrhost.fleet.pairing import BLIND_ROUNDS, cover
from ccrhost.model.allreduce import PAIR, Figure, judge_run
from ccrhost.model.status import FAIL, OK, UNKNOWN
from ccrhost.probes.nccl_tests import run_result

sys.path.insert(0, str(Path(__file__).parent))
from nccl_report import at_busbw  # noqa: E402

FIGURE = Figure(90.0, "test")


class Fleet:
    """Pairs run by each node's fault: 'slow' (its link), 'wrong' (corrupts), 'hang' (never answers),
    'missing' (no binary: srun names the node, as it does when its tasks exit by themselves)."""

    def __init__(self, faults):
        self.faults, self.rounds = faults, []

    def __call__(self, pairs):
        self.rounds.append(list(pairs))
        return [self.one(a, b) for a, b in pairs]

    def one(self, a, b):
        kinds = {self.faults.get(a), self.faults.get(b)}
        if "missing" in kinds:
            where = [n for n in (a, b) if self.faults.get(n) == "missing"]
            text = "8: slurmstepd: error: execve(): all_reduce_perf: No such file or directory\n" + "".join(
                f"srun: error: {n}: tasks 8-15: Exited with exit code 2\n" for n in where)
            run = run_result(text, 2)
        elif "hang" in kinds:
            run = run_result("", None, timed_out=True)
        elif "wrong" in kinds:
            run = run_result(at_busbw(100.0, ranks=16, wrong=7), 1)
        elif "slow" in kinds:
            run = run_result(at_busbw(50.0, ranks=16), 0)
        else:
            run = run_result(at_busbw(100.0, ranks=16), 0)
        return AllReducePair(a, b, judge_run(run, PAIR, FIGURE, f"{a}+{b}"), run.missing_on)


NODES = [f"node{i}" for i in range(1, 7)]
ISSUE = {"node2": "slow", "node3": "wrong", "node4": "hang", "node5": "missing"}


def test_the_issues_six_nodes_name_each_bad_node_and_clear_node1_and_node6():
    fleet = Fleet(ISSUE)
    got = pair_fleet(NODES, fleet, retries=1, valid_for=60)
    assert {n: (r.status, r.code) for n, r in got.items()} == {
        "node1": (OK, None), "node2": (FAIL, "allreduce_slow"), "node3": (FAIL, "allreduce_wrong"),
        "node4": (UNKNOWN, "allreduce_hang"), "node5": (UNKNOWN, "allreduce_missing"), "node6": (OK, None)}
    assert fleet.rounds[0] == [("node1", "node2"), ("node3", "node4"), ("node5", "node6")]
    assert fleet.rounds[1] == [("node1", "node2")]  # the slow pair's retry
    # node5 was named by srun: node6 never ran, so it tells which of node1 and node2 is slow
    assert fleet.rounds[2] == [("node6", "node1")]
    assert fleet.rounds[3] == [("node6", "node2"), ("node1", "node3")]  # each suspect with a cleared host
    assert fleet.rounds[4:] == [[("node6", "node2")], [("node6", "node4")]]  # the slow pair's retry; node4 last
    assert "[node2: slow with node1 and with known-good node6]" in got["node2"].message
    assert "[node1: slow with node2, fine with node6]" in got["node1"].message
    assert "[node3: unmeasurable with node4, wrong results with known-good node1]" in got["node3"].message
    assert "[node4: unmeasurable with node3, unmeasurable with known-good node6]" in got["node4"].message
    assert "[node5: named at fault by the run's own output]" in got["node5"].message
    assert "(on node5)" in got["node5"].message
    # node4 hangs with every partner: each of its runs is one deadline, and it is tried with two partners
    assert sum(1 for rnd in fleet.rounds for p in rnd if "node4" in p) == 2
    assert all(r.status != FAIL for n, r in got.items() if n in ("node1", "node4", "node5", "node6"))


def test_with_no_known_good_and_no_pair_that_never_ran_unresolved_hosts_are_crossed():
    # node1+node2 slow, node3+node4 wrong: every host is a suspect; a crossed pair clears two hosts
    fleet = Fleet({"node2": "slow", "node3": "wrong"})
    got = pair_fleet(NODES[:4], fleet, retries=0, valid_for=60)
    assert {n: r.code for n, r in got.items()} == {"node1": None, "node2": "allreduce_slow",
                                                   "node3": "allreduce_wrong", "node4": None}
    assert fleet.rounds[0] == [("node1", "node2"), ("node3", "node4")]
    # crossed with hosts never paired with: both bad again, then node1+node4 is fine and clears both
    assert fleet.rounds[1:] == [[("node1", "node3"), ("node2", "node4")], [("node1", "node4"), ("node2", "node3")],
                                [("node4", "node2"), ("node1", "node3")]]
    assert "[node2: slow with node1 and with known-good node4]" in got["node2"].message


def test_blind_rounds_are_bounded_when_every_host_is_bad():
    fleet = Fleet(dict.fromkeys(NODES, "slow"))
    got = pair_fleet(NODES, fleet, retries=0, valid_for=60)
    assert len(fleet.rounds) <= 1 + BLIND_ROUNDS
    assert all(r.status == FAIL and "no known-good partner left" in r.message for r in got.values())
    pairs = [frozenset(p) for rnd in fleet.rounds for p in rnd]
    assert len(pairs) == len(set(pairs))  # never the same two hosts twice


def test_a_known_good_partner_is_still_preferred_and_never_runs_two_pairs_at_once():
    fleet = Fleet({"node2": "slow", "node3": "slow"})
    got = pair_fleet(NODES, fleet, retries=0, valid_for=60)
    assert fleet.rounds[1] == [("node5", "node1"), ("node6", "node2")]
    assert fleet.rounds[2] == [("node5", "node3"), ("node6", "node4")]
    for rnd in fleet.rounds:
        hosts = [h for p in rnd for h in p]
        assert len(hosts) == len(set(hosts))
    assert {n for n, r in got.items() if r.status == FAIL} == {"node2", "node3"}


def test_a_named_host_is_not_retested_and_its_partner_waits_for_a_good_one():
    # node1+node2 fine, node3 missing (named): node4 never ran and is cleared by node1, node3 is not run again
    fleet = Fleet({"node3": "missing"})
    got = cover(NODES[:4], fleet, retries=0)
    assert fleet.rounds == [[("node1", "node2"), ("node3", "node4")], [("node1", "node4")]]
    assert got["node3"][0].verdict.code == "allreduce_missing"
    assert got["node4"][1] == "unmeasurable with node3, fine with known-good node1"
    assert got["node4"][0].verdict.status == OK


def test_a_host_whose_pair_never_ran_and_finds_no_partner_says_so():
    got = cover(["node5", "node6"], Fleet({"node5": "missing"}), retries=0)
    assert got["node5"][1] == "named at fault by the run's own output"
    assert got["node6"][1] == "never ran: node5 was named at fault, and no partner was left"
    assert got["node6"][0].verdict.code == "allreduce_missing"  # UNKNOWN, never a pass nor a FAIL
