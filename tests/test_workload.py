"""The workload model (issue 15): hand-derived node CCRs, the refusals,
and the verification judging by the same model.

Common figures, derived once:
  H100 SXM node: F = 8 x 989.5 TFLOPS bf16 = 7.916e15 FLOP/s,
                 B = 8 x 400 Gb/s = 3200 Gb/s = 400 GB/s = 4e11 B/s.
  A100 SXM node: F = 8 x 312 = 2.496e15 FLOP/s, B = 8 x 200 Gb/s = 2e11 B/s.
  8192 tokens per GPU per step: the node computes 6 x 8 x 8192 = 393,216
  FLOP per parameter per step.
Figures are per parameter (P cancels) unless params is given.

Model v3 (issue 26) changed two defaults: the reduction is NCCL's ring
(2(N-1)/N per node, N data-parallel ranks) and, with no framework named,
gradients are reduced in fp32 (4 B). The v2 derivations below that are
about something else (compression, sharding, TP, pipelines) keep their
figures by asking for v2's volume explicitly: V2 = tree over the nodes
(what v2 called hierarchical) with 2-byte gradients.
"""

import json
import math

import pytest

from conftest import declared

from ccrhost.fleet.report import text_table
from ccrhost.model.gpus import GpuReading
from ccrhost.model.step import node_model
from ccrhost.model.verdict import (
    FAIL,
    OK,
    UNKNOWN,
    WARN,
    Expectation,
    Port,
    Readings,
    evaluate,
)
from ccrhost.model.workload import WorkloadError, WorkloadSpec
from ccrhost.node.formats import format_text
from ccrhost.settings import InventoryDataError, validate_all, validate_host

H100_F, H100_B = 8 * 989.5, 8 * 400.0  # TFLOPS, Gb/s
A100_F, A100_B = 8 * 312.0, 8 * 200.0
NODE_FLOPS = 6 * 8 * 8192  # 393,216 FLOP per parameter per step
V2 = {"grad_bytes_per_param": 2, "reduction": "tree"}  # v2's "hierarchical" bf16 volume


def h100(spec, gpus=8):
    return node_model(spec, gpus, H100_B, H100_F)


# --- the worked example and its variants -----------------------------

def test_worked_example_v3_defaults_ring_and_fp32_gradients():
    # v3 defaults: ring over N = 1024 ranks, fp32 gradient reduce (no framework named):
    #   2 x 1023/1024 x 4 B = 7.9921875 B per parameter per node;
    # CCR = 393216 x 4e11 / (7.9921875 x 7.916e15) = 2.486106 (compute-underused, just above 2).
    node = h100(WorkloadSpec(tokens_per_gpu_step=8192, dp_size=1024))
    assert node.nic_bytes == pytest.approx(7.9921875)
    assert node.ccr == pytest.approx(2.486106, rel=1e-6) and node.band == "compute-underused"
    notes = " ".join(node.notes)
    assert "reduction: ring (default" in notes and "no framework named: gradient reduce at the conservative fp32" in notes


def test_worked_example_dp1024_on_h100_8x400_is_about_5():
    # v2's figure, asked for explicitly (tree, bf16 gradients).
    # m = 1024 / 8 = 128 nodes. The node's NICs together send
    #   2 x 127/128 x 2 B = 3.96875 B per parameter (tree all-reduce),
    # at 4e11 B/s: 9.921875e-12 s; compute 393,216 / 7.916e15 = 4.96736e-11 s.
    # CCR = 4.96736e-11 / 9.921875e-12 = 393216 x 4e11 / (3.96875 x 7.916e15) = 5.00647
    node = h100(WorkloadSpec(tokens_per_gpu_step=8192, dp_size=1024, **V2))
    assert node.nodes == 128 and node.stage_nodes == 128
    assert node.nic_bytes == pytest.approx(3.96875)
    assert node.flops == NODE_FLOPS
    assert node.beta == pytest.approx(3.96875 / 393216) == pytest.approx(1.009305e-5, rel=1e-6)
    assert node.comm_s == pytest.approx(9.921875e-12) and node.compute_s == pytest.approx(4.967357e-11, rel=1e-6)
    assert node.ccr == pytest.approx(5.00647, rel=1e-5)
    assert node.band == "compute-underused"
    # no overlap: exposed = comm; share = 1 / (CCR + 1) = 0.166487; slowdown = 1 + 1/CCR = 1.199742
    assert node.exposed_comm_fraction == pytest.approx(0.166487, rel=1e-5)
    assert node.slowdown == pytest.approx(1.199742, rel=1e-6)


