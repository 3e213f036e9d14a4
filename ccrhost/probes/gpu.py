"""GPU readings on this node: NVML first, nvidia-smi when NVML cannot load."""

from __future__ import annotations

import subprocess

from ccrhost.gpu_readings import NVSMI_FIELDS, GpuFormatError, parse_nvsmi_csv, read_nvml

FIELDS_NEW = ",".join(NVSMI_FIELDS)
# Drivers before 535 call the last field clocks_throttle_reasons.active.
FIELDS_OLD = FIELDS_NEW.replace("clocks_event_reasons.active", "clocks_throttle_reasons.active")
FORMAT = "--format=csv,noheader,nounits"

COMMAND = (
    "if ! command -v nvidia-smi >/dev/null 2>&1; then echo '@@error'; echo 'nvidia-smi not found';"
    f" elif out=$(nvidia-smi --query-gpu={FIELDS_NEW} {FORMAT} 2>&1) ||"
    f" out=$(nvidia-smi --query-gpu={FIELDS_OLD} {FORMAT} 2>&1); then echo '@@gpus'; echo \"$out\";"
    " else echo '@@error'; echo \"$out\"; fi"
)


def parse_command_output(lines: list[str]) -> dict:
    """``{"gpus": [...], "error": None}`` or ``{"gpus": [], "error": why}``."""
    if lines and lines[0] == "@@error":
        return {"gpus": [], "error": " ".join(x.strip() for x in lines[1:]).strip() or "nvidia-smi failed"}
    try:
        gpus = parse_nvsmi_csv([x for x in lines[1:] if x.strip()])
    except GpuFormatError as exc:
        return {"gpus": [], "error": f"unexpected nvidia-smi output: {exc}"}
    return {"gpus": [g.to_dict() for g in gpus], "error": None}


def read_local(nvml=None) -> dict:
    """Readings through pynvml, or through nvidia-smi when NVML cannot load."""
    try:
        if nvml is None:
            import pynvml as nvml
        return {"gpus": [g.to_dict() for g in read_nvml(nvml)], "error": None, "source": "nvml"}
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        nvml_error = f"{type(exc).__name__}: {exc}"
    out = subprocess.run(["sh", "-c", COMMAND], capture_output=True, text=True, timeout=20)
    result = parse_command_output(out.stdout.splitlines())
    result["source"] = "nvidia-smi"
    if result["error"]:
        result["error"] = f"NVML: {nvml_error}; nvidia-smi: {result['error']}"
    return result
