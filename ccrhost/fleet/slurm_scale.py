"""Acceptance S4 (issue 50): the all-reduce over growing groups of nodes,
a failing step bisected to the node that causes it.

A node can pass every pair and still slow a large ring (a NIC that degrades
with many peers, a switch port that drops under fan-in), so the nodes are
admitted in groups that double (``ccrhost.fleet.admission.admit``); each
group is ONE srun step across its nodes, one task per GPU, as the pair mode
runs two (``slurm_nccl.pair_run``).

The figure is the pair mode's: nccl-tests' busbw is algbw x 2(n-1)/n, the
bytes each rank sends, so a ring's busbw does not fall with its size; every
node's NICs carry the ring at their own rate, and the ring is as fast as its
slowest edge. A group is therefore judged by ``pair_figure`` over its
slowest member (the lowest published figure of any of them), and a healthy
group of any size meets the figure a healthy pair meets.

A run that could not measure (no binary, a hang, an NCCL warning, a node not
allocated) says nothing about speed: its new nodes are UNKNOWN, never FAIL,
and admission goes on without them.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, replace

from ccrhost.fleet.admission import admit
from ccrhost.fleet.allreduce import pair_figure
from ccrhost.fleet.slurm_job import busy_note
from ccrhost.fleet.slurm_nccl import NcclOptions, NodeInfo, _env_args, _step
from ccrhost.model.allreduce import (MODE_TEXT, PAIR, RunResult, RunVerdict, busbw_text, judge_run, run_timeout,
                                     thresholds)
from ccrhost.model.culprit import evidence
from ccrhost.model.ports import natural_key
from ccrhost.model.status import FAIL, OK, UNKNOWN, Reason
from ccrhost.node.active import run_tool
from ccrhost.probes.nccl_tests import command, environment, run_result


@dataclass(frozen=True)
class ScaleRun:
    """One run of a group, for the report."""

    group: tuple[str, ...]
    passed: bool | None       # None: it could not measure (its verdict says why)
    busbw: float | None       # GB/s at the largest size, where measured
    message: str              # judge_run's verdict on it
    purpose: str = ""         # admission's: step, retry, halve, confirm ("" for a run that could not measure)
    step: int = 0             # the admission step it served (1-based, within its chunk)


@dataclass(frozen=True)
class ScaleOutcome:
    admitted: tuple[str, ...]          # in a group that passed, chunk by chunk
    reasons: dict[str, Reason]         # every node not admitted: allreduce_scale_slow, _undecided, or its run's UNKNOWN
    runs: tuple[ScaleRun, ...]         # every real run, in order

    @property
    def count(self) -> int:
        return len(self.runs)


class _NotMeasured(Exception):
    """A group's run gave no verdict on speed: ``nodes`` are left UNKNOWN with ``reason``."""

    def __init__(self, nodes: list[str], reason: Reason):
        super().__init__(reason.message)
        self.nodes, self.reason = nodes, reason


def group_figure(members: list[NodeInfo], opts: NcclOptions):
    """The pair figure of the group's slowest member (see the module's note)."""
    def published(info):
        figs = thresholds(PAIR, info.gpu_name, list(info.nic_gbps), opts.min_busbw, opts.platform)
        return min((f.busbw for f in figs if not f.fleet), default=math.inf)
    slowest = min(members, key=published)
    return pair_figure(list(slowest.nic_gbps), list(slowest.nic_gbps), slowest.gpu_name, opts.min_busbw,
                       opts.platform)


def group_argv(job: str, members: list[NodeInfo], opts: NcclOptions, port: int, mode: str = PAIR,
               name: str = "ccrhost-nccl-scale") -> list[str]:
    """One step over the group: a task per GPU (the fewest any member has), the root on the node Slurm lists
    first; ``mode``'s NCCL settings (the rack-level run's too: fleet/rack_nvlink.py)."""
    tasks = max(min(m.gpus for m in members), 1)
    first = min(members, key=lambda n: natural_key(n.name))
    env = {**environment(mode), "NCCL_COMM_ID": f"{first.address}:{port}"}
    return [*_step(job, [m.name for m in members], tasks, name, opts), *_env_args(env),
            *command(opts.binary, mode, tasks, min_bytes=opts.max_bytes, max_bytes=opts.max_bytes,
                     iters=opts.iters, per_process=True)]