def test_flat_and_hierarchical_are_refused_naming_what_replaced_them():
    # v2's flat counted every GPU's shard through the NICs: 8 x 2 x 1023/1024 x 2 B = 31.97 B, the old
    # per-GPU formula and 8x NCCL's real ring (issue 26, item 1). Refused, not silently mapped.
    with pytest.raises(WorkloadError, match=r"reduction = 'flat': removed in model v3 .*NCCL's flat ring is 'ring'"):
        h100(WorkloadSpec(8192, 1024, reduction="flat"))
    with pytest.raises(WorkloadError, match=r"reduction = 'hierarchical': removed in model v3: .* is 'tree'"):
        h100(WorkloadSpec(8192, 1024, reduction="hierarchical"))
    # NCCL's ring with bf16 gradients: 2 x 1023/1024 x 2 = 3.99609375 B, CCR 4.972213 (v2's flat: 0.62153)
    ring = h100(WorkloadSpec(8192, 1024, grad_bytes_per_param=2, reduction="ring"))
    assert ring.nic_bytes == pytest.approx(3.99609375) and ring.ccr == pytest.approx(4.972213, rel=1e-6)


def test_two_bit_compression():
    # 2-bit codes for bf16 (16-bit) gradients: ratio 2/16 = 0.125 of the bytes:
    # 3.96875 x 0.125 = 0.49609375 B; CCR = 8 x 5.00647 = 40.0518; exposed 1/41.0518 = 2.436 %.
    node = h100(WorkloadSpec(8192, 1024, compression=0.125, **V2))
    assert node.nic_bytes == pytest.approx(0.49609375)
    assert node.ccr == pytest.approx(40.0518, rel=1e-5)
    assert node.exposed_comm_fraction == pytest.approx(0.024359, rel=1e-4)


def test_fsdp_moves_one_and_a_half_times_the_all_reduce():
    # ZeRO-3/FSDP: reduce-scatter of bf16 gradients + two all-gathers of bf16
    # parameters: 127/128 x (2 + 2 x 2) = 5.953125 B; CCR = 5.00647 / 1.5 = 3.33765.
    node = h100(WorkloadSpec(8192, 1024, sharding="full", **V2))
    assert node.nic_bytes == pytest.approx(5.953125)
    assert node.ccr == pytest.approx(3.33765, rel=1e-5)
    # ZeRO-1/2: reduce-scatter + one all-gather = 127/128 x (2 + 2), the all-reduce's 3.96875 B.
    assert h100(WorkloadSpec(8192, 1024, sharding="optimizer", **V2)).nic_bytes == pytest.approx(3.96875)


def test_tensor_parallel_inside_the_node_and_dp_across_nodes():
    # TP = 8 fills the node with one replica: 1024 GPUs = dp 128 x tp 8 = 128 nodes, and each
    # node holds one whole gradient copy: 2 x 127/128 x 2 B = 3.96875 B again, CCR 5.00647.
    # The TP all-reduces stay on NVLink and are not counted.
    node = h100(WorkloadSpec(8192, dp_size=128, tp_size=8, **V2))
    assert node.nodes == 128 and node.nic_bytes == pytest.approx(3.96875)
    assert node.ccr == pytest.approx(5.00647, rel=1e-5)
    # dp 16 x tp 8 = 16 nodes: 2 x 15/16 x 2 B = 3.75 B; CCR = 393216 x 4e11 / (3.75 x 7.916e15) = 5.29851.
    # (Read as DP only, dp 16 would be 2 nodes and 2 B: CCR 9.93; tp_size changes the answer.)
    small = h100(WorkloadSpec(8192, dp_size=16, tp_size=8, **V2))
    assert small.nodes == 16 and small.nic_bytes == pytest.approx(3.75)
    assert small.ccr == pytest.approx(5.29851, rel=1e-5)


