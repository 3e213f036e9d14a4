"""The fleet view of ``deploys/monitor.py``: one sampling window on every
host at once, summarized with the same functions as ``ccrhost monitor``."""

from __future__ import annotations

import atexit
import json
import sys
from pathlib import Path

from ccrhost.facts.gpu import NvidiaGpus
from ccrhost.facts.monitor import RuntimeSamples
from ccrhost.facts.rdma import RdmaDevices
from ccrhost.facts.parallel import once_per_run, parallel_facts
from ccrhost.monitor import effective_rates, fleet_outliers, fleet_table, html_chart
from ccrhost.counters import summarize


def fleet_window(state, inventory, settings_by_host: dict) -> dict:
    """Sample every host once per run; the fleet report is printed at exit."""
    return once_per_run(inventory, "monitor", lambda: _window(state, inventory, settings_by_host))


def _window(state, inventory, settings_by_host: dict) -> dict:
    active = set(inventory.get_active_hosts())
    hosts = [h for h in inventory if h in active]
    first = settings_by_host[hosts[0].name]
    count = max(2, int(first.monitor_seconds / first.monitor_interval) + 1)
    rdma = parallel_facts(state, [(h, RdmaDevices, {}) for h in hosts])
    gpus = parallel_facts(state, [(h, NvidiaGpus, {}) for h in hosts])
    samples = parallel_facts(state, [(h, RuntimeSamples, {"count": count, "interval": first.monitor_interval})
                                     for h in hosts])
    summaries = {}
    for h, r, g, s in zip(hosts, rdma, gpus, samples):
        st = settings_by_host[h.name]
        if isinstance(s, list) and len(s) > 1:
            summaries[h.name] = summarize(s, effective_rates(r, st.rdma_exclude_devices),
                                          len(g.get("gpus", [])), st.monitor_gpu_target, st.monitor_net_target)
    flags = fleet_outliers(summaries, first.monitor_outlier_tolerance)
    report = {"hosts": {h: {**s.to_dict(), "flags": flags.get(h, [])} for h, s in summaries.items()}}
    out = Path(first.verify_report_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "monitor-report.json").write_text(json.dumps(report, indent=2) + "\n")
    table = fleet_table(summaries, flags)
    (out / "monitor-report.txt").write_text(table)
    (out / "monitor-report.html").write_text(html_chart(summaries, flags))
    atexit.register(lambda: sys.stdout.write("\n" + table + f"Report: {out / 'monitor-report.json'}\n"))
    return report
