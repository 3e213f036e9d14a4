"""deploys/baseline.py: every host's calibration input collected on the
controller, read-only on the nodes (nothing needs installing there): its
active-check state files and the versions they ran under, written as
``<verify_report_dir>/baseline/<host>.json``, the document ``ccrhost
baseline results`` prints, for ``ccrhost baseline calibrate --from``."""

from __future__ import annotations

import json
import os
import time

from ccrhost.node.baseline_results import document, parse_versions, results_of_text


def collect_host(host, settings) -> str:
    """Read ``host`` and write its document; the path written."""
    from ccrhost.facts.baseline import BaselineVersions
    from ccrhost.facts.nicfw import ActiveStateText
    from ccrhost.output import write_atomic

    results, errors = {}, []
    for path in dict.fromkeys((settings.verify_allreduce_state, settings.verify_dcgm_state)):
        found, error = results_of_text(path, host.get_fact(ActiveStateText, path=path, attempt=time.time()) or "")
        results.update(found)
        errors += [error] if error else []
    versions = parse_versions(host.get_fact(BaselineVersions) or "", tuple(settings.rdma_exclude_devices))
    out = os.path.join(settings.verify_report_dir, "baseline", f"{host.name}.json")
    write_atomic(out, json.dumps(document(host.name, time.time(), versions, results, errors), indent=1) + "\n")
    return out


def readings_of(snap, settings):
    """The readings capture takes, from the deploy's snapshot (as ``ccrhost check`` reads them on the node)."""
    from ccrhost.model import datapath as dp
    from ccrhost.model.baseline import BaselineReading
    from ccrhost.model.gpus import GpuProbe
    from ccrhost.model.verdict import readings_from_facts

    if "rdma" in snap.errors:
        return None
    gpus = snap.gpus if "gpus" not in snap.errors else GpuProbe(error=snap.errors["gpus"])
    exclude = settings.rdma_exclude_devices
    datapath = dp.unreadable(snap.errors["pci"]) if "pci" in snap.errors else snap.pci.datapath(exclude)
    readings = readings_from_facts(snap.rdma, gpus, exclude, datapath=datapath)
    # unreadable: each settings key is left out, saying why
    readings.baseline = (snap.baseline if "baseline" not in snap.errors
                         else BaselineReading(error=snap.errors["baseline"]))
    return readings


def capture_host(host, settings, date: str) -> str:
    """The host's hardware and baseline as a platform file, ``<verify_report_dir>/baseline/<host>.platform.yaml``
    (``ccrhost baseline capture`` through pyinfra); the path written, or why none was."""
    from ccrhost.node.baseline_capture import capture_text
    from ccrhost.operations import cache as fact_cache
    from ccrhost.output import write_atomic

    snap = fact_cache.snapshot(host)
    readings = readings_of(snap, settings)
    if readings is None:
        return f"not captured: {snap.errors['rdma']}"
    text, _ = capture_text(readings, host.name, f"{host.name}", date)
    out = os.path.join(settings.verify_report_dir, "baseline", f"{host.name}.platform.yaml")
    write_atomic(out, text)
    return out
