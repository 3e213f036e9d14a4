"""The verification stage: evaluate each node's CCR and data path and fail the bad ones."""

from __future__ import annotations

from pyinfra import host, state
from pyinfra.api.state import StateStage

from ccrhost.model import datapath as dp
from ccrhost.model.gpu_health import GpuHealthReading
from ccrhost.model.gpus import GpuProbe
from ccrhost.model.status import UNKNOWN
from ccrhost.model.verdict import FAIL, OK, Verdict, evaluate, readings_from_facts, unjudged
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


def node_verdict(snap, settings, window: dp.LinkWindow | None = None, measured=None,
                 gpudirect=None) -> Verdict:
    """The node's verdict from one snapshot (``probes.node.NodeSnapshot``),
    as ``ccrhost check`` makes it from the same output: RDMA ports that
    cannot be read are UNKNOWN ``rdma_unreadable`` (never a FAIL for what
    nobody saw), GPUs or a data path that cannot be read are UNKNOWN reasons
    of a verdict that still judges the rest."""
    if "rdma" in snap.errors:  # "cannot read <what the probe reads>: <why>", the check's words
        return unjudged(UNKNOWN, "rdma_unreadable", snap.errors["rdma"])
    gpus = snap.gpus if "gpus" not in snap.errors else GpuProbe(error=snap.errors["gpus"])
    exclude = settings.rdma_exclude_devices
    if "pci" in snap.errors:
        datapath = dp.unreadable(snap.errors["pci"])  # UNKNOWN for the data path; the CCR is still judged
    else:
        datapath = snap.pci.datapath(exclude, window, gpudirect)
    health = snap.gpu_health if "gpu_health" not in snap.errors else GpuHealthReading(error=snap.errors["gpu_health"])
    readings = readings_from_facts(snap.rdma, gpus, exclude, measured, datapath, health)
    return evaluate(readings, settings.expectation(), settings.policy())


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
    snap = fact_cache.snapshot(host, window=settings.verify_link_window)
    window = link_window(settings, snap.pci) if "pci" not in snap.errors else None
    verdict = node_verdict(snap, settings, window, measured, gpudirect)
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
