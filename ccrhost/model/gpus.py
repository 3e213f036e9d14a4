"""GPUs: what a GPU reading holds, and peak dense TFLOPS per GPU model and precision, keyed by the names NVML
(``nvmlDeviceGetName``, ``nvidia-smi --query-gpu=name``) reports: the table
is data, ccrhost/platforms/gpus.yaml, with each row's source. ``None``
means the datasheet gives no dense figure for that precision.
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


def _row(entry: dict) -> GpuPeak:
    return GpuPeak(entry["model"], tuple(entry["names"]), dict(zip(PRECISIONS, entry["tflops"])), entry["source"])


_TABLE: tuple[GpuPeak, ...] | None = None


def table() -> tuple[GpuPeak, ...]:
    """The peak table of ccrhost/platforms/gpus.yaml, read once (model/platform.py reads the file)."""
    global _TABLE, _BY_NAME
    if _TABLE is None:
        from ccrhost.model.platform import GPUS, builtin_data

        _TABLE = tuple(_row(e) for e in builtin_data()[GPUS])
        _BY_NAME = {name: peak for peak in _TABLE for name in peak.names}
    return _TABLE


_BY_NAME: dict[str, GpuPeak] = {}


def lookup(nvml_name: str) -> GpuPeak | None:
    """The table row for an NVML device name, or None when unknown."""
    table()
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
    row = lookup(name) or next((r for r in table() if r.model.lower() == name.strip().lower()), None)
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