def _chunks(names: list[str], cap: int) -> list[list[str]]:
    """As few chunks as the cap allows, of even sizes (no one-node tail that no group could hold)."""
    n = math.ceil(len(names) / cap)
    size, extra = divmod(len(names), n)
    out, at = [], 0
    for i in range(n):
        k = size + (i < extra)
        out.append(names[at:at + k])
        at += k
    return out


def _relabel(verdict: RunVerdict, nodes: int) -> RunVerdict:
    """judge_run names the pair mode's ring ("two-node ..."): say how many nodes this ring had."""
    if verdict.reason is None:
        return replace(verdict, passed=verdict.passed.replace(MODE_TEXT[PAIR], _label(nodes), 1))
    return replace(verdict, reason=replace(verdict.reason,
                                           message=verdict.reason.message.replace(MODE_TEXT[PAIR], _label(nodes), 1)))


def _label(nodes: int) -> str:
    return f"ring all-reduce over {nodes} nodes"


def run_scale(job: str | None, infos: dict[str, NodeInfo], opts: NcclOptions, say, batches=None, start: int = 2,
              run=run_tool, launch=None) -> ScaleOutcome:
    """Admit ``infos``' nodes (in their order) by groups growing from
    ``start`` and doubling, no group larger than the cap (``batches.cap``,
    else ``opts.max_nodes``): more nodes than the cap are admitted per chunk
    of at most the cap. With ``batches`` each group's nodes are held only for
    its run; without, every step runs in ``job``. Runs are not retried: a
    flaky shortfall is caught by admission's confirming run (undecided).
    ``launch(job, members, opts, port, timeout) -> ToolRun`` runs one group
    (default: an srun step, :func:`group_argv`, through ``run``); a deploy
    without Slurm launches it with mpirun from the group's first node."""
    if start < 2:
        raise ValueError(f"start must be at least 2 (a group of one node crosses no network), not {start}")
    cap = max(batches.cap if batches is not None else opts.max_nodes, 2)
    names = list(infos)
    runs: list[ScaleRun] = []
    reasons: dict[str, Reason] = {}
    admitted: list[str] = []
    if len(names) == 1:
        reasons[names[0]] = Reason(UNKNOWN, "allreduce_scale_undecided",
                                   f"{names[0]}: all-reduce at scale not run: no other node to form a group with")
        return ScaleOutcome((), reasons, ())
    chunks = _chunks(names, cap) if names else []
    if len(chunks) > 1:
        say(f"all-reduce scale: {len(names)} nodes, more than the cap of {cap}: admitted per chunk "
            f"({', '.join(str(len(c)) for c in chunks)} nodes), no group larger than {cap}")
    if launch is None:
        def launch(step_job, members, opts, port, timeout):
            return run(group_argv(step_job, members, opts, port), timeout, None)
    for number, chunk in enumerate(chunks, 1):
        if len(chunk) == 1:  # a cap of 2 over an odd count: no group to run, so never admitted unmeasured
            reasons[chunk[0]] = Reason(UNKNOWN, "allreduce_scale_undecided", (
                f"{chunk[0]}: all-reduce at scale not run: chunk {number}/{len(chunks)} of the cap of {cap} held "
                "no other node; run it with a larger cap"))
            continue
        got, _, left = _admit_chunk(job, chunk, infos, opts, say, batches, start, launch, runs, cap,
                                             f"chunk {number}/{len(chunks)}" if len(chunks) > 1 else "")
        admitted += got
        reasons.update(left)
    return ScaleOutcome(tuple(admitted), reasons, tuple(runs))


