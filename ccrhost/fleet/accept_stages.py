"""The acceptance stages (issue 50), each run on the nodes that need it
through the run's capped batches (ccrhost.fleet.slurm_job.Batches, inside
the run's reservation), each leaving every node it ran on with the one
verdict (model/verdict.py ``evaluate``, through slurm_check ``judge``) as
that stage left it. The runner (ccrhost.fleet.accept) picks the nodes and
records each stage in the certificates.

S0 judges the node's passive readings alone: its stored active results
(all-reduce, DCGM, GEMM) are what the later stages measure anew, so an old
result never fails, nor passes, a node here. S2 and S4 add their findings
on top of the node's own verdict (``add_findings``), as the fleet's rules do.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace

from ccrhost.fleet.slurm_check import CheckOutput, drained_verdict, judge
from ccrhost.fleet.slurm_job import Batches, VerifyOptions
from ccrhost.model.active import ActiveReading
from ccrhost.model.status import UNKNOWN, Reason
from ccrhost.model.verdict import Verdict, add_findings, evaluate


@dataclass
class Fleet:
    """What the stages know of the run's nodes so far."""

    addresses: dict[str, str]
    outputs: dict[str, CheckOutput] = field(default_factory=dict)   # each node's latest check
    settings: dict = field(default_factory=dict)                     # node -> HostSettings
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    allreduce: dict = field(default_factory=dict)   # node -> AllReduceReading of this run
    dcgm: dict = field(default_factory=dict)        # node -> ActiveReading of this run (diag, nvbandwidth, GEMM)
    measured: dict = field(default_factory=dict)    # node -> ib_write_bw measurement of this run
    figures: dict = field(default_factory=dict)     # node -> {stage: {figure: value}}

    def judge(self, name: str) -> Verdict:
        """The node's verdict from its latest check and this run's measurements: only this run's active
        results (none where a stage held from an earlier run), never the stored ones S0 left out."""
        from ccrhost.model.allreduce import AllReduceReading

        now = time.time()
        return judge(self.outputs[name], self.measured.get(name), self.allreduce.get(name) or AllReduceReading(now),
                     self.dcgm.get(name) or ActiveReading(now, {}))[0]

    def figure(self, name: str, stage: str, **values) -> None:
        self.figures.setdefault(name, {}).setdefault(stage, {}).update(
            {k: v for k, v in values.items() if v is not None})


def passive(out: CheckOutput):
    """S0's verdict: the node's own check with its stored active results left out."""
    verdict, settings = judge(out)
    if settings is None or not verdict.evaluated:
        return verdict, settings
    readings = replace(verdict.readings, allreduce=None, dcgm=None)
    return replace(evaluate(readings, settings.expectation(), settings.policy()), evidence=verdict.evidence), settings


def _held(batches: Batches, names: list[str]):
    """Each batch of at most the cap, held while the caller runs steps on it: (job, taken, not taken)."""
    for chunk in batches.chunks(names):
        with batches.hold(chunk) as (job, taken):
            yield job, taken, [n for n in chunk if n not in taken]


def not_run(why: str) -> Verdict:
    from ccrhost.model.verdict import unjudged

    return unjudged(UNKNOWN, "accept_not_run", why)


def run_checks(fleet: Fleet, names: list[str], batches: Batches, vopts: VerifyOptions, say) -> list[str]:
    """The check step on ``names`` (S0, and the soak's before and after): outputs kept; the nodes it reached."""
    from ccrhost.fleet.slurm_verify import check_step

    reached = []
    for job, taken, missed in _held(batches, names):
        if taken:
            got = check_step(job, taken, vopts, say)
            fleet.outputs.update(got)
            reached += [n for n in taken if n in got]
        for name in missed:
            # drained by its own prolog while the batch waited: the codes its reason names (slurm verify's way)
            fleet.verdicts[name] = (drained_verdict(batches.lost[name]) if name in batches.lost
                                    else not_run(f"not checked: {_why(batches, name)}"))
    return reached


