"""``ccrhost check``: the verification, on this node, before a job.

Gathers with the probes (sysfs snippet, NVML or nvidia-smi), evaluates
with the same functions the deploy uses, into the one verdict. Its output
formats: node/formats.py; its drain: node/drain.py; the failure history it
reads and extends: node/history_file.py. Exit codes are Nagios-style.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ccrhost.model.datapath import DatapathReading, unreadable
from ccrhost.model.fabric import FabricReading, window_from_state
from ccrhost.model.status import FAIL, UNKNOWN, Reason
from ccrhost.model.verdict import Verdict, evaluate, readings_from_facts, unjudged
from ccrhost.node.history_file import keep_history, locked, read_history
from ccrhost.node.stored import boot_id, read_stored  # boot_id named here: tests stand in for it

if TYPE_CHECKING:  # the check runs on kept settings (node.prepared), without the settings model
    from ccrhost.settings import HostSettings


def run_check(settings: HostSettings, gather=None, timeout: float = 20, gather_pci=None, started=None,
              gather_health=None, gather_fabric=None, refresh_nic: bool = False, query_nic=None,
              deadline: float | None = None, skipped: list[str] | None = None, read_busy=None,
              gather_baseline=None, gather_host=None, refresh_wiring: bool = False, read_wiring=None,
              gather_imex=None) -> Verdict:
    """Gather this node's readings and evaluate them. ``started``: the reads
    already under way (:class:`ccrhost.node.gather.Started`), else they
    start here. ``gather`` (RDMA and GPUs) and ``gather_pci`` (the data
    path) are for tests; with ``gather`` alone the data path is not read,
    GPU health only with ``gather_health`` and the lossless-fabric counters
    only with ``gather_fabric``. ``refresh_nic`` (the health check, never the
    prolog): query the compute NICs' firmware settings first and store them
    (``query_nic``: the runner, for tests) while ``deadline`` (a
    ``time.monotonic`` time, the whole run's budget) leaves room; the NICs
    it left are added to ``skipped``. On a busy node (GPU processes, a Slurm
    job: ``node.busy.read_local``, or ``read_busy()`` in tests) the queries are
    not made, unless ``verify_active_when_busy``: the verdict says so with a
    proof-missing UNKNOWN ``node_busy`` and the stored readings stay. The host
    baseline is read where a ``baseline_*`` key asks (``gather_baseline``: its
    reader, for tests).
    ``gather_host``: the host health reading (for tests; with ``gather``
    alone it is not read).
    ``refresh_wiring`` (the health check): read the fabric's wiring again
    and store it where the stored reading is missing, unreadable or past half
    its validity (``"force"``: whatever its age); ``read_wiring``: the probe,
    for tests. Every path judges the stored reading and its age.

    What could not be read is UNKNOWN, never a guess: an RDMA probe that
    hangs past ``timeout`` or prints what sysfs never prints gives the
    UNKNOWN verdict of :func:`unknown`; GPUs or a data path that cannot be
    read are UNKNOWN reasons of the verdict.
    """
    policy = settings.policy()  # built once: every part of the check reads the same
    asked = policy.baseline
    if gather is None and gather_baseline is None and asked is not None:
        # its sysctls and mounts come from the settings: started now, beside the reads under way
        from ccrhost.node.gather import _start
        from ccrhost.probes import baseline as baseline_probe

        gather_baseline = _start(baseline_probe.read_local, *asked.ask(), timeout=timeout).result
    if gather is None and gather_imex is None and policy.imex.enabled:  # an NVLink rack's tray, read beside the rest
        from ccrhost.node.gather import _start
        from ccrhost.probes import imex as imex_probe

        gather_imex = _start(imex_probe.read_local, policy.imex, settings.imex_config, timeout=timeout).result
    if gather is None:
        from ccrhost.node.gather import Started
        from ccrhost.probes import fabric as fabric_probe
        from ccrhost.probes import local, rdma

        # The probes are separate processes that only read: run at once,
        # the check waits for the slowest rather than their sum.
        reads = started or Started(timeout)
        if gather_host is None and policy.host_health.enabled:
            # its units and state come from the settings: started once they are known
            gather_host = reads.host_health(settings, policy)
        if gather_fabric is None:  # the reading now, joined with the stored one the settings name
            def gather_fabric():
                return fabric_probe.read_local(settings.verify_link_state, True, timeout, now=reads.fabric_now.result)

        try:
            rdma_state = reads.rdma.result()
        except (local.ProbeTimeout, rdma.RdmaFormatError) as exc:
            # the words and code the deploy gives for the same output (probes.node, operations.cache)
            return unknown("rdma_unreadable", f"cannot read {rdma.SOURCE}: {exc}")
        gpu_state = reads.gpus_result()
        if gather_pci is None:
            gather_pci = reads.pci.result
        if gather_health is None:
            gather_health = reads.gpu_health_result
    else:
        rdma_state, gpu_state = gather()
    datapath = local_datapath(settings, gather_pci) if gather_pci is not None else None
    health = local_gpu_health(settings, gather_health) if gather_health is not None else None
    readings = readings_from_facts(rdma_state, gpu_state, settings.rdma_exclude_devices, datapath=datapath,
                                   gpu_health=health)
    readings.fabric = local_fabric(settings, gather_fabric) if gather_fabric is not None else None
    if asked is not None and gather_baseline is not None:
        from ccrhost.model.baseline import kept

        readings.baseline = kept(gather_baseline(), asked)
    readings.host_health = gather_host() if gather_host is not None else None
    readings.imex = gather_imex() if gather_imex is not None else None
    if settings.allreduce_state:  # the stored results and their age: the check never runs the test itself
        from ccrhost.node.allreduce import stored_reading

        readings.allreduce = stored_reading(settings.allreduce_state)
    nic_state = getattr(settings, "nic_fw_state", None)
    if nic_state:  # the stored firmware readings and their age; the slow query only where asked
        from ccrhost.node import nicfw

        work = _busy_work(settings, read_busy) if refresh_nic else None
        if work is not None and not work.idle:
            from ccrhost.model.busy import SkippedTests

            readings.busy = SkippedTests(work, ["the NIC firmware query (--refresh-nic)"])
        elif refresh_nic:
            devices = sorted({p.device for p in readings.ports if not p.efa})
            nic = policy.nic_fw  # not None: nic_fw_state is set only when one of them is on
            nicfw.run_and_store(nic_state, devices, settings.verify_nic_valid_for, run=query_nic,
                                firmware=nic.enabled, optics=nic.optics, deadline=deadline, skipped=skipped)
        readings.nic_fw = nicfw.stored_reading(nic_state)
    wiring_state = getattr(settings, "wiring_state", None)
    if wiring_state:  # a read-only query (LLDP, subnet management): made on a busy node too
        from ccrhost.node import wiring

        if refresh_wiring and (refresh_wiring == "force" or wiring.due(wiring_state, settings.wiring_valid_for)):
            devices = tuple(sorted({p.device for p in readings.ports if not p.efa}))
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left < 5:  # the health check's budget is spent: the next run reads it
                if skipped is not None:
                    skipped.append("the wiring read (lldpctl, smpquery)")
            else:
                if read_wiring is None:
                    from ccrhost.probes.wiring import read_local

                    def read_wiring(devs, left=left):
                        return read_local(devs, timeout=60 if left is None else min(60, left - 1))
                wiring.run_and_store(wiring_state, settings.wiring_valid_for, devices, read=read_wiring)
        readings.wiring = wiring.stored_reading(wiring_state)
    if getattr(settings, "dcgm_state", None):  # likewise the stored DCGM diag result (node/dcgm.py)
        from ccrhost.node import dcgm as node_dcgm

        # judged whoever stored it, verify_dcgm on or off: a sweep's FAIL holds its drain
        readings.dcgm = node_dcgm.stored_reading(settings.dcgm_state,
                                                 required=getattr(settings, "verify_dcgm", True))
    cert_path = getattr(settings, "accept_certificate", None)
    if cert_path:  # the acceptance certificate: shown beside the verdict, never one of its reasons
        from ccrhost.node import certificate

        readings.certificate = certificate.stored_reading(
            cert_path, tuple(getattr(settings, "accept_stages", certificate.STAGES)),
            certificate.versions(readings))
    path = getattr(settings, "verify_history", None)
    if not path:
        verdict = evaluate(readings, settings.expectation(), policy)
    else:
        # one check at a time reads and extends the history (a prolog beside
        # the health check would otherwise count one failure twice)
        with locked(path):
            readings.history = read_history(path, boot=boot_id())
            verdict = evaluate(readings, settings.expectation(), policy)
            keep_history(path, verdict, policy.history)
    if getattr(settings, "verify_evidence_dir", None) and verdict.status == FAIL:
        from ccrhost.node.evidence import keep_evidence

        verdict.evidence = keep_evidence(settings, verdict)
    return verdict


def _busy_work(settings: HostSettings, read_busy):
    """The node's GPU work and Slurm jobs before the NIC queries; None where the settings run them
    on a busy node anyway (verify_active_when_busy)."""
    if getattr(settings, "verify_active_when_busy", False):
        return None
    if read_busy is None:
        from ccrhost.node import busy

        return busy.read_local(slurm_conf=getattr(settings, "slurm_conf", None))
    return read_busy()


def unknown(code: str, message: str, verdict: Verdict | None = None) -> Verdict:
    """UNKNOWN (exit 3) with ``message`` as its one reason; with ``verdict``,
    that verdict's reasons kept and the status forced to UNKNOWN (a failing
    helper, such as scontrol under --drain)."""
    if verdict is not None:
        return replace(verdict, status=UNKNOWN, reasons=[*verdict.reasons, Reason(UNKNOWN, code, message)])
    return unjudged(UNKNOWN, code, message)


# --- the data path, and the lossless fabric since the node's last reading -------

def local_datapath(settings: HostSettings, gather_pci) -> DatapathReading:
    """Read the data path here."""
    from ccrhost.probes.local import ProbeTimeout
    from ccrhost.probes.pci import PciFormatError

    try:
        snap = gather_pci()
    except (PciFormatError, ProbeTimeout, OSError) as exc:
        return unreadable(str(exc))
    return snap.datapath(settings.rdma_exclude_devices)


def local_fabric(settings: HostSettings, gather_fabric) -> FabricReading:
    """The fabric counters here, judged by the rule the deploy uses
    (``probes.fabric.fabric_reading``): rates since the node's stored
    reading, which this read replaces (``verify_link_state``)."""
    from ccrhost.probes.fabric import FabricFormatError, fabric_reading
    from ccrhost.probes.local import ProbeTimeout

    try:
        dump = gather_fabric()
    except (FabricFormatError, ProbeTimeout, OSError) as exc:
        return FabricReading(error=f"cannot read the lossless-fabric counters (ethtool, hw_counters): {exc}")
    return fabric_reading(dump, None, settings.rdma_exclude_devices, settings.verify_window_max_age)


def local_gpu_health(settings: HostSettings, gather_health, now=None):
    """Read GPU health here, with the rates' window since the last check's
    reading (``verify_gpu_state``, as the link window keeps its counters:
    a reading from another boot is no baseline), else since boot. A stored
    reading that is corrupt or out of range is discarded, replaced and noted."""
    from ccrhost.model.fabric import DISCARDED
    from ccrhost.model.gpu_health import CounterWindow, counters
    from ccrhost.output import write_state

    reading = gather_health()
    if reading.error and not reading.gpus:
        return reading
    now = time.time() if now is None else now
    current = counters(reading)
    path = Path(settings.verify_gpu_state)
    previous, why = read_stored(path)
    boot = boot_id()
    link = window_from_state(previous, current, boot, now, settings.verify_window_max_age, reading.uptime_s)
    if reading.xids:  # only a node that logged an XID asks when its GPUs were reset
        from ccrhost.node.gpu_reset import reset_ages

        reading.resets = reset_ages(str(path), reading.gpus, boot, now)
    then = "rates are judged since boot" if link.since_boot else "rates are judged from the next check on"
    if why is not None:
        note = f"{DISCARDED} in {path} ({why}): discarded and replaced by this reading; the GPU counters' {then}"
    elif link.note is not None and link.note.startswith(DISCARDED):
        note = f"GPU counters in {path}: {link.note}"
    elif link.note is not None:
        note = "no earlier reading of the GPU counters this boot: their rates are judged from the next check on"
    else:
        note = None
    if link.seconds is not None:
        reading.window = CounterWindow(link.seconds, link.before, note, since_boot=link.since_boot)
    else:
        reading.window = CounterWindow(None, {}, note)
    try:
        write_state(path, json.dumps({"boot_id": boot, "time": now, "counters": current}) + "\n")
    except OSError as exc:
        reading.window.note = (f"cannot keep the GPU counters in {path} ({exc.strerror or exc}): "
                               "the next check cannot judge their rates")
    return reading
