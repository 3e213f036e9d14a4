"""The fleet view of ``deploys/monitor.py``: one sampling window on every
host at once, summarized with the same functions as ``ccrhost monitor``."""

from __future__ import annotations

import atexit
import json
import sys
from pathlib import Path

from ccrhost import failures
from ccrhost.facts.counters import RuntimeSamples
from ccrhost.facts.gpu import NvidiaGpus
from ccrhost.facts.rdma import RdmaDevices
from ccrhost.fleet.charts import Bar, bar_chart
from ccrhost.fleet.parallel import once_per_run, parallel_facts
from ccrhost.fleet.report import write_each
from ccrhost.model.ports import effective_rates
from ccrhost.model.status import FAIL, UNKNOWN, below_median
from ccrhost.model.utilization import Summary, summarize
from ccrhost.probes.rdma import RdmaReading


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
        if h not in state.failed_hosts and isinstance(s, list) and len(s) > 1:
            summaries[h.name] = summarize(s, effective_rates(r or RdmaReading(), st.rdma_exclude_devices),
                                          len(g.gpus) if g else 0, st.monitor_gpu_target, st.monitor_net_target)
    missing = unsampled(state, inventory, summaries)
    flags = fleet_outliers(summaries, first.monitor_outlier_tolerance)
    report = {"hosts": {**{h: {**s.to_dict(), "flags": flags.get(h, [])} for h, s in summaries.items()},
                        **{h: {"verdict": UNKNOWN, "reason": why, "flags": []} for h, why in missing.items()}}}
    report["hosts"] = dict(sorted(report["hosts"].items()))
    out = Path(first.verify_report_dir)
    table = fleet_table(summaries, flags, missing)
    # each report on its own, and the table printed whatever becomes of them
    atexit.register(lambda: sys.stdout.write("\n" + table + f"Report: {out / 'monitor-report.json'}\n"))
    write_each({"json": (out / "monitor-report.json", lambda: json.dumps(report, indent=2) + "\n"),
                "txt": (out / "monitor-report.txt", lambda: table),
                "html": (out / "monitor-report.html", lambda: html_chart(summaries, flags, missing))})
    return report


def unsampled(state, inventory, summaries: dict) -> dict[str, str]:
    """Every inventory host of the run without a window, and why: each is
    UNKNOWN in the reports, never left out."""
    missing = {}
    for host in inventory:
        if host.name in summaries or not state.is_host_in_limit(host):
            continue
        recorded = failures.reason(host.name)
        if host not in state.activated_hosts:
            missing[host.name] = "unreachable: no SSH connection at the start of the run"
        elif recorded:
            missing[host.name] = f"{recorded[0]}: {recorded[1]}"
        else:
            missing[host.name] = "sampling failed (see the run log)"
    return missing


def fleet_outliers(summaries: dict[str, Summary], tolerance: float = 0.2) -> dict[str, list[str]]:
    """Hosts whose network or GPU utilization is more than ``tolerance`` below the fleet median."""
    flags: dict[str, list[str]] = {}
    for field, label in (("network_fraction", "network utilization"), ("gpu_util_mean", "GPU utilization")):
        values = {h: getattr(s, field) for h, s in summaries.items() if getattr(s, field) is not None}
        for host, (value, median) in below_median(values, tolerance).items():
            flags.setdefault(host, []).append(f"{label} {value:.3g} is {1 - value / median:.0%} below the fleet median")
    return flags


def fleet_table(summaries: dict[str, Summary], flags: dict[str, list[str]], missing: dict[str, str] | None = None) -> str:
    lines = [f"{'host':24} {'verdict':8} {'GPU mean':>9} {'GPU p5':>7} {'network':>8}  flags"]
    for host, why in sorted((missing or {}).items()):
        lines.append(f"{host:24} {UNKNOWN:8} {'n/a':>9} {'n/a':>7} {'n/a':>8}  {why}")
    for host, s in sorted(summaries.items()):
        gpu = "n/a" if s.gpu_util_mean is None else f"{s.gpu_util_mean:.1f}%"
        p5 = "n/a" if s.gpu_util_p5 is None else f"{s.gpu_util_p5:.0f}%"
        net = "n/a" if s.network_fraction is None else f"{s.network_fraction:.1%}"
        lines.append(f"{host:24} {s.verdict:8} {gpu:>9} {p5:>7} {net:>8}  {'; '.join(flags.get(host, [])) or '-'}")
    return "\n".join(lines) + "\n"


def html_chart(summaries: dict[str, Summary], flags: dict[str, list[str]], missing: dict[str, str] | None = None) -> str:
    """Network utilization per host against the target, as the CCR report draws CCR."""
    bars = [Bar(host, None, UNKNOWN, f"{UNKNOWN}: {why}") for host, why in sorted((missing or {}).items())]
    for host, s in sorted(summaries.items()):
        status = FAIL if host in flags or s.verdict == FAIL else s.verdict
        value = s.network_fraction * 100 if s.network_fraction is not None else None
        gpu = "n/a" if s.gpu_util_mean is None else f"{s.gpu_util_mean:.0f}%"
        bars.append(Bar(host, value, status, f"net {value or 0:.1f}%, GPU {gpu}", s.net_target))
    return bar_chart("Network utilization per host", "Share of the effective rate; dashed line: the target.", bars)
