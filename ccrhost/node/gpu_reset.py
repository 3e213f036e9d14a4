"""``ccrhost reset-gpu``: reset one GPU (``nvidia-smi -r -i N``) and keep
when it was reset, so that the checks after it judge that GPU only on what
the driver logged since (an XID from before the reset is what the reset
repaired; judging it again would reset the GPU at every run of
``ccrhost slurm remediate`` until the line aged past the lookback).

The times are kept beside the GPU counters' state, in
``<verify_gpu_state>.resets`` (``{"boot_id", "resets": {index: epoch}}``):
under /run by default, so a boot starts without any, as it starts with a
kernel log of its own. A file of another boot is no reset of this one.
"""

from __future__ import annotations

import json
import subprocess
import time

RESETS_SUFFIX = ".resets"
RESET_TIMEOUT = 120  # s: nvidia-smi -r waits for the GPU's reset; a driver that never answers is not waited for


def resets_path(gpu_state: str) -> str:
    return gpu_state + RESETS_SUFFIX


def _stored(path: str, boot: str | None) -> dict[str, float]:
    """Index (as text) -> reset time, of boot ``boot``; nothing else."""
    from ccrhost.node.stored import read_stored

    data, _ = read_stored(path)
    if not isinstance(data, dict) or boot is None or data.get("boot_id") != boot:
        return {}
    resets = data.get("resets")
    if not isinstance(resets, dict):
        return {}
    return {k: float(v) for k, v in resets.items()
            if isinstance(k, str) and k.isdigit() and isinstance(v, (int, float)) and not isinstance(v, bool)}


def reset_gpu(gpu_state: str, index: int, run=subprocess.run, now=None, boot: str | None = None) -> tuple[int, str]:
    """Reset GPU ``index``; on success keep its time. (exit code, output)."""
    from ccrhost.node.stored import boot_id
    from ccrhost.output import write_state

    args = ["nvidia-smi", "-r", "-i", str(index)]
    try:
        out = run(args, capture_output=True, text=True, timeout=RESET_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 255, f"{' '.join(args)}: {exc}"
    text = (out.stdout + out.stderr).strip()
    if out.returncode != 0:
        return out.returncode, text
    now = time.time() if now is None else now
    boot = boot_id() if boot is None else boot
    path = resets_path(gpu_state)
    resets = {**_stored(path, boot), str(index): now}
    try:
        write_state(path, json.dumps({"boot_id": boot, "resets": resets}, sort_keys=True) + "\n")
    except OSError as exc:  # the GPU was reset; the checks will judge its old lines until they age out
        text += f"\ncannot keep the reset's time in {path} ({exc.strerror or exc})"
    return 0, text


def reset_ages(gpu_state: str, gpus, boot: str | None, now: float) -> dict[str, float]:
    """PCI key -> seconds since that GPU was reset this boot, for the GPUs
    ``gpus`` (GpuHealth: index and PCI address) that were."""
    from ccrhost.model.gpu_health import pci_key

    stored = _stored(resets_path(gpu_state), boot)
    out = {}
    for g in gpus:
        key = pci_key(g.pci)
        if key and str(g.index) in stored:
            out[key] = max(0.0, now - stored[str(g.index)])
    return out
