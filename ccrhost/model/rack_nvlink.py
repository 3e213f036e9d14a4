"""The rack-level NVLink test of an NVL72-shaped rack (issue 49), pure: which
trays make each rack's run, the figure it is judged by, and what each tray
is told once the rack's runs are done.

A rack (the trays sharing an ``imex_rack``, as fleet/rack.py groups them)
runs one all-reduce over all its trays' GPUs; on an NVL72 that ring crosses
the rack's NVSwitch trays, not the NICs. Where it is slow, the runs without
trays (fleet/admission.py ``isolate``) name the tray that causes it; that
tray FAILs ``rack_nvlink_slow`` naming the rack, the others stay OK. The
runner is fleet/rack_nvlink.py; each tray's result is stored with its time
as the other all-reduce results are (mode ``rack``), so the prolog and
``ccrhost check`` only read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ccrhost.model.allreduce import RACK, Figure, busbw_text, thresholds
from ccrhost.model.culprit import evidence
from ccrhost.model.ports import natural_key
from ccrhost.model.status import FAIL, OK, UNKNOWN, Reason


@dataclass(frozen=True)
class RackRun:
    """One run of a rack's trays (all of them, or the rack without some)."""

    trays: tuple[str, ...]
    passed: bool | None   # None: it could not measure (its message says why)
    busbw: float | None   # GB/s at the largest size, where measured
    message: str          # judge_run's verdict on it


@dataclass(frozen=True)
class TrayResult:
    """What one tray is told: its status, code (None when OK), message and the busbw it rests on."""

    status: str
    code: str | None
    message: str
    busbw: float | None = None

    @classmethod
    def of(cls, reason: Reason, busbw: float | None = None) -> TrayResult:
        return cls(reason.level, reason.code, reason.message, busbw)


def plan(trays: dict[str, str | None]) -> dict[str, list[str]]:
    """Each rack's trays in natural order (``trays``: host -> its ``imex_rack``;
    a tray in no rack is in no run), racks by name."""
    out: dict[str, list[str]] = {}
    for host, rack in trays.items():
        if rack is not None:
            out.setdefault(rack, []).append(host)
    return {name: sorted(hosts, key=natural_key) for name, hosts in sorted(out.items())}


def rounds(trays: int) -> int:
    """The halvings that single out one tray of ``trays``: ceil(log2 n) (0 for one tray)."""
    return math.ceil(math.log2(trays)) if trays > 1 else 0


def figure(members: list[tuple[str | None, object, dict | None]]) -> list[Figure]:
    """The figures the rack's run is judged by (``members``: each tray's GPU
    model, resolved platform and ``verify_allreduce_min_busbw``): those of
    the tray whose published ``allreduce.rack`` is lowest; none (the run is
    UNKNOWN ``allreduce_no_threshold``, naming allreduce.rack) where any tray has none."""
    each = [thresholds(RACK, gpu, [], overrides, platform) for gpu, platform, overrides in members]
    if not each or any(not [f for f in figs if not f.fleet] for figs in each):
        return []
    return min(each, key=lambda figs: min(f.busbw for f in figs if not f.fleet))


def outcome(rack: str, trays: list[str], runs: list[RackRun], culprit: str | None,
            undecided: tuple[str, ...]) -> dict[str, TrayResult]:
    """Each tray's result from the rack's runs (the first: the whole rack)
    and the isolation's finding. A rack that passed: every tray OK with the
    rack's figure. A slow rack: the culprit FAILs ``rack_nvlink_slow``
    naming the rack and the runs with and without it; trays a passing run
    cleared are OK; trays no run could tell apart are UNKNOWN
    ``rack_nvlink_undecided`` (never drained)."""
    if not runs:
        raise ValueError(f"rack {rack}: no run to judge")
    whole = runs[0]
    if whole.passed:
        return {t: TrayResult(OK, None, whole.message, whole.busbw) for t in trays}
    cleared = {t for r in runs if r.passed for t in r.trays}
    out: dict[str, TrayResult] = {}
    if culprit is not None:
        # a rest of one tray never runs (it crosses no other tray): only a passing run clears the others
        with_it, without = evidence(culprit, runs, lambda r: r.trays)
        other = (f"{busbw_text(without)} over {len(without.trays)} trays without it" if without
                 else "no run without it passed")
        out[culprit] = TrayResult.of(Reason(FAIL, "rack_nvlink_slow", (
            f"{culprit} slows the all-reduce over NVLink of rack {rack}: busbw {busbw_text(with_it)} over "
            f"{len(with_it.trays) if with_it else len(trays)} trays with it, {other}; "
            f"{(with_it or whole).message}")), with_it.busbw if with_it else whole.busbw)
    for t in trays:
        if t in out:
            continue
        if t in cleared and t not in undecided:
            passing = max((r for r in runs if r.passed and t in r.trays), key=lambda r: len(r.trays))
            out[t] = TrayResult(OK, None, f"rack {rack} was slow ({busbw_text(whole)} over {len(whole.trays)} trays) "
                                f"{f'with {culprit}' if culprit else 'as a whole'}; this tray passed in "
                                f"{len(passing.trays)} trays without it: {passing.message}", passing.busbw)
        else:
            among = [u for u in (undecided or trays) if u != culprit]
            out[t] = TrayResult.of(Reason(UNKNOWN, "rack_nvlink_undecided", (
                f"rack {rack}: its all-reduce over NVLink was slow ({whole.message}), but no run without trays "
                f"singled one out (the slow one is among {', '.join(among)}): a flaky run, two slow trays "
                "together, or a limit of the rack's size")), whole.busbw)
    return {t: out[t] for t in trays}


def not_measured(rack: str, trays: list[str], reason: Reason) -> dict[str, TrayResult]:
    """A run of the rack that gave no verdict on speed (``reason``, judge_run's: it could not launch or
    measure, or moved wrong data, which the trays' own runs name): no tray is judged on speed here, each is
    UNKNOWN, with the run's own code where that was UNKNOWN, else ``rack_nvlink_undecided``; never a drain
    of the whole rack."""
    said = f"rack {rack}: the all-reduce over NVLink gave no verdict on speed: {reason.message}"
    told = replace(reason, message=said) if reason.level == UNKNOWN else Reason(UNKNOWN, "rack_nvlink_undecided", said)
    return {t: TrayResult.of(told) for t in trays}