def _why(batches: Batches, name: str) -> str:
    node = batches.busy.get(name) or batches.lost.get(name)
    return f"{node.state}" + (f" ({node.reason})" if node.reason else "") if node else "not allocated"


def stage_check(fleet: Fleet, names: list[str], batches: Batches, vopts: VerifyOptions, say) -> None:
    for name in run_checks(fleet, names, batches, vopts, say):
        fleet.verdicts[name], settings = passive(fleet.outputs[name])
        if settings is not None:
            fleet.settings[name] = settings


def run_gemm(fleet: Fleet, names: list[str], batches: Batches, vopts: VerifyOptions, seconds: int | None, say,
             label: str) -> dict[str, list]:
    """dcgmproftester on every GPU of ``names`` for ``seconds`` (None: the node's verify_gemm_seconds), at
    most the cap at once (the power-heavy load staggered batch by batch): {node: [ActiveResult]} or a note."""
    from ccrhost.fleet.slurm_client import run_steps
    from ccrhost.fleet.slurm_dcgm import parse_step, step_script

    out: dict = {}
    for job, taken, missed in _held(batches, names):
        if taken:
            longest = max(seconds or fleet.settings[n].verify_gemm_seconds for n in taken)
            say(f"{label}: GEMM load for {longest} s on {len(taken)} node(s)")
            args = ("--gemm-only", *(("--gemm-seconds", str(int(seconds))) if seconds else ()))
            lines, err = run_steps(job, {n: step_script(vopts.ccrhost, vopts.config, *args) for n in taken},
                                   "ccrhost-gemm", longest + 180)()
            for name in taken:
                out[name] = parse_step(lines[name]) if name in lines else (err or "no output from the step")
        for name in missed:
            out[name] = f"not run: {_why(batches, name)}"
    return out


def merge_dcgm(fleet: Fleet, name: str, results, now: float) -> None:
    """Add ``results`` (ActiveResults, or a note of why there are none) to the node's DCGM reading of this run."""
    from ccrhost.model.active import ActiveResult
    from ccrhost.model.gemm import CHECK as GEMM

    old = fleet.dcgm.get(name)
    have = dict(old.results) if old is not None else {}
    if isinstance(results, str):
        results = [ActiveResult(GEMM, "fp16", UNKNOWN, "gemm_unreadable", f"GEMM: {results}", now, 3600)]
    for r in results:
        have[f"{r.check}/{r.mode}"] = r.to_dict()
        if r.check == GEMM and r.data:
            tflops = r.data.get("tflops") or {}
            fleet.figure(name, "gemm", gemm_tflops_min=r.value,
                         gemm_tflops_sum=round(sum(tflops.values()), 1) if tflops else None)
    reading = ActiveReading(now, have)
    if old is not None:
        reading.required = old.required
    fleet.dcgm[name] = reading


def stage_node(fleet: Fleet, names: list[str], batches: Batches, vopts: VerifyOptions, nccl, say,
               clock=time.time) -> None:
    """S1: DCGM diag at each node's accept_dcgm_level (with nvbandwidth where its settings run it), the GEMM,
    and the single-node all-reduce modes."""
    from ccrhost.fleet.slurm_dcgm import DcgmOptions, run_diag
    from ccrhost.fleet.slurm_nccl import node_infos, run_modes

    for level in sorted({fleet.settings[n].accept_dcgm_level for n in names}):
        group = [n for n in names if fleet.settings[n].accept_dcgm_level == level]
        diag = run_diag(None, group, DcgmOptions(level=level, max_nodes=batches.cap), vopts.ccrhost, vopts.config,
                        say, batches, clock)
        for name, reading in diag.items():
            reading.required = True
            fleet.dcgm[name] = reading
    for name, got in run_gemm(fleet, names, batches, vopts, None, say, "S1").items():
        merge_dcgm(fleet, name, got, clock())
    singles = tuple(m for m in nccl.modes if m != "pair")
    if singles:
        infos = node_infos({n: fleet.verdicts[n] for n in names}, {n: fleet.addresses[n] for n in names})
        readings = run_modes(None, infos, replace(nccl, modes=singles), say, clock=clock, batches=batches)
        fleet.allreduce.update(readings)
    for name in names:
        fleet.verdicts[name] = fleet.judge(name)


