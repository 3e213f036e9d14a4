"""``ccrhost check --drain``: drain this node on FAIL through scontrol and
lift its own drain once the node is fit, within the drain cap (no drain
storm: model/drain_cap.py decides), and keep a job off the node where the
cap held (``--hold``). The reason's words: model/drain_reason.py.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time

from ccrhost.model.drain_reason import (COMMENT_FIELD, HELD_PREFIX, REASON_BYTES, REASON_FIELD, drain_reason, fit,
                                        measured_drain, parse_drain_reason, replace_drain, same_drain)
from ccrhost.model.history import opened_now
from ccrhost.model.managed import DRAIN_PREFIX
from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN
from ccrhost.model.verdict import Verdict, only_unproven


class DrainError(RuntimeError):
    """scontrol failed or hung: the node's drain state is not known."""


def _scontrol(args: list[str]) -> str:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DrainError(f"{os.path.basename(args[0])} {' '.join(args[1:3])}: {exc}") from None
    if out.returncode != 0:
        why = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[-1]
        raise DrainError(f"{os.path.basename(args[0])} {' '.join(args[1:3])} failed: {why}")
    return out.stdout


def show_node(node: str, scontrol: str) -> tuple[str | None, str | None]:
    """The node's (reason, comment) as slurmctld has them."""
    out = _scontrol([scontrol, "show", "node", node, "-o"]).strip()
    found = []
    for pattern in (REASON_FIELD, COMMENT_FIELD):
        match = pattern.search(out)
        value = match.group(1).strip() if match else None
        found.append(None if value in (None, "", "(null)", "none") else value)
    return found[0], found[1]


def current_reason(node: str, scontrol: str) -> str | None:
    return show_node(node, scontrol)[0]


class DrainNote(str):
    """What :func:`drain` did, in words; ``held``: the cap's decision when
    the drain cap kept the node from being drained; ``actions``: a dry
    run's scontrol lines, which it did not run."""
    held = None
    actions: tuple[str, ...] = ()


def _note(text: str, held=None, actions=()) -> DrainNote:
    note = DrainNote(text)
    note.held, note.actions = held, tuple(actions)
    return note


def would_drain(note: DrainNote) -> bool:
    return any(" State=DRAIN " in f" {a} " for a in note.actions)


def drain(verdict: Verdict, node: str | None = None, scontrol: str | None = None, measured: bool = False,
          unknown_drains: bool = False, cap=None, sinfo: str | None = None, dry_run: bool = False) -> DrainNote:
    """:func:`_drain`; with ``dry_run`` it reads Slurm as ever but changes
    nothing: the note says what it would have done and lists the scontrol
    lines (``actions``)."""
    actions: list[str] = []

    def act(args: list[str]) -> str:
        if dry_run:
            actions.append(shlex.join([os.path.basename(args[0]), *args[1:]]))
            return ""
        return _scontrol(args)

    note = _drain(verdict, node, scontrol, measured, unknown_drains, cap, sinfo, act, dry_run)
    if not dry_run:
        return note
    return _note(f"dry run, nothing changed: {note}" + (f"; would run: {' ; '.join(actions)}" if actions else ""),
                 note.held, actions)


