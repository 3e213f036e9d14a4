"""The model against the published runs its presets name (issue 41): each
row of docs/ccr-model.md's reality table is computed here, from the preset
through the inventory's schema, and must fall within the row's stated band
of the published figure. A kernel share is never fitted to the row it
predicts: each row names where its kernel share comes from.

Hardware: H100 SXM / H800 nodes, 8 x 989.5 TFLOPS bf16 dense (the H800 is
the H100 SXM's compute with less NVLink) and 8 x 400 Gb/s; DGX A100 nodes
(Narayanan et al. sec. 5: "eight NVIDIA Mellanox 200Gbps HDR Infiniband
HCAs"), 8 x 312 TFLOPS fp16 and 8 x 200 Gb/s.
"""

import re

import pytest
from conftest import REPO

from ccrhost.model.presets import PRESETS
from ccrhost.model.step import node_model
from ccrhost.settings import validate_host

HOPPER = (8, 8 * 400.0, 8 * 989.5)
DGX_A100 = (8, 8 * 200.0, 8 * 312.0)


def node(data: dict, hardware=HOPPER, precision="bf16"):
    spec = validate_host("reality", {"verify_precision": precision, "verify_workload": data}).verify_workload.spec()
    return node_model(spec, *hardware, strict_mfu=True)


