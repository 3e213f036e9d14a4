"""GPU readings from nvidia-smi CSV and from NVML (a fake pynvml module)."""

import types

import pytest

from ccrhost.probes import gpu as gpu_probe
from ccrhost.probes.gpu import GpuFormatError, GpuProbe, parse_nvsmi_csv, read_nvml


def test_nvidia_smi_csv():
    lines = ["0, NVIDIA H100 80GB HBM3, GPU-aaaa, 1980, 1980, 5, 5, 16, 16, 0x0000000000000000",
             "1, NVIDIA H100 80GB HBM3, GPU-bbbb, 1155, 1980, 5, 5, 16, 16, 0x0000000000000008",
             "2, NVIDIA H100 80GB HBM3, GPU-cccc, 345, 1980, 1, 5, 16, 16, 0x0000000000000001"]
    gpus = parse_nvsmi_csv(lines)
    assert [g.index for g in gpus] == [0, 1, 2]
    assert gpus[1].throttle_reasons == ["HwSlowdown"]
    assert gpus[1].clock_fraction == pytest.approx(1155 / 1980)
    assert gpus[2].throttle_reasons == [] and gpus[2].clock_fraction == 1.0


def test_not_available_values():
    g = parse_nvsmi_csv(["0, NVIDIA L40S, GPU-x, [N/A], [N/A], 4, 4, 16, 16, [Not Supported]"])[0]
    assert g.sm_clock_mhz is None and g.clock_reasons is None


def test_garbled_csv():
    with pytest.raises(GpuFormatError):
        parse_nvsmi_csv(["0, NVIDIA H100"])
    assert gpu_probe.parse_command_output(["@@gpus", "0, NVIDIA H100"]).error.startswith("unexpected nvidia-smi")


def test_nvidia_smi_missing_is_an_error_not_a_crash():
    assert gpu_probe.parse_command_output(["@@error", "nvidia-smi not found"]) == GpuProbe(error="nvidia-smi not found")


def fake_pynvml(count=2, reasons=0x8):
    calls = []
    m = types.SimpleNamespace(NVML_CLOCK_SM=1)
    m.nvmlInit = lambda: calls.append("init")
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlDeviceGetCount = lambda: count
    m.nvmlDeviceGetHandleByIndex = lambda i: ("h", i)
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200 141GB HBM3e"  # older bindings return bytes
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h[1]}"
    m.nvmlDeviceGetClockInfo = lambda h, clock: 1500 if clock == 1 else 0
    m.nvmlDeviceGetMaxClockInfo = lambda h, clock: 1980 if clock == 1 else 0
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: reasons
    return m, calls


def test_nvml_path_with_fake_module():
    nvml, calls = fake_pynvml()
    gpus = read_nvml(nvml)
    assert calls == ["init", "shutdown"]
    assert [(g.index, g.name, g.uuid, g.sm_clock_mhz, g.max_sm_clock_mhz) for g in gpus] == [
        (0, "NVIDIA H200 141GB HBM3e", "GPU-0", 1500, 1980), (1, "NVIDIA H200 141GB HBM3e", "GPU-1", 1500, 1980)]
    assert gpus[0].throttle_reasons == ["HwSlowdown"]


def test_local_probe_prefers_nvml_and_falls_back():
    nvml, _ = fake_pynvml(count=1)
    assert gpu_probe.read_local(nvml).source == "nvml"

    class Broken:
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    result = gpu_probe.read_local(Broken())
    assert result.source == "nvidia-smi"
    assert result.error.startswith("NVML: RuntimeError: NVML Shared Library Not Found; nvidia-smi:")
