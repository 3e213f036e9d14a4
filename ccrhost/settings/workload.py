"""``verify_workload``: the training job a node's CCR comes from."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ccrhost.model import presets
from ccrhost.model import workload as wl


class Workload(BaseModel):
    """A training job; the node CCR comes from it (ccrhost/model/workload.py,
    formulas in docs/ccr-model.md). ``preset`` fills the other keys from a
    named workload (ccrhost/model/presets.py); keys given beside it win."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    preset: Literal[presets.NAMES] | None = Field(  # type: ignore[valid-type]
        None, description="Named workload to start from (llama3-8b, llama3-70b, llama3-405b, llama3-405b-128k, "
        "gpt3-175b, mixtral-8x7b, deepseek-v3); the other keys override its values.")
    tokens_per_gpu_step: float | None = Field(
        None, gt=0, le=1e9, description="Tokens per step / GPUs of the job. Required unless a preset gives it.")
    dp_size: int | None = Field(
        None, ge=1, le=1_000_000, description="Data-parallel degree (model replicas). Required unless a preset "
        "gives it.")
    precision: Literal[wl.TRAIN_PRECISIONS] = Field(  # type: ignore[valid-type]
        "bf16", description="Training precision; the byte widths' defaults follow it.")
    framework: Literal[wl.FRAMEWORKS] | None = Field(  # type: ignore[valid-type]
        None, description="Framework whose default byte widths apply (megatron, torchtitan, deepspeed, ddp-amp). "
        "Default: none named, gradients reduced at the conservative fp32 width.")
    grad_bytes_per_param: float | None = Field(
        None, gt=0, le=16, description="Gradient-reduce bytes per value. Default: the framework's (fp32: 4 "
        "when none is named).")
    param_bytes: float | None = Field(
        None, gt=0, le=16, description="Parameter all-gather bytes per value (ZeRO, FSDP). Default: the "
        "framework's (2 for 16-bit and fp8 training).")
    activation_bytes: float | None = Field(
        None, gt=0, le=16, description="Bytes per value of pipeline sends, expert all-to-all and KV exchange. "
        "Default: 2 (4 for fp32 training).")
    dispatch_bytes: float | None = Field(
        None, gt=0, le=16, description="Bytes per value of the expert all-to-all dispatch (and of the gradient "
        "sent towards the experts in backward). Default: activation_bytes. DeepSeek-V3 sends it in FP8: 1.")
    combine_bytes: float | None = Field(
        None, gt=0, le=16, description="Bytes per value of the expert all-to-all combine (and of its backward "
        "counterpart). Default: activation_bytes. DeepSeek-V3 keeps it in BF16: 2.")
    tp_size: int = Field(1, ge=1, le=64, description="Tensor-parallel degree, inside a node.")
    pp_size: int = Field(1, ge=1, le=4096, description="Pipeline stages, across nodes.")
    cp_size: int = Field(1, ge=1, le=4096, description="Context-parallel degree; needs seq_len, which it divides.")
    cp_method: Literal[wl.CP_METHODS] = Field(  # type: ignore[valid-type]
        "ring", description="How context parallelism moves K and V: ring (ring attention, 3 passes a step) or "
        "all-gather (Llama 3: gathered once forward, gradients reduce-scattered backward, 2 passes).")
    sharding: Literal[wl.SHARDING] = Field(  # type: ignore[valid-type]
        "none", description="none: all-reduce; optimizer: ZeRO-1/2; full: ZeRO-3/FSDP.")
    reduction: str | None = Field(
        None, description="Collective algorithm between nodes: ring (default: NCCL's choice for large buckets), "
        "tree (NCCL tree, hierarchical), sharp (InfiniBand SHARP: an all-reduce leaves each node once), nvls "
        "(NVLink SHARP reduces inside the node; between nodes NVLS-tree moves tree's volume).")
    compression: float = Field(1.0, description="Gradient bytes on the wire / uncompressed, (0, 1].")
    overlap: float = Field(
        0.0, description="Share of the gradient reduce (and FSDP's backward gather) hidden behind backward, "
        "[0, 1]; also the parameter gathers' unless param_overlap is given.")
    param_overlap: float | None = Field(
        None, description="Share of the parameter all-gathers hidden behind the pass they precede, [0, 1]. "
        "Default: overlap.")
    pipeline_overlap: float = Field(
        0.0, description="Share of the pipeline sends hidden behind the next micro-batch's compute, [0, 1].")
    a2a_overlap: float = Field(
        0.0, description="Share of the expert all-to-all hidden behind the other micro-batch's compute "
        "(DualPipe-style), [0, 1].")
    recompute: Literal[wl.RECOMPUTE] = Field(  # type: ignore[valid-type]
        "none", description="Activation recompute: full reruns the forward inside backward.")
    kernel_share: float | None = Field(
        None, description="Share of peak F the kernels reach while computing, [0.01, 1]: what F is multiplied "
        "by. Default: 1 (peak), or solved from mfu.")
    mfu: float | None = Field(
        None, description="A published or measured end-to-end MFU, [0.01, 1] (model FLOPs / step time / peak F, "
        "after the bubble and exposed communication); the model solves the kernel share from it. Not with "
        "kernel_share.")
    mfu_attention: Literal[wl.MFU_ATTENTION] = Field(  # type: ignore[valid-type]
        "full", description="How mfu counts attention FLOPs per token: full, 12 x layers x seq_len x attention "
        "width (PaLM, Megatron-LM, torchtitan), or causal, 6 x ... (the mask halves them).")
    hidden_size: int | None = Field(None, ge=1, le=1 << 20, description="Model width (hidden size).")
    attention_width: int | None = Field(
        None, ge=1, le=1 << 24, description="Attention FLOP width: heads x (query-key dim + value dim) / 2. "
        "Default: hidden_size (DeepSeek-V3: 128 x (192 + 128) / 2 = 20480).")
    params: float | None = Field(None, gt=0, le=1e15, description="Total parameters (MoE: experts included).")
    layers: int | None = Field(None, ge=1, le=100_000, description="Transformer layers (attention FLOPs, KV "
                               "exchange, all-to-all).")
    seq_len: int | None = Field(None, ge=1, le=1 << 30, description="Tokens per sequence (attention FLOPs, "
                                "context parallelism).")
    kv_size: int | None = Field(None, ge=1, le=1 << 20, description="K (and V) width per token per layer: kv "
                                "heads x head dim. Default: hidden_size.")
    experts: int | None = Field(None, ge=1, le=1 << 20, description="Routed experts per MoE layer.")
    expert_params: float | None = Field(None, gt=0, le=1e15, description="Parameters in routed experts, all "
                                        "layers.")
    top_k: int = Field(1, ge=1, le=1 << 20, description="Experts per token.")
    ep_size: int = Field(1, ge=1, le=1 << 20, description="Expert-parallel degree.")
    capacity_factor: float = Field(1.0, description="Expert buffer / even share of routed tokens, 1 to 64.")
    moe_layers: int | None = Field(None, ge=1, le=100_000, description="MoE layers. Default: all layers.")
    moe_max_nodes: int | None = Field(None, ge=1, le=1 << 20, description="Node-limited routing: a token "
                                      "reaches at most this many nodes, each once (DeepSeek-V3).")
    virtual_stages: int = Field(1, ge=1, le=1024, description="Interleaved pipeline chunks per stage.")
    micro_batches: int | None = Field(None, ge=1, le=1 << 20, description="Micro-batches per step (pipeline "
                                      "bubble).")

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data):
        return presets.expand(data) if isinstance(data, dict) else data

    @field_validator("compression", "overlap", "param_overlap", "pipeline_overlap", "kernel_share", "mfu",
                     "capacity_factor", "reduction")
    @classmethod
    def _ratio(cls, value, info):
        # the model's own rule, so the inventory and calc refuse alike
        spec = wl.WorkloadSpec(1, 1, **{info.field_name: value})
        for problem in wl.spec_problems(spec):
            if problem.key == info.field_name:
                raise ValueError(problem.allowed)
        return value

    def missing(self) -> list[wl.Problem]:
        return [wl.Problem(k, None, "required: give it, or a preset that does")
                for k in ("tokens_per_gpu_step", "dp_size") if getattr(self, k) is None]

    def spec(self) -> wl.WorkloadSpec:
        return wl.WorkloadSpec(**self.model_dump())