def megatron_tflops(gpus: int, kernel_share: float) -> float:
    """GPT-3 175B's teraFLOP/s per GPU as Narayanan et al. count them (eq. 3:
    96 B s l h^2 (1 + s/6h + V/16lh) a step, recompute and unmasked
    attention included, V 51,200), at batch 1536 on ``gpus`` A100s."""
    b, s, l, h, v = 1536, 2048, 96, 12288, 51200
    flops = 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    dp = gpus // 96  # model-parallel size 96
    model = node({"preset": "gpt3-175b", "dp_size": dp, "tokens_per_gpu_step": b * s / gpus,
                  "micro_batches": b // dp, "kernel_share": kernel_share}, DGX_A100, "fp16")
    return flops / model.step_s / gpus / 1e12


def titan_tps(data: dict) -> float:
    """Tokens per second per GPU of a torchtitan job."""
    model = node({"preset": "llama3-8b", **data})
    return model.spec.tokens_per_gpu_step / model.step_s


def deepseek_gpu_hours(data: dict | None = None) -> float:
    """H800 GPU hours per trillion tokens: step x 2048 GPUs / 15360 x 4096 tokens."""
    model = node({"preset": "deepseek-v3", **(data or {})})
    return model.step_s * 2048 / (15360 * 4096) * 1e12 / 3600


def titan_70b_tps(data: dict | None = None) -> float:
    """Tokens per second per GPU of torchtitan's 70B run (256 GPUs, FSDP 32 x TP 8)."""
    model = node({"preset": "llama3-70b", **(data or {})})
    return model.spec.tokens_per_gpu_step / model.step_s


# (row, the model's figure, the published one, band as a relative error)
def rows():
    return [
        # arXiv:2407.21783 Table 4: 43 % BF16 MFU on 8,192 GPUs (DP 64, 32 sequences per DP rank: M 32)
        ("Llama 3 405B, 8,192 H100, BF16 MFU", node({"preset": "llama3-405b", "dp_size": 64,
                                                     "tokens_per_gpu_step": 2048, "micro_batches": 32}).mfu("causal"),
         0.43, 0.03),
        # ... 41 % on 16,384: the row the preset's kernel share is solved from (the figure is the round trip)
        ("Llama 3 405B, 16,384 H100, BF16 MFU", node({"preset": "llama3-405b"}).mfu("causal"), 0.41, 0.01),
        # ... 38 % at 131,072 tokens, CP 16 by all-gather; wider: attention is 40 % of this row's FLOPs and runs
        # in other kernels (with document masks) than the GEMMs the kernel share was solved on
        ("Llama 3 405B, 131K context, CP 16, BF16 MFU", node({"preset": "llama3-405b-128k"}).mfu("causal"),
         0.38, 0.10),
        # arXiv:2412.19437 sec. 1 and Table 1: 180K H800 GPU hours per trillion tokens: the shipped preset, whose
        # kernel share is derived from this figure (the round trip; no DeepSeek MFU is published)
        ("DeepSeek-V3, 2048 H800, GPU hours per trillion tokens", deepseek_gpu_hours(), 180e3, 0.01),
        # torchtitan benchmarks Table 4, "2D": 829 TPS/GPU on 256 H100 (FSDP 32, TP 8, Float8): the shipped
        # preset, whose kernel share is solved from this row (the round trip)
        ("torchtitan Llama 3.1 70B, 256 H100, TPS/GPU", titan_70b_tps(), 829, 0.01),
        # torchtitan benchmarks Table 3: 6,514 TPS/GPU on 128 GPUs (FSDP + torch.compile), predicted from the
        # kernel share of Table 1's 8-GPU run (6,667)
        ("torchtitan Llama 3.1 8B, 128 H100, TPS/GPU", titan_tps({}), 6514, 0.03),
        # arXiv:2104.04473 Table 2: 149 and 141 teraFLOP/s per GPU on 768 and 1536 A100s, predicted from the
        # kernel share of the 384-GPU row (153)
        ("Megatron-LM GPT-3 175B, 768 A100, teraFLOP/s per GPU",
         megatron_tflops(768, PRESETS["gpt3-175b"].values["kernel_share"]), 149, 0.03),
        ("Megatron-LM GPT-3 175B, 1536 A100, teraFLOP/s per GPU",
         megatron_tflops(1536, PRESETS["gpt3-175b"].values["kernel_share"]), 141, 0.03),
    ]


ROWS = rows()


@pytest.mark.parametrize("name, model, published, band", ROWS, ids=[r[0] for r in ROWS])
def test_each_prediction_is_within_its_band_of_the_published_figure(name, model, published, band):
    assert abs(model / published - 1) <= band, f"{name}: model {model:.4g}, published {published:g}"


def test_the_reality_table_in_the_docs_shows_these_figures():
    # docs/ccr-model.md gives each row as | row | published | model | error | band |
    text = (REPO / "docs/ccr-model.md").read_text()
    for name, model, published, band in ROWS:
        line = next((ln for ln in text.splitlines() if ln.startswith(f"| {name} |")), None)
        assert line, name
        cells = [c.strip() for c in line.strip("|").split("|")]
        shown = float(re.sub(r"[^0-9.]", "", cells[2])) / (100 if "%" in cells[2] else 1)
        shown *= 1000 if cells[2].endswith("K") else 1
        assert shown == pytest.approx(model, rel=0.006), (name, cells[2], model)
        assert cells[4] == f"±{band:.0%}", (name, cells[4])


def test_the_rows_run_the_shipped_presets():
    # issue 45: the DeepSeek row ran with Llama 3's kernel share, so the demo's preset (kernels at peak) was never
    # held against its source. Each preset with a published throughput now carries the kernel share it implies
    for name in ("deepseek-v3", "llama3-70b"):
        assert PRESETS[name].values.get("kernel_share") is not None, name
    assert "derived" in PRESETS["deepseek-v3"].kernel_share_from and PRESETS["deepseek-v3"].derived
    # at peak kernels the demo's preset ran 2.3x faster than DeepSeek's own GPU hours, the 70B 2x torchtitan's
    assert deepseek_gpu_hours({"kernel_share": 1.0}) / 180e3 < 1 / 2.2
    assert titan_70b_tps({"kernel_share": 1.0}) / 829 > 1.9
    # Llama 3 405B's kernel share, independent of DeepSeek's figure, predicts it within 10%: the derived share
    # (0.425) is near what another H100 run reached (0.458), not a fit of an implausible value
    independent = deepseek_gpu_hours({"kernel_share": PRESETS["llama3-405b"].values["kernel_share"]})
    assert abs(independent / 180e3 - 1) < 0.10


def test_calibrations_round_trip_and_the_bands_discriminate():
    # solving Llama 3's published 41 % (causal attention) gives the preset's kernel share back
    solved = node({"preset": "llama3-405b", "mfu": 0.41}).kernel_share
    assert solved == pytest.approx(PRESETS["llama3-405b"].values["kernel_share"], abs=5e-4)
    # torchtitan's 8-GPU run: one node, no network, no bubble, so its kernel share is its MFU: 6,667 TPS/GPU
    assert titan_tps({"dp_size": 8}) == pytest.approx(6667, rel=1e-3)
    # Megatron's 384-GPU row: 153 teraFLOP/s at the preset's kernel share
    assert megatron_tflops(384, PRESETS["gpt3-175b"].values["kernel_share"]) == pytest.approx(153, rel=2e-3)
    # without the FSDP overlap its source ran with, the 8B at 128 GPUs falls out of its band (-3.9 %):
    # the overlap, not the band, makes the row pass
    assert titan_tps({"overlap": 0.0}) / 6514 - 1 < -0.03
    # with one schedule chunk per stage (the preset before issue 41), Llama 3's 16K MFU falls to
    # 0.458 / (1 + 15/16) = 23.6 % (its sends and gradients stay hidden)
    assert node({"preset": "llama3-405b", "virtual_stages": 1}).mfu("causal") == pytest.approx(0.458 / (31 / 16))
    # counted full (12 L s a) the 131K row would be 55 %, far from the 38 % published: Llama 3 counts causal.
    # Solved the other way: counted full, 41 % at 16K and 38 % at 131K need kernel shares 0.440 and 0.309
    # (30 % apart); counted causal 0.458 and 0.437
    assert node({"preset": "llama3-405b-128k"}).mfu("full") > 0.38 * 1.4
    full = [node({"preset": p, "mfu": m, "mfu_attention": "full"}).kernel_share
            for p, m in (("llama3-405b", 0.41), ("llama3-405b-128k", 0.38))]
    causal = [node({"preset": p, "mfu": m}).kernel_share for p, m in (("llama3-405b", 0.41), ("llama3-405b-128k", 0.38))]
    assert full == pytest.approx([0.440, 0.309], abs=1e-3) and causal == pytest.approx([0.458, 0.437], abs=1e-3)


def test_torchtitans_published_mfu_counts_attention_full():
    # torchtitan's "33% to 39% MFU" for the 8B on 8 GPUs (5,762 and 6,667 TPS/GPU, uncompiled and compiled)
    # matches its get_num_flop_per_token: 6 x the non-embedding parameters (8.03e9 - 128256 x 4096) plus
    # 12 x layers x heads x head dim x seq_len, over the SXM peak: the full count docs/ccr-model.md names
    per_token = 6 * (8.03e9 - 128256 * 4096) + 12 * 32 * 32 * 128 * 8192
    assert [round(tps * per_token / 989.5e12, 3) for tps in (5762, 6667)] == [0.337, 0.39]
