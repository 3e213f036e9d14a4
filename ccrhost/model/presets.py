"""Named workloads: published model sizes and the parallelism their authors
(or the framework that published the run) reported. ``verify_workload:
{preset: NAME}`` and ``ccrhost calc --preset NAME`` start from one; any key
given next to it overrides the preset's value. Pure data, no I/O.

tokens_per_gpu_step is the reported global batch in tokens / the reported
GPU count. What a source does not report is listed in ``assumed``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    values: dict  # verify_workload keys
    sources: tuple[str, ...]  # where each figure comes from
    assumed: tuple[str, ...] = ()  # figures no source gives: ours, override them

    def to_dict(self) -> dict:
        return {"name": self.name, "values": dict(self.values), "sources": list(self.sources),
                "assumed": list(self.assumed)}


LLAMA3 = ("Llama 3 sizes: Grattafiori et al. 2024, 'The Llama 3 Herd of Models', arXiv:2407.21783, "
          "Table 3 (layers, model dimension, 8 KV heads of 128) and sec. 3.1 (8K context in pre-training)")
TORCHTITAN = ("torchtitan's published runs: pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md "
              "(b5bcd76c)")

PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("llama3-8b", {
        "params": 8.03e9, "layers": 32, "hidden_size": 4096, "kv_size": 1024, "seq_len": 8192,
        # Table 3 there: 128 GPUs, FSDP, local batch 2 x 8192 tokens
        "dp_size": 128, "tp_size": 1, "sharding": "full", "tokens_per_gpu_step": 2 * 8192,
        "framework": "torchtitan", "precision": "bf16",
    }, (LLAMA3, TORCHTITAN + ", Table 3: 128 GPUs, FSDP, local batch size 2")),
    Preset("llama3-70b", {
        "params": 70.6e9, "layers": 80, "hidden_size": 8192, "kv_size": 1024, "seq_len": 8192,
        # Table 4 there: 256 GPUs, FSDP 32 x TP 8, global batch 512 sequences, full activation checkpointing
        "dp_size": 32, "tp_size": 8, "sharding": "full", "tokens_per_gpu_step": 512 * 8192 / 256,
        "recompute": "full", "framework": "torchtitan", "precision": "bf16",
    }, (LLAMA3, TORCHTITAN + ", Table 4: 256 GPUs, FSDP 32, TP 8, global batch 512, full activation "
                             "checkpointing")),
    Preset("llama3-405b", {
        "params": 405e9, "layers": 126, "hidden_size": 16384, "kv_size": 1024, "seq_len": 8192,
        # Table 4 there, 16,384 GPUs: TP 8, CP 1, PP 16, DP 128, 16 sequences per DP rank, 16M tokens a batch
        "dp_size": 128, "tp_size": 8, "pp_size": 16, "tokens_per_gpu_step": 16 * 8192 * 128 / 16384,
        "micro_batches": 16,
        # sec. 3.3.2: FSDP sharding optimizer states and gradients, parameters not resharded after
        # forward (one gather a step: ZeRO-2-like); gradients reduce-scattered in fp32
        "sharding": "optimizer", "grad_bytes_per_param": 4, "precision": "bf16",
    }, (LLAMA3, "Llama 3 parallelism: arXiv:2407.21783 Table 4 (16,384 GPUs row) and sec. 3.3.2 "
                "(FSDP without resharding parameters; fp32 gradient reduce-scatter)"),
        ("micro_batches 16: one sequence per micro-batch (the 16 sequences per DP rank)",)),
    Preset("gpt3-175b", {
        "params": 175e9, "layers": 96, "hidden_size": 12288, "seq_len": 2048,
        # Narayanan et al. Table 1: 1536 GPUs, TP 8, PP 16, batch 1536 sequences
        "dp_size": 12, "tp_size": 8, "pp_size": 16, "tokens_per_gpu_step": 1536 * 2048 / 1536,
        "micro_batches": 128, "framework": "megatron", "precision": "fp16",
    }, ("GPT-3 size: Brown et al. 2020, 'Language Models are Few-Shot Learners', arXiv:2005.14165, Table 2.1 "
        "(96 layers, d_model 12288, context 2048)",
        "parallelism: Narayanan et al. 2021, arXiv:2104.04473, Table 1 (175B: TP 8, PP 16, 1536 GPUs, "
        "batch 1536), trained in fp16 with Megatron-LM"),
        ("micro_batches 128: micro-batch size 1 (1536 sequences / 12 replicas)",)),
    Preset("mixtral-8x7b", {
        "params": 46.7e9, "layers": 32, "hidden_size": 4096, "kv_size": 1024, "seq_len": 32768,
        "experts": 8, "top_k": 2, "expert_params": 32 * 8 * 3 * 4096 * 14336,
        # Megatron-LM's recommended layout: 64 GPUs, TP 1, PP 4, EP 8 -> DP 16
        "dp_size": 16, "tp_size": 1, "pp_size": 4, "ep_size": 8,
        "tokens_per_gpu_step": 8192, "framework": "megatron", "precision": "bf16",
    }, ("Mixtral size: Jiang et al. 2024, 'Mixtral of Experts', arXiv:2401.04088, Table 1 (32 layers, dim 4096, "
        "8 KV heads, 8 experts, top 2, hidden 14336, context 32768; 46.7B parameters, 13B active)",
        "parallelism: NVIDIA/Megatron-LM docs/user-guide/parallelism-guide.md line 168 (d98e8a64): 64 GPUs, "
        "TP 1, PP 4, EP 8 (Mistral AI reported none)"),
        ("tokens_per_gpu_step 8192: no batch is reported", "capacity_factor 1 (dropless)")),
    Preset("deepseek-v3", {
        "params": 671e9, "layers": 61, "moe_layers": 58, "hidden_size": 7168, "seq_len": 4096,
        "experts": 256, "top_k": 8, "expert_params": 256 * 58 * 3 * 7168 * 2048,
        # 2048 H800 GPUs: PP 16, EP 64 over 8 nodes, ZeRO-1 data parallelism, no TP; 15360 x 4K batch
        "dp_size": 128, "tp_size": 1, "pp_size": 16, "ep_size": 64, "sharding": "optimizer",
        "tokens_per_gpu_step": 15360 * 4096 / 2048, "precision": "fp8", "moe_max_nodes": 4,
    }, ("DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report', arXiv:2412.19437: sec. 4.2 (61 layers, hidden 7168, "
        "first 3 layers dense, 256 routed experts of intermediate 2048, 8 per token), sec. 3.2 (2048 H800, "
        "16-way PP, 64-way EP over 8 nodes, ZeRO-1 DP), sec. 4.2 (4K sequences, batch 15360), sec. 3.3 (fp8), "
        "sec. 2.1.2 and 3.2.2 (each token to at most 4 nodes, once over IB)",)),
)}
NAMES = tuple(PRESETS)


def expand(data: dict) -> dict:
    """verify_workload keys with the preset's values under the given ones.
    An unknown name is left for the schema to refuse."""
    name = data.get("preset")
    if name not in PRESETS:
        return dict(data)
    return {**PRESETS[name].values, **data}
