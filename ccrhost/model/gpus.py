"""GPUs: what a GPU reading holds, and peak dense TFLOPS per GPU model and precision, keyed by the names NVML
(``nvmlDeviceGetName``, ``nvidia-smi --query-gpu=name``) reports.

Tensor-core figures are the datasheets' "with sparsity" numbers halved.
fp64 is the FP64 tensor-core rate where the part has one. ``None`` means
the datasheet gives no dense figure for that precision.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.model.plain import plain

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


class PeakUnknown(LookupError):
    """No peak figure: ``code`` is ``gpu_unknown_model`` or ``gpu_no_precision``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def peak_tflops(name: str, precision: str, override: dict | None = None) -> tuple[float, GpuPeak | None]:
    """Peak dense TFLOPS of one GPU at ``precision``, and the table row used.

    ``name`` is an NVML name or a table model (``H100 SXM``); ``override``
    (the inventory's ``verify_gpu_tflops``) wins over the table. Raises
    :class:`PeakUnknown` when neither has a figure.
    """
    if override and override.get(precision):
        return override[precision], None
    row = lookup(name) or next((r for r in TABLE if r.model.lower() == name.strip().lower()), None)
    if row is None:
        raise PeakUnknown("gpu_unknown_model", f"model {name!r} is not in the peak-TFLOPS table")
    peak = row.tflops.get(precision)
    if peak is None:
        raise PeakUnknown("gpu_no_precision", f"{row.model} has no dense {precision} figure")
    return peak, row


# nvmlClocksEventReason* bits (nvml.h); GpuIdle alone is not throttling.
REASON_BITS = {
    0x1: "GpuIdle", 0x2: "ApplicationsClocksSetting", 0x4: "SwPowerCap", 0x8: "HwSlowdown",
    0x10: "SyncBoost", 0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str
    uuid: str | None = None
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    clock_reasons: int | None = None

    def to_dict(self) -> dict:
        return plain(self)

    @property
    def throttle_reasons(self) -> list[str]:
        mask = (self.clock_reasons or 0) & THROTTLE_MASK
        return [name for bit, name in REASON_BITS.items() if mask & bit]

    @property
    def clock_fraction(self) -> float:
        """current/max SM clock when throttled for a reason other than idle, else 1."""
        if self.throttle_reasons and self.sm_clock_mhz and self.max_sm_clock_mhz:
            return min(1.0, self.sm_clock_mhz / self.max_sm_clock_mhz)
        return 1.0


@dataclass
class GpuProbe:
    """What the GPU probe read on a node (probes/gpu.py)."""
    gpus: list[GpuReading] = field(default_factory=list)  # NVML, else nvidia-smi --query-gpu
    error: str | None = None      # why no GPU could be read (tool missing, driver down, odd output)
    source: str = "nvidia-smi"    # "nvml" | "nvidia-smi"
