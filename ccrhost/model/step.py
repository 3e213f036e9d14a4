"""What one training job asks of one node's network: the workload model
behind the node CCR (model v3, issue 26). Pure functions, no I/O.

The CCR compares the time a node computes with the time its NICs need for
the job's inter-node traffic, both per training step::

    CCR = compute_s / comm_s = B / (beta x F x k)
    beta = NIC bytes per node per step / FLOPs per node per step

B is the node's NIC bandwidth (all compute ports together), F its peak
dense FLOP/s, k the kernel share: the share of F the kernels reach while
computing (1: peak; a published end-to-end MFU, after the bubble and
exposed communication, is solved into it). Per node, not per GPU: NCCL
keeps the hops inside a node on NVLink and leaves each node once per ring,
so the node's NICs carry one copy of what a ring member
sends (nccl-tests' multi-node all_reduce busbw tops out at the node's
total NIC bandwidth). Each formula, its derivation and its source are in
docs/ccr-model.md; every assumption is in ``ASSUMPTIONS`` and in each
result's ``notes``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from ccrhost.model import ccr as ccrmod
from ccrhost.model import mfu as mfumod
from ccrhost.model import presets
from ccrhost.model.traffic import context_parallel_bytes, data_parallel_bytes, moe_bytes, pipeline_bytes
from ccrhost.model.workload import (
    DEFAULT_REDUCTION,
    WorkloadError,
    WorkloadSpec,
    spec_problems,
    topology_problems,
)

NOT_NETWORK_BOUND = "not-network-bound"


@dataclass(frozen=True)
class NodeModel:
    """The workload model's answer for one node. Byte, FLOP and time
    figures are per parameter when ``params`` is None (they scale with it)."""

    spec: WorkloadSpec
    gpus_per_node: int
    bandwidth_gbps: float  # B, the node's NICs together
    tflops: float  # F, the node's GPUs together (peak)
    params: float | None
    nodes: int  # the job's nodes
    stage_nodes: int  # nodes per pipeline stage: the data-parallel reduction spans them
    grad_bwd_bytes: float  # data-parallel sync during backward: gradient reduce (+ FSDP backward gather)
    grad_fwd_bytes: float  # data-parallel sync during forward: parameter all-gathers
    act_bytes: float  # pipeline sends
    moe_bytes: float  # expert all-to-all (dispatch + combine) crossing nodes
    cp_bytes: float  # context-parallel K/V exchange crossing nodes
    flops: float  # node FLOPs per step, recompute and attention included
    attention_flops: float  # of which attention score/value products (causal)
    fwd_share: float  # forward pass / all FLOPs
    model_flops: float  # node FLOPs per step an MFU counts: no recompute, causal attention
    kernel_share: float  # share of F the kernels reach while computing (given, solved from mfu, or 1)
    compute_s: float  # flops / (F x kernel_share)
    bubble_s: float  # pipeline bubble, (pp-1)/(v x micro_batches) x compute
    grad_bwd_s: float
    grad_fwd_s: float
    pipeline_s: float  # pipeline sends
    moe_s: float  # expert all-to-all
    cp_s: float  # context-parallel K/V exchange: on the critical path, exposed
    notes: tuple[str, ...] = field(default=())  # the defaults and simplifications this answer used

    @property
    def grad_bytes(self) -> float:
        return self.grad_bwd_bytes + self.grad_fwd_bytes

    @property
    def nic_bytes(self) -> float:
        return self.grad_bytes + self.act_bytes + self.moe_bytes + self.cp_bytes

    @property
    def beta(self) -> float:
        """Bytes per FLOP for the node: NIC bytes / FLOPs per step."""
        return self.nic_bytes / self.flops

    @property
    def other_s(self) -> float:
        return self.pipeline_s + self.moe_s + self.cp_s

    @property
    def comm_s(self) -> float:
        return self.grad_bwd_s + self.grad_fwd_s + self.other_s

    @property
    def ccr(self) -> float:
        """compute_s / comm_s = B / (beta x F x kernel_share); infinite without inter-node traffic."""
        return math.inf if self.comm_s == 0 else self.compute_s / self.comm_s

    @property
    def band(self) -> str:
        return NOT_NETWORK_BOUND if self.comm_s == 0 else ccrmod.band(self.ccr)

    @property
    def hidden_by_kind(self) -> dict[str, float]:
        """Traffic hidden behind compute, each kind only behind the compute it
        can run beside: the gradient reduce (and FSDP's backward gather)
        behind backward, parameter gathers behind forward, pipeline sends
        behind the next micro-batch and the all-to-all behind the other
        micro-batch (DualPipe-style), these two in what compute the first two
        left: the NICs carry one stream at a time, so all that is hidden
        together is at most the compute time. The K/V exchange is exposed."""
        s = self.spec
        fwd_s = self.compute_s * self.fwd_share
        grad = min(s.overlap * self.grad_bwd_s, self.compute_s - fwd_s) if s.overlap else 0.0
        param = min(s.param_share * self.grad_fwd_s, fwd_s) if s.param_share else 0.0
        want = {"pipeline": s.pipeline_overlap * self.pipeline_s if s.pipeline_overlap else 0.0,
                "all-to-all": s.a2a_overlap * self.moe_s if s.a2a_overlap else 0.0}
        room = max(0.0, self.compute_s - grad - param)
        total = sum(want.values())
        if math.isinf(total):  # no NIC: what never completes fills the room, shared evenly
            endless = [k for k, v in want.items() if math.isinf(v)]
            shared = {k: room / len(endless) if k in endless else 0.0 for k in want}
        else:
            scale = min(1.0, room / total) if total else 0.0
            shared = {k: v * scale for k, v in want.items()}
        return {"grad": grad, "param": param, **shared}

    @property
    def hidden_s(self) -> float:
        return sum(self.hidden_by_kind.values())

    @property
    def exposed_s(self) -> float:
        """Communication the step waits for."""
        if math.isinf(self.comm_s):
            return math.inf
        return self.comm_s - self.hidden_s

    @property
    def step_s(self) -> float:
        return self.compute_s + self.bubble_s + self.exposed_s

    @property
    def exposed_comm_fraction(self) -> float:
        """Exposed communication / step time, step = compute + bubble + exposed."""
        if math.isinf(self.exposed_s):
            return 1.0
        return self.exposed_s / self.step_s

    @property
    def bubble_fraction(self) -> float:
        return 0.0 if math.isinf(self.exposed_s) else self.bubble_s / self.step_s

    @property
    def slowdown(self) -> float:
        """Step time / the step time on a network that is never the bottleneck."""
        return self.step_s / (self.compute_s + self.bubble_s)

    @property
    def kernel_share_source(self) -> str:
        s = self.spec
        if s.kernel_share is None:
            if s.mfu is None:
                return "peak (default)"
            unreachable = any(n.startswith("kernel share 1: ") for n in self.notes)
            return "peak: the mfu is unreachable here (notes)" if unreachable else "solved from mfu"
        preset = presets.PRESETS.get(s.preset) if isinstance(s.preset, str) else None
        if preset and preset.values.get("kernel_share") == s.kernel_share:
            return f"{s.preset}'s, {preset.kernel_share_from}"
        return "given"

    @property
    def mfu_kind(self) -> str:
        """mfu.PREDICTION where the kernel share is calibrated (a preset's
        source, given, solved from an mfu), mfu.CEILING with kernels at peak."""
        return mfumod.PREDICTION if self.kernel_share < 1 else mfumod.CEILING

    def mfu(self, attention: str = "causal") -> float:
        """The end-to-end MFU the model predicts: model FLOPs (no recompute)
        / (step time x F), attention counted ``causal`` (6 L s a per token)
        or ``full`` (12 L s a, PaLM's and Megatron-LM's count)."""
        return mfumod.end_to_end_mfu(self.model_flops, self.model_attention_flops, self.step_s, self.tflops,
                                     attention)

    @property
    def model_attention_flops(self) -> float:
        """The causal attention FLOPs an MFU counts (no recompute)."""
        return mfumod.model_attention_flops(self.attention_flops, self.fwd_share)
    def statement(self) -> str:
        s = self.spec
        unit = "" if self.params else "/param"
        gb, pb, ab = s.widths
        name = f"{s.preset}: " if s.preset else ""
        where = (f"{s.algorithm} DP over {self.stage_nodes} nodes per stage" if self.stage_nodes > 1
                 else "DP inside one node")
        par = f"dp {s.dp_size} tp {s.tp_size} pp {s.pp_size}"
        par += f" (x{s.virtual_stages} interleaved)" if s.virtual_stages > 1 else ""
        par += f" cp {s.cp_size} ({s.cp_method})" if s.cp_size > 1 else ""
        par += f" ep {s.ep_size} of {s.experts} experts top-{s.top_k}" if s.moe else ""
        traffic = ", ".join(f"{label} {value:.4g} B{unit}" for label, value in (
            ("DP", self.grad_bytes), ("pipeline", self.act_bytes), ("all-to-all", self.moe_bytes),
            ("KV exchange", self.cp_bytes)) if value)
        overlaps = ", ".join(f"{k} {v:g}" for k, v in (
            ("grad", s.overlap), ("param", s.param_share), ("pipeline", s.pipeline_overlap),
            ("all-to-all", s.a2a_overlap)) if v)
        literal = ccrmod.ccr(self.bandwidth_gbps, self.tflops) if self.tflops > 0 else float("nan")
        return (f"{name}{where}, {self.nodes} node(s) x {self.gpus_per_node} GPUs, {par}, {s.precision} "
                f"({s.framework or 'no framework'}: grad {gb:g} B, param {pb:g} B, activation {ab:g} B), "
                f"sharding {s.sharding}, recompute {s.recompute}, compression {s.compression:g}, "
                f"overlap {overlaps or 'none'}, kernel share {self.kernel_share:.3g}: NIC {self.nic_bytes:.4g} B{unit}"
                + (f" ({traffic})" if traffic else "")
                + f", compute {self.flops:.4g} FLOP{unit} per step; beta {self.beta:.4g} B/FLOP; "
                + ("CCR: no inter-node traffic, not network-bound" if self.comm_s == 0 else
                   f"CCR {self.ccr:.4g} ({self.band}), exposed communication {self.exposed_comm_fraction:.1%} "
                   f"of the step, slowdown x{self.slowdown:.3f}")
                + (f", pipeline bubble {self.bubble_fraction:.1%}" if self.bubble_s else "")
                + f"; end-to-end MFU {self.mfu_kind}: causal attention {mfumod.shown(self.mfu('causal'))} / "
                + f"full attention {mfumod.shown(self.mfu('full'))}"
                + f" [the CCR guide's literal beta 4: CCR {literal:.4g}, no band]")

    def to_dict(self) -> dict:
        gb, pb, ab = self.spec.widths
        dispatch, combine = self.spec.a2a_widths
        finite = (lambda v: v if math.isfinite(v) else None)
        return {
            "inputs": asdict(self.spec),
            "reduction": self.spec.algorithm,
            "byte_widths": {"grad_reduce": gb, "param_gather": pb, "activation": ab,
                            "a2a_dispatch": dispatch, "a2a_combine": combine},
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes,
            "stage_nodes": self.stage_nodes,
            "params": self.params,
            "per_parameter": self.params is None,
            "grad_bytes_per_node_step": self.grad_bytes,
            "grad_bwd_bytes_per_node_step": self.grad_bwd_bytes,
            "param_gather_fwd_bytes_per_node_step": self.grad_fwd_bytes,
            "activation_bytes_per_node_step": self.act_bytes,
            "moe_all_to_all_bytes_per_node_step": self.moe_bytes,
            "cp_kv_bytes_per_node_step": self.cp_bytes,
            "nic_bytes_per_node_step": self.nic_bytes,
            "flops_per_node_step": self.flops,
            "attention_flops_per_node_step": self.attention_flops,
            "model_flops_per_node_step": self.model_flops,
            "forward_flops_share": self.fwd_share,
            "beta": self.beta,
            "ccr": None if self.comm_s == 0 else self.ccr,
            "band": self.band,
            "literal_beta_ccr": ccrmod.ccr(self.bandwidth_gbps, self.tflops) if self.tflops > 0 else None,
            "kernel_share": self.kernel_share,
            "kernel_share_source": self.kernel_share_source,
            # as computed: the full count may exceed 1 (text shows it capped, mfu.shown)
            "mfu_end_to_end": {"causal": self.mfu("causal"), "full": self.mfu("full")},
            "mfu_kind": self.mfu_kind,
            "compute_s": self.compute_s,
            "bubble_s": self.bubble_s,
            "bubble_fraction": self.bubble_fraction,
            "step_s": finite(self.step_s),
            "comm_s": finite(self.comm_s),
            "hidden_comm_s": self.hidden_by_kind,
            "exposed_comm_s": finite(self.exposed_s),
            "exposed_comm_fraction": self.exposed_comm_fraction,
            "slowdown": finite(self.slowdown),
            "statement": self.statement(),
            "notes": list(self.notes),
            "assumptions": list(ASSUMPTIONS),
            "preset": presets.PRESETS[self.spec.preset].to_dict() if self.spec.preset in presets.PRESETS else None,
        }



ASSUMPTIONS = (
    "compute: 6 FLOPs per active parameter per token (Kaplan et al. 2020; 8 with full activation recompute) "
    "plus causal attention 6 x layers x seq_len x attention width per token (PaLM, Chowdhery et al. 2022, "
    "app. B, halved for the causal mask), at F x kernel share",
    "end-to-end MFU: model FLOPs (no recompute) / (step time x F), step = compute + bubble + exposed "
    "communication; attention counted causal (6 L s a) and full (12 L s a, PaLM's and Megatron-LM's count)",
    "network: the node's NICs at line rate B, all of them busy with every collective (NCCL rails)",
    "data-parallel sync: ring 2(N-1)/N, tree and nvls 2(m-1)/m, sharp 1 x the stage's gradient bytes per node "
    "(all-reduce); reduce-scatter and all-gather half of ring/tree each",
    "tensor parallelism stays inside the node (its traffic is on NVLink, not counted)",
    "each pipeline stage fills whole nodes; the context-parallel K/V exchange is exposed",
    "overlap per kind: gradient reduction behind backward only, parameter gathers behind the pass they precede, "
    "pipeline sends and the all-to-all behind the compute the first two leave; all hidden at most the compute",
    "MoE: tokens routed evenly over the experts; without moe_max_nodes every routed copy travels on its own",
    "compression multiplies the gradient bytes only; its own compute cost is not counted",
)



def _batch_note(spec: WorkloadSpec) -> str | None:
    """What a preset's global batch became when dp, cp, tp or pp changed
    beside it: tokens_per_gpu_step stays per GPU, so the job's batch scales
    with its GPU count."""
    preset = presets.PRESETS.get(spec.preset) if isinstance(spec.preset, str) else None
    if preset is None:
        return None
    v = preset.values
    theirs = v["tokens_per_gpu_step"] * v["dp_size"] * v.get("cp_size", 1) * v.get("tp_size", 1) * v.get("pp_size", 1)
    ours = spec.tokens_per_gpu_step * spec.gpus
    if math.isclose(ours, theirs, rel_tol=1e-9):
        return None
    changed = [f"{key} {getattr(spec, key)} (preset {v.get(key, 1)})" for key in
               ("dp_size", "cp_size", "tp_size", "pp_size", "tokens_per_gpu_step")
               if getattr(spec, key) != v.get(key, 1)]
    return (f"global batch {ours:.4g} tokens a step, not the {theirs:.4g} of {spec.preset}'s source run: "
            f"{', '.join(changed)}; tokens_per_gpu_step is per GPU, so the batch follows the GPU count "
            f"(give tokens_per_gpu_step {theirs / spec.gpus:.4g} to keep the source's batch)")


def _notes(spec: WorkloadSpec, attention: float) -> tuple[str, ...]:
    gb, pb, ab = spec.widths
    notes = []
    if spec.reduction is None:
        notes.append(f"reduction: {DEFAULT_REDUCTION} (default: what NCCL picks for large gradient buckets "
                     "between nodes without SHARP/NVLS; declare tree, sharp or nvls otherwise)")
    if spec.framework is None and spec.grad_bytes_per_param is None:
        notes.append(f"no framework named: gradient reduce at the conservative fp32 width ({gb:g} B per value); "
                     "set framework (megatron, torchtitan, deepspeed, ddp-amp) or grad_bytes_per_param")
    elif spec.framework is not None:
        # a width given beside the framework wins; the note names which is which
        given = {"grad": spec.grad_bytes_per_param, "param": spec.param_bytes, "activation": spec.activation_bytes}
        parts = [f"{name} {width:g}" + (" (given)" if given[name] is not None else "")
                 for name, width in (("grad", gb), ("param", pb), ("activation", ab))]
        notes.append(f"byte widths from {spec.framework}'s defaults: {', '.join(parts)} B")
    if spec.kernel_share is None and spec.mfu is None:
        notes.append("kernels at peak F (kernel share 1): give kernel_share, or a published or measured "
                     "end-to-end mfu to solve it from")
    elif spec.mfu is not None:
        notes.append(f"kernel share solved from the end-to-end mfu {spec.mfu:g}, attention counted "
                     f"{spec.mfu_attention} ({'6' if spec.mfu_attention == 'causal' else '12'} x layers x "
                     "seq_len x attention width per token)")
    if not attention:
        notes.append("attention FLOPs not counted: give layers, seq_len, hidden_size and params")
    if spec.pp_size > 1 and spec.micro_batches is None:
        notes.append("pipeline bubble not counted: give micro_batches")
    batch = _batch_note(spec)
    if batch:
        notes.append(batch)
    if spec.preset in presets.PRESETS:
        notes += [f"{spec.preset} assumes {a}" for a in presets.PRESETS[spec.preset].assumed]
        notes += [f"{spec.preset} derives {d}" for d in presets.PRESETS[spec.preset].derived]
    return tuple(notes)


def _node(spec: WorkloadSpec, g: int, bandwidth_gbps: float, tflops: float, kernel_share: float) -> NodeModel:
    """The node at a given kernel share (``node_model`` checks the spec)."""
    stage_nodes = spec.dp_size * spec.cp_size * spec.tp_size // g
    params = spec.params if spec.params is not None else 1.0
    bwd, fwd = data_parallel_bytes(spec, g, stage_nodes, params)
    act, moe, cp = pipeline_bytes(spec, g), moe_bytes(spec, g), context_parallel_bytes(spec, g)
    flops, attention, fwd_share, model_flops = mfumod.node_flops(spec, g, params)
    byte_rate = bandwidth_gbps * 1e9 / 8

    def seconds(nbytes: float) -> float:  # no NIC left: traffic never completes
        return nbytes / byte_rate if byte_rate else (math.inf if nbytes else 0.0)

    compute_s = flops / (tflops * 1e12 * kernel_share)
    bubble = 0.0
    if spec.pp_size > 1 and spec.micro_batches:
        # Narayanan et al. 2021 sec. 2.2: bubble = (p - 1) / (v x m) of the ideal step
        bubble = compute_s * (spec.pp_size - 1) / (spec.virtual_stages * spec.micro_batches)
    return NodeModel(
        spec=spec, gpus_per_node=g, bandwidth_gbps=bandwidth_gbps, tflops=tflops, params=spec.params,
        nodes=stage_nodes * spec.pp_size, stage_nodes=stage_nodes,
        grad_bwd_bytes=bwd, grad_fwd_bytes=fwd, act_bytes=act, moe_bytes=moe, cp_bytes=cp,
        flops=flops, attention_flops=attention, fwd_share=fwd_share, model_flops=model_flops,
        kernel_share=kernel_share, compute_s=compute_s, bubble_s=bubble, grad_bwd_s=seconds(bwd),
        grad_fwd_s=seconds(fwd), pipeline_s=seconds(act), moe_s=seconds(moe), cp_s=seconds(cp),
        notes=_notes(spec, attention),
    )


def node_model(spec: WorkloadSpec, gpus_per_node: int, bandwidth_gbps: float, tflops: float,
               strict_mfu: bool = False) -> NodeModel:
    """The workload on one node of ``gpus_per_node`` GPUs, ``bandwidth_gbps``
    of NICs and ``tflops`` of compute. Raises WorkloadError naming each key
    that does not fit.

    Time = work / rate: comm_s = bytes / (B x 1e9 / 8), compute_s = FLOPs /
    (F x 1e12 x kernel share), the same unit conversions as ``ccr.ccr``.
    The kernel share is spec.kernel_share, else solved from spec.mfu, else 1.
    An mfu this node cannot reach (a degraded link, a slower GPU) is refused
    with ``strict_mfu`` (calc: the user asked about this hardware); else the
    kernels run at peak and the notes say so, so that the node is still
    judged by its CCR.
    """
    problems = spec_problems(spec) + topology_problems(spec, gpus_per_node)
    if problems:
        raise WorkloadError(problems)
    if bandwidth_gbps < 0 or tflops <= 0:
        raise ValueError("compute must be positive and bandwidth not negative")
    share = spec.kernel_share
    if share is None and spec.mfu is not None:
        try:
            share = mfumod.solve_kernel_share(
                spec, lambda k: _node(spec, gpus_per_node, bandwidth_gbps, tflops, k).mfu(spec.mfu_attention))
        except WorkloadError as exc:
            if strict_mfu:
                raise
            node = _node(spec, gpus_per_node, bandwidth_gbps, tflops, 1.0)
            return replace(node, notes=node.notes + (f"kernel share 1: {exc}",))
    return _node(spec, gpus_per_node, bandwidth_gbps, tflops, 1.0 if share is None else share)
