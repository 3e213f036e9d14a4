"""``ccrhost slurm verify --nccl``: the all-reduce modes as job steps of the
verify job. Single-node modes run on every node at once (one step per node,
all its GPUs in one process); the pair mode runs pairs as two-node steps
(one task per GPU, ``NCCL_COMM_ID`` at the pair's first node), covered and
isolated by ``ccrhost.fleet.allreduce``. At most ``max_nodes`` nodes run
steps at once. Every run is judged by ``judge_run``; each node's results go
into its readings, and the node's verdict is made by the same evaluation
as ``ccrhost check`` (the one verdict).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from ccrhost.fleet.allreduce import AllReducePair, pair_fleet, pair_figure
from ccrhost.fleet.slurm_job import busy_note, round_line, run_pair_batches
from ccrhost.model.active import ActiveResult
from ccrhost.model.allreduce import (
    ENDS_THE_RUN,
    LOOPBACK,
    NVLINK,
    PAIR,
    AllReduceReading,
    RunResult,
    RunVerdict,
    judge_run,
    run_timeout,
    skipped,
    thresholds,
    with_retries,
)
from ccrhost.model.ports import natural_key
from ccrhost.node.active import run_tool
from ccrhost.probes.nccl_tests import command, environment, run_result


@dataclass
class NcclOptions:
    modes: tuple[str, ...] = (NVLINK, LOOPBACK, PAIR)
    binary: str = "all_reduce_perf"
    max_bytes: str = "16G"
    iters: int = 20
    retries: int = 2
    timeout: int | None = None   # None: each run's own, from its expected time (model.allreduce.run_timeout)
    valid_for: int = 86400
    max_nodes: int = 64          # nodes running steps at once
    port: int = 29500            # NCCL_COMM_ID port of the first pair (each pair its own, two more per pair)
    min_busbw: dict | None = None
    srun_options: tuple[str, ...] = ()
    platform: object = None      # the resolved platform (model/platform.py); None: the built-in for the GPU


@dataclass(frozen=True)
class NodeInfo:
    name: str
    address: str
    gpus: int
    gpu_name: str | None
    nic_gbps: tuple[float, ...]


def node_infos(verdicts: dict, addresses: dict[str, str]) -> dict[str, NodeInfo]:
    """What the gate needs of each node, from its own check's readings: its
    GPUs and active compute ports. A node whose check judged nothing, or
    read no GPU, is not tested (its verdict already says why)."""
    out = {}
    for name, v in verdicts.items():
        gpus = v.readings.gpus
        if not v.evaluated or not gpus:
            continue
        out[name] = NodeInfo(name, addresses[name], len(gpus), gpus[0].name,
                             tuple(p.effective_gbps for p in v.readings.ports if p.active and not p.efa))
    return out


def _step(job: str, nodes: list[str], tasks_per_node: int, name: str, opts: NcclOptions) -> list[str]:
    return ["srun", f"--jobid={job}", "--overlap", "--overcommit", "-J", name, "-N", str(len(nodes)),
            "-n", str(len(nodes) * tasks_per_node), f"--ntasks-per-node={tasks_per_node}", "-w", ",".join(nodes),
            "-l", "--kill-on-bad-exit=1", *opts.srun_options]


def _env_args(env: dict[str, str]) -> list[str]:
    return ["env", *(f"{k}={v}" for k, v in env.items())]


class _Slots:
    """At most ``n`` nodes busy at once."""

    def __init__(self, n: int):
        self.free, self.cond = n, threading.Condition()

    def take(self, k: int):
        with self.cond:
            self.cond.wait_for(lambda: self.free >= k)
            self.free -= k

    def give(self, k: int):
        with self.cond:
            self.free += k
            self.cond.notify_all()


def _parallel(jobs, slots: _Slots):
    """Run ``(k nodes, fn)`` jobs in threads within the slots; results in order."""
    out = [None] * len(jobs)

    def one(i, k, fn):
        slots.take(k)
        try:
            out[i] = fn()
        finally:
            slots.give(k)

    threads = [threading.Thread(target=one, args=(i, k, fn)) for i, (k, fn) in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def single_argv(job: str, node: str, gpus: int, mode: str, opts: NcclOptions) -> list[str]:
    """A single-node mode's step on ``node``: all its ``gpus`` in one process."""
    return [*_step(job, [node], 1, f"ccrhost-nccl-{mode}", opts), *_env_args(environment(mode)),
            *command(opts.binary, mode, gpus, min_bytes=opts.max_bytes, max_bytes=opts.max_bytes, iters=opts.iters)]


def single_node(job: str, info: NodeInfo, mode: str, opts: NcclOptions, run=run_tool, clock=time.time) -> ActiveResult:
    figure = thresholds(mode, info.gpu_name, list(info.nic_gbps), opts.min_busbw, opts.platform)
    argv = single_argv(job, info.name, info.gpus, mode, opts)
    timeout = run_timeout(figure, info.gpus, opts.max_bytes, opts.iters, opts.timeout)
    tail = {}

    def once():
        tool = run(argv, timeout, None)
        tail["t"] = tool.tail
        return judge_run(run_result(tool.output, tool.rc, tool.timed_out, tool.missing), mode, figure, info.name)

    verdict, runs = with_retries(once, opts.retries)
    return ActiveResult("allreduce", mode, verdict.status, verdict.code, verdict.message, clock(), opts.valid_for,
                        verdict.busbw, runs, tail.get("t", ""))