def _admit_chunk(job, chunk, infos, opts, say, batches, start, launch, runs, cap, label):
    """One chunk's admission: restarted without the nodes of a run that could not measure (the groups that
    already ran are answered from their results, not run again)."""
    results: dict[tuple[str, ...], bool] = {}
    proven: set[str] = set()   # in a group that passed: a later run that cannot measure is not theirs
    left: dict[str, Reason] = {}
    first_run = len(runs)
    where = f" ({label})" if label else ""

    def oracle(group: tuple[str, ...]) -> bool:
        if group in results:
            return results[group]
        if len(group) < 2:
            return True  # one node's all-reduce never leaves the node: no ring over the network to judge
        members = [infos[n] for n in group]
        figure = group_figure(members, opts)
        port = opts.port + (len(runs) % 16) * (cap + 1)  # a killed run's ranks may hold their ports a while
        what = ",".join(group)
        held = batches.hold(list(group)) if batches is not None else nullcontext((job, list(group)))
        with held as (step_job, taken):
            absent = [n for n in group if n not in taken]
            if absent:
                note = busy_note(batches, *absent) if batches is not None else "not allocated"
                verdict, missing_on = judge_run(RunResult(None, error=f"not run: {note}"), PAIR, None, what), ()
            else:
                tasks = max(min(m.gpus for m in members), 1)
                tool = launch(step_job, members, opts, port,
                              run_timeout(figure, len(group) * tasks, opts.max_bytes, opts.iters, opts.timeout))
                result = run_result(tool.output, tool.rc, tool.timed_out, tool.missing)
                verdict, missing_on = judge_run(result, PAIR, figure, what), result.missing_on
        verdict = _relabel(verdict, len(group))
        passed = None if verdict.status not in (OK, FAIL) else verdict.status == OK
        runs.append(ScaleRun(group, passed, verdict.busbw, verdict.message))
        say(f"all-reduce scale{where}: {len(group)} nodes: {verdict.message}")
        if passed is None:
            # the nodes the launcher named, else the ones no passing group vouches for, else all
            blamed = absent or [n for n in group if n in missing_on] or [n for n in group if n not in proven] \
                or list(group)
            raise _NotMeasured(blamed, verdict.reason)
        results[group] = passed
        if passed:
            proven.update(group)
        return passed

    order = list(chunk)
    while True:
        try:
            adm = admit(order, oracle, start)
            break
        except _NotMeasured as stop:
            for n in stop.nodes:
                left[n] = Reason(UNKNOWN, stop.reason.code, f"{n}: all-reduce at scale: {stop.reason.message}")
            order = [n for n in order if n not in stop.nodes]
            say(f"all-reduce scale{where}: {', '.join(stop.nodes)} left UNKNOWN ({stop.reason.code}); "
                "admission goes on without them")
    # admission's account of each real run: why it ran, for which step
    purpose = {r.group: (r.purpose, r.step) for r in adm.runs}
    for i in range(first_run, len(runs)):
        r = runs[i]
        if r.group in purpose:
            runs[i] = ScaleRun(r.group, r.passed, r.busbw, r.message, *purpose[r.group])
    mine = runs[first_run:]
    for f in adm.culprits:
        # a group without it of one node is never run (it crosses no network): the run with it is evidence
        with_it, without = evidence(f.node, mine, lambda r: r.group, lone_rest_passes=True)
        size = len(with_it.group) if with_it else f.size
        other = (f"{busbw_text(without)} over {len(without.group)} nodes without it" if without
                 else "no group without it large enough to run")
        said = f"; {with_it.message}" if with_it else ""
        left[f.node] = Reason(FAIL, "allreduce_scale_slow", (
            f"{f.node}: slowed a group of {f.size} nodes at admission step {f.step}{where}: busbw {busbw_text(with_it)} "
            f"over {size} nodes with it, {other}{said}"))
    for f in adm.undecided:
        left[f.node] = Reason(UNKNOWN, "allreduce_scale_undecided", (
            f"{f.node}: admission step {f.step}{where} (a group of {f.size} nodes) failed, but no run singled out "
            "a node: a flaky run, a limit of the group's size, two slow nodes together, or a failing first pair "
            "(the pair mode isolates a pair)"))
    return list(adm.admitted), mine, left
