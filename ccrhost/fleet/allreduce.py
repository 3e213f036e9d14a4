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


def dcgm_host(host, settings, level: int, clock=time.time) -> ActiveResult:
    """The deploy's verification: DCGM's diagnostics at ``level`` on this
    host (its own greenlet), judged by ``judge_diag`` through the node
    runner's own ``result_of``."""
    from ccrhost.facts.allreduce import DcgmDiagRun
    from ccrhost.node import dcgm as node_dcgm
    from ccrhost.operations import cache as fact_cache

    engine, gpus, diag = fact_cache._real(host).get_fact(
        DcgmDiagRun, binary=settings.verify_dcgm_binary, level=level,
        engine_timeout=settings.verify_dcgm_engine_timeout, timeout=int(node_dcgm.deadline(settings, level)))
    return node_dcgm.result_of(engine, gpus, diag, level, settings, clock)


def _pair_host(state, h, settings):
    """What a pair needs of one host, from its snapshot (read now, kept for its own verification)."""
    from pyinfra.context import ctx_host, ctx_state

    from ccrhost.model.ports import compute_ports
    from ccrhost.operations import cache as fact_cache

    from ccrhost.operations.base import DRY

    with ctx_state.use(state), ctx_host.use(h):
        fact_cache.configure(h, settings.verify_link_state, keep=not DRY)  # as its own verification will
        snap = fact_cache.snapshot(h)
    gpus = snap.gpus.gpus if snap.gpus is not None and "gpus" not in snap.errors else []
    rdma = snap.rdma if "rdma" not in snap.errors else None
    nics = [p.effective_gbps for p in compute_ports(rdma, settings.rdma_exclude_devices)
            if p.active and not p.efa] if rdma is not None else []
    return len(gpus), (gpus[0].name if gpus else None), nics


def mpirun_pairs(state, inventory, settings_by_host: dict, clock=time.time) -> dict[str, ActiveResult]:
    """The pair mode across the inventory's hosts whose settings launch it
    with mpirun (``verify_allreduce_launcher``), once per run: every host
    covered in one round of parallel pairs, a bad pair isolated against
    hosts that passed (:func:`pair_fleet`, as on Slurm), each run judged by
    ``judge_run``. Each pair's mpirun runs on its first host."""
    from ccrhost.facts.allreduce import AllReducePairRun
    from ccrhost.fleet.parallel import once_per_run, parallel_facts
    from ccrhost.model.allreduce import judge_run
    from ccrhost.probes.nccl_tests import mpirun_argv, run_result

    def compute():
        active = set(inventory.get_active_hosts())
        hosts = {h.name: h for h in inventory if h in active and settings_by_host[h.name].verify_allreduce
                 and settings_by_host[h.name].verify_allreduce_launcher == "mpirun"}
        if not hosts:
            return {}
        import gevent

        jobs = {n: gevent.spawn(_pair_host, state, h, settings_by_host[n]) for n, h in hosts.items()}
        gevent.joinall(list(jobs.values()))
        info = {n: g.value if g.successful() else (0, None, []) for n, g in jobs.items()}
        first = settings_by_host[next(iter(hosts))]
        out = {n: ActiveResult(CHECK, PAIR, UNKNOWN, "allreduce_failed",
                               "two-node ring all-reduce: no GPU read on the node: nothing to run on", clock(),
                               first.verify_allreduce_valid_for) for n in hosts if not info[n][0]}
        names = [n for n in hosts if info[n][0]]
        address = {n: h.data.get("ssh_hostname") or n for n, h in hosts.items()}
        runs = [0]

        def run_pairs(pairs):
            calls = []
            for k, (a, b) in enumerate(pairs):
                runs[0] += 1
                s = settings_by_host[a]
                argv = mpirun_argv(s.verify_allreduce_mpirun, s.verify_allreduce_binary, [address[a], address[b]],
                                   min(info[a][0], info[b][0]), f"{address[a]}:{s.verify_allreduce_port + 4 * k}",
                                   s.verify_allreduce_max_bytes, s.verify_allreduce_iters)
                calls.append((hosts[a], AllReducePairRun, {"argv": tuple(argv), "timeout": s.verify_allreduce_timeout,
                                                           "attempt": runs[0]}))
            results = []
            for (a, b), got in zip(pairs, parallel_facts(state, calls)):
                text, rc, timed_out, missing = got or ("", None, False, None)
                if missing:
                    missing = f"{settings_by_host[a].verify_allreduce_mpirun} on {a} {missing}"
                figure = pair_figure(info[a][2], info[b][2], info[a][1], settings_by_host[a].verify_allreduce_min_busbw)
                verdict = judge_run(run_result(text, rc, timed_out, missing), PAIR, figure, f"{a}+{b}")
                results.append(AllReducePair(a, b, verdict))
            return results

        out.update(pair_fleet(names, run_pairs, first.verify_allreduce_retries, first.verify_allreduce_valid_for,
                              clock))
        return out

    return once_per_run(inventory, "allreduce_pairs", compute)
