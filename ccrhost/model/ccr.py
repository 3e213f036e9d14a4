"""The connection-to-compute ratio (CCR). Pure functions, no I/O.

    CCR = B / (beta * F)

B is the node's network bandwidth in bytes/s, F its GPU compute in FLOP/s
at the chosen precision, beta the bytes each FLOP needs moved (the seed
guide assumes 4). The seed's own pseudo-code turns Gb/s into GB/s and then
divides by TFLOPS, so its figures are 1000x these.
"""

from __future__ import annotations

from dataclasses import dataclass

SEED_BETA = 4.0
LOW_BAND = 0.5   # below: bandwidth-bound
HIGH_BAND = 2.0  # above: compute under-used
MODELS = ("bottleneck", "sum")


def beta_from_workload(grad_bytes_per_param: float, tokens_per_gpu_step: float, dp_size: int) -> float:
    """Bytes moved per FLOP for data-parallel training with ring all-reduce.

    Each step every GPU moves ``grad_bytes * 2(N-1)/N`` bytes per parameter
    and computes ``6 * tokens`` FLOPs per parameter (forward + backward).
    """
    if grad_bytes_per_param <= 0 or tokens_per_gpu_step <= 0 or dp_size < 1:
        raise ValueError("grad bytes and tokens must be positive and dp_size at least 1")
    return grad_bytes_per_param * 2 * (dp_size - 1) / dp_size / (6 * tokens_per_gpu_step)


def node_bandwidth_gbps(port_gbps: list[float], model: str = "bottleneck") -> float:
    """The node's bandwidth from its active compute ports' effective rates.

    ``bottleneck``: ports x the slowest port, because NCCL splits a
    collective evenly across rails and the slowest sets the pace.
    ``sum``: the plain sum.
    """
    if model not in MODELS:
        raise ValueError(f"bandwidth model {model!r}: allowed {MODELS}")
    if not port_gbps:
        return 0.0
    if model == "sum":
        return float(sum(port_gbps))
    return len(port_gbps) * min(port_gbps)


def ccr(bandwidth_gbps: float, tflops: float, beta: float = SEED_BETA) -> float:
    """Unit-correct CCR: (Gb/s -> bytes/s) / (beta * TFLOPS -> FLOP/s)."""
    if tflops <= 0 or beta <= 0:
        raise ValueError("compute and beta must be positive")
    return (bandwidth_gbps * 1e9 / 8) / (beta * tflops * 1e12)


def seed_ccr(bandwidth_gbps: float, tflops: float) -> float:
    """The seed guide's calculate_ccr(), kept to show the factor of 1000."""
    return (bandwidth_gbps * 0.125) / SEED_BETA / tflops


def band(value: float) -> str:
    if value < LOW_BAND:
        return "bandwidth-bound"
    if value > HIGH_BAND:
        return "compute-underused"
    return "balanced"


@dataclass(frozen=True)
class CcrResult:
    ccr: float
    bandwidth_gbps: float
    tflops: float
    beta: float
    model: str
    band: str | None  # None when beta is the seed's literal default

    def to_dict(self) -> dict:
        return {
            "ccr": self.ccr, "bandwidth_gbps": self.bandwidth_gbps, "tflops": self.tflops,
            "beta": self.beta, "bandwidth_model": self.model, "band": self.band,
        }


def compute(port_gbps: list[float], tflops: float, beta: float = SEED_BETA, model: str = "bottleneck",
            beta_from_workload_given: bool = False) -> CcrResult:
    bandwidth = node_bandwidth_gbps(port_gbps, model)
    value = ccr(bandwidth, tflops, beta)
    return CcrResult(value, bandwidth, tflops, beta, model, band(value) if beta_from_workload_given else None)
