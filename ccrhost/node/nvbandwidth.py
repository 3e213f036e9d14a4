"""nvbandwidth on this node: run the testcases under a deadline, name the
GPUs, judge, store (the active-check state file, beside the DCGM diag).

Judged by :func:`ccrhost.model.nvbandwidth.judge`, the one verdict; the
stored result enters the node's readings as the diag's does.
"""

from __future__ import annotations

import time

from ccrhost.model import nvbandwidth as nvb
from ccrhost.model.active import ActiveResult
from ccrhost.model.status import UNKNOWN, Reason
from ccrhost.node import active
from ccrhost.probes.dcgmi import gpu_ids_command, parse_gpu_ids
from ccrhost.probes.nvbandwidth import NvbandwidthFormatError, command, parse

MODE = "copy engine"
GPU_DEADLINE = 20


def run(settings, run_tool=None, clock=time.time) -> ActiveResult:
    run_tool = run_tool or active.run_tool
    names = run_tool(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], GPU_DEADLINE, None).output
    gpu_name = (names.strip().splitlines() or [None])[0]
    gpus = parse_gpu_ids(run_tool(gpu_ids_command(), GPU_DEADLINE, None).output)
    tool = run_tool(command(settings.verify_nvbandwidth_binary, nvb.TESTCASES), settings.verify_nvbandwidth_timeout,
                    None)
    if tool.missing:
        reasons = [Reason(UNKNOWN, "nvbandwidth_failed", f"nvbandwidth: {tool.missing}")]
    elif tool.timed_out:
        reasons = [Reason(UNKNOWN, "nvbandwidth_failed",
                          f"nvbandwidth: no result before its deadline ({settings.verify_nvbandwidth_timeout} s; killed)")]
    else:
        try:
            matrices = parse(tool.output)
        except NvbandwidthFormatError as exc:
            reasons = [Reason(UNKNOWN, "nvbandwidth_failed", f"nvbandwidth (exit {tool.rc}): {exc}")]
        else:
            status, reasons, summary = nvb.judge(matrices, gpu_name, gpus, settings.verify_nvbandwidth_min_gbs,
                                                platform=settings.platform())
            # each testcase's slowest GPU (or pair), kept for `ccrhost baseline calibrate`; never judged again
            mins = {tc: min(matrices[tc].values.values()) for tc in nvb.TESTCASES
                    if tc in matrices and matrices[tc].values}
            return ActiveResult(nvb.CHECK, MODE, status, reasons[0].code if reasons else None, summary, clock(),
                                settings.verify_dcgm_valid_for, None, 1, tool.tail,
                                tuple(r.to_dict() for r in reasons), {"min_gbs": mins})
    return ActiveResult(nvb.CHECK, MODE, UNKNOWN, reasons[0].code, reasons[0].message, clock(),
                        settings.verify_dcgm_valid_for, None, 1, tool.tail, tuple(r.to_dict() for r in reasons))


def run_and_store(settings, run_tool=None, clock=time.time) -> ActiveResult:
    result = run(settings, run_tool, clock)
    active.store(settings.verify_dcgm_state, [result])
    return result
