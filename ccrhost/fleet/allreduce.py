"""The two-node all-reduce across the fleet: every node covered in one round
of parallel pairs, a bad pair split against nodes that passed (the pairing
of ``ccrhost.fleet.pairing``, as ib_write_bw uses it), and each node's
result as the one stored-result record.

Rounds are run by a ``run_pairs(pairs) -> [AllReducePair]`` the engine
gives (Slurm job steps, mpirun over SSH); each pair's run is judged by
``ccrhost.model.allreduce.judge_run``, the one verdict.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ccrhost.fleet.pairing import cover
from ccrhost.model.active import ActiveResult
from ccrhost.model.allreduce import PAIR, RunVerdict, threshold
from ccrhost.model.status import UNKNOWN

CHECK = "allreduce"


@dataclass(frozen=True)
class AllReducePair:
    server: str          # the pair's first node (rank 0 there)
    client: str
    verdict: RunVerdict

    @property
    def slow(self) -> bool:
        return self.verdict.code == "allreduce_slow"

    @property
    def wrong(self) -> bool:
        return self.verdict.code == "allreduce_wrong"

    @property
    def errors(self) -> list[str]:
        return [self.verdict.message] if self.verdict.status == UNKNOWN else []


def pair_figure(a_nics: list[float], b_nics: list[float], gpu_name: str | None, overrides=None):
    """A pair carries what the weaker of its two nodes can: the lower figure."""
    figures = [f for f in (threshold(PAIR, gpu_name, a_nics, overrides), threshold(PAIR, gpu_name, b_nics, overrides))
               if f is not None]
    return min(figures, key=lambda f: f.busbw, default=None)


def pair_fleet(names: list[str], run_pairs, retries: int, valid_for: float, clock=time.time) -> dict[str, ActiveResult]:
    """Each node's pair result. A pair below threshold is rerun up to
    ``retries`` times (wrong results and UNKNOWN never); a bad pair's two
    nodes are then each paired with a node that passed, so the result names
    the node at fault and clears its partner."""
    out: dict[str, ActiveResult] = {}
    if len(names) < 2:
        for name in names:
            out[name] = ActiveResult(CHECK, PAIR, UNKNOWN, "allreduce_failed",
                                     "two-node ring all-reduce: no other node to pair with", clock(), valid_for)
        return out
    for name, (r, note) in cover(names, run_pairs, retries, retryable=lambda r: r.slow).items():
        v = r.verdict
        message = v.message + (f" [{name}: {note}]" if note else "")
        out[name] = ActiveResult(CHECK, PAIR, v.status, v.code, message, clock(), valid_for, v.busbw)
    return out
