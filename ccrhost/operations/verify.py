"""The verification stage: evaluate each node's CCR and data path and fail the bad ones."""

from __future__ import annotations

from pyinfra import host, state
from pyinfra.api.state import StateStage

from ccrhost.model import datapath as dp
from ccrhost.model.verdict import FAIL, OK, evaluate, readings_from_facts
from ccrhost.operations import cache as fact_cache
from ccrhost.operations.base import fail, operation
from ccrhost.probes.pci import only_compute


def link_window(settings, pci) -> dp.LinkWindow | None:
    """The error counters over ``verify_link_window`` seconds: the snapshot's
    reading, then a second one once that long has passed since it was read
    (the wait happens on the node, every host at once). In the tuning deploy
    the snapshot is re-read once the stages changed anything, so the window
    opens after the tuning, not during it. Where the snapshot's own command
    read the counters again (the tuning's read-back, or the verification's
    own read), no second command is needed."""
    seconds = settings.verify_link_window
    if not seconds:
        return None
    from ccrhost.facts.pci import PortErrorCounters

    exclude = settings.rdma_exclude_devices
    after, took = fact_cache.link_window(host, seconds), seconds  # read by the snapshot's own command
    if after is None:
        age = fact_cache.snapshot_age(host) or 0.0
        after = fact_cache._real(host).get_fact(PortErrorCounters, delay=max(seconds - age, 0.0))
        took = fact_cache.snapshot_age(host) or seconds
    return dp.LinkWindow(pci.compute_counters(exclude), only_compute(after, exclude), round(took, 1))


def datapath_reading(settings, gpudirect=None) -> dp.DatapathReading:
    try:
        pci = fact_cache.pci(host)
    except fact_cache.NodeReadError as exc:
        return dp.unreadable(str(exc))  # UNKNOWN for the data path; the CCR is still judged
    return pci.datapath(settings.rdma_exclude_devices, link_window(settings, pci), gpudirect)


@operation
def ccr(settings, report=None, measured=None, gpudirect=None):
    """
    Measure this node's CCR from its RDMA ports and GPUs, read its GPU-to-NIC
    data path (peer memory, ACS, IOMMU, topology, port errors over
    ``verify_link_window`` seconds, versions) and judge both.

    + settings: the host's validated ``HostSettings`` (expectations, policy)
    + report: a ``FleetReport`` that collects the verdict for the fleet report
    + measured: this host's ``HostMeasurement`` from ``ccrhost.measure``, if any
    + gpudirect: this host's measured ``GpuDirectBandwidth``, if any

    Read-only: yields nothing for OK, WARN and UNKNOWN (reasons are logged),
    and fails the host, naming the reasons, for FAIL.

    **Example:**

    .. code:: python

        verify.ccr(name="Verify CCR", settings=settings, report=report)
    """
    fact_cache.fresh(host)  # judge the node as the stages before left it
    # a read now (nothing held) takes the link window in the same command
    fact_cache.snapshot(host, window=settings.verify_link_window)
    datapath = datapath_reading(settings, gpudirect)
    readings = readings_from_facts(fact_cache.rdma(host), fact_cache.gpus(host),
                                   settings.rdma_exclude_devices, measured, datapath)
    verdict = evaluate(readings, settings.expectation(), settings.policy())
    if report is not None:
        report.record(host.name, verdict, executed=state.current_stage == StateStage.Execute,
                      address=host.data.get("ssh_hostname"))
    value = f"CCR {verdict.ccr.ccr:.3e}" if verdict.ccr else "CCR unknown"
    if verdict.status == FAIL:
        yield from fail(f"verification FAIL ({value}): {verdict.summary()}")
    elif verdict.status == OK:
        host.log(f"verification OK ({value})")
    else:
        host.log(f"verification {verdict.status} ({value}): {verdict.summary()}")
