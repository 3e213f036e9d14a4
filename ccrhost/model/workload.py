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
from dataclasses import asdict, dataclass, field, fields, replace

from ccrhost.model import ccr as ccrmod
from ccrhost.model import presets

TRAIN_PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
VALUE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
SHARDING = ("none", "optimizer", "full")
REDUCTION = ("ring", "tree", "sharp", "nvls")
# NCCL picks ring for large all-reduces between nodes unless SHARP (CollNet)
# or NVLS is set up; a fabric with them declares sharp or nvls.
DEFAULT_REDUCTION = "ring"
CP_METHODS = ("ring", "all-gather")
# How a published or measured end-to-end MFU counts attention FLOPs per token:
# causal, 6 x layers x seq_len x attention width (the model's own count: the
# mask halves the products), or full, 12 x ... (PaLM app. B, Megatron-LM's
# eq. 3 in arXiv:2104.04473, torchtitan's get_num_flop_per_token).
MFU_ATTENTION = ("causal", "full")
# below 1 % of peak no training run is worth judging a network by: a typo
# (1e-300) would otherwise print steps of centuries
MIN_EFFICIENCY = 0.01
# v2's names, refused with what replaced them (a silent mapping would change
# a verdict without anyone asking for it)
REMOVED_REDUCTIONS = {
    "flat": "removed in model v3 (it counted every GPU's shard through the NICs, 8x too pessimistic): "
            "NCCL's flat ring is 'ring', 2(N-1)/N of the replica's gradient per node",
    "hierarchical": "removed in model v3: what it moved, 2(m-1)/m per node for m nodes, is 'tree' "
                    "(NCCL tree, NVLS-tree, hierarchical all-reduce)",
    "in-network": "split in issue 41: 'sharp' (InfiniBand SHARP between nodes: an all-reduce leaves each node "
                  "once) or 'nvls' (NVLink SHARP reduces inside a node only; between nodes NCCL's NVLS-tree "
                  "moves tree's 2(m-1)/m)",
}
RECOMPUTE = ("none", "full")
FRAMEWORKS = ("megatron", "torchtitan", "deepspeed", "ddp-amp")
# Kaplan et al. 2020, "Scaling Laws for Neural Language Models", sec. 2.1:
# C = 6N FLOPs per token for training (2N forward, 4N backward).
FLOPS_PER_PARAM_TOKEN = 6
NOT_NETWORK_BOUND = "not-network-bound"


def framework_widths(framework: str | None, precision: str) -> tuple[float, float, float]:
    """(gradient-reduce, parameter-gather, activation) bytes per value that
    ``framework`` sends when training in ``precision``. fp8 recipes keep
    bf16 master weights and gather them in bf16 unless told otherwise.

    - megatron: megatron/training/arguments.py lines 1204-1216 (NVIDIA/Megatron-LM
      d98e8a64): with --bf16, params_dtype is bf16 and gradients are accumulated
      and all-reduced in fp32 unless --grad-reduce-in-bf16; fp16 reduces in fp16.
      Parameters (distributed optimizer) and pipeline sends travel in params_dtype;
      fp8 parameter gathers are the opt-in --fp8-param-gather.
    - torchtitan: torchtitan/config/configs.py lines 94 and 102 (pytorch/torchtitan
      b5bcd76c): mixed_precision_param = "bfloat16", mixed_precision_reduce =
      "float32" (its only allowed value); fp8 all-gather is the opt-in
      enable_fsdp_float8_all_gather.
    - deepspeed: deepspeed/runtime/engine.py lines 939-950 (microsoft/DeepSpeed
      38327e07): communication_data_type is fp16 with fp16, bf16 with bf16, else fp32.
    - ddp-amp: torch.autocast over an fp32 model with GradScaler (PyTorch's AMP
      examples, the CCR guide's step 4): parameters and so .grad stay fp32, DDP reduces
      the .grad dtype; autocast's matmul outputs are 16-bit.
    - none named: the conservative fp32 gradient reduce (what Megatron and
      torchtitan do by default), parameters and activations at 16 bits.
    """
    if precision == "fp32":
        return 4.0, 4.0, 4.0
    half = 2.0  # bf16 / fp16, and the bf16 weights of fp8 recipes
    if framework == "megatron":
        return (half if precision == "fp16" else 4.0), half, half
    if framework == "deepspeed":
        return half, half, half
    if framework == "ddp-amp":
        return 4.0, 4.0, half
    return 4.0, half, half  # torchtitan, and none named


