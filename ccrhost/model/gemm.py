"""GEMM throughput per GPU, measured with DCGM's ``dcgmproftester`` (field
1004, tensor pipe active), against the GPU's peak: the measured compute a
measured CCR pairs with a measured bandwidth (issue 50). Pure: the probe
(``ccrhost.probes.gemm``) fills :class:`GemmReading` from the tool's output.

Field 1004 runs ``cublasHgemm`` (FP16 in and out) with tensor-op math
(NVIDIA/DCGM ``common/CudaWorker/FieldWorkers.hpp``), so its peak is the
fp16 dense one of ccrhost/platforms/gpus.yaml, read through model/gpus.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.model.gpus import PeakUnknown, peak_tflops
from ccrhost.model.plain import plain
from ccrhost.model.status import FAIL, UNKNOWN, Reason

CHECK = "gemm"
TENSOR_FIELD = 1004
# The fields whose GEMM rate this module judges, and the precision of their peak.
PRECISION = {TENSOR_FIELD: "fp16"}


@dataclass(frozen=True)
class GemmPolicy:
    # No published floor exists for dcgmproftester's TFLOP/s. 0.4 is the lowest
    # tensor-active ratio DCGM's own validation of this load accepts
    # (NVIDIA/DCGM dcgmproftester/PhysicalGpu.cpp: limit 0.4 on compute
    # capability 8.6 and later, 0.5 before), taken as achieved/peak: a proxy,
    # to be calibrated per site from known-good nodes.
    min_fraction: float = 0.4
    duration_s: int = 30          # dcgmproftester's own default -d (Arguments.h)
    field_id: int = TENSOR_FIELD


@dataclass(frozen=True)
class GemmReading:
    """One run of dcgmproftester on a node: achieved TFLOP/s per DCGM GPU id
    (the ids ``-i`` takes, ``dcgmi discovery -l``), each the sum over the
    GPU's workers (MIG slices) of the median of their ticks."""
    tool: str | None                      # the binary run (dcgmproftester12), None when none was found
    version: str | None = None            # the DCGM release where known; the tool's --version is a constant
    field_id: int = TENSOR_FIELD
    tflops: dict[int, float] = field(default_factory=dict)
    ticks: dict[int, int] = field(default_factory=dict)   # report lines read per GPU
    format: str | None = None             # "fmt" (DCGM 3.2.5+) or "stream" (2.2.6 to 3.1.8)
    error: str | None = None              # why nothing usable was read (missing, hung, odd output)

    def to_dict(self) -> dict:
        return plain(self)


@dataclass(frozen=True)
class Peak:
    tflops: float
    source: str     # where the figure comes from, as a reason names it


def peaks(names: dict[int, str], precision: str = "fp16",
          override: dict | None = None) -> tuple[dict[int, Peak], list[Reason]]:
    """Each GPU's peak at ``precision`` ({GPU id: NVML name}), through
    model/gpus.py's table (``override``: the inventory's verify_gpu_tflops);
    a GPU with no figure is an UNKNOWN ``gemm_no_peak`` instead."""
    out: dict[int, Peak] = {}
    reasons: list[Reason] = []
    for gpu, name in sorted(names.items()):
        try:
            tflops, row = peak_tflops(name, precision, override)
        except PeakUnknown as exc:
            reasons.append(Reason(UNKNOWN, "gemm_no_peak", f"GEMM: GPU {gpu}: no peak to compare with: {exc}",
                                  gpu=gpu))
            continue
        source = (f"setting verify_gpu_tflops.{precision}" if row is None
                  else f"{row.model} {precision} dense, ccrhost/platforms/gpus.yaml: {row.source}")
        out[gpu] = Peak(float(tflops), source)
    return out, reasons


def check_gemm(reading: GemmReading, peaks: dict[int, Peak], min_fraction: float) -> list[Reason]:
    """The reasons against the GPUs of ``peaks`` (every GPU expected): a GPU
    below ``min_fraction`` of its peak FAILs ``gemm_slow``; a run that gave
    nothing, or no figure for an expected GPU, is UNKNOWN
    ``gemm_unreadable``; a GPU measured but with no peak UNKNOWN
    ``gemm_no_peak``. Empty: every expected GPU was measured at or above its floor."""
    tool = reading.tool or "dcgmproftester"
    if reading.error is not None:
        return [Reason(UNKNOWN, "gemm_unreadable", f"GEMM: {tool}: {reading.error}")]
    if not reading.tflops:
        return [Reason(UNKNOWN, "gemm_unreadable", f"GEMM: {tool} reported no GPU's throughput")]
    if not peaks:
        return [Reason(UNKNOWN, "gemm_no_peak", "GEMM: no GPU's peak is known: nothing to compare with")]
    precision = PRECISION.get(reading.field_id, "?")
    reasons: list[Reason] = []
    for gpu in sorted(set(peaks) | set(reading.tflops)):
        achieved, peak = reading.tflops.get(gpu), peaks.get(gpu)
        if achieved is None:
            reasons.append(Reason(UNKNOWN, "gemm_unreadable",
                                  f"GEMM: {tool} reported nothing for GPU {gpu}", gpu=gpu))
        elif peak is None:
            reasons.append(Reason(UNKNOWN, "gemm_no_peak",
                                  f"GEMM: GPU {gpu} achieved {achieved:.1f} TFLOP/s but no peak is known for it",
                                  gpu=gpu))
        elif achieved < min_fraction * peak.tflops:
            reasons.append(Reason(
                FAIL, "gemm_slow",
                f"GEMM ({tool} field {reading.field_id}, {precision}): GPU {gpu} achieved {achieved:.1f} TFLOP/s, "
                f"{achieved / peak.tflops:.2f} of its peak {peak.tflops:g} TFLOP/s ({peak.source}), "
                f"below {min_fraction:g}", gpu=gpu))
    return reasons


def measured_compute(reading) -> float | None:
    """The node's measured compute in TFLOP/s, the sum of its GPUs' from the
    stored GEMM result of ``reading`` (an ``ActiveReading``, the DCGM state
    file's): only a fresh OK or FAIL result with figures (a FAIL is a slow
    GPU measured, so its figure is true); None otherwise: stale, UNKNOWN,
    none stored."""
    from ccrhost.model.active import ActiveResult
    from ccrhost.model.status import OK

    data = reading.results.get(f"{CHECK}/{PRECISION[TENSOR_FIELD]}") if reading is not None else None
    if data is None or reading.error:
        return None
    try:
        result = ActiveResult.from_dict(data)
    except ValueError:
        return None
    tflops = (result.data or {}).get("tflops")
    if result.stale(reading.read_at) or result.status not in (OK, FAIL) or not isinstance(tflops, dict) or not tflops:
        return None
    values = [v for v in tflops.values() if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
    return round(sum(values), 3) if len(values) == len(tflops) else None
