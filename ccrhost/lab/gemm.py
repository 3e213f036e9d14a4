"""The lab's GEMM (shims/dcgmproftester12): the GPUs' full speed from the
peak table, and the fault that slows one GPU under sustained load."""

from __future__ import annotations

FAULTS = {
    "gemm_throttle": "INDEX[:AFTER]: GPU INDEX runs dcgmproftester's GEMM at full speed for the first AFTER "
                     "seconds of a run (default 60), then at 30% of it: a short run passes, a soak fails "
                     "(shims/dcgmproftester12)",
}
LIVE = tuple(FAULTS)


def peak(model: str) -> float | None:
    """The fp16 dense peak (TFLOP/s) of an NVML GPU name, from ccrhost/platforms/gpus.yaml
    as the checks read it; None for a model the table lacks (the shim then reports nothing)."""
    from ccrhost.model.gpus import PeakUnknown, peak_tflops

    try:
        return float(peak_tflops(model, "fp16")[0])
    except PeakUnknown:
        return None


def refused(faults, gpu_count: int) -> str | None:
    for f in faults:
        if f.kind != "gemm_throttle":
            continue
        index, _, after = (f.value or "").partition(":")
        if not index.isdigit() or int(index) >= gpu_count or (after and not after.isdigit()):
            return f"fault gemm_throttle={f.value}: need INDEX[:AFTER] with a GPU 0..{gpu_count - 1} and whole seconds"
    return None
