"""The workload schema: one training job's keys (``WorkloadSpec``), the byte
widths its framework and precision imply, and the rules a spec must meet
alone (``spec_problems``) and on a node (``topology_problems``). The
inventory's schema (settings) and calc validate through here. Pure, no I/O.

What the job's traffic costs a node is ``model/traffic.py``, its FLOPs and
MFU ``model/mfu.py``, the node's step and CCR ``model/step.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

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
    if s.pp_size > 1 and (s.hidden_size is None or s.params is None or s.layers is None):
        # layers too: without them nothing bounds the stages (pp_size 4096 of a model of unknown depth)
        bad("pp_size", "pipeline stages hold layers and send activations: give layers, hidden_size and params "
                       "with pp_size > 1")
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
        if s.moe_max_nodes is not None and s.moe_max_nodes > s.top_k:
            # a token's top_k experts sit on at most top_k nodes: a larger limit limits nothing
            bad("moe_max_nodes", f"allowed: 1 to top_k ({s.top_k}): a token reaches at most one node per expert "
                                 "it is routed to")
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



class WorkloadError(ValueError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))