def _drain(verdict: Verdict, node: str | None, scontrol: str | None, measured: bool, unknown_drains: bool, cap,
           sinfo: str | None, act, dry_run: bool) -> DrainNote:
    """Drain this node on FAIL, undrain it when OK or WARN, and never touch
    a reason someone else set (one that does not start with ``ccrhost:``).
    UNKNOWN changes nothing (the node's state is not known) unless
    ``unknown_drains``: in a prolog, where Slurm drains the node for the
    failing prolog anyway, the reason then says what could not be read
    instead of Slurm's bare "Prolog error". ``measured``: the verdict
    includes a bandwidth measurement, so it may also lift or rewrite a drain
    that rests on one. ``cap`` (a :class:`~ccrhost.model.drain_cap.DrainCap`):
    a new drain only while the cap has room (:func:`capped`); past it the
    node is not drained, its comment says so, and the note's ``held`` is
    the decision."""
    import shutil  # only a drain needs it; every check would pay its import

    if os.environ.get("SLURM_SCRIPT_CONTEXT") == "prolog_slurmd" and verdict.status in (OK, WARN):
        # Slurm allocates no drained node, so a node whose prolog runs
        # carries no drain to lift: no RPC to slurmctld from every node of
        # every job start (Slurm sets this variable since 21.08; older ones
        # ask as the health check does).
        return _note("no drain change (a node starting a job is not drained)")
    scontrol = scontrol or shutil.which("scontrol")
    if not scontrol:
        return _note("scontrol not found; not draining")
    # slurmd names the node in the prolog's and health check's environment;
    # its NodeName need not be the host name
    node = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    if unknown_drains and only_unproven(verdict):
        return _note(f"{node} not drained: UNKNOWN only for want of an active check's proof "
                     f"({', '.join(dict.fromkeys(r.code for r in verdict.reasons if r.level == UNKNOWN))})")
    reason, comment = show_node(node, scontrol)
    ours = reason is not None and reason.startswith(DRAIN_PREFIX)
    if reason is not None and not ours:
        return _note(f"{node} already has reason {reason!r} set by someone else; left alone")
    if ours and measured_drain(reason) and not measured:
        return _note(f"{node} stays drained: {reason!r} rests on a measurement this check cannot repeat")
    if ours and replace_drain(reason):
        return _note(f"{node} stays drained: {reason!r} is to be replaced; only an operator resumes it")
    if verdict.status == FAIL or (unknown_drains and verdict.status == UNKNOWN):
        text = drain_reason(verdict)
        if ours and (reason == text or same_drain(reason, text)) and not opened_now(verdict.readings.history):
            # stamped once per failure: the drain's time stays the failure's (the cap's window, remediate's
            # "booted after its drain"); a failure that returns (a new episode) is stamped again
            return _note(f"{node} stays drained: {reason}")
        if cap is not None and not ours:  # a new drain: only while the cap has room
            decision = capped(verdict, node, cap, scontrol, sinfo)
            if decision.held:
                return _held(verdict, node, cap, scontrol, comment, decision, "not drained", act, dry_run)
        act([scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={text}"])
        if cap is not None and not ours and not dry_run:
            # nodes that failed at the same moment all saw room: the first
            # ones by drain time stay drained, the others lift their own
            decision = capped(verdict, node, cap, scontrol, sinfo)
            if decision.held:
                act([scontrol, "update", f"NodeName={node}", "State=RESUME"])
                return _held(verdict, node, cap, scontrol, comment, decision,
                             "drained, then lifted again (others drained first)", act, dry_run)
        return _note(f"drained {node}: {text}")
    if verdict.status in (OK, WARN) and comment is not None and comment.startswith(HELD_PREFIX):
        act([scontrol, "update", f"NodeName={node}", "Comment="])
        if not dry_run:
            cap_textfile(cap, None)
    if ours and verdict.status in (OK, WARN):
        act([scontrol, "update", f"NodeName={node}", "State=RESUME"])
        return _note(f"resumed {node} (its ccrhost drain reason no longer holds)")
    return _note("no drain change")


# --- the drain cap: no drain storm (ccrhost/model/drain_cap.py) ----------------

def parse_sinfo_drains(text: str, node: str):
    """``sinfo -h -N -o '%N|%R|%H|%E'`` (a node once per partition, the
    reason last: it may hold '|'): the nodes that share a partition with
    ``node`` (all, when it is in none shown), and their ccrhost drains."""
    from datetime import datetime

    from ccrhost.model.drain_cap import Drained

    rows = []
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) == 4 and parts[0]:
            rows.append(tuple(p.strip() for p in parts))
    mine = {part for name, part, _, _ in rows if name == node}
    names = {name for name, part, _, _ in rows if part in mine or not mine}
    drained = {}
    for name, _, when, reason in rows:
        parsed = parse_drain_reason(reason) if name in names else None
        if parsed is None or name in drained:
            continue
        try:  # sinfo prints the reason's time in the local zone, as datetime reads it back
            since = datetime.strptime(when, "%Y-%m-%dT%H:%M:%S").timestamp()
        except ValueError:
            since = None
        drained[name] = Drained(name, parsed.codes, since)
    return len(names), list(drained.values())


def capped(verdict: Verdict, node: str, cap, scontrol: str, sinfo: str | None = None):
    """The cap's decision for ``node``, from the drains Slurm shows now."""
    from ccrhost.model.drain_cap import decide, drain_codes

    sinfo = sinfo or os.path.join(os.path.dirname(scontrol), "sinfo")
    out = _scontrol([sinfo, "-h", "-N", "-o", "%N|%R|%H|%E"])
    population, drained = parse_sinfo_drains(out, node)
    return decide(node, drain_codes(verdict.reasons), drained, population, cap, time.time())


def _held(verdict: Verdict, node: str, cap, scontrol: str, comment: str | None, decision, what: str,
          act=None, dry_run: bool = False) -> DrainNote:
    """Say loudly that the cap held: the node's comment (what `slurm
    verify` and `scontrol show node` read), syslog, the textfile (a dry
    run: only the note)."""
    codes = ",".join(c.code for c in decision.counts)
    text = fit(f"{HELD_PREFIX} {codes}: drain cap reached: {decision.text()}", REASON_BYTES)
    if comment != text:
        (act or _scontrol)([scontrol, "update", f"NodeName={node}", f"Comment={text}"])
    # "DRAIN CAP HELD": the NHC check (templates/ccrhost.nhc.j2) reads these words to leave the node undrained
    message = (f"{node} {what}: DRAIN CAP HELD for {codes} ({decision.text()}); "
               f"jobs are kept off it without a drain: {verdict.summary()}")
    if dry_run:
        return _note(message, decision)
    try:
        import syslog

        syslog.openlog("ccrhost", syslog.LOG_PID, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_WARNING, message)
    except OSError:
        pass
    cap_textfile(cap, decision)
    return _note(message, decision)


def cap_textfile(cap, decision) -> None:
    """The node_exporter textfile of the cap (``slurm_drain_cap_textfile``):
    1 per code while it holds here, 0 once it no longer does."""
    if cap is None or not cap.textfile:
        return
    if decision is None and not os.path.exists(cap.textfile):
        return  # never held here: nothing to clear
    lines = ["# HELP ccrhost_drain_cap_held 1 while the drain cap keeps this failing node from jobs without a drain.",
             "# TYPE ccrhost_drain_cap_held gauge"]
    if decision is None:
        lines.append("ccrhost_drain_cap_held 0")
    else:
        lines += [f'ccrhost_drain_cap_held{{code="{c.code}",level="{c.level}"}} 1' for c in decision.counts]
        lines += ["# HELP ccrhost_drain_cap_drained Nodes of the partition drained by ccrhost for the code.",
                  "# TYPE ccrhost_drain_cap_drained gauge"]
        lines += [f'ccrhost_drain_cap_drained{{code="{c.code}"}} {c.rank - 1}' for c in decision.counts]
        lines += ["# HELP ccrhost_drain_cap_limit The cap for the code.", "# TYPE ccrhost_drain_cap_limit gauge"]
        lines += [f'ccrhost_drain_cap_limit{{code="{c.code}"}} {c.limit}' for c in decision.counts]
    from ccrhost.output import write_atomic  # only where the cap holds or did: every check would pay its import

    try:
        write_atomic(cap.textfile, "\n".join(lines) + "\n")
    except OSError:
        pass  # the log and the node's comment still say it


def hold_job(job: str, scontrol: str, scancel: str | None = None, dry_run: bool = False) -> str:
    """Keep job ``job`` off this node without draining it (the prolog, past
    the cap): requeue it (a batch job goes back to the queue), else cancel
    it (Slurm cancels an srun or salloc whose prolog fails too). Raises
    DrainError when neither works. ``dry_run``: says so, touches nothing."""
    if dry_run:
        return (f"dry run, nothing changed: would hold job {job}: would run: {os.path.basename(scontrol)} requeue {job}"
                f" (else scancel {job})")
    try:
        _scontrol([scontrol, "requeue", job])
        return f"requeued job {job}"
    except DrainError as first:
        scancel = scancel or os.path.join(os.path.dirname(scontrol), "scancel")
        try:
            _scontrol([scancel, job])
        except DrainError as exc:
            raise DrainError(f"cannot keep job {job} off this node: {first}; {exc}") from None
        return f"cancelled job {job} (it cannot be requeued: {first})"
