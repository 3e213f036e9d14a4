"""The acceptance stages' runs over pyinfra's SSH connections
(ccrhost.fleet.accept_deploy.Runners): each kind of work on many hosts at
once, one greenlet per host, through the verification's own readers and
runners (the snapshot, fleet/busy, fleet/measure, fleet/allreduce) and the
facts of ccrhost.facts.accept. A host whose read fails is absent from the
result (pyinfra has failed it, with the reason); the stage is then UNKNOWN
for that host only."""

from __future__ import annotations

import time
from itertools import count

import gevent
from pyinfra.context import ctx_host, ctx_state

from ccrhost import failures
from ccrhost.fleet.accept_deploy import Runners
from ccrhost.fleet.parallel import parallel_facts

_ATTEMPT = count(1)  # every read a new one: pyinfra never answers one run's fact with another's


def _each(state, hosts: dict, names: list[str], work) -> dict:
    """``work(host)`` for every one of ``names`` at once, in the host's context: {name: result}."""
    def one(h):
        with ctx_state.use(state), ctx_host.use(h):
            return work(h)

    jobs = {n: gevent.spawn(one, hosts[n]) for n in names}
    gevent.joinall(list(jobs.values()))
    out = {}
    for n, g in jobs.items():
        if g.successful():
            out[n] = g.value
        else:
            failures.record(n, f"acceptance: {type(g.exception).__name__}: {g.exception}")
            state.fail_hosts({hosts[n]})
    return out


def runners(state, inventory, settings_by_host: dict) -> Runners:
    """The deploy's runners over the inventory's active hosts."""
    from ccrhost.operations import cache as fact_cache

    active = set(inventory.get_active_hosts())
    hosts = {h.name: h for h in inventory if h in active}

    def snapshots(names, again):
        from ccrhost.operations.base import DRY

        def read(h):
            settings = settings_by_host[h.name]
            fact_cache.configure(h, settings.verify_link_state, keep=not DRY, settings=settings)  # as its own pass will
            if again:
                fact_cache.drop(h)
            return fact_cache.snapshot(h)

        return _each(state, hosts, names, read)

    def certificates(names):
        from ccrhost.facts.nicfw import ActiveStateText

        return _each(state, hosts, names, lambda h: fact_cache._real(h).get_fact(
            ActiveStateText, path=settings_by_host[h.name].accept_certificate, attempt=next(_ATTEMPT)))

    def busy(names):
        from ccrhost.fleet.busy import read_busy

        # read here, not through busy_hosts: the run's acceptance is itself computed once per run
        found = read_busy(state, inventory, settings_by_host, wants=lambda s: True) if names else {}
        return {n: w for n, w in found.items() if n in names}

    def dcgm(names, level):
        from ccrhost.fleet.allreduce import dcgm_host

        return _each(state, hosts, names, lambda h: dcgm_host(h, settings_by_host[h.name], level))

    def gemm(names, seconds):
        return _each(state, hosts, names, lambda h: gemm_host(h, settings_by_host[h.name], seconds))

    def singles(names):
        from ccrhost.fleet.allreduce import single_modes

        return single_modes(state, {n: hosts[n] for n in names}, settings_by_host)

    def mesh_round(pairs, addresses, devices, opts):
        return lat_round(state, hosts, pairs, addresses, devices, opts)

    def bandwidth(names):
        from ccrhost.fleet.measure import measure_fleet, plan_for

        chosen, plan = plan_for(state, inventory, settings_by_host, only=set(names))
        return measure_fleet(state, chosen, plan) if chosen else {}

    def pair_allreduce(names):
        from ccrhost.fleet.allreduce import mpirun_pairs

        return mpirun_pairs(state, inventory, settings_by_host, exclude=set(hosts) - set(names))

    return Runners(snapshots, certificates, busy, dcgm, gemm, singles, mesh_round, bandwidth, pair_allreduce,
                   lambda *args: scale_launch(state, hosts, settings_by_host, *args))


def scale_launch(state, hosts: dict, settings_by_host: dict, job, members, opts, port: int, timeout):
    """One S4 group's all-reduce (slurm_scale.run_scale's ``launch``): mpirun from the group's first node,
    rank 0 and NCCL_COMM_ID's root there, as the pair mode runs (probes/nccl_tests.mpirun_argv)."""
    from ccrhost.facts.allreduce import AllReducePairRun
    from ccrhost.node.active import ToolRun
    from ccrhost.probes.nccl_tests import mpirun_argv

    first = members[0]
    mpirun = settings_by_host[first.name].verify_allreduce_mpirun
    tasks = max(min(m.gpus for m in members), 1)
    argv = mpirun_argv(mpirun, opts.binary, [m.address for m in members], tasks, f"{first.address}:{port}",
                       opts.max_bytes, opts.iters)
    got = parallel_facts(state, [(hosts[first.name], AllReducePairRun,
                                  {"argv": tuple(argv), "timeout": timeout, "attempt": next(_ATTEMPT)})])[0]
    text, rc, timed_out, missing = got or ("", None, False, None)
    return ToolRun(tuple(argv), rc, text, 0.0, timed_out, f"{mpirun} on {first.name} {missing}" if missing else None)


def gemm_host(host, settings, seconds: int, clock=time.time):
    """dcgmproftester on every GPU of the host for ``seconds``, judged as ``ccrhost dcgm --gemm-only``
    judges it (node/gemm.result_of against each GPU's peak)."""
    from ccrhost.facts.accept import GemmRun
    from ccrhost.model.gemm import GemmReading
    from ccrhost.node.gemm import result_of
    from ccrhost.operations import cache as fact_cache

    snap = fact_cache.snapshot(host)
    gpus = snap.gpus.gpus if snap.gpus is not None and "gpus" not in snap.errors else []
    reading = fact_cache._real(host).get_fact(GemmRun, seconds=int(seconds), gpu_ids=tuple(g.index for g in gpus),
                                              attempt=next(_ATTEMPT))
    if reading is None:
        reading = GemmReading(None, error="the GEMM's output could not be read")
    return result_of(reading, {g.index: g.name for g in gpus}, int(seconds), settings, clock=clock)


def lat_round(state, hosts: dict, pairs, addresses: dict, devices: dict, opts) -> list:
    """One mesh round (fleet/slurm_mesh's scripts and judge): every server, then a second later every
    client, each an ib_write_lat on its host through pyinfra; the servers' output read once they end."""
    from ccrhost.facts.accept import ScriptLines
    from ccrhost.fleet.slurm_mesh import client_script, judge_pair, server_script

    servers = gevent.spawn(parallel_facts, state, [
        (hosts[s], ScriptLines, {"script": server_script(devices[s], opts), "attempt": next(_ATTEMPT)})
        for s, _ in pairs])
    gevent.sleep(1)  # let the servers listen
    clients = parallel_facts(state, [
        (hosts[c], ScriptLines, {"script": client_script(devices[c], addresses[s], opts), "attempt": next(_ATTEMPT)})
        for s, c in pairs])
    served = servers.get()
    return [judge_pair(s, c, devices[c], server or None, client or None, opts, "the host's read failed")
            for (s, c), server, client in zip(pairs, served, clients)]