def _not_run(mode: str, what: str, why: str) -> RunVerdict:
    """A run that could not start (its node not allocated), judged as any launch failure is."""
    return judge_run(RunResult(None, error=f"not run: {why}"), mode, None, what)


def run_modes(job: str | None, infos: dict[str, NodeInfo], opts: NcclOptions, say, run=run_tool,
              clock=time.time, batches=None) -> dict[str, AllReduceReading]:
    """Every node's all-reduce results, as readings for its verdict. With
    ``batches`` (``ccrhost.fleet.slurm_job.Batches``) each batch of at most
    ``max_nodes`` nodes is its own allocation, held only while it runs;
    without, the steps run in ``job`` with at most ``max_nodes`` nodes busy."""
    slots = _Slots(max(opts.max_nodes, 2))
    results: dict[str, dict] = {n: {} for n in infos}
    singles = [m for m in opts.modes if m != PAIR]

    def ended(name):
        """The earlier mode that hung, found no binary or moved wrong data on the node: not run again."""
        return next((r for r in results[name].values() if r["code"] in ENDS_THE_RUN), None)

    def skip(name, mode):
        e = ended(name)
        v = skipped(mode, e["mode"], e["code"], name)
        results[name][mode] = ActiveResult("allreduce", mode, v.status, v.code, v.message, clock(), opts.valid_for,
                                           None, 0).to_dict()

    if singles and batches is not None:
        for chunk in batches.chunks(list(infos)):
            with batches.hold(chunk) as (held, taken):
                for mode in singles:
                    for name in [n for n in taken if ended(n)]:
                        skip(name, mode)
                    go = [n for n in taken if mode not in results[n]]
                    say(f"all-reduce {mode}: {len(go)} node(s) of {len(chunk)} in this batch")
                    done = _parallel([(1, lambda i=infos[n]: single_node(held, i, mode, opts, run, clock))
                                      for n in go], slots)
                    for name, result in zip(go, done):
                        results[name][mode] = result.to_dict()
                    for name in chunk:
                        if name not in taken:
                            v = _not_run(mode, name, busy_note(batches, name))
                            results[name][mode] = ActiveResult("allreduce", mode, v.status, v.code, v.message,
                                                               clock(), opts.valid_for).to_dict()
    for mode in singles if batches is None else ():
        for name in [n for n in infos if ended(n)]:
            skip(name, mode)
        go = [n for n in infos if mode not in results[n]]
        say(f"all-reduce {mode}: {len(go)} node(s), at most {opts.max_nodes} at once")
        done = _parallel([(1, lambda i=infos[n]: single_node(job, i, mode, opts, run, clock)) for n in go], slots)
        for name, result in zip(go, done):
            results[name][mode] = result.to_dict()
    if PAIR in opts.modes:
        rounds = [0]

        def run_pairs(pairs):
            rounds[0] += 1
            say(round_line("all-reduce pair", rounds[0], pairs, "+"))
            if batches is None:
                return _parallel([(2, lambda k=k, a=a, b=b: pair_run(job, infos[a], infos[b], opts, k, run))
                                  for k, (a, b) in enumerate(pairs)], slots)
            return run_pair_batches(
                batches, pairs,
                lambda held, ok: _parallel([(2, lambda k=k, a=a, b=b: pair_run(held, infos[a], infos[b], opts, k, run))
                                            for k, (a, b) in ok], slots),
                lambda a, b, why: AllReducePair(a, b, _not_run(PAIR, f"{a}+{b}", why)))

        for name in [n for n in infos if ended(n)]:
            skip(name, PAIR)
        paired = [n for n in infos if PAIR not in results[n]]
        for name, result in pair_fleet(paired, run_pairs, opts.retries, opts.valid_for, clock).items():
            results[name][PAIR] = result.to_dict()
    now = clock()
    return {n: AllReduceReading(now, r) for n, r in results.items()}


def pair_run(job: str, a: NodeInfo, b: NodeInfo, opts: NcclOptions, index: int, run=run_tool) -> AllReducePair:
    tasks = min(a.gpus, b.gpus)
    figure = pair_figure(list(a.nic_gbps), list(b.nic_gbps), a.gpu_name, opts.min_busbw, opts.platform)
    port = opts.port + 4 * index
    # task 0 lands on the node Slurm lists first (its node order, by name on most sites): the root is there
    first = min((a, b), key=lambda n: natural_key(n.name))
    env = {**environment(PAIR), "NCCL_COMM_ID": f"{first.address}:{port}"}
    argv = [*_step(job, [a.name, b.name], max(tasks, 1), "ccrhost-nccl-pair", opts), *_env_args(env),
            *command(opts.binary, PAIR, tasks, min_bytes=opts.max_bytes, max_bytes=opts.max_bytes,
                     iters=opts.iters, per_process=True)]
    tool = run(argv, run_timeout(figure, 2 * tasks, opts.max_bytes, opts.iters, opts.timeout), None)
    result = run_result(tool.output, tool.rc, tool.timed_out, tool.missing)
    verdict = judge_run(result, PAIR, figure, f"{a.name}+{b.name}")
    return AllReducePair(a.name, b.name, verdict, tuple(n for n in result.missing_on if n in (a.name, b.name)))
