"""The CCR model: units, the CCR guide's factor of 1000, beta, bandwidth models."""

import pytest

from ccrhost.model import ccr, ports, step, workload
from ccrhost.model import gpus as gpu_peaks


def test_worked_example_h100_sxm_8x400():
    # README example: 8 x H100 SXM at 989 TFLOPS bf16 dense, 8 x 400 Gb/s.
    value = ccr.ccr(8 * 400, 8 * 989, beta=4)
    assert value == pytest.approx(400e9 / (4 * 7912e12))  # 400 GB/s over 4 B/FLOP x 7.912 PFLOP/s
    assert value == pytest.approx(1.2639e-5, rel=1e-4)
    # the CCR guide's pseudo-code divides GB/s by TFLOPS: 1000x ours
    assert ccr.guide_ccr(8 * 400, 8 * 989) == pytest.approx(1000 * value)


def test_per_gpu_and_per_node_agree():
    assert ccr.ccr(400, 989) == pytest.approx(ccr.ccr(3200, 7912))


def test_bandwidth_models():
    rates = [400.0] * 7 + [200.0]
    assert ccr.node_bandwidth_gbps(rates, "bottleneck") == 8 * 200
    assert ccr.node_bandwidth_gbps(rates, "sum") == 7 * 400 + 200
    assert ccr.node_bandwidth_gbps([], "bottleneck") == 0
    with pytest.raises(ValueError, match="bandwidth model"):
        ccr.node_bandwidth_gbps(rates, "mean")


def test_effective_rate_is_capped_by_pcie():
    assert ports.effective_gbps(400, 252.06) == 252.06
    assert ports.effective_gbps(400, 504.1) == 400
    assert ports.effective_gbps(400, None) == 400


def test_bands_only_with_a_workload():
    seed = ccr.compute([400] * 8, 7916, beta=4)
    assert seed.band is None and seed.workload is None
    # 64 GPUs = 8 nodes, 4096 tokens; model v3's defaults: NCCL's ring over the 64 ranks and fp32
    # gradients (no framework named): 2 x 63/64 x 4 B = 7.875 B against 6 x 8 x 4096 FLOP per parameter;
    # CCR = 400e9 x 196608 / (7.875 x 7.916e15) = 1.2616 (v2, tree with 2 B: 2.838; the old per-GPU beta: 0.315)
    node = step.node_model(workload.WorkloadSpec(4096, 64), 8, 3200, 7916)
    work = ccr.from_workload(node)
    assert work.ccr == pytest.approx(400e9 * 6 * 8 * 4096 / (7.875 * 7916e12)) == pytest.approx(1.2616, rel=1e-4)
    assert work.band == "balanced" and work.workload["nodes"] == 8
    # the guide's literal beta = 4 figure stays in the result, labelled as such
    assert work.workload["literal_beta_ccr"] == pytest.approx(seed.ccr)
    assert ccr.band(1.0) == "balanced" and ccr.band(2.5) == "compute-underused" and ccr.band(0.4) == "bandwidth-bound"


@pytest.mark.parametrize("name, bf16", [
    ("NVIDIA H100 80GB HBM3", 989.5), ("NVIDIA H100 PCIe", 756), ("NVIDIA H100 NVL", 835),
    ("NVIDIA H200 141GB HBM3e", 989.5), ("NVIDIA A100-SXM4-80GB", 312), ("NVIDIA A100-PCIE-40GB", 312),
    ("NVIDIA B200", 2250), ("NVIDIA GB200", 2500), ("NVIDIA L40S", 362), ("AMD Instinct MI300X", 1307.4),
])
def test_peak_table_by_nvml_name(name, bf16):
    row = gpu_peaks.lookup(name)
    assert row is not None and row.tflops["bf16"] == bf16 and row.source


def test_unknown_gpu_is_not_defaulted():
    assert gpu_peaks.lookup("NVIDIA H999") is None
