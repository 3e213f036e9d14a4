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


def single_node_host(host, settings, clock=time.time) -> list[ActiveResult]:
    """The deploy's verification: each single-node mode on this host (its
    own greenlet, so every host runs at once), retried below threshold,
    judged by ``judge_run``."""
    from ccrhost.facts.allreduce import AllReduceRun
    from ccrhost.model.allreduce import judge_run, with_retries
    from ccrhost.operations import cache as fact_cache
    from ccrhost.probes.nccl_tests import run_result

    snap = fact_cache.snapshot(host)
    gpus = snap.gpus.gpus if snap.gpus is not None and "gpus" not in snap.errors else []
    name = gpus[0].name if gpus else None
    results = []
    for mode in settings.verify_allreduce_modes:
        if not gpus:
            results.append(ActiveResult(CHECK, mode, UNKNOWN, "allreduce_failed",
                                        f"{mode}: no GPU read on the node: nothing to run on", clock(),
                                        settings.verify_allreduce_valid_for))
            continue
        figure = threshold(mode, name, [], settings.verify_allreduce_min_busbw)
        attempt = [0]

        def once(mode=mode, figure=figure):
            attempt[0] += 1
            text, rc, timed_out, missing = fact_cache._real(host).get_fact(
                AllReduceRun, binary=settings.verify_allreduce_binary, mode=mode, gpus=len(gpus),
                max_bytes=settings.verify_allreduce_max_bytes, iters=settings.verify_allreduce_iters,
                timeout=settings.verify_allreduce_timeout, attempt=attempt[0])
            if missing:
                missing = f"{settings.verify_allreduce_binary} {missing}"
            return judge_run(run_result(text, rc, timed_out, missing), mode, figure, host.name)

        verdict, runs = with_retries(once, settings.verify_allreduce_retries)
        results.append(ActiveResult(CHECK, mode, verdict.status, verdict.code, verdict.message, clock(),
                                    settings.verify_allreduce_valid_for, verdict.busbw, runs))
    return results
