"""``ccrhost slurm accept``: staged acceptance of new and repaired nodes,
ending in a certificate per node (issue 50; docs/accept.md).

The run takes the nodes asked for (a hostlist, or a partition's drained
nodes), leaves every node running a job untouched, holds the rest in a
reservation of its own and resumes them inside it (so only its jobs land
there), then runs the stages in order (ccrhost.fleet.accept_stages), each
on the nodes whose certificate does not already hold it, at most
``max_nodes`` nodes at once. A node that fails a stage, or whose stage could
not run (UNKNOWN), goes no further. Every stage is recorded in the node's
certificate (model/certificate.py), stored on the node and in the report
directory. At the end the nodes not certified are drained with the stage
and its codes, and the reservation is deleted: only certified nodes return
to service. A second run starts from the certificates the nodes keep
(each node's check reads its own), so it re-runs only what did not pass.
"""

from __future__ import annotations

import getpass
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from ccrhost.fleet.accept_stages import (
    Fleet,
    StageBatches,
    mesh_details,
    not_run,
    scale_details,
    stage_check,
    stage_mesh,
    stage_node,
    stage_pairs,
    stage_scale,
    stage_soak,
)
from ccrhost.fleet.slurm_client import SlurmError, hostlist, list_nodes, run_slurm, run_steps
from ccrhost.fleet.slurm_job import Batches, Progress, VerifyError, VerifyOptions
from ccrhost.model import certificate as cm
from ccrhost.model.managed import CHECK_CONFIG
from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN, Reason, worst
from ccrhost.model.verdict import EXIT_CODES

REPORT = "accept.json"
CERTS = "certificates"


class AcceptError(VerifyError):
    def show(self, file=None):
        import click

        click.echo(f"ccrhost slurm accept: {self.message}", err=True)


@dataclass
class AcceptOptions:
    partition: str | None = None
    nodelist: str | None = None
    ccrhost: str = "/usr/local/bin/ccrhost"
    config: str = CHECK_CONFIG
    report_dir: str = "ccrhost-report"
    max_nodes: int = 8                 # nodes in a stage at once (K)
    stages: tuple[str, ...] | None = None  # run only these (else each node's accept_stages)
    again: tuple[str, ...] = ()        # run these even where the certificate holds them (a repair's)
    budget: float = 24 * 3600          # the whole run, seconds
    soak_minutes: float | None = None  # else each node's accept_soak_minutes
    reservation: str | None = None     # its name; None: ccrhost-accept-<time>
    dry_run: bool = False
    wait: float = 600
    check_timeout: float = 300
    sbatch_options: tuple[str, ...] = ()
    nccl: object = None                # slurm_nccl.NcclOptions for S1's single-node modes and S4
    measure_seconds: int = 5
    measure_timeout: int = 60
    measure_retries: int = 1
    measure_port: int = 18515
    measure_ports: int | None = None   # at most this many ports per node in S3 (None: every active one)
    mesh_timeout: int = 20             # seconds an ib_write_lat end waits for its peer (S2)


@dataclass
class Outcome:
    certificates: dict = field(default_factory=dict)   # node -> Certificate
    states: dict = field(default_factory=dict)         # node -> certified, failed, incomplete, ...
    untouched: dict = field(default_factory=dict)      # node -> why (running a job, down)
    ran: dict = field(default_factory=dict)            # node -> the stages this run ran for it
    details: dict = field(default_factory=dict)        # stage -> what its fleet runs showed (mesh pairs, groups)
    stopped: dict = field(default_factory=dict)        # node -> the stage where it stopped in this run


def _targets(opts: AcceptOptions) -> dict:
    from ccrhost.model.drain_reason import replace_drain

    nodes = list_nodes(opts.partition, opts.nodelist)
    if not opts.nodelist:  # a partition: its drained nodes (new or back from repair), none drained for replacement
        nodes = {n: v for n, v in nodes.items() if "drain" in v.state and not replace_drain(v.reason or "")}
    if not nodes:
        raise AcceptError(f"no nodes to accept{f' in partition {opts.partition}' if opts.partition else ''}"
                          f"{f' matching {opts.nodelist}' if opts.nodelist else ''}")
    return nodes


def _untouched(state: str) -> str | None:
    """Why a node is left alone: a job runs there (draining: drained, a job still running), it is down, or
    slurmctld does not hear it (``*``); None: it may be accepted."""
    if any(w in state for w in ("alloc", "mix", "comp", "draining")):
        return "running a job"
    if "down" in state:
        return "down"
    return "not responding" if state.endswith("*") else None