@dataclass(frozen=True)
class WorkloadSpec:
    """One training job, in the keys of ``verify_workload`` (validated there).
    None means: the default the model states in the result's notes."""

    tokens_per_gpu_step: float  # the job's tokens per step / its GPU count
    dp_size: int  # data-parallel degree (replicas of the model)
    precision: str = "bf16"  # training precision (the widths' defaults follow it)
    framework: str | None = None  # whose byte widths: megatron, torchtitan, deepspeed, ddp-amp
    grad_bytes_per_param: float | None = None  # gradient-reduce width
    param_bytes: float | None = None  # parameter all-gather width (ZeRO / FSDP)
    activation_bytes: float | None = None  # pipeline, all-to-all and KV exchange width
    dispatch_bytes: float | None = None  # expert all-to-all dispatch width; default: activation_bytes
    combine_bytes: float | None = None  # expert all-to-all combine width; default: activation_bytes
    tp_size: int = 1  # tensor-parallel degree, inside a node
    pp_size: int = 1  # pipeline stages, across nodes
    cp_size: int = 1  # context-parallel degree
    cp_method: str = "ring"  # ring attention (3 passes) or all-gather of K and V (2 passes)
    sharding: str = "none"  # none: all-reduce; optimizer: ZeRO-1/2; full: ZeRO-3/FSDP
    reduction: str | None = None  # ring, tree, sharp or nvls; None: DEFAULT_REDUCTION
    compression: float = 1.0  # gradient bytes on the wire / uncompressed, (0, 1]
    overlap: float = 0.0  # share of the gradient reduce hidden behind backward, [0, 1]
    param_overlap: float | None = None  # share of parameter gathers hidden behind their pass; None: overlap
    pipeline_overlap: float = 0.0  # share of pipeline sends hidden behind the next micro-batch's compute
    a2a_overlap: float = 0.0  # share of the expert all-to-all hidden behind the other micro-batch's compute
    recompute: str = "none"  # full activation recompute reruns the forward in backward
    kernel_share: float | None = None  # share of peak F the kernels reach while computing; None: 1 or from mfu
    mfu: float | None = None  # a published or measured end-to-end MFU: the model solves kernel_share from it
    mfu_attention: str = "full"  # how that MFU counts attention: causal (6 L s a) or full (12 L s a)
    hidden_size: int | None = None  # model width
    attention_width: int | None = None  # heads x (query-key dim + value dim) / 2; default hidden_size
    params: float | None = None  # total parameters (MoE: experts included)
    layers: int | None = None  # transformer layers
    seq_len: int | None = None  # tokens per sequence (context)
    kv_size: int | None = None  # K (and V) width per token per layer: kv heads x head dim
    experts: int | None = None  # routed experts per MoE layer
    expert_params: float | None = None  # parameters in routed experts, all layers
    top_k: int = 1  # experts per token
    ep_size: int = 1  # expert-parallel degree
    capacity_factor: float = 1.0  # expert buffer / even share of the routed tokens
    moe_layers: int | None = None  # MoE layers; default: all layers
    moe_max_nodes: int | None = None  # node-limited routing: a token reaches at most this many nodes, once each
    virtual_stages: int = 1  # interleaved pipeline chunks per stage
    micro_batches: int | None = None  # micro-batches per step (pipeline bubble)
    preset: str | None = None  # the named workload the values came from, for the statement

    @property
    def widths(self) -> tuple[float, float, float]:
        g, p, a = framework_widths(self.framework, self.precision)
        return (self.grad_bytes_per_param if self.grad_bytes_per_param is not None else g,
                self.param_bytes if self.param_bytes is not None else p,
                self.activation_bytes if self.activation_bytes is not None else a)

    @property
    def a2a_widths(self) -> tuple[float, float]:
        """(dispatch, combine) bytes per value of the expert all-to-all."""
        a = self.widths[2]
        return (self.dispatch_bytes if self.dispatch_bytes is not None else a,
                self.combine_bytes if self.combine_bytes is not None else a)

    @property
    def grad_bytes(self) -> float:
        return self.widths[0]

    @property
    def param_share(self) -> float:
        return self.overlap if self.param_overlap is None else self.param_overlap

    @property
    def replica_tokens(self) -> float:
        """Tokens one model replica (tp x cp x pp GPUs) handles a step."""
        return self.tokens_per_gpu_step * self.tp_size * self.cp_size * self.pp_size

    @property
    def gpus(self) -> int:
        return self.dp_size * self.cp_size * self.tp_size * self.pp_size

    @property
    def algorithm(self) -> str:
        return self.reduction or DEFAULT_REDUCTION

    @property
    def moe(self) -> bool:
        return self.experts is not None


