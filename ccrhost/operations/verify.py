"""The verification stage: evaluate each node's CCR and fail the bad ones."""

from __future__ import annotations

from pyinfra import host, state
from pyinfra.api.state import StateStage

from ccrhost.model.verdict import FAIL, OK, evaluate, readings_from_facts
from ccrhost.operations import cache as fact_cache
from ccrhost.operations.base import fail, operation


@operation
def ccr(settings, report=None, measured=None):
    """
    Measure this node's CCR from its RDMA ports and GPUs and judge it.

    + settings: the host's validated ``HostSettings`` (expectations, policy)
    + report: a ``FleetReport`` that collects the verdict for the fleet report
    + measured: this host's ``HostMeasurement`` from ``ccrhost.measure``, if any

    Read-only: yields nothing for OK, WARN and UNKNOWN (reasons are logged),
    and fails the host, naming the reasons, for FAIL.

    **Example:**

    .. code:: python

        verify.ccr(name="Verify CCR", settings=settings, report=report)
    """
    fact_cache.fresh(host)  # judge the node as the stages before left it
    readings = readings_from_facts(fact_cache.rdma(host), fact_cache.gpus(host),
                                   settings.rdma_exclude_devices, measured)
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