def test_a100_8x200():
    # Same job on DGX A100: CCR = 393216 x 2e11 / (3.96875 x 2.496e15) = 7.93895.
    node = node_model(WorkloadSpec(8192, 1024, **V2), 8, A100_B, A100_F)
    assert node.ccr == pytest.approx(7.93895, rel=1e-5) and node.band == "compute-underused"


def test_single_node_job_is_not_network_bound():
    # dp 8 on 8 GPUs: the all-reduce never leaves the node; 0 NIC bytes, no division by zero.
    for reduction in ("ring", "tree", "sharp", "nvls"):
        node = h100(WorkloadSpec(8192, 8, reduction=reduction))
        assert node.nic_bytes == 0 and node.beta == 0
        assert node.ccr == math.inf and node.band == "not-network-bound"
        assert node.exposed_comm_fraction == 0 and node.slowdown == 1
        data = node.to_dict()
        assert data["ccr"] is None and data["band"] == "not-network-bound"
        json.dumps(data, allow_nan=False)  # valid JSON: no Infinity
        assert "no inter-node traffic" in data["statement"]


def test_framework_widths_and_grad_bytes_overrides_them():
    # tree over 128 nodes moves 2 x 127/128 = 1.984375 x the gradient width per parameter:
    # Megatron bf16 (arguments.py: fp32 reduce unless --grad-reduce-in-bf16): 4 B -> 7.9375 B, CCR 2.503236;
    # torchtitan (mixed_precision_reduce float32): 4 B, the same; DeepSpeed bf16 (communication_data_type
    # bf16): 2 B -> CCR 5.006473; ddp-amp (fp32 .grad under autocast): 4 B; Megatron fp16: 2 B.
    def ccr(**kw):
        return h100(WorkloadSpec(8192, 1024, reduction="tree", **kw)).ccr
    assert ccr(framework="megatron") == pytest.approx(2.503236, rel=1e-6)
    assert ccr(framework="torchtitan") == pytest.approx(2.503236, rel=1e-6)
    assert ccr(framework="ddp-amp") == pytest.approx(2.503236, rel=1e-6)
    assert ccr(framework="deepspeed") == pytest.approx(5.006473, rel=1e-6)
    assert ccr(framework="megatron", precision="fp16") == pytest.approx(5.006473, rel=1e-6)
    assert ccr(framework="megatron", grad_bytes_per_param=2) == pytest.approx(5.006473, rel=1e-6)
    # parameter and activation widths: ddp-amp gathers fp32 parameters, the others 16-bit; fp32 training 4/4/4
    assert WorkloadSpec(1, 1, framework="ddp-amp").widths == (4, 4, 2)
    assert WorkloadSpec(1, 1, framework="torchtitan", precision="fp8").widths == (4, 2, 2)
    assert WorkloadSpec(1, 1, precision="fp32", framework="deepspeed").widths == (4, 4, 4)
    assert WorkloadSpec(1, 1).widths == (4, 2, 2)  # none named: conservative fp32 reduce


