"""``ccrhost slurm verify --rack-nvlink`` (issue 49): each NVLink rack's
all-reduce over all its trays' GPUs as one srun step (a task per GPU, as
the scale stage runs a group: ``slurm_scale.group_argv``), with
``NCCL_MNNVL_ENABLE=1`` so that it crosses the rack's NVLink and never
falls back to the NICs unseen. It is judged by the platform's
``allreduce.rack`` figure (model/rack_nvlink.py ``figure``); a slow rack is
run without trays, halving (fleet/admission.py ``isolate``), until the tray
that slows it is found, then once without that tray alone (which clears
the others, or shows a second slow tray). Each tray's result is an all-reduce result of mode
``rack``, for slurm_verify to judge and store as the others.

Only trays whose own check was judged and did not FAIL run (a tray that
FAILs already would only slow its rack); the caller holds the trays
(idle nodes only: never one that runs a job).
"""

from __future__ import annotations

import time
from contextlib import nullcontext

from ccrhost.fleet.admission import isolate
from ccrhost.fleet.slurm_nccl import NcclOptions, NodeInfo, node_infos
from ccrhost.fleet.slurm_scale import group_argv
from ccrhost.model import rack_nvlink as model
from ccrhost.model.active import ActiveResult
from ccrhost.model.allreduce import RACK, judge_run, run_timeout
from ccrhost.model.status import FAIL, OK
from ccrhost.node.active import run_tool
from ccrhost.probes.nccl_tests import run_result

CHECK = "allreduce"


class _NoVerdict(Exception):
    """A run of the rack gave no verdict on speed: the rack's trays are left UNKNOWN."""

    def __init__(self, verdict):
        super().__init__(verdict.message)
        self.verdict = verdict


class _OneTray(Exception):
    """The isolation asked for a run of one tray, which crosses nothing: no tray can be singled out."""


def trays_to_run(verdicts: dict, settings: dict, addresses: dict[str, str], say) -> tuple[dict, dict]:
    """(the racks' trays by rack, NodeInfo by tray): the nodes whose settings turn
    imex_enable on and name an imex_rack, whose own check judged readings and did not FAIL."""
    from ccrhost.fleet.rack_report import imex_on

    trays = {n: getattr(settings[n], "imex_rack", None) for n in verdicts if imex_on(settings.get(n))}
    failing = sorted(n for n in trays if verdicts[n].status == FAIL)
    if failing:
        say(f"rack all-reduce: not run on {', '.join(failing)}: FAIL their own checks")
    infos = node_infos({n: verdicts[n] for n in trays if n not in failing}, addresses)
    racks = model.plan({n: r for n, r in trays.items() if n in infos})
    return racks, infos


def run_rack(job: str | None, rack: str, members: list[NodeInfo], figures: list, opts: NcclOptions, say,
             run=run_tool, clock=time.time) -> tuple[dict[str, ActiveResult], list[model.RackRun]]:
    """The rack's run, and its isolation where it is slow: each tray's result and every run made."""
    infos = {m.name: m for m in members}
    trays = [m.name for m in members]
    runs: list[model.RackRun] = []

    def oracle(group: tuple[str, ...]) -> bool:
        group_infos = [infos[t] for t in group]
        if len(group) < 2:  # one tray's all-reduce crosses no other tray: it says nothing of the rack's links
            raise _OneTray()
        tasks = max(min(m.gpus for m in group_infos), 1)
        port = opts.port + (len(runs) % 16) * (len(trays) + 1)  # a killed run's ranks may hold their ports
        tool = run(group_argv(job, group_infos, opts, port, RACK, "ccrhost-nccl-rack"),
                   run_timeout(figures, len(group) * tasks, opts.max_bytes, opts.iters, opts.timeout), None)
        verdict = judge_run(run_result(tool.output, tool.rc, tool.timed_out, tool.missing), RACK, figures,
                            f"rack {rack}: {len(group)} trays")
        speed = verdict.status == OK or verdict.code == "allreduce_slow"
        runs.append(model.RackRun(tuple(group), verdict.status == OK if speed else None, verdict.busbw,
                                  verdict.message))
        say(f"rack all-reduce: {verdict.message}")
        if not speed:
            raise _NoVerdict(verdict)
        return verdict.status == OK

    try:
        found = isolate(trays, oracle)
        rest = tuple(t for t in trays if t != found.culprit)
        if found.culprit is not None and len(rest) > 1 and rest not in {r.trays for r in runs}:
            oracle(rest)  # the rack without the tray named: clears every other tray, or shows a second slow one
        told = model.outcome(rack, trays, runs, found.culprit, found.undecided)
    except _OneTray:  # two trays: neither can run without the other
        told = model.outcome(rack, trays, runs, None, tuple(trays))
    except _NoVerdict as stop:
        told = model.not_measured(rack, trays, stop.verdict.reason)
    now = clock()
    return {t: ActiveResult(CHECK, RACK, r.status, r.code, r.message, now, opts.valid_for, r.busbw, len(runs))
            for t, r in told.items()}, runs


def run_racks(job: str | None, verdicts: dict, settings: dict, addresses: dict[str, str], opts: NcclOptions,
              say, batches=None, run=run_tool, clock=time.time) -> dict[str, ActiveResult]:
    """Every rack's run (a rack of one tray runs none): each tray's result. With ``batches`` each rack's
    trays are held only for its runs, idle ones only; a tray not held is left out of its rack's runs."""
    racks, infos = trays_to_run(verdicts, settings, addresses, say)
    out: dict[str, ActiveResult] = {}
    for rack, trays in racks.items():
        if len(trays) < 2:
            say(f"rack all-reduce: rack {rack}: {len(trays)} tray to run: nothing crosses the rack, not run")
            continue
        # --nccl-profile's platform, else each tray's own (verify_profile); a site's figure, else the tray's own
        figures = model.figure([(infos[t].gpu_name,
                                 opts.platform if opts.platform is not None else settings[t].platform(),
                                 opts.min_busbw or getattr(settings[t], "verify_allreduce_min_busbw", None))
                                for t in trays])
        held = batches.hold(trays) if batches is not None else nullcontext((job, trays))
        with held as (step_job, taken):
            left = [t for t in trays if t not in taken]
            if left:
                say(f"rack all-reduce: rack {rack}: {', '.join(left)} not held (busy or lost): run without them")
            if len(taken) < 2:
                continue
            say(f"rack all-reduce: rack {rack}: {len(taken)} trays (at most {model.rounds(len(taken))} halvings "
                "to find a slow one)")
            got, _ = run_rack(step_job, rack, [infos[t] for t in taken], figures, opts, say, run, clock)
            out.update(got)
    return out

