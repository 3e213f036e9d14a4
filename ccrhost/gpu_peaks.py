"""Peak dense TFLOPS per GPU model and precision, keyed by the names NVML
(``nvmlDeviceGetName``, ``nvidia-smi --query-gpu=name``) reports.

Tensor-core figures are the datasheets' "with sparsity" numbers halved.
fp64 is the FP64 tensor-core rate where the part has one. ``None`` means
the datasheet gives no dense figure for that precision.
"""

from __future__ import annotations

from dataclasses import dataclass

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class GpuPeak:
    model: str
    names: tuple[str, ...]  # as NVML reports them
    tflops: dict[str, float | None]
    source: str


def _p(fp64, fp32, tf32, bf16, fp16, fp8):
    return dict(zip(PRECISIONS, (fp64, fp32, tf32, bf16, fp16, fp8)))


TABLE: tuple[GpuPeak, ...] = (
    GpuPeak("A100 SXM", ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "A100-SXM4-40GB", "A100-SXM4-80GB"),
            _p(19.5, 19.5, 156, 312, 312, None),
            "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"),
    GpuPeak("A100 PCIe", ("NVIDIA A100-PCIE-40GB", "NVIDIA A100-PCIE-80GB", "NVIDIA A100 80GB PCIe"),
            _p(19.5, 19.5, 156, 312, 312, None),
            "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (PCIe column)"),
    # NVML names the SXM part by its memory: no "SXM" in the string.
    GpuPeak("H100 SXM", ("NVIDIA H100 80GB HBM3",),
            _p(67, 67, 494.5, 989.5, 989.5, 1979),
            "nvidia.com/en-us/data-center/h100 (SXM column)"),
    GpuPeak("H100 PCIe", ("NVIDIA H100 PCIe",),
            _p(51, 51, 378, 756, 756, 1513),
            "nvidia.com/en-us/data-center/h100 (PCIe column)"),
    GpuPeak("H100 NVL", ("NVIDIA H100 NVL",),
            _p(60, 60, 417.5, 835, 835, 1670),
            "nvidia.com/en-us/data-center/h100 (NVL column); torchtitan get_peak_flops bf16 835e12"),
    GpuPeak("H200 SXM", ("NVIDIA H200 141GB HBM3e", "NVIDIA H200"),
            _p(67, 67, 494.5, 989.5, 989.5, 1979),
            "nvidia.com/en-us/data-center/h200 (same silicon as H100 SXM)"),
    GpuPeak("B200", ("NVIDIA B200", "NVIDIA B200 180GB HBM3e"),
            _p(37, 75, 1100, 2250, 2250, 4500),
            "nvidia.com HGX B200 specifications; torchtitan 2.25e15"),
    GpuPeak("GB200", ("NVIDIA GB200",),
            _p(40, 80, 1250, 2500, 2500, 5000),
            "nvidia.com/en-us/data-center/gb200-nvl72 (per GPU)"),
    GpuPeak("L40S", ("NVIDIA L40S",),
            _p(None, 91.6, 183, 362, 362, 733),
            "l40s-datasheet-28413"),
    GpuPeak("MI300X", ("AMD Instinct MI300X",),
            _p(163.4, 163.4, 653.7, 1307.4, 1307.4, 2614.9),
            "amd.com/en/products/accelerators/instinct/mi300/mi300x.html"),
)

_BY_NAME = {name: peak for peak in TABLE for name in peak.names}


def lookup(nvml_name: str) -> GpuPeak | None:
    """The table row for an NVML device name, or None when unknown."""
    return _BY_NAME.get(nvml_name.strip())


def known_names() -> list[str]:
    return sorted(_BY_NAME)