def stage_pairs(fleet: Fleet, names: list[str], batches: Batches, vopts: VerifyOptions, nccl, say,
                clock=time.time) -> None:
    """S3: pairs covering every node: ib_write_bw (slurm verify --measure's pairing and isolation) and the
    all-reduce pair mode, whose ring busbw is the measured CCR's B (beside the GEMM's measured F)."""
    from ccrhost.fleet.slurm_nccl import node_infos, run_modes
    from ccrhost.fleet.slurm_verify import measure_pairs

    measured = measure_pairs(None, {n: fleet.verdicts[n] for n in names}, fleet.settings,
                             {n: fleet.addresses[n] for n in names}, vopts, say, batches)
    fleet.measured.update(measured)
    if "pair" in nccl.modes:
        infos = node_infos({n: fleet.verdicts[n] for n in names}, {n: fleet.addresses[n] for n in names})
        for name, reading in run_modes(None, infos, replace(nccl, modes=("pair",)), say, clock=clock,
                                       batches=batches).items():
            old = fleet.allreduce.get(name)
            fleet.allreduce[name] = replace(reading, results={**(old.results if old else {}), **reading.results})
    for name in names:
        judge_pairs(fleet, name)


def judge_pairs(fleet: Fleet, name: str) -> None:
    """S3's verdict for the node and its figures: the measured CCR, its B and F."""
    fleet.verdicts[name] = fleet.judge(name)
    ccr = fleet.verdicts[name].measured_ccr
    fleet.figure(name, "pairs", measured_ccr=getattr(ccr, "ccr", None),
                 measured_gbps=getattr(ccr, "bandwidth_gbps", None), compute=getattr(ccr, "compute", None))


def mesh_options(settings: list, timeout: int, say):
    """One mesh for all the nodes, so one set of its settings: the strictest the nodes ask for (the smallest
    group, the lowest prune share and p99 gate), said where they differ."""
    from ccrhost.fleet.slurm_mesh import MeshOptions

    keys = ("accept_mesh_group", "accept_mesh_prune", "accept_latency_max_p99_us")
    chosen = {}
    for key in keys:
        values = sorted({getattr(s, key) for s in settings})
        chosen[key] = values[0]
        if len(values) > 1:
            say(f"S2 mesh: the nodes ask for {key} {', '.join(map(str, values))}: the mesh uses {values[0]}")
    return MeshOptions(group=chosen[keys[0]], prune=chosen[keys[1]], max_p99_us=chosen[keys[2]], timeout=timeout)


def stage_mesh(fleet: Fleet, names: list[str], batches: Batches | None, timeout: int, say, runner=None):
    """S2: a full mesh of ib_write_lat pairs in groups, pruning, the latency gate (ccrhost.fleet.slurm_mesh);
    ``runner``: each round another way than Slurm's (slurm_mesh.run_mesh)."""
    from ccrhost.fleet.slurm_mesh import run_mesh

    opts = mesh_options([fleet.settings[n] for n in names], timeout, say)
    devices = {}
    for name in names:
        ports = [p for p in fleet.verdicts[name].readings.ports if p.active and not p.efa]
        if ports:
            devices[name] = sorted(p.device for p in ports)[0]
    for name in names:
        if name not in devices:
            add_findings(fleet.verdicts[name], [Reason(UNKNOWN, "accept_not_run",
                                                       "S2 mesh: no active compute RDMA port to test from")])
    outcome = run_mesh(None, {n: fleet.addresses[n] for n in devices}, devices, opts, say, batches, runner)
    for name, found in outcome.reasons.items():
        add_findings(fleet.verdicts[name], list(found))
    return outcome


