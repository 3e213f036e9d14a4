"""Verdicts from readings: each fault gives its named reason; unknown is not bad."""

import pytest

from ccrhost.settings import validate_host
from ccrhost.model.gpus import GpuReading
from ccrhost.model.verdict import (
    Expectation,
    FAIL,
    OK,
    UNKNOWN,
    WARN,
    Policy,
    Port,
    Readings,
    evaluate,
    fleet_outliers,
    readings_from_facts,
)
from ccrhost.probes.gpu import GpuProbe
from ccrhost.probes.rdma import RdmaDevice, RdmaPort, RdmaReading

H100 = validate_host("n", {"verify_profile": "hgx-h100-8x400"}).expectation()  # the built-in platform file


def port(i, state="ACTIVE", phys="LinkUp", rate=400.0, width=16, gts=32.0):
    return Port(f"mlx5_{i}", 1, "Ethernet", state, phys, rate, gts, width, 32.0, 16)


def gpu(i, name="NVIDIA H100 80GB HBM3", clock=1980, reasons=0, gen=5):
    return GpuReading(i, name, f"GPU-{i}", clock, 1980, gen, 5, 16, 16, reasons)


def healthy(**changes):
    ports = [port(i) for i in range(8)]
    gpus = [gpu(i) for i in range(8)]
    return Readings(ports=changes.get("ports", ports), gpus=changes.get("gpus", gpus),
                    gpu_error=changes.get("gpu_error"))


def codes(verdict):
    return sorted(r.code for r in verdict.reasons)


def test_healthy_node_is_ok_at_its_expected_ccr():
    v = evaluate(healthy(), H100)
    assert v.status == OK and v.reasons == []
    assert v.ccr.ccr == pytest.approx(v.expected_ccr)
    assert v.exit_code == 0


def test_port_down_fails_and_names_the_port():
    ports = [port(i) for i in range(8)]
    ports[2] = port(2, state="DOWN", phys="Disabled")
    v = evaluate(healthy(ports=ports), H100)
    assert v.status == FAIL
    assert codes(v) == ["ccr_below_expected", "port_count", "port_down"]
    assert "port mlx5_2/1 is DOWN/Disabled" in v.summary()


def test_one_slow_port_sets_the_pace():
    ports = [port(i) for i in range(8)]
    ports[5] = port(5, rate=200.0)
    v = evaluate(healthy(ports=ports), H100)
    assert v.ccr.bandwidth_gbps == 8 * 200
    assert codes(v) == ["ccr_below_expected", "port_rate"]
    summed = evaluate(healthy(ports=ports), H100, Policy(bandwidth_model="sum"))
    assert summed.ccr.bandwidth_gbps == 7 * 400 + 200 and summed.ccr.model == "sum"


def test_nic_at_pcie_x8_counts_at_what_it_can_move():
    ports = [port(i) for i in range(8)]
    ports[6] = port(6, width=8)
    v = evaluate(healthy(ports=ports), H100)
    assert v.status == FAIL
    assert "nic_pcie_width" in codes(v)
    assert v.ccr.bandwidth_gbps == pytest.approx(8 * 32 * 128 / 130 * 8)


def test_missing_gpu_raises_ccr_but_the_count_fails_it():
    v = evaluate(healthy(gpus=[gpu(i) for i in range(7)]), H100)
    assert v.ccr.ccr > v.expected_ccr
    assert v.status == FAIL and codes(v) == ["gpu_count"]


def test_throttled_gpu_warns_and_scales_compute():
    gpus = [gpu(i) for i in range(8)]
    gpus[0] = gpu(0, clock=990, reasons=0x8)
    v = evaluate(healthy(gpus=gpus), H100)
    assert v.status == WARN and codes(v) == ["gpu_throttled"]
    assert v.ccr.tflops == pytest.approx(7 * 989.5 + 989.5 / 2)


def test_idle_is_not_throttling_and_idle_pcie_gen_only_warns():
    gpus = [gpu(i, clock=345, reasons=0x1, gen=1) for i in range(8)]
    v = evaluate(healthy(gpus=gpus), H100)
    assert v.status == WARN and set(codes(v)) == {"gpu_pcie_gen"}
    assert v.ccr.tflops == pytest.approx(8 * 989.5)


def test_unknown_gpu_model_is_unknown_not_a_default():
    v = evaluate(healthy(gpus=[gpu(i, name="NVIDIA H999") for i in range(8)]))
    assert v.status == UNKNOWN and v.ccr is None
    assert "'NVIDIA H999' is not in the peak-TFLOPS table; set verify_gpu_tflops" in v.summary()
    override = evaluate(healthy(gpus=[gpu(i, name="NVIDIA H999") for i in range(8)]),
                        policy=Policy(gpu_tflops={"bf16": 1500.0}))
    assert override.status == OK and override.ccr.tflops == 12000


def test_unreadable_gpus_are_unknown_not_fail():
    v = evaluate(healthy(gpus=[], gpu_error="nvidia-smi not found"), H100)
    assert v.status == UNKNOWN and codes(v) == ["gpu_unreadable"]
    assert v.exit_code == 3


def test_fail_outranks_unknown():
    ports = [port(i) for i in range(8)]
    ports[0] = port(0, state="DOWN", phys="Disabled")
    v = evaluate(healthy(ports=ports, gpus=[], gpu_error="NVML: driver not loaded"), H100)
    assert v.status == FAIL


def test_min_ccr_absolute():
    v = evaluate(healthy(), H100, Policy(min_ccr=2e-5))
    assert v.status == FAIL and codes(v) == ["ccr_low"]


def test_fleet_outlier():
    verdicts = {f"h{i}": evaluate(healthy()) for i in range(4)}
    ports = [port(i) for i in range(8)]
    ports[1] = port(1, rate=200.0)
    verdicts["slow"] = evaluate(healthy(ports=ports))
    out = fleet_outliers(verdicts, 0.1)
    assert list(out) == ["slow"] and "below the fleet median" in out["slow"].message


def test_readings_from_facts_excludes_storage_ports():
    rdma = RdmaReading({
        "mlx5_0": RdmaDevice(ports={1: RdmaPort("ACTIVE", 4, "LinkUp", 400.0, link_layer="Ethernet")}),
        "mlx5_bond_0": RdmaDevice(ports={1: RdmaPort("ACTIVE", 4, "LinkUp", 100.0, link_layer="Ethernet")}),
    })
    r = readings_from_facts(rdma, GpuProbe(), exclude=("mlx5_bond_*",))
    assert [p.device for p in r.ports] == ["mlx5_0"]


def test_an_active_port_whose_rate_was_not_read_is_unknown_and_enters_no_ccr():
    ports = [port(i) for i in range(8)]
    ports[5] = port(5, rate=None)
    for expect in (H100, Expectation()):  # with declared hardware and without
        v = evaluate(healthy(ports=ports), expect)
        assert v.status == UNKNOWN and v.ccr is None
        assert [(r.level, r.code) for r in v.reasons] == [(UNKNOWN, "port_rate_unreadable")]
        assert v.reasons[0].message.startswith("port mlx5_5/1 is ACTIVE but its rate was not read "
                                               "(/sys/class/infiniband/mlx5_5/ports/1/rate gave no value)")
    down = [port(i) for i in range(8)]
    down[5] = port(5, state="DOWN", phys="Disabled", rate=None)  # a port that is down carries nothing anyway
    assert "port_rate_unreadable" not in {r.code for r in evaluate(healthy(ports=down), H100).reasons}
