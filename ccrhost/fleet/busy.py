"""Which hosts of a deploy run have GPU work running, read once per run on
every host that would run an active test, so that neither its own tests
nor a pair test with a peer start there (``ccrhost.model.busy``)."""

from __future__ import annotations

import time

from ccrhost.fleet.parallel import once_per_run, parallel_facts
from ccrhost.model.busy import GpuWork


def runs_active(settings, measure: bool = True) -> bool:
    """Whether this host's verification would start an active test."""
    return measure and (settings.verify_measure or settings.verify_measure_gpudirect or settings.verify_allreduce
                        or (settings.verify_dcgm and settings.verify_dcgm_level_deploy > 0))


def busy_hosts(state, inventory, settings_by_host: dict) -> dict[str, GpuWork]:
    """Host name -> its GPU work, for each active host that would run an
    active test, is not let run it busy (``verify_active_when_busy``) and
    is not idle; read once per run."""
    return once_per_run(inventory, "busy_hosts", lambda: read_busy(state, inventory, settings_by_host))


def read_busy(state, inventory, settings_by_host: dict, wants=runs_active) -> dict[str, GpuWork]:
    """:func:`busy_hosts` read now, for the active hosts whose settings ``wants`` (the verification's active
    tests by default; an acceptance's stages)."""
    from ccrhost.facts.busy import GpuWorkFact

    active = set(inventory.get_active_hosts())
    hosts = [h for h in inventory if h in active and wants(settings_by_host[h.name])
             and not settings_by_host[h.name].verify_active_when_busy]
    now = time.time()
    works = parallel_facts(state, [(h, GpuWorkFact, {"attempt": now,
                                                     "slurm_conf": settings_by_host[h.name].slurm_conf})
                                   for h in hosts])
    return {h.name: w or GpuWork(error="the read failed") for h, w in zip(hosts, works)
            if w is None or not w.idle}
