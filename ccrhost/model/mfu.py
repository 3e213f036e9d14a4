"""The FLOP and MFU arithmetic of the workload model: the FLOPs a node
computes per step, the end-to-end MFU a step time gives, and the kernel
share that reaches a published MFU. Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ccrhost.model.workload import Problem, WorkloadError, WorkloadSpec

# Kaplan et al. 2020, "Scaling Laws for Neural Language Models", sec. 2.1:
# C = 6N FLOPs per token for training (2N forward, 4N backward).
FLOPS_PER_PARAM_TOKEN = 6


def node_flops(spec: WorkloadSpec, g: int, params: float) -> tuple[float, float, float, float]:
    """(FLOPs, attention FLOPs, forward share, model FLOPs) one node computes
    per step.

    Per token: 6 x active parameters (Kaplan et al. 2020: 2 forward, 4
    backward), MoE active = params - expert_params x (1 - top_k / experts);
    plus attention 6 x layers x seq_len x a when those and params are given,
    a = attention_width (heads x (query-key dim + value dim) / 2: the score
    product is 2 s x heads x qk dim a token forward, the value product 2 s x
    heads x v dim) or hidden_size. PaLM app. B counts 12 L H Q T without
    masking; a causal mask halves it. Full recompute reruns the forward (2 of
    each 6) inside backward: 8/6 of the FLOPs, forward share 2/8 instead of
    2/6. Model FLOPs (what an MFU counts) leave the recompute out. Each GPU
    computes its tokens_per_gpu_step share."""
    active = params
    if spec.moe and spec.expert_params:
        active = params - spec.expert_params * (1 - spec.top_k / spec.experts)
    attention = 0.0
    if spec.params is not None and None not in (spec.layers, spec.seq_len, spec.hidden_size):
        width = spec.attention_width if spec.attention_width is not None else spec.hidden_size
        attention = FLOPS_PER_PARAM_TOKEN * spec.layers * spec.seq_len * width
    per_token = FLOPS_PER_PARAM_TOKEN * active + attention
    passes = 8 if spec.recompute == "full" else 6
    tokens = g * spec.tokens_per_gpu_step
    scale = tokens * passes / 6
    return per_token * scale, attention * scale, 2 / passes, per_token * tokens



def model_attention_flops(attention_flops: float, fwd_share: float) -> float:
    """The causal attention FLOPs an MFU counts (no recompute), from the
    node's attention FLOPs and forward share (``node_flops``)."""
    return attention_flops * fwd_share * 3


def end_to_end_mfu(model_flops: float, attention_flops: float, step_s: float, tflops: float,
                   attention: str = "causal") -> float:
    """The end-to-end MFU: model FLOPs (no recompute) / (step time x F),
    attention counted ``causal`` (6 L s a per token, in ``model_flops``) or
    ``full`` (12 L s a, PaLM's and Megatron-LM's count: ``attention_flops``,
    the causal model attention FLOPs, counted twice)."""
    if math.isinf(step_s):
        return 0.0
    flops = model_flops + (attention_flops if attention == "full" else 0.0)
    return flops / (step_s * tflops * 1e12)


# What an MFU figure is: a prediction needs a kernel share measured somewhere
# (a preset's source run, a given kernel_share, a solved mfu); with the
# kernels at peak it is only the most the step allows.
PREDICTION = "prediction"
CEILING = "ceiling (kernels at peak)"


def shown(value: float) -> str:
    """An MFU for people, never above 100%: attention counted full (12 L s a)
    can put the model FLOPs above what the GPUs computed, and that is no
    utilisation; the figure is capped and says so."""
    return f"100.0% (capped: {value:.1%} by this count, above peak F)" if value > 1 else f"{value:.1%}"


def cell(value: float, kind: str) -> str:
    """An MFU table cell: capped at 100%, a ceiling marked ``<=``."""
    return ("<=" if kind == CEILING else "") + f"{min(value, 1.0):.1%}"


def solve_kernel_share(spec: WorkloadSpec, mfu_at: Callable[[float], float]) -> float:
    """The kernel share at which the node's predicted end-to-end MFU (in
    spec.mfu_attention's count), ``mfu_at(share)``, is spec.mfu. The step
    shrinks as the kernels speed up (compute falls faster than the overlap's
    room), so the MFU rises with the share: bisection. Raises WorkloadError
    when even kernels at peak leave less than spec.mfu."""
    target, count = spec.mfu, spec.mfu_attention
    best = mfu_at(1.0)
    if best < target * (1 - 1e-9):
        raise WorkloadError([Problem("mfu", target, f"unreachable here: with kernels at peak (kernel share 1) the "
                                     f"pipeline bubble and exposed communication leave an end-to-end MFU of "
                                     f"{best:.1%} ({count} attention); give at most that, or kernel_share")])
    lo, hi = 1e-9, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if mfu_at(mid) < target:
            lo = mid
        else:
            hi = mid
    return hi