def _reserve_line(name: str, nodes: list[str]) -> list[str]:
    """The reservation that keeps every other job off ``nodes`` (no IGNORE_JOBS: a job that started since
    they were listed makes it fail, and nothing is touched). It has no end of its own: the run deletes it,
    and a run killed outright leaves its nodes out of service, never back in it."""
    return ["scontrol", "create", "reservation", f"ReservationName={name}", f"Nodes={hostlist(nodes)}",
            "StartTime=now", "Duration=UNLIMITED", f"Users={getpass.getuser()}"]


def _resume_line(nodes: list[str]) -> list[str]:
    return ["scontrol", "update", f"NodeName={hostlist(nodes)}", "State=RESUME"]


def _resume(name: str, nodes: list[str], minutes: int, say) -> None:
    """The drained ones of ``nodes`` resumed inside the reservation, once slurmctld hears them."""
    say(f"reservation {name} holds {hostlist(nodes)} until the run deletes it (budget {minutes} min)")
    drained = [n for n, v in list_nodes(nodelist=hostlist(nodes)).items() if "drain" in v.state]
    if not drained:
        return
    run_slurm(*_resume_line(drained), check=False)
    say(f"resumed inside the reservation: {hostlist(drained)}")
    # slurmctld pings a resumed node before it takes jobs (idle*, "not responding"): wait for the answer
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = list_nodes(nodelist=hostlist(drained))
        if all(not v.state.endswith("*") for v in now.values()):
            break
        time.sleep(0.5)


def _stop(signum, frame):
    """SIGTERM or SIGHUP (a closed session, a job's time limit): end as ^C does, through the drain-back."""
    raise KeyboardInterrupt(f"signal {signum}")


def _repair_stages(node) -> tuple[str, ...]:
    """The stages a node drained by ccrhost must run again whatever its certificate says: those its drain
    reason's codes concern (model/certificate.stages_for), as remediate asks for a repaired node."""
    from ccrhost.model.drain_reason import parse_drain_reason
    from ccrhost.model.reasons import SOURCES

    parsed = parse_drain_reason(node.reason) if node.reason else None
    return cm.stages_for(parsed.codes, SOURCES) if parsed is not None and parsed.codes else ()


def _wanted(opts: AcceptOptions, settings) -> tuple[str, ...]:
    own = settings.accept_stages if settings is not None else cm.STAGES
    return tuple(s for s in own if opts.stages is None or s in opts.stages)


def _certificate(data, name: str):
    try:
        cert = cm.Certificate.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return cert if cert.node == name else None


def _prior(fleet: Fleet, name: str, report_dir: str):
    """The node's certificate: the one it keeps (its own check read it) or the report directory's copy,
    whichever is newer. Where the node keeps none, the copy counts only if a stage in it did not pass (a
    node its prolog drained before it could be given its copy): a passing copy of a node that lost its own
    (reinstalled, or a new one under an old name) proves nothing about it."""
    verdict = fleet.verdicts.get(name)
    stored = getattr(verdict.readings, "certificate", None) if verdict is not None else None
    own = _certificate(stored.data, name) if stored is not None and not stored.error and stored.data else None
    try:
        copy = _certificate(json.loads((Path(report_dir) / CERTS / f"{name}.json").read_text()), name)
    except (OSError, ValueError):
        copy = None
    if own is None:
        return copy if copy is not None and cm.first_failure(copy, cm.STAGES) is not None else None
    if copy is None:
        return own
    return max((own, copy), key=lambda c: max((r.at for r in c.stages.values()), default=0.0))


def _versions(fleet: Fleet, name: str) -> dict:
    from ccrhost.model.certificate_view import versions

    verdict = fleet.verdicts.get(name)
    return versions(verdict.readings) if verdict is not None and verdict.evaluated else {}


def _stage_result(fleet: Fleet, name: str, stage: str, started: float, run_id: str, clock) -> cm.StageResult:
    verdict = fleet.verdicts[name]
    reasons = tuple({"level": r.level, "code": r.code, "message": r.message} for r in verdict.reasons
                    if r.level != OK)
    figures = dict((fleet.figures.get(name) or {}).get(stage) or {})
    if stage in ("node", "pairs", "soak"):  # the GEMM's figure: S1's and the soak's own, the measured CCR's F
        figures.update((fleet.figures.get(name) or {}).get("gemm") or {})
    return cm.StageResult(stage, verdict.status, clock(), round(clock() - started, 1), reasons, figures,
                          _versions(fleet, name), run_id)