def test_overlap_hides_gradient_traffic_up_to_the_compute_time():
    # Example, overlap 0.5: exposed 0.5 x 9.921875e-12 = 4.9609e-12 s;
    # share 4.9609 / (49.6736 + 4.9609) = 9.0802 %, slowdown 1.099871. CCR unchanged.
    half = h100(WorkloadSpec(8192, 1024, overlap=0.5, **V2))
    assert half.ccr == pytest.approx(5.00647, rel=1e-5)
    assert half.exposed_comm_fraction == pytest.approx(0.090802, rel=1e-4)
    assert half.slowdown == pytest.approx(1.099871, rel=1e-6)
    # 8 x 100 Gb/s (1e11 B/s), 2048 tokens: comm 3.96875e-11 s, compute 98304 / 7.916e15 = 1.24184e-11 s,
    # CCR 0.312904 (bandwidth-bound). Full overlap hides gradients behind backward only (4 of the 6
    # FLOPs: 8.27893e-12 s): exposed 3.96875e-11 - 8.27893e-12 = 3.140857e-11 s,
    # share 3.140857 / (1.241839 + 3.140857) = 71.665 %, slowdown 4.382696 / 1.241839 = 3.529198.
    # (v2 hid behind the whole step: 68.710 %, x3.19586.)
    slow = node_model(WorkloadSpec(2048, 1024, overlap=1.0, **V2), 8, 800, H100_F)
    assert slow.ccr == pytest.approx(0.312904, rel=1e-5) and slow.band == "bandwidth-bound"
    assert slow.exposed_comm_fraction == pytest.approx(0.716649, rel=1e-5)
    assert slow.slowdown == pytest.approx(3.529198, rel=1e-5)


def test_pipeline_stages_add_exposed_activation_traffic():
    # 70e9 parameters, hidden 8192, bf16; dp 32 x tp 8 x pp 4 = 1024 GPUs, 32 nodes per stage, 128 nodes.
    # gradients: 2 x 31/32 x 2 B x 70e9/4 = 67.8125e9 B (each node holds a quarter of the model);
    # activations, a middle stage, both directions: 2 x 8 GPUs x 8192 tokens x 4 stages x 8192 x 2 B
    #   = 2^33 = 8,589,934,592 B;
    # compute 6 x 8 x 8192 x 70e9 = 2.752512e16 FLOP: 3.477150 s; comm (67.8125e9 + 8.5899e9) / 4e11
    #   = 0.169531 + 0.021475 s; CCR = 3.477150 / 0.191006 = 18.2044.
    spec = WorkloadSpec(8192, dp_size=32, tp_size=8, pp_size=4, hidden_size=8192, params=70e9, layers=80, **V2)
    node = h100(spec)
    assert node.nodes == 128 and node.stage_nodes == 32
    assert node.grad_bytes == pytest.approx(67.8125e9) and node.act_bytes == 2 ** 33
    assert node.flops == pytest.approx(2.752512e16)
    assert node.ccr == pytest.approx(18.2044, rel=1e-5)
    # full overlap hides the gradients, not the pipeline sends: 0.021475 / (3.477150 + 0.021475) = 0.6138 %
    # (backward, 2/3 x 3.477150 = 2.318 s, is longer than the gradients' 0.169531 s: all hidden)
    hidden = h100(WorkloadSpec(**{**spec.__dict__, "overlap": 1.0}))
    assert hidden.exposed_s == pytest.approx(0.02147484, rel=1e-6)
    assert hidden.exposed_comm_fraction == pytest.approx(0.0061381, rel=1e-4)


def test_the_model_refuses_a_workload_that_does_not_fit_the_node():
    with pytest.raises(WorkloadError, match=r"tp_size = 16: allowed: a divisor of the 8 GPUs per node"):
        h100(WorkloadSpec(8192, 64, tp_size=16))
    with pytest.raises(WorkloadError, match=r"dp_size = 100: allowed: dp_size x cp_size a multiple of 8"):
        h100(WorkloadSpec(8192, 100))
    with pytest.raises(WorkloadError, match=r"pp_size = 2: .*give layers, hidden_size and params"):
        h100(WorkloadSpec(8192, 8, pp_size=2))


# --- the inventory: same keys, refusals named ----------------------------------

WORKLOAD = {"tokens_per_gpu_step": 8192, "dp_size": 1024}

