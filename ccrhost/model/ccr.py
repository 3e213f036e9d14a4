"""The connection-to-compute ratio (CCR). Pure functions, no I/O.

    CCR = B / (beta * F)

B is the node's network bandwidth in bytes/s, F its GPU compute in FLOP/s
at the chosen precision, beta the bytes each FLOP needs moved (the CCR
guide assumes 4; with a workload, ccrhost/model/step.py gives the
node's). The CCR guide's own pseudo-code turns Gb/s into GB/s and then divides
by TFLOPS, so its figures are 1000x these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SEED_BETA = 4.0
LOW_BAND = 0.5   # below: bandwidth-bound
HIGH_BAND = 2.0  # above: compute under-used
MODELS = ("bottleneck", "sum")




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


def guide_ccr(bandwidth_gbps: float, tflops: float) -> float:
    """The CCR guide's calculate_ccr(), kept to show the factor of 1000."""
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
    band: str | None  # None when beta is the CCR guide's literal default or given as --beta/verify_beta
    workload: dict | None = None  # the workload model's figures and assumptions, when one was given
    compute: str | None = None    # a measured CCR's F: "measured" (the GEMM's) or "nominal" (the peak's)

    def to_dict(self) -> dict:
        return {
            # infinite: a job with no inter-node traffic (JSON has no infinity)
            "ccr": self.ccr if math.isfinite(self.ccr) else None, "bandwidth_gbps": self.bandwidth_gbps,
            "tflops": self.tflops, "beta": self.beta, "bandwidth_model": self.model, "band": self.band,
            "workload": self.workload, "compute": self.compute,
        }


def compute(port_gbps: list[float], tflops: float, beta: float = SEED_BETA, model: str = "bottleneck") -> CcrResult:
    bandwidth = node_bandwidth_gbps(port_gbps, model)
    return CcrResult(ccr(bandwidth, tflops, beta), bandwidth, tflops, beta, model, None)


def from_workload(node, model: str = "bottleneck") -> CcrResult:
    """The result for a ``model.step.NodeModel``: its node CCR, beta and
    band, with its figures and assumptions attached for the report."""
    return CcrResult(node.ccr, node.bandwidth_gbps, node.tflops, node.beta, model, node.band, node.to_dict())