def stage_scale(fleet: Fleet, names: list[str], batches: Batches | None, nccl, say, launch=None) -> object:
    """S4: all-reduce over growing groups, a failing step bisected (ccrhost.fleet.slurm_scale); ``launch``
    runs a group where Slurm does not (slurm_scale.run_scale)."""
    from ccrhost.fleet.slurm_nccl import node_infos
    from ccrhost.fleet.slurm_scale import run_scale

    infos = node_infos({n: fleet.verdicts[n] for n in names}, {n: fleet.addresses[n] for n in names})
    for name in names:
        if name not in infos:  # never a pass on what was not run
            add_findings(fleet.verdicts[name], [Reason(UNKNOWN, "accept_not_run",
                                                       "S4 scale: no GPU read on the node: nothing to run on")])
    outcome = run_scale(None, infos, nccl, say, batches=batches, launch=launch)
    for name, found in outcome.reasons.items():
        add_findings(fleet.verdicts[name], [found])
    return outcome


def mesh_details(got) -> dict:
    """S2's account in the run's report (accept.json's details)."""
    return {"rounds": got.rounds, "pruned": [p.node for p in got.pruned], "pairs": [p.to_dict() for p in got.pairs]}


def scale_details(got) -> dict:
    """S4's account in the run's report: each group's run, why it ran, and who was admitted."""
    return {"runs": [{"group": list(r.group), "passed": r.passed, "busbw": r.busbw, "purpose": r.purpose,
                      "step": r.step} for r in got.runs], "admitted": list(got.admitted)}


def stage_soak(fleet: Fleet, names: list[str], batches: Batches, vopts: VerifyOptions, minutes: float | None, say,
               clock=time.time) -> None:
    """S5: the passive check (its counters stored), the GEMM load on every GPU for the soak's length, the check
    again: its counter, XID and ECC rules judge what the load did, and the sustained GEMM its figure."""
    run_checks(fleet, names, batches, vopts, say)
    seconds = {n: int(round(60 * (minutes or fleet.settings[n].accept_soak_minutes))) for n in names}
    for length in sorted(set(seconds.values())):
        group = [n for n in names if seconds[n] == length]
        for name, got in run_gemm(fleet, group, batches, vopts, length, say, "S5 soak").items():
            merge_dcgm(fleet, name, got, clock())
    reached = run_checks(fleet, names, batches, vopts, say)
    for name in names:
        if name in reached:
            fleet.verdicts[name] = fleet.judge(name)


class StageBatches(Batches):
    """The run's batches as one stage sees them: nothing held once its ``deadline`` (time.monotonic) has
    passed (the stage's budget; those nodes are ``late``), and, where the stage's nodes fit the cap, one
    allocation for the whole stage (:meth:`whole`) that every hold inside it shares: a stage of many rounds
    (the mesh, the scale's groups) does not wait on an allocation per round."""

    def __init__(self, inner: Batches, deadline: float):
        self.__dict__.update(inner.__dict__)
        self.inner, self.deadline, self.late = inner, deadline, set()
        self.job, self.taken = None, None

    @contextmanager
    def whole(self, nodes: list[str]):
        if len(nodes) > self.cap or time.monotonic() > self.deadline:
            yield self
            return
        with self.inner.hold(nodes) as (job, taken):
            self.job, self.taken = job, list(taken)
            try:
                yield self
            finally:
                self.job, self.taken = None, None

    def chunks(self, names: list[str]) -> list[list[str]]:
        return [list(names)] if self.taken is not None else self.inner.chunks(names)

    def hold(self, nodes):
        if time.monotonic() > self.deadline:
            self.late.update(nodes)
            return nullcontext((None, []))
        if self.taken is not None:
            return nullcontext((self.job, [n for n in nodes if n in self.taken]))
        return self.inner.hold(nodes)