# (extra host data, workload changes, the key named, the value shown, a piece of "allowed")
REFUSALS = [
    ({"verify_profile": "hgx-h100-8x400"}, {"tp_size": 16}, "verify_workload[tp_size]", "16",
     "a divisor of the 8 GPUs per node (tensor parallelism stays inside the node's NVLink) "
     "(GPUs per node from verify_gpu_count / verify_profile)"),
    ({"verify_gpu_count": 8}, {"tp_size": 3}, "verify_workload[tp_size]", "3", "a divisor of the 8 GPUs"),
    ({"verify_gpu_count": 8}, {"dp_size": 100}, "verify_workload[dp_size]", "100",
     "allowed: dp_size x cp_size a multiple of 8 (8 GPUs per node / tp_size 1)"),
    ({"verify_profile": "dgx-a100-8x200"}, {"dp_size": 13, "tp_size": 2}, "verify_workload[dp_size]", "13",
     "allowed: dp_size x cp_size a multiple of 4 (8 GPUs per node / tp_size 2)"),
    ({}, {"compression": 0.0}, "verify_workload[compression]", "0.0", "allowed: a ratio in (0, 1]"),
    ({}, {"compression": 1.5}, "verify_workload[compression]", "1.5", "allowed: a ratio in (0, 1]"),
    ({}, {"overlap": -0.1}, "verify_workload[overlap]", "-0.1", "allowed: a fraction in [0, 1]"),
    ({}, {"overlap": 1.2}, "verify_workload[overlap]", "1.2", "allowed: a fraction in [0, 1]"),
    ({}, {"pp_size": 4}, "verify_workload[pp_size]", "4", "give layers, hidden_size and params with pp_size > 1"),
    # issue 45: without layers nothing bounded the stages
    ({}, {"pp_size": 4096, "hidden_size": 1024, "params": 1e9}, "verify_workload[pp_size]", "4096",
     "pipeline stages hold layers and send activations: give layers, hidden_size and params with pp_size > 1"),
    # issue 45: a token's top_k experts sit on at most top_k nodes
    ({}, {"preset": "deepseek-v3", "moe_max_nodes": 100, "tokens_per_gpu_step": 30720, "dp_size": 128},
     "verify_workload[moe_max_nodes]", "100",
     "allowed: 1 to top_k (8): a token reaches at most one node per expert it is routed to"),
    # issue 45: a null beside a preset silently reset its kernel share to peak
    ({}, {"preset": "deepseek-v3", "kernel_share": None, "tokens_per_gpu_step": 30720, "dp_size": 128},
     "verify_workload[kernel_share]", "None",
     "null beside preset deepseek-v3 would drop its kernel_share (0.425) and fall back to the default; allowed: "
     "a value, or leave kernel_share out to keep the preset's"),
    ({}, {"precision": "int4"}, "verify_workload[precision]", "'int4'", "allowed: 'fp32', 'bf16', 'fp16' or 'fp8'"),
    ({}, {"sharding": "zero3"}, "verify_workload[sharding]", "'zero3'", "allowed: 'none', 'optimizer' or 'full'"),
    ({}, {"overlapp": 0.5}, "verify_workload[overlapp]", "0.5", "unknown key; allowed: preset, tokens_per_gpu_step"),
    ({}, {"dp_size": 1024.0}, "verify_workload[dp_size]", "1024.0", "valid integer"),
    ({}, {"reduction": "flat"}, "verify_workload[reduction]", "'flat'", "NCCL's flat ring is 'ring'"),
    ({}, {"reduction": "hierarchical"}, "verify_workload[reduction]", "'hierarchical'", "is 'tree'"),
    ({}, {"reduction": "butterfly"}, "verify_workload[reduction]", "'butterfly'", "allowed: ring, tree, sharp, nvls"),
    ({}, {"mfu": 0.0}, "verify_workload[mfu]", "0.0", "allowed: a fraction in [0.01, 1]"),
    ({}, {"preset": "llama4"}, "verify_workload[preset]", "'llama4'", "allowed: 'llama3-8b', 'llama3-70b'"),
    ({}, {"experts": 8, "ep_size": 16, "expert_params": 1e9, "params": 2e9, "hidden_size": 1024, "layers": 8,
          "dp_size": 1024}, "verify_workload[ep_size]", "16", "allowed: at most experts (8)"),
    ({}, {"cp_size": 8, "seq_len": 4, "layers": 8, "hidden_size": 1024}, "verify_workload[seq_len]", "4",
     "allowed: at least cp_size (8) tokens"),
    ({}, {"top_k": 2}, "verify_workload[top_k]", "2", "allowed only with experts"),
    ({}, {"tokens_per_gpu_step": None, "preset": None}, "verify_workload[tokens_per_gpu_step]", "None",
     "required: give it, or a preset that does"),
]


