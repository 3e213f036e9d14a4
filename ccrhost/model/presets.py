"""Named workloads: published model sizes and the parallelism their authors
(or the framework that published the run) reported. ``verify_workload:
{preset: NAME}`` and ``ccrhost calc --preset NAME`` start from one; any key
given next to it overrides the preset's value. Pure data, no I/O.

tokens_per_gpu_step is the reported global batch in tokens / the reported
GPU count. What a source does not report is listed in ``assumed``; a figure
computed from a source's figure (not reported as such) in ``derived``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    values: dict  # verify_workload keys
    sources: tuple[str, ...]  # where each figure comes from
    assumed: tuple[str, ...] = ()  # figures no source gives: ours, override them
    derived: tuple[str, ...] = ()  # figures computed from a source's figure, each with its computation
    kernel_share_from: str = "from its source run"  # where values["kernel_share"] comes from

    def to_dict(self) -> dict:
        return {"name": self.name, "values": dict(self.values), "sources": list(self.sources),
                "assumed": list(self.assumed), "derived": list(self.derived),
                "kernel_share_from": self.kernel_share_from if "kernel_share" in self.values else None}


LLAMA3 = ("Llama 3 sizes: Grattafiori et al. 2024, 'The Llama 3 Herd of Models', arXiv:2407.21783, "
          "Table 3 (layers, model dimension, 8 KV heads of 128) and sec. 3.1 (8K context in pre-training)")
LLAMA3_405B = ("Llama 3 parallelism: arXiv:2407.21783 Table 4 (rows of 8,192 and 16,384 GPUs: TP 8, PP 16, "
               "16M tokens a batch, 43 % and 41 % BF16 MFU) and sec. 3.3.2 (FSDP sharding optimizer states and "
               "gradients, parameters not resharded after forward; DP 'asynchronously prefetching sharded model "
               "weights and reducing gradients'; fp32 gradient reduce-scatter; an interleaved schedule, bubble "
               "(PP-1)/(V*M), the first and last chunks holding only the embedding and the output head; "
               "asynchronous point-to-point sends; all-gather context parallelism)")
TORCHTITAN = ("torchtitan's published runs: pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md "
              "(b5bcd76c)")
# FSDP overlaps by design: it prefetches the next all-gather and runs the
# reduce-scatter beside the backward (Zhao et al. 2023, 'PyTorch FSDP',
# arXiv:2304.11277, its communication optimizations: overlap, backward and
# forward prefetching); torchtitan's 8B FSDP runs lose 2.3 % a GPU from 8 to
# 128 GPUs (Tables 1 and 3: 6,667 and 6,514 TPS/GPU compiled).
FSDP_OVERLAP = ("overlap 1: FSDP prefetches parameter all-gathers and reduce-scatters beside backward (Zhao et al. "
                "2023, arXiv:2304.11277: overlapped communication, backward and forward prefetching)")

PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("llama3-8b", {
        "params": 8.03e9, "layers": 32, "hidden_size": 4096, "kv_size": 1024, "seq_len": 8192,
        # Table 3 there: 128 GPUs, FSDP, local batch 2 x 8192 tokens
        "dp_size": 128, "tp_size": 1, "sharding": "full", "tokens_per_gpu_step": 2 * 8192,
        "framework": "torchtitan", "precision": "bf16", "overlap": 1.0,
        # Table 1 there: the same job compiled on 8 GPUs (one node: no network, no bubble, so its MFU is the
        # kernel share), 6,667 TPS/GPU x 5.462e10 FLOPs a token (6 x 8.03e9 + 6 x 32 x 8192 x 4096) / 989.5 TFLOPS
        "kernel_share": 0.368,
    }, (LLAMA3, TORCHTITAN + ", Table 3: 128 GPUs, FSDP, local batch size 2; Table 1: 6,667 TPS/GPU on 8 GPUs "
                             "(FSDP + torch.compile)", FSDP_OVERLAP),
        ("recompute none: the run used selective activation checkpointing, which the model does not count",)),
    Preset("llama3-70b", {
        "params": 70.6e9, "layers": 80, "hidden_size": 8192, "kv_size": 1024, "seq_len": 8192,
        # Table 4 there: 256 GPUs, FSDP 32 x TP 8, global batch 512 sequences, full activation checkpointing,
        # Float8 on the linear layers (torchtitan's Float8: bf16 master weights, so gathers stay bf16)
        "dp_size": 32, "tp_size": 8, "sharding": "full", "tokens_per_gpu_step": 512 * 8192 / 256,
        "recompute": "full", "framework": "torchtitan", "precision": "fp8", "overlap": 1.0,
        # Table 4's "2D" row: 829 TPS/GPU; solved on 8 x 989.5 TFLOPS bf16 and 8 x 400 Gb/s (its Grand Teton
        # hosts), against the bf16 peak as torchtitan's Float8 runs are quoted (tests/test_workload_reality.py
        # checks the round trip)
        "kernel_share": 0.509,
    }, (LLAMA3, TORCHTITAN + ", Table 4: 256 GPUs, FSDP 32, TP 8, global batch 512, full activation "
                             "checkpointing, torch.compile + Float8; its '2D' row: 829 TPS/GPU", FSDP_OVERLAP),
        ("parameter gathers in bf16: Table 4 does not say enable_fsdp_float8_all_gather",),
        kernel_share_from="solved from its source run's 829 tokens/s/GPU (torchtitan Table 4)"),
    Preset("llama3-405b", {
        "params": 405e9, "layers": 126, "hidden_size": 16384, "kv_size": 1024, "seq_len": 8192,
        # Table 4 there, 16,384 GPUs: TP 8, CP 1, PP 16, DP 128, 16 sequences per DP rank, 16M tokens a batch
        "dp_size": 128, "tp_size": 8, "pp_size": 16, "tokens_per_gpu_step": 16 * 8192 * 128 / 16384,
        # one sequence per micro-batch; V 8: 126 layers + the embedding and output chunks = 128 = 16 stages x
        # 8 chunks of one, and the bubble (PP-1)/(V*M) it gives matches Table 4's MFU drop from DP 64 (M 32,
        # 43 %) to DP 128 (M 16, 41 %): (1 + 15/128) / (1 + 15/256) = 1.055, published 43/41 = 1.049
        "micro_batches": 16, "virtual_stages": 8,
        # sec. 3.3.2: FSDP sharding optimizer states and gradients, parameters not resharded after
        # forward (one gather a step: ZeRO-2-like); gradients reduce-scattered in fp32, both prefetched and
        # reduced asynchronously; point-to-point sends asynchronous
        "sharding": "optimizer", "grad_bytes_per_param": 4, "precision": "bf16",
        "overlap": 1.0, "pipeline_overlap": 1.0,
        # Table 4's three rows fit one kernel share only if attention counts causal (the 131K row's 38 %
        # would need a kernel share 30 % lower under 12 L s h); solved from the 16,384-GPU row's 41 %
        # (tests/test_workload_reality.py checks that solving 0.41 gives it back)
        "kernel_share": 0.458, "mfu_attention": "causal",
    }, (LLAMA3, LLAMA3_405B),
        ("micro_batches 16: one sequence per micro-batch (the 16 sequences per DP rank)",
         "virtual_stages 8: one layer (or the embedding, or the output head) per chunk; not reported, derived "
         "from Table 4's MFU drop")),
    Preset("llama3-405b-128k", {
        "params": 405e9, "layers": 126, "hidden_size": 16384, "kv_size": 1024, "seq_len": 131072,
        # Table 4 there, long context: 16,384 GPUs, TP 8, CP 16, PP 16, 16 sequences per DP rank, 16M tokens;
        # the table prints DP 4, but 16,384 GPUs / (8 x 16 x 16) and 16M / (16 x 131,072) both give 8
        "dp_size": 8, "tp_size": 8, "cp_size": 16, "pp_size": 16, "tokens_per_gpu_step": 16 * 131072 * 8 / 16384,
        "micro_batches": 16, "virtual_stages": 8, "cp_method": "all-gather",
        "sharding": "optimizer", "grad_bytes_per_param": 4, "precision": "bf16",
        "overlap": 1.0, "pipeline_overlap": 1.0, "kernel_share": 0.458, "mfu_attention": "causal",
    }, (LLAMA3, LLAMA3_405B + "; the long-context row: CP 16 over 131,072 tokens, 38 % BF16 MFU"),
        ("micro_batches 16 and virtual_stages 8 as llama3-405b", "kernel_share: llama3-405b's")),
    Preset("gpt3-175b", {
        "params": 175e9, "layers": 96, "hidden_size": 12288, "seq_len": 2048,
        # Narayanan et al. Table 2, PTD parallelism: 174.6B, model-parallel size 96 (TP 8 in the node x PP 12),
        # batch 1536, micro-batch 1, 1536 GPUs: 141 teraFLOP/s per GPU; eq. (3) counts activation recompute
        "dp_size": 16, "tp_size": 8, "pp_size": 12, "tokens_per_gpu_step": 1536 * 2048 / 1536,
        "micro_batches": 96, "recompute": "full", "framework": "megatron", "precision": "fp16",
        # solved from Table 2's 384-GPU row (153 teraFLOP/s per GPU by eq. (3), V 51,200) on DGX A100
        # (8 x 312 TFLOPS, 8 x 200 Gb/s); tests/test_workload_reality.py predicts the 768- and 1536-GPU rows with it
        "kernel_share": 0.502,
    }, ("GPT-3 size: Brown et al. 2020, 'Language Models are Few-Shot Learners', arXiv:2005.14165, Table 2.1 "
        "(96 layers, d_model 12288, context 2048)",
        "parallelism and throughput: Narayanan et al. 2021, arXiv:2104.04473, Table 2 (PTD parallelism, 174.6B: model-parallel "
        "size 96, batch 1536, micro-batch 1, 384 to 1536 GPUs: 153, 149, 141 teraFLOP/s per GPU) and eq. (3) "
        "(activation recompute), trained in fp16 with Megatron-LM"),
        ("tp 8 x pp 12: the paper gives the product 96 and keeps TP in the node (sec. 5.4.1)",
         "micro_batches 96: micro-batch size 1 (1536 sequences / 16 replicas)", "virtual_stages 1, overlap 0: "
         "the default schedule; the 2021 code reduced gradients after backward")),
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
        # MLA: 128 heads, query-key dim 128 + 64 (RoPE) = 192, value dim 128: 128 x (192 + 128) / 2
        "attention_width": 128 * (192 + 128) // 2,
        # 2048 H800 GPUs: PP 16, EP 64 over 8 nodes, ZeRO-1 data parallelism, no TP; 15360 x 4K batch
        "dp_size": 128, "tp_size": 1, "pp_size": 16, "ep_size": 64, "sharding": "optimizer",
        "tokens_per_gpu_step": 15360 * 4096 / 2048, "precision": "fp8", "moe_max_nodes": 4,
        # sec. 3.3.2: dispatch (and the activation gradient before the down-projection) in FP8, both
        # combines in BF16
        "dispatch_bytes": 1, "combine_bytes": 2,
        # DualPipe (sec. 3.2.1): two chunks a rank fed from both ends, bubble (PP/2-1)(F&B+B-3W) against
        # 1F1B's (PP-1)(F+B), about interleaving's (PP-1)/(2M); "both all-to-all and PP communication can
        # be fully hidden during execution"
        "virtual_stages": 2, "micro_batches": 120, "a2a_overlap": 1.0, "pipeline_overlap": 1.0,
        # derived, not published: no DeepSeek MFU is reported. Sec. 1 and Table 1: 180K H800 GPU hours per
        # trillion tokens (pre-training 2,664K GPU hours / 14.8T tokens; the 2,788K total adds context
        # extension and post-training). A step of 15360 x 4096 tokens on 2048 GPUs then takes
        # 180e3 x 3600 / 1e12 x 62.9e6 / 2048 = 19.9 s; the model gives that step on 8 x 989.5 TFLOPS bf16
        # (the H800 computes as the H100 SXM) and 8 x 400 Gb/s at kernel share 0.425 (peak: 8.5 s).
        # tests/test_workload_reality.py checks the round trip.
        "kernel_share": 0.425,
    }, ("DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report', arXiv:2412.19437: sec. 4.2 (61 layers, hidden 7168, "
        "first 3 layers dense, 256 routed experts of intermediate 2048, 8 per token, 128 heads of query-key "
        "dim 192 and value dim 128), sec. 3.2 (2048 H800, 16-way PP, 64-way EP over 8 nodes, ZeRO-1 DP), "
        "sec. 3.2.1 (DualPipe: all-to-all and PP communication fully hidden), sec. 3.3.2 (FP8 dispatch, BF16 "
        "combine), sec. 4.2 (4K sequences, batch 15360), sec. 3.3 (fp8), sec. 2.1.2 and 3.2.2 (each token to "
        "at most 4 nodes, once over IB)",
        "DualPipe bubble: deepseek-ai/DualPipe README.md (89f5de17), 'Pipeline Bubbles and Memory Usage "
        "Comparison'"),
        ("micro_batches 120: one sequence per micro-batch (15360 sequences / 128 replicas)",
         "virtual_stages 2: DualPipe's two chunks a rank, its bubble as interleaving's",
         "gradient reduce at fp32 and not overlapped: the report does not say"),
        ("kernel_share 0.425: derived from the report's 180K H800 GPU hours per trillion tokens (sec. 1, "
         "Table 1: 2,664K pre-training GPU hours / 14.8T tokens), a 19.9 s step of 15360 x 4096 tokens on "
         "2048 GPUs, against the bf16 peak; the report gives no MFU",),
        kernel_share_from="derived from its published 180K H800 GPU hours per trillion tokens"),
)}
NAMES = tuple(PRESETS)


def expand(data: dict) -> dict:
    """verify_workload keys with the preset's values under the given ones.
    An unknown name is left for the schema to refuse. A null (YAML ``~``)
    over a value the preset sets is refused, not taken as "the default": it
    would silently undo the preset (``kernel_share: null`` would put the
    kernels at peak). Raises ValueError("[key] ...")."""
    name = data.get("preset")
    if not isinstance(name, str) or name not in PRESETS:  # a list or mapping: the schema names it
        return dict(data)
    values = dict(PRESETS[name].values)
    # the two efficiencies exclude each other: the one given replaces the preset's
    for given, dropped in (("mfu", "kernel_share"), ("kernel_share", "mfu")):
        if data.get(given) is not None and data.get(dropped) is None:
            values.pop(dropped, None)
    for key in sorted(data):
        if data[key] is None and values.get(key) is not None:
            shown = f"{values[key]:g}" if isinstance(values[key], float) else values[key]
            raise ValueError(f"[{key}] null beside preset {name} would drop its {key} ({shown}) "
                             f"and fall back to the default; allowed: a value, or leave {key} out to keep the "
                             f"preset's")
    return {**values, **data}
