"""Runtime figures from counter samples: throughput per port, GPU
utilization, and the summary against the targets. Pure.

Samples come from :mod:`ccrhost.probes.counters`; plain 32-bit counters
wrap, and :func:`delta` handles one wrap between samples.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ccrhost.model.status import FAIL, OK, UNKNOWN

WORD = 4  # port_xmit_data / port_rcv_data count 4-byte words


def delta(before: int | None, after: int | None, wrap: int | None) -> int | None:
    """Counter increase, across one wrap-around of a 32-bit counter."""
    if before is None or after is None:
        return None
    if after >= before:
        return after - before
    return after + wrap - before if wrap else None  # a 64-bit counter going back was reset


@dataclass(frozen=True)
class PortRate:
    device: str
    port: int
    tx_gbps: float | None
    rx_gbps: float | None
    hw_deltas: dict


def rates(before: dict, after: dict, seconds: float) -> list[PortRate]:
    out = []
    for key in sorted(after):
        b, a = before.get(key), after[key]
        if b is None or seconds <= 0:
            continue
        gbps = {}
        for side in ("tx", "rx"):
            d = delta(getattr(b, f"{side}_words"), getattr(a, f"{side}_words"), a.wrap)
            gbps[side] = None if d is None else d * WORD * 8 / seconds / 1e9
        hw = {n: delta(b.hw.get(n), a.hw.get(n), None) for n in a.hw}
        out.append(PortRate(key[0], key[1], gbps["tx"], gbps["rx"], {k: v for k, v in hw.items() if v is not None}))
    return out


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = (len(ordered) - 1) * q
    lo, hi = int(index), min(int(index) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (index - lo)


@dataclass
class Summary:
    seconds: float
    gpu_util_mean: float | None
    gpu_util_p5: float | None
    network_fraction: float | None        # achieved / effective, busiest direction, over the compute ports
    port_fraction: dict[str, float]       # per port, busiest direction
    bytes_per_gpu_second: float | None
    hw_totals: dict[str, int]
    gpu_target: float
    net_target: float

    @property
    def gpu_ok(self) -> bool | None:
        return None if self.gpu_util_mean is None else self.gpu_util_mean >= self.gpu_target

    @property
    def net_ok(self) -> bool | None:
        return None if self.network_fraction is None else self.network_fraction * 100 >= self.net_target

    @property
    def verdict(self) -> str:
        checks = [self.gpu_ok, self.net_ok]
        if False in checks:
            return FAIL
        return UNKNOWN if None in checks else OK

    def to_dict(self) -> dict:
        return {**self.__dict__, "gpu_ok": self.gpu_ok, "net_ok": self.net_ok, "verdict": self.verdict}


def summarize(samples: list[dict], effective_gbps: dict[str, float], gpu_count: int,
              gpu_target: float = 90.0, net_target: float = 80.0) -> Summary:
    """``samples``: [{"t": seconds, "ports": parse_counters(...), "gpu_util": [percent per GPU]}]."""
    utils = [u for s in samples for u in s.gpu_util]
    per_port: dict[str, list[float]] = {}
    moved_bytes, hw_totals = 0.0, {}
    for prev, cur in zip(samples, samples[1:]):
        dt = cur.t - prev.t
        for r in rates(prev.ports, cur.ports, dt):
            name = f"{r.device}/{r.port}"
            if name not in effective_gbps:
                continue
            busiest = max(x for x in (r.tx_gbps, r.rx_gbps, 0.0) if x is not None)
            per_port.setdefault(name, []).append(busiest)
            moved_bytes += ((r.tx_gbps or 0) + (r.rx_gbps or 0)) * 1e9 / 8 * dt
            for k, v in r.hw_deltas.items():
                hw_totals[k] = hw_totals.get(k, 0) + v
    seconds = samples[-1].t - samples[0].t if len(samples) > 1 else 0.0
    port_fraction = {n: statistics.mean(v) / effective_gbps[n] for n, v in per_port.items() if effective_gbps[n]}
    total_eff = sum(effective_gbps[n] for n in per_port)
    network = (sum(statistics.mean(v) for v in per_port.values()) / total_eff) if total_eff else None
    return Summary(
        seconds=seconds,
        gpu_util_mean=statistics.mean(utils) if utils else None,
        gpu_util_p5=percentile(utils, 0.05),
        network_fraction=network,
        port_fraction=port_fraction,
        bytes_per_gpu_second=(moved_bytes / (gpu_count * seconds)) if gpu_count and seconds else None,
        hw_totals=hw_totals,
        gpu_target=gpu_target,
        net_target=net_target,
    )
