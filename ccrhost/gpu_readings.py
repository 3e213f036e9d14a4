"""GPU readings, from NVML or nvidia-smi, in one shape for the evaluation."""

from __future__ import annotations

from dataclasses import asdict, dataclass

NVSMI_FIELDS = (
    "index", "name", "uuid", "clocks.sm", "clocks.max.sm",
    "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
    "clocks_event_reasons.active",
)

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
        return asdict(self)

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


class GpuFormatError(ValueError):
    pass


def _int(value: str) -> int | None:
    value = value.strip()
    if not value or value.startswith("[") or value in ("N/A", "Not Supported"):
        return None
    try:
        return int(value, 0)
    except ValueError:
        raise GpuFormatError(f"expected a number, got {value!r}") from None


def parse_nvsmi_csv(lines: list[str]) -> list[GpuReading]:
    """``nvidia-smi --query-gpu=<NVSMI_FIELDS> --format=csv,noheader,nounits``."""
    gpus = []
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(NVSMI_FIELDS):
            raise GpuFormatError(f"expected {len(NVSMI_FIELDS)} fields, got {line!r}")
        gpus.append(GpuReading(
            index=_int(cells[0]), name=cells[1], uuid=cells[2] or None,
            sm_clock_mhz=_int(cells[3]), max_sm_clock_mhz=_int(cells[4]),
            pcie_gen=_int(cells[5]), pcie_gen_max=_int(cells[6]),
            pcie_width=_int(cells[7]), pcie_width_max=_int(cells[8]),
            clock_reasons=_int(cells[9]),
        ))
    return gpus


def read_nvml(nvml) -> list[GpuReading]:
    """Readings through a loaded ``pynvml`` module (passed in so tests can fake it)."""
    nvml.nvmlInit()
    try:
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            name = nvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            uuid = nvml.nvmlDeviceGetUUID(h)
            gpus.append(GpuReading(
                index=i, name=name, uuid=uuid.decode() if isinstance(uuid, bytes) else uuid,
                sm_clock_mhz=nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM),
                max_sm_clock_mhz=nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM),
                pcie_gen=nvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
                pcie_gen_max=nvml.nvmlDeviceGetMaxPcieLinkGeneration(h),
                pcie_width=nvml.nvmlDeviceGetCurrPcieLinkWidth(h),
                pcie_width_max=nvml.nvmlDeviceGetMaxPcieLinkWidth(h),
                clock_reasons=nvml.nvmlDeviceGetCurrentClocksEventReasons(h),
            ))
        return gpus
    finally:
        nvml.nvmlShutdown()
