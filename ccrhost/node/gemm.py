"""GEMM throughput on this node: dcgmproftester (field 1004) on every GPU
at once under its deadline, against each GPU's fp16 dense peak, judged
by :func:`ccrhost.model.gemm.check_gemm` and stored in the active-check
state file beside the DCGM diag and nvbandwidth (``ccrhost dcgm``), where
``ccrhost check`` and the prolog read it with its age.

The GPUs are read as for nvbandwidth (``nvidia-smi``: the name, and the
indexes, which are DCGM's GPU ids on a node without MIG).
"""

from __future__ import annotations

import time

from ccrhost.model import gemm
from ccrhost.model.active import ActiveResult
from ccrhost.model.status import OK, worst
from ccrhost.node import active
from ccrhost.probes import gemm as probe
from ccrhost.probes.dcgmi import gpu_ids_command, parse_gpu_ids

MODE = gemm.PRECISION[gemm.TENSOR_FIELD]   # "fp16": the precision its peak is read at
GPU_DEADLINE = 20
SLACK = 15   # beyond timeout's own limit and KILL: bash's start and the markers


def result_of(reading: gemm.GemmReading, names: dict[int, str], seconds: int, settings,
              tail: str = "", clock=time.time) -> ActiveResult:
    """A run's reading to the stored result: value the lowest GPU's TFLOP/s,
    data every GPU's (``{"tflops": {"0": 612.3, ...}, "seconds": 30, "tool": ...}``)."""
    peaks, unknown = gemm.peaks(names, MODE, settings.verify_gpu_tflops)
    # the run's own reasons first; a GPU with no peak said once: by check_gemm when it was measured
    reasons = gemm.check_gemm(reading, peaks, settings.verify_gemm_min_fraction)
    reasons += [r for r in unknown if r.gpu not in reading.tflops]
    status = worst(r.level for r in reasons)
    tool = reading.tool or "dcgmproftester"
    lowest = min(reading.tflops.items(), key=lambda kv: kv[1]) if reading.tflops else None
    if status == OK:
        low_gpu, low = lowest
        message = (f"GEMM ({tool} field {reading.field_id}, {MODE}, {seconds} s): {len(reading.tflops)} GPU(s) at or "
                   f"above {settings.verify_gemm_min_fraction:g} of their peak; lowest GPU {low_gpu} {low:.1f} "
                   f"TFLOP/s ({low / peaks[low_gpu].tflops:.2f} of {peaks[low_gpu].tflops:g})")
    else:
        message = "; ".join(r.message for r in reasons)
    data = {"tflops": {str(g): v for g, v in sorted(reading.tflops.items())}, "seconds": int(seconds),
            "tool": reading.tool} if reading.tflops else None
    return ActiveResult(gemm.CHECK, MODE, status, reasons[0].code if reasons else None, message, clock(),
                        settings.verify_dcgm_valid_for, lowest[1] if lowest else None, 1, tail,
                        tuple(r.to_dict() for r in reasons), data)


def run(settings, seconds: int | None = None, run_tool=None, clock=time.time) -> ActiveResult:
    """One run of ``seconds`` (default verify_gemm_seconds) to its result.
    ``run_tool(argv, deadline, env) -> ToolRun`` is for tests."""
    run_tool = run_tool or active.run_tool
    seconds = int(seconds or settings.verify_gemm_seconds)
    name = (run_tool(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], GPU_DEADLINE, None)
            .output.strip().splitlines() or [""])[0].strip()
    gpus = parse_gpu_ids(run_tool(gpu_ids_command(), GPU_DEADLINE, None).output)
    names = {i: name for i in gpus} if name else {}
    script = probe.run_script(seconds, sorted(gpus) or None)
    tool = run_tool(["bash", "-c", script], seconds + probe.GRACE_S + 5 + SLACK, None)
    if tool.missing or tool.timed_out:
        why = tool.missing or f"no result before its deadline ({seconds + probe.GRACE_S + 5 + SLACK} s; killed)"
        reading = gemm.GemmReading(None, error=why)
    else:
        reading = probe.parse_run_script(tool.output.splitlines())
    return result_of(reading, names, seconds, settings, tool.tail, clock)


def run_and_store(settings, seconds: int | None = None, run_tool=None, clock=time.time) -> ActiveResult:
    result = run(settings, seconds, run_tool, clock)
    active.store(settings.verify_dcgm_state, [result])
    return result