def run_accept(opts: AcceptOptions, stream=None, clock=time.time) -> tuple[int, Outcome]:
    say = Progress(stream)
    stream = stream if stream is not None else sys.stderr
    start = time.monotonic()
    nodes = _targets(opts)
    out = Outcome()
    for name, node in nodes.items():
        if (why := _untouched(node.state)) is not None:
            out.untouched[name] = f"{node.state}: {why}"
    todo = [n for n in nodes if n not in out.untouched]
    say(f"{len(nodes)} node(s) to accept; not touched: "
        + (", ".join(f"{n} ({w})" for n, w in sorted(out.untouched.items())) or "none"))
    run_id = opts.reservation or f"ccrhost-accept-{int(clock())}"
    minutes = max(1, math.ceil(opts.budget / 60))
    if opts.dry_run or not todo:
        for line in [_reserve_line(run_id, todo), _resume_line(todo)] if todo else []:
            stream.write(f"dry run: would run: {' '.join(line)}\n")
        if todo:
            stream.write(f"dry run: would run the stages each node's certificate does not hold, of "
                         f"{', '.join(opts.stages or cm.STAGES)}, at most {opts.max_nodes} nodes at once; "
                         "nothing changed\n")
        return (0 if opts.dry_run else EXIT_CODES[UNKNOWN]), out
    vopts = VerifyOptions(partition=opts.partition, ccrhost=opts.ccrhost, config=opts.config,
                          report_dir=opts.report_dir, wait=opts.wait,
                          check_timeout=opts.check_timeout, measure_seconds=opts.measure_seconds,
                          measure_timeout=opts.measure_timeout, measure_retries=opts.measure_retries,
                          measure_port=opts.measure_port, measure_ports=opts.measure_ports,
                          sbatch_options=(*opts.sbatch_options, f"--reservation={run_id}"))
    fleet = Fleet({n: nodes[n].address for n in todo})
    batches = Batches(vopts, say, opts.max_nodes)
    batches.free_states = ("idle", "reserved")
    try:
        run_slurm(*_reserve_line(run_id, todo))
    except SlurmError as exc:
        raise AcceptError(f"could not reserve {hostlist(todo)}: {exc}; nothing was changed") from None
    certs: dict = {}
    finished = False
    again = {n: _repair_stages(nodes[n]) for n in todo}
    old = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        _resume(run_id, todo, minutes, say)
        # where every node fits the cap, one allocation for the whole run: each node's prolog runs once,
        # not once a stage, and no stage waits on an allocation of its own
        run = StageBatches(batches, math.inf)
        with run.whole(todo):
            _run_stages(opts, fleet, todo, run, vopts, out, certs, run_id, start, say, clock, again)
            _finish(opts, fleet, todo, run, out, certs, say)
        finished = True
    finally:
        if not finished:  # interrupted (an error, ^C): no node it resumed returns to service uncertified
            reason = "ccrhost: accept_not_run: UNKNOWN: acceptance interrupted before its end [action investigate]"
            run_slurm("scontrol", "update", f"NodeName={hostlist(todo)}", "State=DRAIN", f"Reason={reason}",
                      check=False)
            say(f"interrupted: {hostlist(todo)} drained again")
        run_slurm("scontrol", "delete", f"ReservationName={run_id}", check=False)
        say(f"reservation {run_id} deleted")
        for sig, handler in old.items():
            signal.signal(sig, handler)
    paths = write_report(opts.report_dir, out, run_id)
    stream.write("\n" + text_table(out, clock()))
    stream.write(f"Reports: {', '.join(str(p) for p in paths)}\n")
    levels = [OK if s == cm.CERTIFIED else FAIL if s == cm.FAILED else UNKNOWN for s in out.states.values()]
    levels += [UNKNOWN for _ in out.untouched]  # a node asked for and left alone is not accepted
    return EXIT_CODES[worst(levels or [OK])], out


