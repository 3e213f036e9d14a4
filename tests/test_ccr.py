"""The CCR model: units, the seed's factor of 1000, beta, bandwidth models."""

import pytest

from ccrhost.model import ccr, ports
from ccrhost.model import gpus as gpu_peaks


def test_worked_example_h100_sxm_8x400():
    # README example: 8 x H100 SXM at 989 TFLOPS bf16 dense, 8 x 400 Gb/s.
    value = ccr.ccr(8 * 400, 8 * 989, beta=4)
    assert value == pytest.approx(400e9 / (4 * 7912e12))  # 400 GB/s over 4 B/FLOP x 7.912 PFLOP/s
    assert value == pytest.approx(1.2639e-5, rel=1e-4)
    # the seed's pseudo-code divides GB/s by TFLOPS: 1000x ours
    assert ccr.seed_ccr(8 * 400, 8 * 989) == pytest.approx(1000 * value)


def test_per_gpu_and_per_node_agree():
    assert ccr.ccr(400, 989) == pytest.approx(ccr.ccr(3200, 7912))


def test_beta_from_workload():
    # 2 bytes/param (bf16 grads), 4096 tokens per GPU step, DP 64
    beta = ccr.beta_from_workload(2, 4096, 64)
    assert beta == pytest.approx(2 * 2 * 63 / 64 / (6 * 4096))
    assert ccr.beta_from_workload(2, 4096, 1) == 0  # no data parallelism, nothing to reduce
    with pytest.raises(ValueError):
        ccr.beta_from_workload(0, 4096, 8)


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
    assert seed.band is None
    work = ccr.compute([400] * 8, 7916, beta=ccr.beta_from_workload(2, 4096, 64), beta_from_workload_given=True)
    assert work.band == "bandwidth-bound"
    assert ccr.band(1.0) == "balanced" and ccr.band(2.5) == "compute-underused"


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
