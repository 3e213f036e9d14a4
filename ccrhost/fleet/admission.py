"""Which node (or tray) slows a collective, found by bisection: pure planning
for incremental admission (acceptance S4) and for a rack's slow tray.

A node can pass its pairs and still slow a large group, so groups grow by
doubling and a failing step is bisected instead of rerun node by node: the
culprit costs about log2 of the step's new nodes in runs, not one run each.
The caller's ``run(group) -> bool`` (True: the collective met its figure) is
the only oracle; every run is recorded so the search can be logged and
replayed.

The assumption: one slow member makes any group containing it fail, and a
group of good members passes. Where it does not hold (a group fails yet
every half of its suspects passes: a size limit, a flaky run) the members
are left undecided rather than guessed: one is named only where a group
without it passed and the same group with it failed (a fault of two members
together is blamed on the one that completed such a group, or undecided).
The empty group passes by definition and is never run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

Oracle = Callable[[tuple[str, ...]], bool]


@dataclass(frozen=True)
class Run:
    """One run of the collective: the group, its result, why it ran
    (``step``, ``retry``, ``halve``, ``confirm``; for a rack ``rack`` and
    ``without``) and the admission step it served (1-based; 0 for a rack)."""

    group: tuple[str, ...]
    passed: bool
    purpose: str
    step: int = 0


@dataclass(frozen=True)
class Finding:
    """A node named in an admission step (as its culprit, or undecided)."""

    node: str
    step: int   # 1-based index into admission_plan
    size: int   # that step's planned group size (before removals)


@dataclass(frozen=True)
class Admission:
    admitted: tuple[str, ...]          # the last group that passed
    culprits: tuple[Finding, ...]
    undecided: tuple[Finding, ...]     # the oracle contradicted the assumption in that step
    runs: tuple[Run, ...]


@dataclass(frozen=True)
class Isolation:
    culprit: str | None
    undecided: tuple[str, ...]  # the fault is among these (the rack passed without them; all when it never passed)
    runs: tuple[Run, ...]


def _distinct(members: Sequence[str], what: str) -> list[str]:
    # a duplicate would make "the group without it" ambiguous
    out = list(members)
    if len(set(out)) != len(out):
        dup = sorted({m for m in out if out.count(m) > 1})
        raise ValueError(f"{what} named more than once: {', '.join(dup)}")
    return out


def admission_plan(nodes: Sequence[str], start: int = 2) -> list[tuple[str, ...]]:
    """The growing groups: prefixes of ``nodes`` of size start, 2*start,
    4*start, ... while smaller than all of them, then all of them."""
    order = _distinct(nodes, "node")
    if start < 1:
        raise ValueError(f"start must be at least 1, not {start}")
    sizes, size = [], start
    while size < len(order):
        sizes.append(size)
        size *= 2
    if order:
        sizes.append(len(order))
    return [tuple(order[:s]) for s in sizes]


class _Recorder:
    """Runs the oracle once per distinct group and records each real run."""

    def __init__(self, run: Oracle):
        self.run = run
        self.runs: list[Run] = []
        self.seen: dict[tuple[str, ...], bool] = {}

    def __call__(self, group: tuple[str, ...], purpose: str, step: int = 0) -> bool:
        if not group:
            return True
        if group in self.seen:  # a retry equal to a half that already passed costs nothing
            return self.seen[group]
        result = self.run(group)
        if not isinstance(result, bool):
            # None (could not run) read as a failure would bisect toward an innocent node
            raise TypeError(f"run({', '.join(group)}) returned {result!r}, not True or False")
        self.seen[group] = result
        self.runs.append(Run(group, result, purpose, step))
        return result


def _narrow(candidates: list[str], holds_fault: Callable[[list[str], str], bool]) -> tuple[str | None, list[str]]:
    """Halve ``candidates`` (already shown to hold the fault) down to one.

    ``holds_fault(half, purpose)`` runs the one test that shows the fault
    lies in ``half``. Only the first half is tested: when it is cleared the
    second is presumed (saves a run per level), and a presumed last member
    gets one confirming run. Returns (the culprit or None, the smallest set
    shown to hold the fault).
    """
    shown, suspect, presumed = list(candidates), list(candidates), False
    while len(suspect) > 1:
        half = suspect[:len(suspect) // 2]
        if holds_fault(half, "halve"):
            shown = suspect = half
            presumed = False
        else:
            suspect = suspect[len(suspect) // 2:]
            presumed = True
    if presumed and not holds_fault(suspect, "confirm"):
        return None, shown  # every half cleared: the assumption failed, name no one
    return suspect[0], suspect


def admit(nodes: Sequence[str], run: Oracle, start: int = 2) -> Admission:
    """Grow groups by ``admission_plan``; bisect a failing step's new nodes
    against the last passing group, remove the culprit, rerun the step
    without it (a second slow node in the same step is found the same way),
    then keep growing. Groups keep the fixed order, less the nodes removed.

    Runs for one failing step of k new nodes: the halvings to reach the
    culprit (floor or ceil of log2 k by its position) plus one confirming
    run when the last halving cleared the tested half, so at most
    ceil(log2 k) + 1. Then one rerun of the step without it, unless that
    group already ran or nothing of the step is left.
    """
    plan = admission_plan(nodes, start)
    rec = _Recorder(run)
    passing: tuple[str, ...] = ()
    removed: set[str] = set()
    culprits: list[Finding] = []
    undecided: list[Finding] = []
    for step, planned in enumerate(plan, 1):
        purpose = "step"
        while True:
            have = set(passing)
            new = [n for n in planned if n not in removed and n not in have]
            group = passing + tuple(new)
            if not new or rec(group, purpose, step):
                passing = group
                break
            culprit, _ = _narrow(new, lambda half, why, base=passing, step=step: not rec(base + tuple(half), why, step))
            if culprit is None:
                # name the whole step undecided rather than guess among its nodes
                undecided.extend(Finding(n, step, len(planned)) for n in new)
                removed.update(new)
                break
            culprits.append(Finding(culprit, step, len(planned)))
            removed.add(culprit)
            purpose = "retry"
    return Admission(passing, tuple(culprits), tuple(undecided), tuple(rec.runs))


def isolate(trays: Sequence[str], run: Oracle) -> Isolation:
    """Run the whole rack; only if it fails, run it without half of the
    suspect trays at a time until a run passes. That run is a clean base:
    the fault is in the half it left out, which is then halved the way
    ``admit`` halves a step (the base plus half of it), so a tray is named
    only where a group without it passed and the same group with it failed
    (or, with no clean base, where the rack without that one tray passed).

    Runs: one for a healthy rack; for a failing one of n trays, 1 + the
    halvings (floor or ceil of log2 n, by position) + one confirming run
    when the last halving was presumed: at most ceil(log2 n) + 2. One slow
    tray is named; with two, one of them or ``undecided`` (run again
    without the one named to look for another).
    """
    rack = tuple(_distinct(trays, "tray"))
    rec = _Recorder(run)
    if not rack or rec(rack, "rack"):
        return Isolation(None, (), tuple(rec.runs))

    def rack_without(out) -> tuple[str, ...]:
        return tuple(t for t in rack if t not in out)

    suspect = list(rack)
    while len(suspect) > 1:
        half = suspect[:len(suspect) // 2]
        if rec(rack_without(half), "without"):
            break
        suspect = suspect[len(suspect) // 2:]  # presumed: the rack failed with this half out
    else:
        # no clean run: the one tray left (or the rack's only tray) is named if the rack passes without it
        if rec(rack_without(suspect), "confirm"):
            return Isolation(suspect[0], (), tuple(rec.runs))
        return Isolation(None, rack, tuple(rec.runs))
    base = set(rack_without(half))
    culprit, shown = _narrow(half, lambda part, why: not rec(
        tuple(t for t in rack if t in base or t in part), why))
    return Isolation(culprit, () if culprit else tuple(shown), tuple(rec.runs))


def replay(runs: Sequence[Run]) -> Oracle:
    """An oracle that answers from a recorded search, so ``admit`` or
    ``isolate`` given the same members repeats it run for run."""
    answers = {r.group: r.passed for r in runs}

    def run(group: tuple[str, ...]) -> bool:
        if group not in answers:
            raise KeyError(f"no recorded run of {', '.join(group)}")
        return answers[group]
    return run