@pytest.mark.parametrize("extra, change, key, shown, allowed", REFUSALS, ids=[f"{c}" for _, c, *_ in REFUSALS])
def test_inventory_refuses_with_host_key_value_and_what_is_allowed(extra, change, key, shown, allowed):
    with pytest.raises(InventoryDataError) as info:
        validate_host("gpu-07", {**extra, "verify_workload": {**WORKLOAD, **change}})
    assert len(info.value.errors) == 1, str(info.value)
    assert f"gpu-07: {key} = {shown}: " in str(info.value) and allowed in str(info.value), str(info.value)


def test_one_bad_host_is_named_and_the_good_one_is_not():
    good = {"verify_profile": "hgx-h100-8x400", "verify_workload": WORKLOAD}
    bad = {"verify_profile": "hgx-h100-8x400", "verify_workload": {**WORKLOAD, "tp_size": 16}}
    with pytest.raises(InventoryDataError) as info:
        validate_all({"gpu-01": good, "gpu-02": bad})
    assert [e.where for e in info.value.errors] == ["gpu-02"]


def test_the_old_three_keys_keep_their_meaning():
    settings = validate_host("gpu-01", {"verify_workload": {"grad_bytes_per_param": 2, "tokens_per_gpu_step": 8192,
                                                            "dp_size": 1024}})
    spec = settings.policy().workload
    assert spec == WorkloadSpec(8192, 1024, grad_bytes_per_param=2)
    # the same bytes per value, now over NCCL's ring (v3's default): 2 x 1023/1024 x 2 = 3.99609375 B,
    # CCR 4.972213 (v2, hierarchical: 5.00647)
    assert h100(spec).ccr == pytest.approx(4.972213, rel=1e-6)


def test_full_keys_are_accepted_and_reach_the_policy():
    data = {"tokens_per_gpu_step": 8192, "dp_size": 32, "precision": "fp8", "tp_size": 8, "pp_size": 4,
            "sharding": "optimizer", "reduction": "tree", "compression": 0.5, "overlap": 0.25,
            "hidden_size": 8192, "params": 70e9, "layers": 80}
    spec = validate_host("gpu-01", {"verify_profile": "hgx-h100-8x400", "verify_workload": data}).policy().workload
    assert spec == WorkloadSpec(**data)


# --- the verification judges by the same model ---------------------------------

def port(i, rate=400.0):
    return Port(f"mlx5_{i}", 1, "Ethernet", "ACTIVE", "LinkUp", rate, 32.0, 16, 32.0, 16)


def gpu(i):
    return GpuReading(i, "NVIDIA H100 80GB HBM3", f"GPU-{i}", 1980, 1980, 5, 5, 16, 16, 0)


def readings(rates=(400.0,) * 8, gpus=8):
    return Readings(ports=[port(i, r) for i, r in enumerate(rates)], gpus=[gpu(i) for i in range(gpus)])


def policy(**workload):
    return validate_host("gpu-01", {"verify_workload": {**WORKLOAD, **V2, **workload}}).policy()


