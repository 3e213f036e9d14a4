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
from ccrhost.model.allreduce import AllReduceReading, judge_run, threshold, with_retries
from ccrhost.node import active
from ccrhost.probes.nccl_tests import command, environment, run_result

CHECK = "allreduce"


def run_mode(mode: str, gpu_name: str | None, gpus: int, nic_gbps: list[float], settings, run=None,
             clock=time.time) -> ActiveResult:
    """One mode to its verdict. ``run(argv, deadline, env) -> ToolRun``
    (default: :func:`ccrhost.node.active.run_tool`) is for tests."""
    run = run or active.run_tool
    figure = threshold(mode, gpu_name, nic_gbps, settings.verify_allreduce_min_busbw)
    argv = command(settings.verify_allreduce_binary, mode, gpus, max_bytes=settings.verify_allreduce_max_bytes,
                   min_bytes=settings.verify_allreduce_max_bytes, iters=settings.verify_allreduce_iters)
    last = {}

    def once():
        tool = run(argv, settings.verify_allreduce_timeout, environment(mode))
        last["tail"] = tool.tail
        return judge_run(run_result(tool.output, tool.rc, tool.timed_out, tool.missing), mode, figure)

    verdict, runs = with_retries(once, settings.verify_allreduce_retries)
    return ActiveResult(CHECK, mode, verdict.status, verdict.code, verdict.message, clock(),
                        settings.verify_allreduce_valid_for, verdict.busbw, runs, last.get("tail", ""))


def run_and_store(settings, gpu_name: str | None, gpus: int, nic_gbps: list[float], modes=None,
                  run=None, clock=time.time) -> list[ActiveResult]:
    results = [run_mode(m, gpu_name, gpus, nic_gbps, settings, run, clock)
               for m in (modes or settings.verify_allreduce_modes)]
    active.store(settings.verify_allreduce_state, results)
    return results


def stored_reading(path: str, clock=time.time) -> AllReduceReading:
    """What ``ccrhost check`` and the prolog judge: the stored results and their age, never a new run."""
    now = clock()
    stored, error = active.read_stored(path, (CHECK,), now)
    return AllReduceReading(now, {r.mode: r.to_dict() for r in stored.values()}, error)