SPEC_KEYS = tuple(f.name for f in fields(WorkloadSpec))


@dataclass(frozen=True)
class Problem:
    """A workload key that does not fit (the node it runs on)."""

    key: str
    value: object
    allowed: str

    def __str__(self) -> str:
        return f"{self.key} = {self.value!r}: {self.allowed}"


def spec_problems(spec: WorkloadSpec) -> list[Problem]:
    """Rules that need only the workload (the inventory's schema and calc
    check them both, through here)."""
    s, problems = spec, []

    def bad(key, allowed):
        problems.append(Problem(key, getattr(s, key), allowed))

    if s.reduction in REMOVED_REDUCTIONS:
        bad("reduction", f"{REMOVED_REDUCTIONS[s.reduction]}; allowed: {', '.join(REDUCTION)}")
    elif s.reduction is not None and s.reduction not in REDUCTION:
        bad("reduction", f"allowed: {', '.join(REDUCTION)}")
    if not 0 < s.compression <= 1:
        bad("compression", "allowed: a ratio in (0, 1], compressed / uncompressed gradient bytes "
                           "(2-bit of bf16 = 0.125)")
    for key, what in (("overlap", "of the gradient reduce hidden behind backward"),
                      ("param_overlap", "of the parameter gathers hidden behind the pass they precede"),
                      ("pipeline_overlap", "of the pipeline sends hidden behind the next micro-batch's compute"),
                      ("a2a_overlap", "of the expert all-to-all hidden behind the other micro-batch's compute")):
        value = getattr(s, key)
        if value is not None and not 0 <= value <= 1:
            bad(key, f"allowed: a fraction in [0, 1] {what}")
    for key, what in (("kernel_share", "of peak F the kernels reach while computing"),
                      ("mfu", "of peak F: the end-to-end MFU (model FLOPs / step time / peak)")):
        value = getattr(s, key)
        if value is not None and not MIN_EFFICIENCY <= value <= 1:
            bad(key, f"allowed: a fraction in [{MIN_EFFICIENCY:g}, 1] {what}")
    if s.kernel_share is not None and s.mfu is not None:
        bad("mfu", f"give kernel_share ({s.kernel_share:g}) or mfu, not both: the model solves the kernel share "
                   "from an end-to-end MFU")
    if s.mfu_attention not in MFU_ATTENTION:
        bad("mfu_attention", "allowed: causal (6 x layers x seq_len x attention width per token) or full "
                             "(12 x ..., as PaLM, Megatron-LM and torchtitan count)")
    if s.cp_method not in CP_METHODS:
        bad("cp_method", "allowed: ring (ring attention: K and V passed around, 3 passes) or all-gather "
                         "(Llama 3: K and V gathered, 2 passes)")
    if s.precision in VALUE_BYTES:
        least = VALUE_BYTES[s.precision]
        for key in ("grad_bytes_per_param", "param_bytes", "activation_bytes", "dispatch_bytes", "combine_bytes"):
            value = getattr(s, key)
            if value is not None and value < least:
                bad(key, f"allowed: at least {least:g} B per value with {s.precision} training (its values are "
                         f"{least:g} B); a compressed gradient reduce is compression, a narrower recipe is "
                         "precision")
    if s.seq_len is not None:
        sequences = s.replica_tokens / s.seq_len
        if sequences < 1:
            bad("tokens_per_gpu_step", f"allowed: one sequence per replica per step at least: tokens_per_gpu_step "
                                       f"x tp x cp x pp ({s.replica_tokens:g}) below seq_len ({s.seq_len})")
        elif s.micro_batches is not None and s.micro_batches > sequences:
            bad("micro_batches", f"allowed: at most the {sequences:g} sequences a replica handles a step "
                                 "(tokens_per_gpu_step x tp x cp x pp / seq_len)")
    elif s.replica_tokens < 1:
        bad("tokens_per_gpu_step", f"allowed: one token per replica per step at least: tokens_per_gpu_step x tp "
                                   f"x cp x pp is {s.replica_tokens:g}")
    elif s.micro_batches is not None and s.micro_batches > s.replica_tokens:
        bad("micro_batches", f"allowed: at most the {s.replica_tokens:g} tokens a replica handles a step")
    if not 1 <= s.capacity_factor <= 64:
        bad("capacity_factor", "allowed: 1 to 64 (expert buffer / the even share of routed tokens)")
    if s.pp_size > 1 and (s.hidden_size is None or s.params is None):
        bad("pp_size", "pipeline stages send activations: give hidden_size and params with pp_size > 1")
    if s.virtual_stages > 1 and s.pp_size == 1:
        bad("virtual_stages", "allowed: 1 without a pipeline (pp_size 1); interleaving splits pipeline stages")
    # Llama 3 (arXiv:2407.21783 sec. 3.3.2) gives the first chunk only the embedding and the last only the
    # output projection and loss: two chunks may hold no layer
    if s.layers is not None and s.pp_size * s.virtual_stages > s.layers + 2:
        bad("pp_size", f"allowed: pp_size x virtual_stages ({s.pp_size * s.virtual_stages}) at most the "
                       f"{s.layers} layers plus 2 (each chunk holds a layer, or the embedding or output head)")
    if s.micro_batches is not None and s.pp_size == 1:
        bad("micro_batches", "allowed only with pp_size > 1 (it sets the pipeline bubble)")
    if s.cp_size > 1:
        if s.seq_len is None:
            bad("cp_size", "context parallelism splits a sequence: give seq_len with cp_size > 1")
        elif s.seq_len < s.cp_size:
            bad("seq_len", f"allowed: at least cp_size ({s.cp_size}) tokens, one per context-parallel rank")
        elif s.seq_len % s.cp_size:
            bad("cp_size", f"allowed: a divisor of seq_len ({s.seq_len}): each context-parallel rank holds "
                           "as many tokens of the sequence")
        if s.layers is None or s.hidden_size is None:
            bad("cp_size", "the KV exchange needs layers and hidden_size (and kv_size with GQA)")
    if s.kv_size is not None and s.hidden_size is not None and s.kv_size > s.hidden_size:
        bad("kv_size", f"allowed: at most hidden_size ({s.hidden_size}): kv heads x head dim")
    if s.moe:
        if s.ep_size > s.experts:
            bad("ep_size", f"allowed: at most experts ({s.experts}): each expert-parallel rank holds one "
                           "expert at least")
        elif s.experts % s.ep_size:
            bad("ep_size", f"allowed: a divisor of experts ({s.experts}), so every rank holds as many")
        if s.top_k > s.experts:
            bad("top_k", f"allowed: 1 to experts ({s.experts})")
        if s.dp_size * s.cp_size % s.ep_size:
            bad("ep_size", f"allowed: a divisor of dp_size x cp_size ({s.dp_size * s.cp_size}): "
                           "expert parallelism splits the data-parallel ranks")
        missing = [k for k in ("params", "expert_params", "hidden_size", "layers") if getattr(s, k) is None]
        if missing:
            bad("experts", f"a mixture of experts needs {', '.join(missing)} too")
        elif s.expert_params >= s.params:
            bad("expert_params", f"allowed: less than params ({s.params:g}): the rest is attention and embeddings")
        if s.moe_layers is not None and s.layers is not None and s.moe_layers > s.layers:
            bad("moe_layers", f"allowed: at most layers ({s.layers})")
    else:
        for key, default in (("ep_size", 1), ("top_k", 1), ("expert_params", None), ("moe_layers", None),
                             ("moe_max_nodes", None), ("dispatch_bytes", None), ("combine_bytes", None),
                             ("a2a_overlap", 0.0)):
            if getattr(s, key) != default:
                bad(key, "allowed only with experts (a mixture-of-experts model)")
    return problems


