"""``ccrhost monitor``: the CCR guide's step-5 figures from the node itself.

GPU utilization (NVML, else nvidia-smi), per-port RDMA throughput from the
port counters (iftop cannot see RDMA, which bypasses the kernel), PFC/ECN
congestion counters, and a summary against the targets (GPU >= 90%,
network >= 80% of the effective rate).
"""

from __future__ import annotations

import json
import time

from ccrhost.model.ports import effective_rates  # noqa: F401  (the CLI takes it from here)
from ccrhost.model.utilization import Summary, rates, summarize


def live_line(prev: dict, cur: dict, effective: dict[str, float]) -> str:
    port_rates = [r for r in rates(prev.ports, cur.ports, cur.t - prev.t) if f"{r.device}/{r.port}" in effective]
    total = sum(max(r.tx_gbps or 0, r.rx_gbps or 0) for r in port_rates)
    cap = sum(effective.values()) or 1
    gpu = cur.gpu_util
    gpu_text = f"GPU {sum(gpu) / len(gpu):5.1f}% (min {min(gpu):.0f}%)" if gpu else "GPU n/a"
    cnp = sum(v for r in port_rates for k, v in r.hw_deltas.items() if "cnp" in k)
    return f"{gpu_text} | net {total:8.1f} Gb/s = {total / cap:6.1%} of {cap:g} | CNPs {cnp}"


def run(effective: dict[str, float], gpu_count: int, interval: float, duration: float | None,
        sample, gpu_target: float = 90.0, net_target: float = 80.0, stream=None) -> Summary:
    """Sample until ``duration`` (or Ctrl-C); ``sample()`` returns one sample."""
    samples = [sample()]
    deadline = time.monotonic() + duration if duration else None
    tty = stream is not None and stream.isatty()
    try:
        while deadline is None or time.monotonic() < deadline:
            next_at = time.monotonic() + interval
            if deadline is not None:
                next_at = min(next_at, deadline)
            time.sleep(max(0.0, next_at - time.monotonic()))
            samples.append(sample())
            if stream is not None:
                line = f"t={samples[-1].t - samples[0].t:6.1f}s {live_line(samples[-2], samples[-1], effective)}"
                stream.write(("\r" + line) if tty else line + "\n")
                stream.flush()
    except KeyboardInterrupt:
        pass
    if tty:
        stream.write("\n")
    return summarize(samples, effective, gpu_count, gpu_target, net_target)


def format_text(s: Summary) -> str:
    def pct(x):
        return "n/a" if x is None else f"{x:.1f}%"

    lines = [f"ccrhost monitor: {s.verdict} over {s.seconds:.1f} s",
             f"  GPU utilization: mean {pct(s.gpu_util_mean)}, p5 {pct(s.gpu_util_p5)} (target >= {s.gpu_target:g}%)",
             f"  network: {pct(None if s.network_fraction is None else s.network_fraction * 100)} of the effective "
             f"rate (target >= {s.net_target:g}%)"]
    for port, frac in sorted(s.port_fraction.items()):
        lines.append(f"    {port}: {frac:.1%}")
    if s.bytes_per_gpu_second is not None:
        lines.append(f"  moved: {s.bytes_per_gpu_second / 1e9:.2f} GB per GPU-second")
    for name, total in sorted(s.hw_totals.items()):
        lines.append(f"  {name}: +{total}")
    return "\n".join(lines) + "\n"


def format_json(s: Summary) -> str:
    return json.dumps(s.to_dict(), indent=2) + "\n"


def format_prometheus(s: Summary) -> str:
    out = ["# HELP ccrhost_monitor_gpu_util_percent Mean GPU utilization over the window.",
           "# TYPE ccrhost_monitor_gpu_util_percent gauge"]
    if s.gpu_util_mean is not None:
        out += [f'ccrhost_monitor_gpu_util_percent{{stat="mean"}} {s.gpu_util_mean:g}',
                f'ccrhost_monitor_gpu_util_percent{{stat="p5"}} {s.gpu_util_p5:g}']
    out += ["# HELP ccrhost_monitor_network_fraction Achieved / effective rate of the compute ports.",
            "# TYPE ccrhost_monitor_network_fraction gauge"]
    if s.network_fraction is not None:
        out.append(f'ccrhost_monitor_network_fraction{{port="all"}} {s.network_fraction:.6g}')
    for port, frac in sorted(s.port_fraction.items()):
        out.append(f'ccrhost_monitor_network_fraction{{port="{port}"}} {frac:.6g}')
    out += ["# HELP ccrhost_monitor_ok 1 when both targets are met, 0 when one is missed.",
            "# TYPE ccrhost_monitor_ok gauge", f"ccrhost_monitor_ok {1 if s.verdict == 'OK' else 0}"]
    for name, total in sorted(s.hw_totals.items()):
        out.append(f'ccrhost_monitor_hw_counter_delta{{counter="{name}"}} {total}')
    return "\n".join(out) + "\n"
