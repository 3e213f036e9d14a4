"""The verification stage: evaluate each node's CCR and data path and fail the bad ones."""

from __future__ import annotations

import time

from pyinfra import host, state
from pyinfra.api.state import StateStage

from ccrhost.model import datapath as dp
from ccrhost.model.gpu_health import GpuHealthReading
from ccrhost.model.gpus import GpuProbe
from ccrhost.model.status import UNKNOWN
from ccrhost.model.verdict import FAIL, OK, Verdict, evaluate, readings_from_facts, unjudged
from ccrhost.operations import cache as fact_cache
from ccrhost.operations.base import fail, operation


def fabric(snap, settings, first=None):
    """The lossless-fabric reading: rates since the node's stored reading up
    to ``first`` (the run's first read, ``cache.fabric_first``), settings as
    ``snap`` shows them; None when the probe was not read."""
    from ccrhost.model.fabric import FabricReading
    from ccrhost.probes.fabric import fabric_reading

    if "fabric" in snap.errors:
        return FabricReading(error=snap.errors["fabric"])
    if snap.fabric is None:
        return None
    return fabric_reading(first or snap.fabric, snap.fabric, settings.rdma_exclude_devices,
                          settings.verify_window_max_age)


def node_verdict(snap, settings, measured=None, gpudirect=None, first=None, allreduce=None,
                 nic_fw=None, dcgm=None, skipped=None, wiring=None, imex=None) -> Verdict:
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
        datapath = snap.pci.datapath(exclude, None, gpudirect)
    health = snap.gpu_health if "gpu_health" not in snap.errors else GpuHealthReading(error=snap.errors["gpu_health"])
    readings = readings_from_facts(snap.rdma, gpus, exclude, measured, datapath, health)
    readings.fabric = fabric(snap, settings, first)
    readings.allreduce = allreduce
    readings.nic_fw = nic_fw
    readings.dcgm = dcgm
    readings.busy = skipped
    readings.wiring = wiring
    readings.imex = imex
    asked = settings.policy().baseline
    if asked is not None:  # read in the same snapshot; judged only where a key asks
        from ccrhost.model.baseline import BaselineReading, kept

        readings.baseline = kept(snap.baseline, asked) if "baseline" not in snap.errors else BaselineReading(
            error=snap.errors["baseline"])
    if "host_health" in snap.errors:
        from ccrhost.model.host_health import HostHealthReading

        readings.host_health = HostHealthReading(error=snap.errors["host_health"])
    else:
        readings.host_health = snap.host_health  # None: not read (not judged)
    return evaluate(readings, settings.expectation(), settings.policy())


def compute_devices(snap, settings) -> list[str]:
    """The compute NICs' RDMA devices (no EFA, none of rdma_exclude_devices): what the NIC queries ask."""
    from ccrhost.model.ports import compute_ports

    return sorted({p.device for p in compute_ports(snap.rdma, settings.rdma_exclude_devices) if not p.efa})


def nic_firmware(snap, settings) -> list:
    """Each compute NIC's firmware settings, queried now (``mlxconfig -e q``;
    seconds per NIC), as the active-check results the node stores."""
    from ccrhost.facts.nicfw import NicFirmwareQuery
    from ccrhost.node.nicfw import result

    now = time.time()
    devices = compute_devices(snap, settings)
    nics = fact_cache._real(host).get_fact(NicFirmwareQuery, devices=tuple(devices), firmware=settings.verify_nic_firmware,
                                           optics=settings.verify_nic_optics, attempt=now)
    return [result(nic, settings.verify_nic_valid_for, now) for nic in nics]


def wiring_result(snap, settings):
    """The fabric's wiring, read now (LLDP, one MAD round trip per InfiniBand
    port), as the active-check result the node stores."""
    from ccrhost.facts.wiring import WiringQuery
    from ccrhost.node.wiring import result

    now = time.time()
    devices = compute_devices(snap, settings)
    reading = fact_cache._real(host).get_fact(WiringQuery, devices=tuple(devices), attempt=now)
    return result(reading, settings.wiring_valid_for, now)