def _run_stages(opts, fleet: Fleet, todo, batches, vopts, out: Outcome, certs, run_id, start, say, clock,
                again: dict | None = None) -> None:
    from ccrhost.fleet.slurm_nccl import NcclOptions

    nccl = opts.nccl or NcclOptions()
    plan: dict[str, tuple[str, ...]] = {}
    alive = list(todo)
    for stage in cm.STAGES:
        left = opts.budget - (time.monotonic() - start)
        if stage == "check":
            need = list(alive)
        else:
            need = [n for n in alive if stage in plan.get(n, ())]
        if not need:
            continue
        if left <= 0:
            for name in need:
                fleet.verdicts[name] = _late(stage, "the run's budget")
                _record(fleet, certs, out, name, stage, time.time(), run_id, clock)
            break
        budget = min(left, min(fleet.settings[n].accept_budget(stage) for n in need if n in fleet.settings)
                     if any(n in fleet.settings for n in need) else left)
        staged = StageBatches(batches, time.monotonic() + budget)
        # a fleet stage runs with every live node (the certified ones as partners) where any node needs it
        runs = list(alive) if stage in cm.FLEET_STAGES else need
        say(f"{cm.TITLES[stage]}: {len(need)} node(s)" + (f", {len(runs) - len(need)} partner(s)"
                                                            if len(runs) > len(need) else ""))
        began = time.time()
        with staged.whole(runs) as held:
            _stage(stage, opts, fleet, runs, held, vopts, nccl, plan, certs, say, clock, out, again or {})
        say(f"{cm.TITLES[stage]}: done in {time.time() - began:.1f} s")
        for name in staged.late:
            if name in runs and getattr(fleet.verdicts.get(name), "status", None) != FAIL:  # a FAIL stands
                fleet.verdicts[name] = _late(stage, f"its budget of {budget:g} s")
        for name in runs:
            verdict = fleet.verdicts.get(name)
            # a partner (its certificate held the stage) that fails it now has it recorded too: drained,
            # never left certified by an older pass
            failed_now = verdict is None or verdict.status not in (OK, WARN)
            if stage == "check" or stage in plan.get(name, ()) or failed_now:
                _record(fleet, certs, out, name, stage, began, run_id, clock)
                out.ran.setdefault(name, []).append(stage)
            if failed_now:
                out.stopped[name] = stage
        write_report(opts.report_dir, out, run_id)  # each stage kept as it ends: an interrupted run resumes here
        for name in list(alive):
            verdict = fleet.verdicts.get(name)
            if verdict is None or verdict.status not in (OK, WARN):
                alive.remove(name)
                say(f"{name}: {cm.TITLES[stage]} {verdict.status if verdict else UNKNOWN}: goes no further")
    for name in todo:
        certs[name], out.states[name] = completed(fleet, name, certs.get(name), run_id, clock)
        if certs[name] is None:
            del certs[name]


def completed(fleet: Fleet, name: str, cert, run_id: str, clock):
    """(the node's certificate with every stage its settings leave out recorded as skipped, its state).
    Certified means every stage the node's own settings ask for (--stages only narrows a run)."""
    wanted = _wanted_for(fleet, name)
    if cert is not None:
        for stage in cm.STAGES:
            if stage not in wanted and stage not in cert.stages:
                cert = cm.record(cert, name, cm.StageResult(stage, cm.SKIPPED, clock(), run=run_id),
                                 _valid_for(fleet, name), _versions(fleet, name), wanted)
    return cert, cm.state(cert, wanted, clock(), _versions(fleet, name))


def _stage(stage, opts, fleet: Fleet, runs, held, vopts, nccl, plan, certs, say, clock, out: Outcome,
           again: dict) -> None:
    """One stage on ``runs`` through ``held`` (the stage's batches)."""
    if stage == "check":
        stage_check(fleet, runs, held, vopts, say)
        for name in runs:
            settings = fleet.settings.get(name)
            wanted = _wanted(opts, settings)
            prior = _prior(fleet, name, opts.report_dir)
            if prior is not None:
                certs[name] = prior
            plan[name] = cm.to_run(prior, wanted, clock(), _versions(fleet, name),
                                   (*opts.again, *again.get(name, ())), valid_for=_valid_for(fleet, name))
    elif stage == "node":
        stage_node(fleet, runs, held, vopts, nccl, say, clock)
    elif stage == "mesh":
        out.details["mesh"] = mesh_details(stage_mesh(fleet, runs, held, opts.mesh_timeout, say))
    elif stage == "pairs":
        stage_pairs(fleet, runs, held, vopts, nccl, say, clock)
    elif stage == "scale":
        out.details["scale"] = scale_details(stage_scale(fleet, runs, held, nccl, say))
    elif stage == "soak":
        stage_soak(fleet, runs, held, vopts, opts.soak_minutes, say, clock)


def _late(stage: str, what: str):
    return replace(not_run(""), reasons=[Reason(UNKNOWN, "accept_budget_exceeded",
                                                f"{cm.TITLES[stage]}: not run within {what}")])


def _valid_for(fleet: Fleet, name: str) -> float:
    settings = fleet.settings.get(name)
    return float(settings.accept_valid_for) if settings is not None else 30 * 86400.0