# The peak F may be quoted at: a job computes in its training precision (fp8
# recipes keep attention and some GEMMs in 16 bits, so their MFU is quoted at
# the bf16 peak too, as DeepSeek-V3 and torchtitan's Float8 runs are).
PEAK_FOR_TRAINING = {"fp32": ("fp32", "tf32"), "bf16": ("bf16", "fp16"), "fp16": ("fp16", "bf16"),
                     "fp8": ("fp8", "bf16", "fp16")}


def peak_precision_problem(peak: str, spec: WorkloadSpec) -> Problem | None:
    """F at ``peak`` precision for a job that trains in spec.precision: a
    contradiction (fp64 F for a bf16 job, an fp8 F for an fp32 one) is refused."""
    allowed = PEAK_FOR_TRAINING.get(spec.precision)
    if allowed is None or peak in allowed:
        return None
    return Problem("precision", spec.precision,
                   f"{spec.precision} training does not run at the {peak} peak: F's precision "
                   f"(verify_precision, calc's --precision) allowed with it: {', '.join(allowed)}")


def _fits(ranks_x_tp: int, g: int) -> bool:
    """A group of ranks_x_tp GPUs either fits in a node or fills whole nodes."""
    return (g % ranks_x_tp == 0) if ranks_x_tp <= g else (ranks_x_tp % g == 0)


