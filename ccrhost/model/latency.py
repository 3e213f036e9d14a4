"""RDMA latency between two ports (ib_write_lat) and its gate.

The gate is Imbue's host validation (shared/reference/acceptance.md,
`host_validation/p2p_ib_test.py`): ib_write_lat's 99% percentile at most
4.2 µs. The judge is pure: a reading in, reasons out.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccrhost.model.status import FAIL, UNKNOWN, Reason

IMBUE_MAX_P99_US = 4.2
IMBUE_SOURCE = "Imbue host validation, ib_write_lat p99 at most 4.2 µs"


@dataclass(frozen=True)
class LatencyReading:
    """One row of ib_write_lat's report, in microseconds; ``error`` says
    why there is no usable row (then the numbers may be None)."""
    bytes: int | None = None
    iterations: int | None = None
    t_min: float | None = None
    t_max: float | None = None
    t_typical: float | None = None
    t_avg: float | None = None
    t_stdev: float | None = None
    p99: float | None = None
    p99_9: float | None = None
    error: str | None = None
    pair: str = ""             # what was measured, for the message: "node-a mlx5_0 -> node-b"
    nic: str | None = None     # the local RDMA device


def check_latency(reading: LatencyReading, max_p99_us: float = IMBUE_MAX_P99_US,
                  source: str = IMBUE_SOURCE) -> list[Reason]:
    """FAIL ``rdma_latency_high`` when p99 exceeds the limit, UNKNOWN
    ``rdma_latency_unreadable`` when there is no p99 to judge."""
    where = reading.pair or reading.nic or "RDMA pair"
    if reading.error is not None or reading.p99 is None:
        why = reading.error or "ib_write_lat gave no 99% percentile"
        return [Reason(UNKNOWN, "rdma_latency_unreadable", f"{where}: RDMA latency not read: {why}",
                       nic=reading.nic)]
    if reading.p99 > max_p99_us:
        return [Reason(FAIL, "rdma_latency_high",
                       f"{where}: ib_write_lat p99 {reading.p99:.2f} µs is above {max_p99_us:g} µs ({source})",
                       nic=reading.nic)]
    return []