@operation
def ccr(settings, report=None, measured=None, gpudirect=None, allreduce=None, dcgm=None, skipped=None):
    """
    Measure this node's CCR from its RDMA ports and GPUs, read its GPU-to-NIC
    data path (peer memory, ACS, IOMMU, topology, versions) and its lossless
    fabric (pause, drops, port and transport errors since the node's last
    stored reading) and judge them.

    + settings: the host's validated ``HostSettings`` (expectations, policy)
    + report: a ``FleetReport`` that collects the verdict for the fleet report
    + measured: this host's ``HostMeasurement`` from ``ccrhost.measure``, if any
    + gpudirect: this host's measured ``GpuDirectBandwidth``, if any
    + allreduce: this host's all-reduce results (``ActiveResult``), if run: judged with the rest
      and stored in ``verify_allreduce_state`` for the prolog and ``ccrhost check``
    + dcgm: this host's DCGM diag result (``ActiveResult``), if run: judged with the rest and
      stored in ``verify_dcgm_state``
    + skipped: the active tests not run for the node's GPU work (``model.busy.SkippedTests``), if any:
      a proof-missing UNKNOWN; nothing stored, so earlier results stay

    Read-only: yields nothing for OK, WARN and UNKNOWN (reasons are logged),
    and fails the host, naming the reasons, for FAIL.

    **Example:**

    .. code:: python

        verify.ccr(name="Verify CCR", settings=settings, report=report)
    """
    fact_cache.fresh(host)  # judge the node as the stages before left it
    snap = fact_cache.snapshot(host)  # the fabric counters' window comes with it: no second read, no sleep
    reading = None
    if allreduce is not None:
        from ccrhost.model.allreduce import AllReduceReading

        reading = AllReduceReading(time.time(), {r.mode: r.to_dict() for r in allreduce})
    nic_results = nic_firmware(snap, settings) if settings.verify_nic_firmware or settings.verify_nic_optics else None
    nic_reading = None
    if nic_results is not None:
        from ccrhost.model.nicfw import NicFwReading

        nic_reading = NicFwReading(time.time(), {r.mode: r.to_dict() for r in nic_results})
    wiring = wiring_result(snap, settings) if settings.wiring_enable else None
    imex = None
    if settings.imex_enable:  # an NVLink rack's tray: its IMEX domain, read now
        from ccrhost.facts.imex import ImexQuery

        imex = fact_cache._real(host).get_fact(ImexQuery, unit=settings.imex_unit, channel=settings.imex_channel,
                                               config=settings.imex_config, attempt=time.time())
    wiring_reading = None
    if wiring is not None:
        from ccrhost.model.wiring import StoredWiring

        wiring_reading = StoredWiring(time.time(), wiring.to_dict())
    diag = dcgm_text = None
    if dcgm is not None:  # judged with what the node stored (a sweep's level 3 FAIL stands), stored by merging
        from ccrhost.facts.nicfw import ActiveStateText
        from ccrhost.model.active import ActiveReading
        from ccrhost.node.active import merged

        dcgm_text = fact_cache._real(host).get_fact(ActiveStateText, path=settings.verify_dcgm_state,
                                                    attempt=time.time())
        diag = ActiveReading(time.time(), {f"{r.check}/{r.mode}": r.to_dict() for r in merged(dcgm_text, [dcgm])
                                           if r.check in ("dcgm_diag", "nvbandwidth", "gemm")},
                             required=settings.verify_dcgm)
    verdict = node_verdict(snap, settings, measured, gpudirect, fact_cache.fabric_first(host), reading, nic_reading,
                           diag, skipped, wiring_reading, imex)
    if report is not None:
        report.record(host.name, verdict, executed=state.current_stage == StateStage.Execute,
                      address=host.data.get("ssh_hostname"), settings=settings)
    fabric = verdict.readings.fabric
    if fabric is not None and fabric.window is not None and fabric.window.note:
        host.log(f"note: {fabric.window.note}")  # a first reading: rates start from now
    stored = (allreduce or []) + (nic_results or []) + ([wiring] if wiring is not None else [])
    if stored:  # what the prolog and `ccrhost check` read later, with its age; other checks' results kept
        from ccrhost.facts.nicfw import ActiveStateText
        from ccrhost.node.active import store_script

        text = fact_cache._real(host).get_fact(ActiveStateText, path=settings.verify_allreduce_state,
                                               attempt=time.time())
        yield store_script(settings.verify_allreduce_state, stored, text)
    if dcgm is not None:
        from ccrhost.node.active import store_script

        yield store_script(settings.verify_dcgm_state, [dcgm], dcgm_text)
    value = f"CCR {verdict.ccr.ccr:.3e}" if verdict.ccr else "CCR unknown"
    if verdict.status == FAIL:
        yield from fail(f"verification FAIL ({value}): {verdict.summary()}")
    elif verdict.status == OK:
        host.log(f"verification OK ({value})")
    else:
        host.log(f"verification {verdict.status} ({value}): {verdict.summary()}")
