"""The runs a culprit is named on (ccrhost.model.culprit.evidence), shared
by the scale stage (its groups) and the rack NVLink test (its trays): the
smallest failed run with the culprit whose rest passed, and that run; a rest
too small to run counts only where the caller says so (the scale stage)."""

from dataclasses import dataclass

from ccrhost.model.culprit import evidence


@dataclass(frozen=True)
class Run:
    group: tuple[str, ...]
    passed: bool | None


def members(run):
    return run.group


# the rack of three with c slow, as fleet/admission.py isolate runs it
WHOLE, NO_A, NO_B, NO_C = Run(("a", "b", "c"), False), Run(("b", "c"), False), Run(("a", "c"), False), \
    Run(("a", "b"), True)
RACK = [WHOLE, NO_A, NO_B, NO_C]


def test_the_smallest_failed_run_whose_rest_passed_and_that_passing_run():
    assert evidence("c", RACK, members) == (WHOLE, NO_C)
    bigger = [Run(("a", "b", "c", "d", "e"), False), Run(("a", "b", "d", "e"), True)]
    assert evidence("c", bigger + RACK, members) == (WHOLE, NO_C)  # three members, not five


def test_a_rest_of_one_counts_only_where_the_caller_never_runs_one():
    # the scale stage: b alone is never run, so the pair (b, c) failing is the smallest evidence
    assert evidence("c", RACK, members, lone_rest_passes=True) == (NO_A, None)


def test_no_run_without_it_passed_gives_the_first_failed_run_with_it_and_none():
    runs = [Run(("a", "b"), None), WHOLE, Run(("a", "b", "c", "d"), False)]
    assert evidence("c", runs, members) == (WHOLE, None)
    assert evidence("d", [WHOLE], members) == (None, None)


def test_the_members_are_read_through_the_callers_function():
    @dataclass(frozen=True)
    class Tray:
        trays: tuple[str, ...]
        passed: bool | None

    runs = [Tray(r.group, r.passed) for r in RACK]
    assert evidence("c", runs, lambda r: r.trays) == (runs[0], runs[3])
