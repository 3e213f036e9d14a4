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
from ccrhost.model.allreduce import PAIR, RunVerdict, thresholds
from ccrhost.model.status import UNKNOWN

CHECK = "allreduce"


@dataclass(frozen=True)
class AllReducePair:
    server: str          # the pair's first node (rank 0 there)
    client: str
    verdict: RunVerdict
    culprits: tuple[str, ...] = ()  # the pair's nodes the run's own output named at fault (no binary there)

    @property
    def slow(self) -> bool:
        return self.verdict.code == "allreduce_slow"

    @property
    def wrong(self) -> bool:
        return self.verdict.code == "allreduce_wrong"

    @property
    def errors(self) -> list[str]:
        return [self.verdict.message] if self.verdict.status == UNKNOWN else []


def pair_figure(a_nics: list[float], b_nics: list[float], gpu_name: str | None, overrides=None, platform=None):
    """A pair carries what the weaker of its two nodes can: the lower published figure, and the platform's
    fleet figure (a list, as judge_run takes it)."""
    a, b = (thresholds(PAIR, gpu_name, nics, overrides, platform) for nics in (a_nics, b_nics))
    fleet = [f for f in a if f.fleet]
    published = [f for f in (*a, *b) if not f.fleet]
    return [*([min(published, key=lambda f: f.busbw)] if published else []), *fleet]


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
    judged by ``judge_run``; after a mode that hung, found no binary or
    moved wrong data the later ones are not run (``skipped``)."""
    from ccrhost.facts.allreduce import AllReduceRun
    from ccrhost.model.allreduce import ENDS_THE_RUN, judge_run, run_timeout, skipped, with_retries
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
        ended = next((r for r in results if r.code in ENDS_THE_RUN), None)
        if ended is not None:
            v = skipped(mode, ended.mode, ended.code, host.name)
            results.append(ActiveResult(CHECK, mode, v.status, v.code, v.message, clock(),
                                        settings.verify_allreduce_valid_for, None, 0))
            continue
        figure = thresholds(mode, name, [], settings.verify_allreduce_min_busbw, settings.platform())
        timeout = run_timeout(figure, len(gpus), settings.verify_allreduce_max_bytes,
                              settings.verify_allreduce_iters, settings.verify_allreduce_timeout)
        attempt = [0]

        def once(mode=mode, figure=figure, timeout=timeout):
            attempt[0] += 1
            text, rc, timed_out, missing = fact_cache._real(host).get_fact(
                AllReduceRun, binary=settings.verify_allreduce_binary, mode=mode, gpus=len(gpus),
                max_bytes=settings.verify_allreduce_max_bytes, iters=settings.verify_allreduce_iters,
                timeout=timeout, attempt=attempt[0])
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
        fact_cache.configure(h, settings.verify_link_state, keep=not DRY, settings=settings)  # as its own verification will
        snap = fact_cache.snapshot(h)
    gpus = snap.gpus.gpus if snap.gpus is not None and "gpus" not in snap.errors else []
    rdma = snap.rdma if "rdma" not in snap.errors else None
    nics = [p.effective_gbps for p in compute_ports(rdma, settings.rdma_exclude_devices)
            if p.active and not p.efa] if rdma is not None else []
    return len(gpus), (gpus[0].name if gpus else None), nics


def _singles_host(state, h, settings):
    """:func:`single_node_host` for ``h`` from the fleet's own greenlet."""
    from pyinfra.context import ctx_host, ctx_state

    from ccrhost.operations import cache as fact_cache
    from ccrhost.operations.base import DRY

    with ctx_state.use(state), ctx_host.use(h):
        fact_cache.configure(h, settings.verify_link_state, keep=not DRY, settings=settings)  # as its own verification will
        return single_node_host(h, settings)


def single_modes(state, hosts: dict, settings_by_host: dict) -> dict[str, list[ActiveResult]]:
    """:func:`single_node_host` on every host of ``hosts`` (name -> pyinfra Host) at once; a host whose run
    raised is failed with the reason (this host only, as a failed fact read is) and absent from the result."""
    import gevent

    jobs = {n: gevent.spawn(_singles_host, state, h, settings_by_host[n]) for n, h in hosts.items()}
    gevent.joinall(list(jobs.values()))
    out = {}
    for n, g in jobs.items():
        if not g.successful():
            from ccrhost import failures

            failures.record(n, f"the all-reduce modes failed: {type(g.exception).__name__}: {g.exception}")
            state.fail_hosts({hosts[n]})
            continue
        out[n] = list(g.value)
    return out


