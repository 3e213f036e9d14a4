"""GPU readings on this node: NVML first, nvidia-smi when NVML cannot load."""

from __future__ import annotations

import re

from ccrhost.model.gpus import GpuProbe, GpuReading  # noqa: F401  (GpuProbe: the probe's record)
from ccrhost import numbers
from ccrhost.probes import local
from ccrhost.probes.sections import split

NVSMI_FIELDS = (
    "index", "name", "uuid", "clocks.sm", "clocks.max.sm",
    "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
    "clocks_event_reasons.active",
)


class GpuFormatError(ValueError):
    """nvidia-smi printed a row its CSV format does not allow; the message quotes it."""


_HEX = re.compile(r"0x[0-9a-fA-F]{1,16}")


def _int(value: str, field: str, line: str) -> int | None:
    value = value.strip()
    if not value or value.startswith("[") or value in ("N/A", "Not Supported"):
        return None
    number = int(value, 16) if _HEX.fullmatch(value) else numbers.integer(value, 0)
    if number is None:
        raise GpuFormatError(f"line {line!r}: {field} {value!r} is not a number")
    return number


def parse_nvsmi_csv(lines: list[str]) -> list[GpuReading]:
    """``nvidia-smi --query-gpu=<NVSMI_FIELDS> --format=csv,noheader,nounits``."""
    gpus = []
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(NVSMI_FIELDS):
            raise GpuFormatError(f"line {line!r}: {len(cells)} fields, expected {len(NVSMI_FIELDS)}")
        n = {f: _int(c, f, line) for f, c in zip(NVSMI_FIELDS, cells) if f not in ("name", "uuid")}
        gpus.append(GpuReading(
            index=n["index"], name=cells[1], uuid=cells[2] or None,
            sm_clock_mhz=n["clocks.sm"], max_sm_clock_mhz=n["clocks.max.sm"],
            pcie_gen=n["pcie.link.gen.current"], pcie_gen_max=n["pcie.link.gen.max"],
            pcie_width=n["pcie.link.width.current"], pcie_width_max=n["pcie.link.width.max"],
            clock_reasons=n["clocks_event_reasons.active"],
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


FIELDS_NEW = ",".join(NVSMI_FIELDS)
# Drivers before 535 call the last field clocks_throttle_reasons.active.
FIELDS_OLD = FIELDS_NEW.replace("clocks_event_reasons.active", "clocks_throttle_reasons.active")
FORMAT = "--format=csv,noheader,nounits"

# A driver that stopped answering hangs nvidia-smi: `timeout` ends it (exit
# 124) so that one node's GPUs cannot stall the fleet's snapshot.
_NVSMI = "timeout -k 5 20 nvidia-smi"


def command(bound: bool = True) -> str:
    """The snippet; ``bound``: each nvidia-smi under `timeout` (the fleet's
    snapshot). ``ccrhost check`` runs it under :func:`local.run`, which
    kills the whole process group at the deadline: no `timeout` process
    per call there."""
    smi = _NVSMI if bound else "nvidia-smi"
    silent = "did not answer within 20 s (killed)" if bound else "failed and printed nothing"
    return (
        "if ! command -v nvidia-smi >/dev/null 2>&1; then echo '@@error'; echo 'nvidia-smi not found';"
        f" elif out=$({smi} --query-gpu={FIELDS_NEW} {FORMAT} 2>&1) ||"
        f" {{ [ $? -ne 124 ] && out=$({smi} --query-gpu={FIELDS_OLD} {FORMAT} 2>&1); }}; then"
        " echo '@@gpus'; echo \"$out\";"
        f" elif [ -z \"$out\" ]; then echo '@@error'; echo 'nvidia-smi {silent}';"
        " else echo '@@error'; echo \"$out\"; fi"
    )


COMMAND = command()


def parse_command_output(lines: list[str]) -> GpuProbe:
    """The snippet's output: ``@@gpus`` then CSV rows, or ``@@error`` then why."""
    sections = split(lines)
    if not sections or sections[0].tag == "error":
        why = " ".join(x.strip() for x in sections[0].lines).strip() if sections else ""
        return GpuProbe(error=why or "nvidia-smi failed")
    try:
        gpus = parse_nvsmi_csv([x for x in sections[0].lines if x.strip()])
    except GpuFormatError as exc:
        return GpuProbe(error=f"unexpected nvidia-smi --query-gpu output: {exc}")
    return GpuProbe(gpus)


def read_local(nvml=None, timeout: float = 20) -> GpuProbe:
    """Readings through pynvml, or through nvidia-smi when NVML cannot load;
    a hung nvidia-smi is killed after ``timeout`` s and is the probe's error."""
    try:
        if nvml is None:
            # nvmlInit() loads this library; where it cannot load, importing
            # pynvml (some 20 ms, on every `ccrhost check`) would only fail
            import ctypes

            ctypes.CDLL("libnvidia-ml.so.1")
            import pynvml as nvml
        return GpuProbe(read_nvml(nvml), source="nvml")
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        nvml_error = f"{type(exc).__name__}: {exc}"
    try:
        out = local.run(command(bound=False), timeout, "nvidia-smi --query-gpu")
    except local.ProbeTimeout as exc:
        return GpuProbe(error=f"NVML: {nvml_error}; nvidia-smi: {exc}")
    result = parse_command_output(out.splitlines())
    if result.error:
        result.error = f"NVML: {nvml_error}; nvidia-smi: {result.error}"
    return result
