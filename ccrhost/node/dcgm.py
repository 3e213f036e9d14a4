"""DCGM diagnostics on this node: ask the host engine, run the level, judge, store.

The host engine is asked first (``dcgmi discovery -l``) under its own
deadline: one that does not answer is UNKNOWN and the diag is not started
(an aborted diag is what leaves an engine hung). The diag runs under its
level's deadline through the generic runner (process group killed), is
judged by :func:`ccrhost.model.dcgm.judge_diag` (the one verdict), and
stored with its time and validity in the node's active-check state file,
where ``ccrhost check`` and the prolog read it with its age.
"""

from __future__ import annotations

import time

from ccrhost.model.active import ActiveReading, ActiveResult
from ccrhost.model.dcgm import CHECK, ToolAnswer, engine_answered, judge_diag, mode
from ccrhost.node import active
from ccrhost.probes.dcgmi import DcgmiFormatError, diag_command, engine_command, gpu_ids_command, parse_diag, \
    parse_gpu_ids

GPU_IDS_DEADLINE = 20


def _answer(tool) -> ToolAnswer:
    return ToolAnswer(tool.rc, tool.output, tool.timed_out, tool.missing)


def deadline(settings, level: int) -> float:
    from ccrhost.model.dcgm import DEADLINES

    return float((settings.verify_dcgm_timeouts or {}).get(level) or DEADLINES[level])


def result_of(engine: ToolAnswer, gpus: dict, diag: ToolAnswer | None, level: int, settings,
              clock=time.time) -> ActiveResult:
    """A run's parts (the engine's answer, the GPUs' names, the diag's
    answer, None when not started) to the stored result, by the one verdict."""
    limit = deadline(settings, level)
    parsed = None
    if diag is not None and not diag.timed_out and not diag.missing:
        try:
            parsed = parse_diag(diag.output)
        except DcgmiFormatError as exc:
            parsed = str(exc)
    status, reasons, summary = judge_diag(engine, diag, parsed, level, gpus, settings.verify_dcgm_exclude,
                                          settings.verify_dcgm_engine_timeout, limit)
    tail = (diag or engine).output
    return ActiveResult(CHECK, mode(level), status, reasons[0].code if reasons else None, summary, clock(),
                        settings.verify_dcgm_valid_for, None, 1, "\n".join(tail.splitlines()[-active.TAIL_LINES:]),
                        tuple(r.to_dict() for r in reasons))


def run_level(settings, level: int, run=None, clock=time.time) -> ActiveResult:
    """One level to its verdict. ``run(argv, deadline, env) -> ToolRun`` is for tests."""
    run = run or active.run_tool
    binary = settings.verify_dcgm_binary
    engine = _answer(run(engine_command(binary), settings.verify_dcgm_engine_timeout, None))
    diag, gpus = None, {}
    if engine_answered(engine):
        gpus = parse_gpu_ids(run(gpu_ids_command(), GPU_IDS_DEADLINE, None).output)
        diag = _answer(run(diag_command(binary, level), deadline(settings, level), None))
    return result_of(engine, gpus, diag, level, settings, clock)


def run_and_store(settings, level: int, run=None, clock=time.time) -> ActiveResult:
    result = run_level(settings, level, run, clock)
    active.store(settings.verify_dcgm_state, [result])
    return result


def stored_reading(path: str, clock=time.time, required: bool = True) -> ActiveReading:
    """What ``ccrhost check`` and the prolog judge: the stored diag,
    nvbandwidth and GEMM results and their age (``required``: the node's settings
    ask for them, verify_dcgm)."""
    now = clock()
    stored, error = active.read_stored(path, (CHECK, "nvbandwidth", "gemm"), now)
    return ActiveReading(now, stored, error, required)