def topology_problems(spec: WorkloadSpec, gpus_per_node: int) -> list[Problem]:
    """Rules that need the node's GPU count: TP fits in the node, stages fill
    whole nodes, CP and EP groups fit in a node or fill whole nodes."""
    g, s = gpus_per_node, spec
    problems = []
    if g < 1:
        return [Problem("tp_size", s.tp_size, "the node has no GPU to run the workload on")]
    if s.tp_size > g or g % s.tp_size:
        problems.append(Problem("tp_size", s.tp_size,
                                f"allowed: a divisor of the {g} GPUs per node (tensor parallelism stays "
                                "inside the node's NVLink)"))
        return problems
    if (s.dp_size * s.cp_size * s.tp_size) % g:
        per_node = g // s.tp_size
        problems.append(Problem("dp_size", s.dp_size,
                                f"allowed: dp_size x cp_size a multiple of {per_node} ({g} GPUs per node / "
                                f"tp_size {s.tp_size}), so that each pipeline stage fills whole nodes"))
    if s.cp_size > 1 and not _fits(s.cp_size * s.tp_size, g):
        problems.append(Problem("cp_size", s.cp_size,
                                f"allowed: cp_size x tp_size dividing the {g} GPUs per node or a multiple of them"))
    if s.moe and s.ep_size > 1 and not _fits(s.ep_size * s.tp_size, g):
        problems.append(Problem("ep_size", s.ep_size,
                                f"allowed: ep_size x tp_size dividing the {g} GPUs per node or a multiple of them"))
    return problems


def _share(op: str, algorithm: str, ranks: int, nodes: int) -> float:
    """Bytes a node's NICs send per byte of the collective's buffer.

    ring (nccl-tests PERFORMANCE.md; Patarasuk & Yuan 2009): N ranks, the
    ring leaves each node once: all-reduce 2(N-1)/N, reduce-scatter or
    all-gather (N-1)/N. tree (NCCL tree, hierarchical all-reduce, Jia et
    al. 2018): the same over the m nodes. nvls: NVLink SHARP reduces inside
    the node only; between nodes NCCL runs NVLS-tree, the tree's volume.
    sharp (InfiniBand SHARP / CollNet, between nodes): an all-reduce's data
    leaves each node once and the switch returns the sum (NVIDIA SHARP docs,
    "Using NVIDIA SHARP with NVIDIA NCCL"): 1; reduce-scatter and
    all-gather gain nothing from a switch reduction and move what tree
    moves. A group inside one node: 0."""
    if nodes <= 1:
        return 0.0
    base = ranks if algorithm == "ring" else nodes
    once = (base - 1) / base
    if op == "all-reduce":
        return 1.0 if algorithm == "sharp" else 2 * once
    return once


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
            return f"{s.preset}'s, from its source run"
        return "given"

    def mfu(self, attention: str = "causal") -> float:
        """The end-to-end MFU the model predicts: model FLOPs (no recompute)
        / (step time x F), attention counted ``causal`` (6 L s a per token)
        or ``full`` (12 L s a, PaLM's and Megatron-LM's count)."""
        if math.isinf(self.step_s):
            return 0.0
        flops = self.model_flops + (self.model_attention_flops if attention == "full" else 0.0)
        return flops / (self.step_s * self.tflops * 1e12)

    @property
    def model_attention_flops(self) -> float:
        """The causal attention FLOPs an MFU counts (no recompute)."""
        return self.attention_flops * self.fwd_share * 3

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
                + f"; end-to-end MFU {self.mfu('causal'):.1%} (causal attention) / {self.mfu('full'):.1%} (full)"
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
            "mfu_end_to_end": {"causal": self.mfu("causal"), "full": self.mfu("full")},
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