def fleet_allreduce(state, inventory, settings_by_host: dict, clock=time.time,
                    exclude=frozenset()) -> dict[str, list[ActiveResult]]:
    """Every all-reduce mode of the deploy's verification, once per run:
    the single-node modes on every host at once, then the pair mode across
    the hosts that launch it with mpirun (:func:`mpirun_pairs`), without
    the hosts whose single-node modes hung, found no binary or moved wrong
    data (they are not run again: a skipped pair result). Hosts in
    ``exclude`` (GPU work running) run no mode."""
    from ccrhost.fleet.parallel import once_per_run
    from ccrhost.model.allreduce import ENDS_THE_RUN, skipped

    def compute():
        active = set(inventory.get_active_hosts())
        hosts = {h.name: h for h in inventory if h in active and h.name not in exclude
                 and settings_by_host[h.name].verify_allreduce}
        out = single_modes(state, hosts, settings_by_host)
        ended = {n: next(r for r in rs if r.code in ENDS_THE_RUN) for n, rs in out.items()
                 if any(r.code in ENDS_THE_RUN for r in rs)}
        left_out = set(ended) | (set(hosts) - set(out)) | set(exclude)
        pairs = mpirun_pairs(state, inventory, settings_by_host, clock, exclude=left_out)
        for n, result in pairs.items():
            out.setdefault(n, []).append(result)
        for n, r in ended.items():
            if settings_by_host[n].verify_allreduce_launcher == "mpirun":
                v = skipped(PAIR, r.mode, r.code, n)
                out[n].append(ActiveResult(CHECK, PAIR, v.status, v.code, v.message, clock(),
                                           settings_by_host[n].verify_allreduce_valid_for, None, 0))
        return out

    return once_per_run(inventory, "allreduce_fleet", compute)


def mpirun_pairs(state, inventory, settings_by_host: dict, clock=time.time,
                 exclude=frozenset()) -> dict[str, ActiveResult]:
    """The pair mode across the inventory's hosts whose settings launch it
    with mpirun (``verify_allreduce_launcher``), once per run: every host
    covered in one round of parallel pairs, a bad pair isolated against
    hosts that passed (:func:`pair_fleet`, as on Slurm), each run judged by
    ``judge_run``. Each pair's mpirun runs on its first host; hosts in
    ``exclude`` (GPU work running, or found bad by a single-node mode) are
    in no pair (and absent from the result)."""
    from ccrhost.facts.allreduce import AllReducePairRun
    from ccrhost.fleet.parallel import parallel_facts
    from ccrhost.model.allreduce import judge_run, run_timeout
    from ccrhost.probes.nccl_tests import mpirun_argv, run_result

    def compute():
        active = set(inventory.get_active_hosts())
        hosts = {h.name: h for h in inventory if h in active and settings_by_host[h.name].verify_allreduce
                 and settings_by_host[h.name].verify_allreduce_launcher == "mpirun" and h.name not in exclude}
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
            calls, figures = [], []
            for k, (a, b) in enumerate(pairs):
                runs[0] += 1
                s = settings_by_host[a]
                tasks = min(info[a][0], info[b][0])
                argv = mpirun_argv(s.verify_allreduce_mpirun, s.verify_allreduce_binary, [address[a], address[b]],
                                   tasks, f"{address[a]}:{s.verify_allreduce_port + 4 * k}",
                                   s.verify_allreduce_max_bytes, s.verify_allreduce_iters)
                figures.append(pair_figure(info[a][2], info[b][2], info[a][1], s.verify_allreduce_min_busbw,
                                           s.platform()))
                timeout = run_timeout(figures[-1], 2 * tasks, s.verify_allreduce_max_bytes, s.verify_allreduce_iters,
                                      s.verify_allreduce_timeout)
                calls.append((hosts[a], AllReducePairRun, {"argv": tuple(argv), "timeout": timeout,
                                                           "attempt": runs[0]}))
            results = []
            for (a, b), got, figure in zip(pairs, parallel_facts(state, calls), figures):
                text, rc, timed_out, missing = got or ("", None, False, None)
                if missing:
                    missing = f"{settings_by_host[a].verify_allreduce_mpirun} on {a} {missing}"
                run = run_result(text, rc, timed_out, missing)
                verdict = judge_run(run, PAIR, figure, f"{a}+{b}")
                named = {address[a]: a, address[b]: b, a: a, b: b}
                results.append(AllReducePair(a, b, verdict, tuple(dict.fromkeys(
                    named[n] for n in run.missing_on if n in named))))
            return results

        out.update(pair_fleet(names, run_pairs, first.verify_allreduce_retries, first.verify_allreduce_valid_for,
                              clock))
        return out

    return compute()