def _record(fleet: Fleet, certs, out: Outcome, name: str, stage: str, began: float, run_id: str, clock) -> None:
    if name not in fleet.verdicts:
        fleet.verdicts[name] = not_run(f"{cm.TITLES[stage]}: the node gave no result")
    wanted = _wanted_for(fleet, name)
    result = _stage_result(fleet, name, stage, began, run_id, clock)
    certs[name] = cm.record(certs.get(name), name, result, _valid_for(fleet, name), _versions(fleet, name), wanted)
    out.certificates[name] = certs[name]


def _wanted_for(fleet: Fleet, name: str) -> tuple[str, ...]:
    settings = fleet.settings.get(name)
    return settings.accept_stages if settings is not None else cm.STAGES


def _finish(opts, fleet: Fleet, todo, batches: Batches, out: Outcome, certs, say) -> None:
    """Certificates onto the nodes (while the reservation holds them), then a drain for every node not
    certified, naming the stage that stopped it and its codes."""
    from ccrhost.model.drain_reason import drain_reason
    from ccrhost.node.certificate import store_script

    out.certificates.update(certs)
    # "@@stored" only once the file is in place: a node that gave output but could not write is not counted
    branches = {n: store_script(fleet.settings[n].accept_certificate, certs[n]) + ' && echo "@@stored"'
                for n in todo if n in certs and n in fleet.settings}
    stored = []
    for chunk in batches.chunks(list(branches)):
        with batches.hold(chunk) as (job, taken):
            if taken:
                got, err = run_steps(job, {n: branches[n] for n in taken}, "ccrhost-accept-store", 60)()
                stored += [n for n in taken if "@@stored" in got.get(n, ())]
                if err:
                    say(f"storing certificates: {err}")
    say(f"certificates stored on {len(stored)} of {len(todo)} node(s)")
    for name in todo:
        state = out.states.get(name, cm.INCOMPLETE)
        if state == cm.CERTIFIED:
            say(f"{name}: certified")
            continue
        verdict = fleet.verdicts.get(name) or not_run("no stage ran")
        if verdict.status in (OK, WARN):  # passed what ran, yet not certified (a stage left to run)
            verdict = not_run(f"not certified: {state}")
        # the stage this run's verdict comes from, so the reason names the stage its codes belong to
        where = cm.TITLES[out.stopped[name]] if name in out.stopped else "acceptance"
        # drained whatever the level: a node not certified never returns to service (an UNKNOWN too,
        # which a check's own drain leaves alone)
        reason = drain_reason(replace(verdict, reasons=[replace(r, message=f"{where}: {r.message}")
                                                        for r in verdict.reasons if r.level != OK]))
        done = run_slurm("scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}", check=False)
        say(f"{name}: {state} at {where}: " + (f"drained: {reason}" if done.returncode == 0
                                                else f"could not drain: {done.stderr.strip()}"))


def text_table(out: Outcome, now: float) -> str:
    """One line per node: its state, the stage that stopped it and why, or the stages it passed."""
    lines = [f"{'node':<16} {'state':<11} detail"]
    for name in sorted(set(out.states) | set(out.untouched)):
        if name in out.untouched:
            lines.append(f"{name:<16} {'untouched':<11} {out.untouched[name]}")
            continue
        cert = out.certificates.get(name)
        state = out.states[name]
        detail = ""
        if cert is not None:
            failed = next((r for r in cert.stages.values() if not r.passed), None)
            if failed is not None:
                codes = ",".join(dict.fromkeys(r["code"] for r in failed.reasons if r["level"] == failed.status))
                detail = f"{cm.TITLES[failed.stage]}: {failed.status} {codes}"
            else:
                detail = "passed: " + ", ".join(s for s in cm.STAGES if s in cert.stages
                                                 and cert.stages[s].status != cm.SKIPPED)
        ran = out.ran.get(name)
        lines.append(f"{name:<16} {state:<11} {detail}" + (f" (ran: {','.join(ran)})" if ran else ""))
    return "\n".join(lines) + "\n"


def write_report(folder: str, out: Outcome, run_id: str) -> list[Path]:
    root = Path(folder)
    (root / CERTS).mkdir(parents=True, exist_ok=True)
    for name, cert in out.certificates.items():
        path = root / CERTS / f"{name}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(cert.to_dict(), indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    doc = {"run": run_id, "states": dict(sorted(out.states.items())), "untouched": dict(sorted(out.untouched.items())),
           "ran": {n: list(s) for n, s in sorted(out.ran.items())}, "details": out.details,
           "certificates": {n: c.to_dict() for n, c in sorted(out.certificates.items())}}
    report = root / REPORT
    report.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return [report, root / CERTS]