def test_verification_bands_apply_to_the_node_ccr_from_the_model():
    v = evaluate(readings(), declared("hgx-h100-8x400"), policy())
    assert v.ccr.ccr == pytest.approx(5.00647, rel=1e-5) and v.expected_ccr == pytest.approx(5.00647, rel=1e-5)
    assert v.ccr.band == "compute-underused" and v.ccr.beta == pytest.approx(1.009305e-5, rel=1e-6)
    assert v.status == WARN and [r.code for r in v.reasons] == ["ccr_high"]
    model = v.to_dict()["ccr"]["workload"]
    assert model["nodes"] == 128 and model["nic_bytes_per_node_step"] == pytest.approx(3.96875)
    assert "tree DP over 128 nodes" in model["statement"] and model["assumptions"]


def test_a_bandwidth_bound_workload_warns_with_its_exposed_share():
    # declared and found 8 x 100 Gb/s, 2048 tokens: CCR 0.312904 (the overlap test's derivation),
    # no overlap: exposed share = comm / (compute + comm) = 1 / (1 + CCR) = 76.2 %.
    expect = Expectation("NVIDIA H100 80GB HBM3", 8, 8, 100)
    v = evaluate(readings(rates=(100.0,) * 8), expect, policy(tokens_per_gpu_step=2048))
    assert v.ccr.ccr == pytest.approx(0.312904, rel=1e-5) and v.ccr.band == "bandwidth-bound"
    assert [(r.level, r.code) for r in v.reasons] == [(WARN, "ccr_bandwidth_bound")]
    assert "exposed communication 76% of the step" in v.reasons[0].message


def test_a_slow_port_fails_against_the_model_expected_ccr():
    # one port at 200G: bottleneck B = 8 x 200 = 1600 Gb/s, CCR 5.00647 / 2 = 2.50324 < 0.9 x 5.00647
    v = evaluate(readings(rates=(400.0,) * 7 + (200.0,)), declared("hgx-h100-8x400"), policy())
    assert v.status == FAIL and v.ccr.ccr == pytest.approx(2.50324, rel=1e-5)
    assert {"port_rate", "ccr_below_expected"} <= {r.code for r in v.reasons}
    assert v.fail_below == pytest.approx(0.9 * 5.00647, rel=1e-5)


def test_a_single_node_job_passes_without_a_ccr_to_divide():
    v = evaluate(readings(), declared("hgx-h100-8x400"), policy(dp_size=8))
    assert v.status == OK and v.reasons == []
    assert v.ccr.ccr == math.inf and v.ccr.band == "not-network-bound" and v.expected_ccr is None
    data = v.to_dict()
    assert data["ccr"]["ccr"] is None and data["ccr"]["band"] == "not-network-bound"
    json.dumps(data, allow_nan=False, default=str)


def test_gpu_count_unknown_until_evaluation_is_checked_there():
    # no verify_gpu_count/profile: validation cannot check tp 16; evaluation finds 8 GPUs and says so
    pol = policy(tp_size=16, dp_size=64)
    v = evaluate(readings(), Expectation(), pol)
    assert v.status == UNKNOWN and v.ccr is None
    assert [r.code for r in v.reasons] == ["workload_invalid"]
    assert "verify_workload does not fit this node's 8 GPUs: tp_size = 16: allowed: a divisor" in v.reasons[0].message


def test_report_states_the_model_per_host():
    slow = readings(rates=(400.0,) * 7 + (200.0,))
    verdicts = {"gpu-01": evaluate(readings(), declared("hgx-h100-8x400"), policy()),
                "gpu-02": evaluate(slow, declared("hgx-h100-8x400"), policy())}
    text = text_table(verdicts)
    assert "gpu-01: workload model: tree DP over 128 nodes" in text and "CCR 5.006" in text
    assert "gpu-02: workload model: tree DP over 128 nodes" in text and "CCR 2.503" in text
    assert "workload model assumptions: compute: 6 FLOPs per active parameter per token" in text
    assert "bands do not apply" not in text
    check = format_text(verdicts["gpu-01"])  # ccrhost check's text
    assert "  workload model: tree DP over 128 nodes per stage" in check and "CCR 5.006" in check