class WorkloadError(ValueError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def data_parallel_bytes(spec: WorkloadSpec, g: int, stage_nodes: int, params: float) -> tuple[float, float]:
    """(backward, forward) bytes one node's NICs send per step to keep the
    data-parallel copies in step; a stage on one node sends none.

    The replica's stage holds params / pp_size parameters; the dense ones
    are reduced over the N = dp x cp data-parallel ranks on the stage's m
    nodes, the routed experts' over the N/ep expert-data-parallel ranks on
    m / n_ep nodes, each node holding 1/n_ep of them (n_ep = the nodes an
    expert-parallel group spans). By ``sharding`` (Rajbhandari et al. 2020,
    ZeRO, sec. 7): none, an all-reduce of gradients (backward); optimizer
    (ZeRO-1/2), a reduce-scatter of gradients (backward) and an all-gather
    of updated parameters (before the next forward); full (ZeRO-3/FSDP), the
    reduce-scatter, an all-gather before forward and another before backward.
    ``compression`` scales the gradient part only (the CCR guide's step 3).
    """
    gb, pb, _ = spec.widths
    ranks = spec.dp_size * spec.cp_size
    expert = (spec.expert_params or 0.0) if spec.moe else 0.0
    n_ep = max(1, spec.ep_size * spec.tp_size // g) if spec.moe else 1
    pieces = [((params - expert) / spec.pp_size, ranks, stage_nodes)]
    if expert:
        pieces.append((expert / spec.pp_size / n_ep, ranks // spec.ep_size, stage_nodes // n_ep))
    bwd = fwd = 0.0
    for values, n, m in pieces:
        grad = values * gb * spec.compression
        if spec.sharding == "none":
            bwd += _share("all-reduce", spec.algorithm, n, m) * grad
            continue
        once = _share("reduce-scatter", spec.algorithm, n, m)
        bwd += once * grad
        fwd += once * values * pb
        if spec.sharding == "full":
            bwd += once * values * pb
    return bwd, fwd


def pipeline_bytes(spec: WorkloadSpec, g: int) -> float:
    """Bytes the busiest node's NICs send per step at pipeline-stage boundaries.

    Each replica processes tokens_per_gpu_step x tp x cp x pp tokens a
    step; a node holds g / (tp x cp) replica slices of its stage, so g x T x
    pp tokens cross its stage, each sending a hidden_size vector forward and
    its gradient backward (Narayanan et al. 2021, arXiv:2104.04473, sec. 3.2:
    Megatron splits the send across TP ranks, the total is unchanged). A
    middle stage sends both ways, an end stage one way; with v interleaved
    chunks a stage sends at each chunk's boundary (sec. 2.2.2: "the amount of
    communication also increases by v"): 2v sends (pp > 2), 2v - 1 (pp 2).

        bytes = sends x g x T x pp x hidden x activation bytes
    """
    if spec.pp_size == 1:
        return 0.0
    v = spec.virtual_stages
    sends = 2 * v if spec.pp_size > 2 else 2 * v - 1
    return sends * g * spec.tokens_per_gpu_step * spec.pp_size * spec.hidden_size * spec.widths[2]


def moe_bytes(spec: WorkloadSpec, g: int) -> float:
    """Expert all-to-all bytes a node's NICs send per step.

    A node routes g x T x pp tokens through each of its stage's moe_layers /
    pp MoE layers: g x T x moe_layers token-layers. Each token goes to top_k
    experts; buffers are sized capacity_factor x the even share (GShard,
    Lepikhin et al. 2020, sec. 2.2). Experts sit evenly on the n_ep nodes of
    the expert-parallel group, so (n_ep - 1)/n_ep of the copies leave the
    node. With node-limited routing (DeepSeek-V3 sec. 2.1.2 and 3.2.2: a
    token goes to at most M nodes, once over IB, then over NVLink to its
    experts there) the copies are M instead of top_k x cf. Each pass moves a
    hidden_size vector per copy out (dispatch, or in backward the gradient
    towards the experts) and back (combine, or its gradient): forward and
    backward, and the forward again with full recompute. DeepSeek-V3 sec.
    3.3.2 sends the dispatch and the activation gradient before the
    down-projection in FP8 and keeps both combines in BF16: dispatch_bytes 1,
    combine_bytes 2.

        bytes = passes x (dispatch + combine bytes) x g x T x moe_layers x copies x (n_ep-1)/n_ep x hidden
    """
    if not spec.moe or spec.ep_size * spec.tp_size <= g:
        return 0.0
    n_ep = spec.ep_size * spec.tp_size // g
    passes = 3 if spec.recompute == "full" else 2
    layers = spec.moe_layers if spec.moe_layers is not None else spec.layers
    copies = spec.top_k * spec.capacity_factor
    if spec.moe_max_nodes is not None:
        copies = min(copies, spec.moe_max_nodes)
    return (passes * sum(spec.a2a_widths) * g * spec.tokens_per_gpu_step * layers * copies
            * (n_ep - 1) / n_ep * spec.hidden_size)


def context_parallel_bytes(spec: WorkloadSpec, g: int) -> float:
    """K/V bytes a node's NICs send per step for context parallelism.

    The cp ranks of a group hold s/cp tokens each. Ring attention (Liu et
    al. 2023, arXiv:2310.01889; Megatron-Core context parallelism) passes
    their K and V blocks around the ring cp - 1 times per layer: per
    sequence and layer a node sends (cp-1) x s/cp x 2 x kv_size values;
    backward passes K, V and their gradients, twice that: 3 passes. The
    all-gather method (Llama 3, arXiv:2407.21783 sec. 3.3.2) gathers K and V
    once forward, the same (cp-1)/cp volume, keeps them, and reduce-scatters
    their gradients backward: 2 passes. Full recompute gathers once more (+1).
    A node hosts one group's slice; the group handles T x tp x cp x layers /
    s sequence-layers a step:

        bytes = passes x T x tp x layers x (cp - 1) x 2 x kv_size x act bytes

    Zero when the group (cp x tp GPUs) fits in a node (NVLink)."""
    if spec.cp_size == 1 or spec.cp_size * spec.tp_size <= g:
        return 0.0
    passes = (3 if spec.cp_method == "ring" else 2) + (1 if spec.recompute == "full" else 0)
    kv = spec.kv_size if spec.kv_size is not None else spec.hidden_size
    return (passes * spec.tokens_per_gpu_step * spec.tp_size * spec.layers * (spec.cp_size - 1)
            * 2 * kv * spec.widths[2])


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
    return tuple(notes)


def _node(spec: WorkloadSpec, g: int, bandwidth_gbps: float, tflops: float, kernel_share: float) -> NodeModel:
    """The node at a given kernel share (``node_model`` checks the spec)."""
    stage_nodes = spec.dp_size * spec.cp_size * spec.tp_size // g
    params = spec.params if spec.params is not None else 1.0
    bwd, fwd = data_parallel_bytes(spec, g, stage_nodes, params)
    act, moe, cp = pipeline_bytes(spec, g), moe_bytes(spec, g), context_parallel_bytes(spec, g)
    flops, attention, fwd_share, model_flops = node_flops(spec, g, params)
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


def solve_kernel_share(spec: WorkloadSpec, g: int, bandwidth_gbps: float, tflops: float) -> float:
    """The kernel share at which the node's predicted end-to-end MFU (in
    spec.mfu_attention's count) is spec.mfu. The step shrinks as the kernels
    speed up (compute falls faster than the overlap's room), so the MFU
    rises with the share: bisection. Raises WorkloadError when even kernels
    at peak leave less than spec.mfu."""
    target, count = spec.mfu, spec.mfu_attention
    best = _node(spec, g, bandwidth_gbps, tflops, 1.0).mfu(count)
    if best < target * (1 - 1e-9):
        raise WorkloadError([Problem("mfu", target, f"unreachable here: with kernels at peak (kernel share 1) the "
                                     f"pipeline bubble and exposed communication leave an end-to-end MFU of "
                                     f"{best:.1%} ({count} attention); give at most that, or kernel_share")])
    lo, hi = 1e-9, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if _node(spec, g, bandwidth_gbps, tflops, mid).mfu(count) < target:
            lo = mid
        else:
            hi = mid
    return hi


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
            share = solve_kernel_share(spec, gpus_per_node, bandwidth_gbps, tflops)
        except WorkloadError as exc:
            if strict_mfu:
                raise
            node = _node(spec, gpus_per_node, bandwidth_gbps, tflops, 1.0)
            return replace(node, notes=node.notes + (f"kernel share 1: {exc}",))
    return _node(spec, gpus_per_node, bandwidth_gbps, tflops, 1.0 if share is None else share)
