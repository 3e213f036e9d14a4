"""The pairwise all-reduce: one round covering every node, retries below
threshold only, and the isolation that names the bad node, not its pair."""

from ccrhost.fleet.allreduce import AllReducePair, pair_fleet, pair_figure
from ccrhost.model.allreduce import PAIR, Figure, judge_run
from ccrhost.model.status import FAIL, OK, UNKNOWN
from ccrhost.probes.nccl_tests import run_result

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from nccl_report import at_busbw  # noqa: E402

FIGURE = Figure(90.0, "test")


class Fleet:
    """Pairs run by rules per node: 'slow' halves its pairs' busbw, 'wrong'
    corrupts, 'hang' never answers, 'missing' has no binary, 'flaky' is
    slow on its first run only."""

    def __init__(self, faults):
        self.faults = faults
        self.rounds = []
        self.runs = {}

    def __call__(self, pairs):
        self.rounds.append(list(pairs))
        return [AllReducePair(a, b, self.one(a, b)) for a, b in pairs]

    def one(self, a, b):
        kinds = {self.faults.get(a), self.faults.get(b)}
        key = frozenset((a, b))
        self.runs[key] = self.runs.get(key, 0) + 1
        if "missing" in kinds:
            run = run_result("", None, missing="all_reduce_perf not found on " + (a if self.faults.get(a) else b))
        elif "hang" in kinds:
            run = run_result("", None, timed_out=True)
        elif "wrong" in kinds:
            run = run_result(at_busbw(100.0, ranks=16, wrong=7), 1)
        elif "slow" in kinds or ("flaky" in kinds and self.runs[key] == 1):
            run = run_result(at_busbw(50.0, ranks=16), 0)
        else:
            run = run_result(at_busbw(100.0, ranks=16), 0)
        return judge_run(run, PAIR, FIGURE, f"{a}+{b}")


def names(n):
    return [f"n{i}" for i in range(1, n + 1)]


def test_one_round_covers_every_node_in_parallel_pairs():
    fleet = Fleet({})
    got = pair_fleet(names(8), fleet, retries=2, valid_for=60, clock=lambda: 1.0)
    assert fleet.rounds == [[("n1", "n2"), ("n3", "n4"), ("n5", "n6"), ("n7", "n8")]]
    assert {n: r.status for n, r in got.items()} == dict.fromkeys(names(8), OK)
    assert got["n1"].value == 100.0 and got["n1"].mode == "pair" and got["n1"].measured_at == 1.0


def test_the_slow_node_is_named_and_its_partner_cleared():
    fleet = Fleet({"n4": "slow"})
    got = pair_fleet(names(6), fleet, retries=1, valid_for=60)
    assert got["n4"].status == FAIL and got["n4"].code == "allreduce_slow"
    assert "[n4: slow with n3 and with known-good n2]" in got["n4"].message
    assert got["n3"].status == OK and "[n3: slow with n4, fine with known-good n1]" in got["n3"].message
    assert [r.status for n, r in got.items() if n not in ("n4",)] == [OK] * 5
    # one round, the slow pair's retry, one isolation round (and its retry of the still-slow pair)
    assert fleet.rounds[0] == [("n1", "n2"), ("n3", "n4"), ("n5", "n6")]
    assert fleet.rounds[1] == [("n3", "n4")]
    assert fleet.rounds[2] == [("n1", "n3"), ("n2", "n4")]


def test_wrong_results_are_never_retried_and_the_corrupting_node_is_named():
    fleet = Fleet({"n2": "wrong"})
    got = pair_fleet(names(4), fleet, retries=2, valid_for=60)
    assert fleet.rounds[:2] == [[("n1", "n2"), ("n3", "n4")], [("n3", "n1"), ("n4", "n2")]]
    assert (got["n2"].status, got["n2"].code) == (FAIL, "allreduce_wrong")
    assert "wrong results with known-good n4" in got["n2"].message
    assert got["n1"].status == OK


def test_hung_and_missing_nodes_are_unknown_and_their_partners_pass():
    fleet = Fleet({"n2": "hang", "n5": "missing"})
    got = pair_fleet(names(6), fleet, retries=2, valid_for=60)
    assert (got["n2"].status, got["n2"].code) == (UNKNOWN, "allreduce_hang")
    assert (got["n5"].status, got["n5"].code) == (UNKNOWN, "allreduce_missing")
    assert got["n1"].status == OK and got["n6"].status == OK
    # no reruns of UNKNOWN: the round, then isolation rounds while good partners are fewer than suspects
    assert fleet.rounds == [[("n1", "n2"), ("n3", "n4"), ("n5", "n6")], [("n3", "n1"), ("n4", "n2")],
                            [("n3", "n5"), ("n4", "n6")]]


def test_a_pair_that_falls_short_once_passes_on_its_retry():
    fleet = Fleet({"n1": "flaky"})
    got = pair_fleet(names(4), fleet, retries=2, valid_for=60)
    assert got["n1"].status == OK and got["n2"].status == OK and got["n1"].message.endswith("(threshold 90 GB/s)")
    assert fleet.rounds == [[("n1", "n2"), ("n3", "n4")], [("n1", "n2")]]


def test_a_lone_node_has_no_pair():
    got = pair_fleet(["n1"], Fleet({}), retries=2, valid_for=60)
    assert got["n1"].status == UNKNOWN and "no other node" in got["n1"].message


def test_the_pair_figure_is_the_weaker_nodes():
    assert [f.busbw for f in pair_figure([400.0] * 8, [400.0] * 4, None)] == [184.0]
