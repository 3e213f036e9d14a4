"""The runs a culprit is named on, pure: for the report of a bisection
(fleet/admission.py ``admit`` for the scale stage, ``isolate`` for a rack's
slow tray), the failed run with the culprit and the passing run without it
that together single it out. Each caller keeps its own run record (the
scale stage's ``ScaleRun.group``, the rack's ``RackRun.trays``) and says
how its members are read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

R = TypeVar("R")


def evidence(culprit: str, runs: Sequence[R], members: Callable[[R], Sequence[str]],
             lone_rest_passes: bool = False) -> tuple[R | None, R | None]:
    """The smallest failed run with ``culprit`` whose members without it passed, and that passing run
    (first in ``runs`` among equals); where there is none, the first failed run with it, and None.

    ``runs``' records have ``passed`` (True, False, or None: not measured); ``members(run)`` names a run's
    members. With ``lone_rest_passes`` a failed run whose rest is under two members also counts, with no
    passing run (None): the scale stage never runs one node's all-reduce, which crosses no network."""
    passed = {frozenset(members(r)): r for r in runs if r.passed}
    best = None
    for r in runs:
        if r.passed is False and culprit in members(r):
            rest = frozenset(members(r)) - {culprit}
            if ((lone_rest_passes and len(rest) < 2) or rest in passed) and \
                    (best is None or len(members(r)) < len(members(best))):
                best = r
    if best is None:
        return next((r for r in runs if r.passed is False and culprit in members(r)), None), None
    return best, passed.get(frozenset(members(best)) - {culprit})
