"""The single-node all-reduce modes on this node: run, judge, store.

Each mode runs ``all_reduce_perf`` with all the node's GPUs in one process
(``-g N``) under the generic runner (deadline, process group killed), is
judged by :func:`ccrhost.model.allreduce.judge_run` (the one verdict; the
fleet's pair runs use it too), retried only below threshold, and stored
with its time and validity for the prolog and ``ccrhost check`` to read.
"""

from __future__ import annotations

import time

from ccrhost.model.active import ActiveResult
from ccrhost.model.allreduce import (
    ENDS_THE_RUN,
    AllReduceReading,
    judge_run,
    run_timeout,
    skipped,
    thresholds,
    with_retries,
)
from ccrhost.node import active
from ccrhost.probes.nccl_tests import command, environment, run_result

CHECK = "allreduce"


def run_mode(mode: str, gpu_name: str | None, gpus: int, nic_gbps: list[float], settings, run=None,
             clock=time.time) -> ActiveResult:
    """One mode to its verdict. ``run(argv, deadline, env) -> ToolRun``
    (default: :func:`ccrhost.node.active.run_tool`) is for tests."""
    run = run or active.run_tool
    figure = thresholds(mode, gpu_name, nic_gbps, settings.verify_allreduce_min_busbw, settings.platform())
    argv = command(settings.verify_allreduce_binary, mode, gpus, max_bytes=settings.verify_allreduce_max_bytes,
                   min_bytes=settings.verify_allreduce_max_bytes, iters=settings.verify_allreduce_iters)
    timeout = run_timeout(figure, gpus, settings.verify_allreduce_max_bytes, settings.verify_allreduce_iters,
                          settings.verify_allreduce_timeout)
    last = {}

    def once():
        tool = run(argv, timeout, environment(mode))
        last["tail"] = tool.tail
        return judge_run(run_result(tool.output, tool.rc, tool.timed_out, tool.missing), mode, figure)

    verdict, runs = with_retries(once, settings.verify_allreduce_retries)
    return ActiveResult(CHECK, mode, verdict.status, verdict.code, verdict.message, clock(),
                        settings.verify_allreduce_valid_for, verdict.busbw, runs, last.get("tail", ""))


def run_and_store(settings, gpu_name: str | None, gpus: int, nic_gbps: list[float], modes=None,
                  run=None, clock=time.time) -> list[ActiveResult]:
    results, ended = [], None
    for m in modes or settings.verify_allreduce_modes:
        if ended is not None:  # hung, missing or wrong in an earlier mode: not run again
            v = skipped(m, ended.mode, ended.code)
            results.append(ActiveResult(CHECK, m, v.status, v.code, v.message, clock(),
                                        settings.verify_allreduce_valid_for, None, 0))
            continue
        results.append(run_mode(m, gpu_name, gpus, nic_gbps, settings, run, clock))
        if results[-1].code in ENDS_THE_RUN:
            ended = results[-1]
    active.store(settings.verify_allreduce_state, results)
    return results


def stored_reading(path: str, clock=time.time) -> AllReduceReading:
    """What ``ccrhost check`` and the prolog judge: the stored results and their age, never a new run."""
    now = clock()
    stored, error = active.read_stored(path, (CHECK,), now)
    return AllReduceReading(now, {active.mode_of(k, d): d for k, d in stored.items()}, error)
