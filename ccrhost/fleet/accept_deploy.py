"""The acceptance stages from a pyinfra deploy, for clusters without Slurm
(``pyinfra -y INVENTORY deploys/accept.py``; issue 50, docs/accept.md).

The same stages, certificates and judges as ``ccrhost slurm accept``
(ccrhost.fleet.accept, accept_stages): each node's stored certificate
decides what runs again (model/certificate.to_run), a node that fails a
stage or cannot run it goes no further, a fleet stage (mesh, pairs) runs
with every live node, the certified ones as partners. What touches the
nodes is a :class:`Runners` (ccrhost.fleet.accept_pyinfra over pyinfra's
SSH connections; tests give fakes); this module only orders and judges.

Where this path differs from Slurm's:
- a node whose GPUs hold compute processes (fleet/busy) is not touched: no
  stage, no certificate written, UNKNOWN ``node_busy``;
- S0 is the node's passive verdict from the deploy's snapshot, as
  ``deploys/verify.py`` judges it, its stored active results left out;
- S1's all-reduce modes run where the node's ``verify_allreduce`` is on
  (its ``verify_allreduce_modes``), S3's pair mode where
  ``verify_allreduce_launcher`` is set;
- S4 launches each group's all-reduce with mpirun from the group's first
  node (``verify_allreduce_launcher: mpirun``, as S3's pairs); a node
  without that launcher is UNKNOWN ``accept_not_run`` saying so, never a pass;
- under ``--dry`` only S0 runs (read-only); the stages each node would run
  are said, nothing is measured and nothing written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ccrhost.fleet import accept as common
from ccrhost.fleet.accept_stages import (Fleet, judge_pairs, merge_dcgm, mesh_details, not_run, scale_details,
                                         stage_mesh)
from ccrhost.model import certificate as cm
from ccrhost.model.status import OK, UNKNOWN, WARN, Reason
from ccrhost.model.verdict import add_findings

RUN_PREFIX = "ccrhost-accept-deploy"


@dataclass
class Runners:
    """What the stages ask of the nodes, each over many nodes at once."""

    snapshots: Callable      # (names, again: bool) -> {name: NodeSnapshot}; again: read anew
    certificates: Callable   # (names) -> {name: stored certificate text, "" where none}
    busy: Callable           # (names) -> {name: GpuWork} for the names with GPU work (or unreadable)
    dcgm: Callable           # (names, level) -> {name: ActiveResult}
    gemm: Callable           # (names, seconds) -> {name: ActiveResult}
    singles: Callable        # (names) -> {name: [ActiveResult]} (the single-node all-reduce modes)
    mesh_round: Callable     # (pairs, addresses, devices, MeshOptions) -> [PairOutcome]
    bandwidth: Callable      # (names) -> {name: HostMeasurement} (ib_write_bw pairs)
    pair_allreduce: Callable  # (names) -> {name: ActiveResult} (the all-reduce pair mode)
    scale_launch: Callable = None  # (job, [NodeInfo], NcclOptions, port, timeout) -> ToolRun: one group's run


@dataclass
class DeployFleet(Fleet):
    """The run's nodes as the deploy reads them: each node's latest snapshot, and the fabric reading its
    window starts from (the run's first, or the soak's start)."""

    snaps: dict = field(default_factory=dict)
    firsts: dict = field(default_factory=dict)

    def judge(self, name: str):
        from ccrhost.model.allreduce import AllReduceReading
        from ccrhost.operations.verify import node_verdict

        results = self.allreduce.get(name)
        reading = AllReduceReading(time.time(), dict(results)) if results else None
        return node_verdict(self.snaps[name], self.settings[name], self.measured.get(name), None,
                            self.firsts.get(name), reading, None, self.dcgm.get(name))


@dataclass
class NodeOutcome:
    """What the deploy does with one node: store ``certificate`` (None: nothing to store), then pass it
    (certified) or fail it with ``message``."""

    state: str
    message: str
    certificate: cm.Certificate | None = None
    ran: tuple[str, ...] = ()
    planned: tuple[str, ...] = ()   # the stages its certificate did not hold (those a dry run would run)


def _passed(fleet: Fleet, name: str) -> bool:
    verdict = fleet.verdicts.get(name)
    return verdict is not None and verdict.status in (OK, WARN)


def stage_check(fleet: DeployFleet, names: list[str], runners: Runners, report_dir: str, clock) -> dict:
    """S0: each node's passive verdict from a fresh snapshot, its stored certificate read back beside it;
    the stages each node must run (model/certificate.to_run on the newer of its own and the report's copy)."""
    from ccrhost.node.certificate import parse, stored_from
    from ccrhost.operations.verify import node_verdict

    snaps = runners.snapshots(names, True)
    texts = runners.certificates(names)
    plan = {}
    for name in names:
        settings = fleet.settings[name]
        if name not in snaps:
            fleet.verdicts[name] = not_run("S0 passive check: the node could not be read")
            plan[name] = ()
            continue
        fleet.snaps[name] = snaps[name]
        fleet.firsts[name] = snaps[name].fabric
        fleet.verdicts[name] = verdict = node_verdict(snaps[name], settings, first=snaps[name].fabric)
        text = texts.get(name)
        got = parse(text.encode(), settings.accept_certificate) if text else None
        present = common._versions(fleet, name)
        verdict.readings.certificate = stored_from(got, settings.accept_certificate, settings.accept_stages,
                                                   present, clock())
        prior = common._prior(fleet, name, report_dir)
        plan[name] = (prior, cm.to_run(prior, settings.accept_stages, clock(), present,
                                       valid_for=common._valid_for(fleet, name)))
    return plan


def stage_node(fleet: DeployFleet, names: list[str], runners: Runners, clock) -> None:
    """S1: DCGM diag at each node's accept_dcgm_level, the GEMM for its verify_gemm_seconds, and the
    single-node all-reduce modes where its verify_allreduce is on."""
    from ccrhost.model.active import ActiveReading

    missing: dict[str, list[str]] = {}
    for level in sorted({fleet.settings[n].accept_dcgm_level for n in names}):
        group = [n for n in names if fleet.settings[n].accept_dcgm_level == level]
        got = runners.dcgm(group, level)
        for name in group:
            if name not in got:
                missing.setdefault(name, []).append(f"DCGM diag level {level}")
                continue
            fleet.dcgm[name] = ActiveReading(clock(), {f"{got[name].check}/{got[name].mode}": got[name].to_dict()},
                                             required=True)
    _gemm(fleet, names, runners, lambda n: fleet.settings[n].verify_gemm_seconds, clock)
    reduced = [n for n in names if fleet.settings[n].verify_allreduce]
    got = runners.singles(reduced) if reduced else {}
    for name in reduced:
        if name in got:
            fleet.allreduce[name] = {r.mode: r.to_dict() for r in got[name]}
        else:
            missing.setdefault(name, []).append("the single-node all-reduce modes")
    for name in names:
        fleet.verdicts[name] = fleet.judge(name)
        _unmeasured(fleet, name, "S1 node-local", missing.get(name))


def _unmeasured(fleet: Fleet, name: str, title: str, what: list[str] | None) -> None:
    """A run that gave the node no result leaves it unproven (UNKNOWN accept_not_run), never passed."""
    if what:
        add_findings(fleet.verdicts[name], [Reason(UNKNOWN, "accept_not_run",
                                                   f"{title}: {', '.join(what)}: the node gave no result")])


def _gemm(fleet: DeployFleet, names: list[str], runners: Runners, seconds_of, clock) -> None:
    lengths = {n: int(round(seconds_of(n))) for n in names}
    for length in sorted(set(lengths.values())):
        got = runners.gemm([n for n in names if lengths[n] == length], length)
        for name in [n for n in names if lengths[n] == length]:
            merge_dcgm(fleet, name, [got[name]] if name in got else "the node gave no result", clock())


def stage_mesh_deploy(fleet: DeployFleet, names: list[str], runners: Runners, say) -> object:
    """S2: accept_stages.stage_mesh, each round's ib_write_lat ends over pyinfra's connections."""
    timeout = min(fleet.settings[n].accept_mesh_timeout for n in names)
    return stage_mesh(fleet, names, None, timeout, say, runner=runners.mesh_round)


def stage_pairs(fleet: DeployFleet, names: list[str], runners: Runners) -> None:
    """S3: ib_write_bw pairs covering every node (the verification's pairing and isolation), and the
    all-reduce pair mode across the nodes whose verify_allreduce_launcher launches it."""
    measured = runners.bandwidth(names)
    fleet.measured.update(measured)
    missing = {n: ["ib_write_bw"] for n in names if n not in measured}
    launched = [n for n in names if fleet.settings[n].verify_allreduce
                and fleet.settings[n].verify_allreduce_launcher != "none"]
    got = runners.pair_allreduce(launched) if len(launched) > 1 else {}
    for name in launched:
        if name in got:
            fleet.allreduce[name] = {**fleet.allreduce.get(name, {}), got[name].mode: got[name].to_dict()}
        elif len(launched) > 1:
            missing.setdefault(name, []).append("the all-reduce pair mode")
    for name in names:
        judge_pairs(fleet, name)
        _unmeasured(fleet, name, "S3 pair bandwidth", missing.get(name))


def stage_scale(fleet: DeployFleet, names: list[str], runners: Runners, say) -> object:
    """S4: the all-reduce over growing groups, launched with mpirun (the nodes whose verify_allreduce_launcher
    is mpirun), a failing step bisected as on Slurm (accept_stages.stage_scale); UNKNOWN for the others."""
    from ccrhost.fleet.accept_stages import stage_scale as admit_groups
    from ccrhost.fleet.slurm_nccl import NcclOptions

    launched = [n for n in names if fleet.settings[n].verify_allreduce_launcher == "mpirun"]
    for name in names:
        if name not in launched:
            launcher = fleet.settings[name].verify_allreduce_launcher
            add_findings(fleet.verdicts[name], [Reason(
                UNKNOWN, "accept_not_run", f"S4 scale: not run from a pyinfra deploy: verify_allreduce_launcher "
                f"{launcher}: the growing groups' all-reduce launches with mpirun here, or through Slurm "
                "(ccrhost slurm accept); or leave scale out of accept_stages")])
    if not launched:
        return None
    s = fleet.settings[launched[0]]
    nccl = NcclOptions(binary=s.verify_allreduce_binary, max_bytes=s.verify_allreduce_max_bytes,
                       iters=s.verify_allreduce_iters, timeout=s.verify_allreduce_timeout,
                       port=s.verify_allreduce_port, min_busbw=s.verify_allreduce_min_busbw,
                       max_nodes=max(len(launched), 2), platform=s.platform())
    return admit_groups(fleet, launched, None, nccl, say, launch=runners.scale_launch)


def stage_soak(fleet: DeployFleet, names: list[str], runners: Runners, clock) -> None:
    """S5: a snapshot (the counters' window starts there), the GEMM load on every GPU for the node's
    accept_soak_minutes, a snapshot again: the counter, XID and ECC rules judge what the load did."""
    before = runners.snapshots(names, True)
    _gemm(fleet, names, runners, lambda n: 60 * fleet.settings[n].accept_soak_minutes, clock)
    after = runners.snapshots(names, True)
    for name in names:
        if name not in before or name not in after:
            fleet.verdicts[name] = not_run("S5 soak: the node could not be read before and after the load")
            continue
        fleet.snaps[name], fleet.firsts[name] = after[name], before[name].fabric
        fleet.verdicts[name] = fleet.judge(name)


def run(names: list[str], settings: dict, addresses: dict, runners: Runners, report_dir: str, dry: bool = False,
        say=lambda line: None, clock=time.time) -> tuple[dict[str, NodeOutcome], common.Outcome]:
    """Every stage each node's certificate does not hold, in order; each node's outcome and the run's."""
    from ccrhost.model.busy import busy_reason

    run_id = f"{RUN_PREFIX}-{int(clock())}"
    out = common.Outcome()
    active = [n for n in names if any(s != "check" for s in settings[n].accept_stages)]
    busy = {n: busy_reason(w, "acceptance", "verify_active_when_busy") for n, w in runners.busy(active).items()}
    for name, reason in busy.items():
        out.untouched[name] = reason.message
    todo = [n for n in names if n not in out.untouched]
    fleet = DeployFleet({n: addresses[n] for n in todo}, settings={n: settings[n] for n in todo})
    certs: dict = {}
    began = clock()
    planned = stage_check(fleet, todo, runners, report_dir, clock) if todo else {}
    plan = {n: p[1] if p else () for n, p in planned.items()}
    for name in todo:
        if planned.get(name) and planned[name][0] is not None:
            certs[name] = planned[name][0]
        common._record(fleet, certs, out, name, "check", began, run_id, clock)
        out.ran.setdefault(name, []).append("check")
        if not _passed(fleet, name):
            out.stopped[name] = "check"
    alive = [n for n in todo if _passed(fleet, n)]
    for stage in cm.STAGES[1:] if not dry else ():
        need = [n for n in alive if stage in plan[n]]
        if not need:
            continue
        runs = list(alive) if stage in cm.FLEET_STAGES else need
        say(f"{cm.TITLES[stage]}: {len(need)} node(s)"
            + (f", {len(runs) - len(need)} partner(s)" if len(runs) > len(need) else ""))
        began = clock()
        _stage(stage, fleet, runs, runners, out, say, clock)
        for name in runs:
            failed = not _passed(fleet, name)
            if stage in plan[name] or failed:  # a partner that fails now has it recorded: never left certified
                common._record(fleet, certs, out, name, stage, began, run_id, clock)
                out.ran[name].append(stage)
            if failed:
                out.stopped[name] = stage
                alive.remove(name)
                say(f"{name}: {cm.TITLES[stage]} {fleet.verdicts[name].status}: goes no further")
    results = {}
    for name in todo:
        cert, out.states[name] = common.completed(fleet, name, certs.get(name), run_id, clock)
        if cert is not None:
            out.certificates[name] = cert
        results[name] = NodeOutcome(out.states[name], _message(out, name, cert, dry, plan[name]), cert,
                                    tuple(out.ran.get(name, ())), tuple(s for s in plan[name] if s != "check"))
    for name, reason in busy.items():
        results[name] = NodeOutcome("untouched", f"acceptance: {reason.level} {reason.code}: {reason.message}")
    if not dry:
        common.write_report(report_dir, out, run_id)
    return results, out


def _stage(stage: str, fleet: DeployFleet, runs: list[str], runners: Runners, out: common.Outcome, say,
           clock) -> None:
    if stage == "node":
        stage_node(fleet, runs, runners, clock)
    elif stage == "mesh":
        out.details["mesh"] = mesh_details(stage_mesh_deploy(fleet, runs, runners, say))
    elif stage == "pairs":
        stage_pairs(fleet, runs, runners)
    elif stage == "scale":
        got = stage_scale(fleet, runs, runners, say)
        if got is not None:
            out.details["scale"] = scale_details(got)
    elif stage == "soak":
        stage_soak(fleet, runs, runners, clock)


def _message(out: common.Outcome, name: str, cert, dry: bool, plan: tuple[str, ...]) -> str:
    """The line the deploy logs for the node (certified) or fails it with: the stage that stopped it, its
    status, codes and first finding."""
    if dry:
        left = [cm.TITLES[s] for s in plan if s != "check"]
        return f"acceptance (dry run): would run {', '.join(left) if left else 'no stage beyond S0'}"
    state = out.states[name]
    if state == cm.CERTIFIED:
        return "acceptance: certified (" + ", ".join(s for s in cm.STAGES if s in cert.stages
                                                      and cert.stages[s].status != cm.SKIPPED) + ")"
    stopped = cert.stages.get(out.stopped[name]) if cert is not None and name in out.stopped else None
    stopped = stopped or (cm.first_failure(cert, cm.STAGES) if cert is not None else None)
    if stopped is None:
        return f"acceptance: {state}: a stage it asks for has not run"
    found = [r for r in stopped.reasons if r["level"] == stopped.status]
    codes = ",".join(dict.fromkeys(r["code"] for r in found))
    return (f"acceptance {state} at {cm.TITLES[stopped.stage]}: {stopped.status} {codes}"
            + (f": {found[0]['message']}" if found else ""))
