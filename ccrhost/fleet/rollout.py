"""``ccrhost slurm rollout``: reboot, a few at a time, only the nodes that
owe a reboot, so that firmware settings written for the next boot
(deploys/nic_firmware.py) take effect, and give back only the nodes that
verify.

Which nodes: those whose own check (over ssh, ``--refresh-nic``: read-only,
under a job too) names a setting pending the next boot (``nic_fw_pending``),
or an explicit list with ``force``. Never a node drained or down for a
reason that is not ccrhost's (its reason and drain are left alone), a DOWN
node (it would hold its batch for the whole wait), one already rebooting,
or one ccrhost drained for replacement or on a measurement (a local check
cannot lift those); each skip is reported with why.

Slurm does the reboot and its bookkeeping: ``scontrol reboot ASAP
nextstate=DOWN`` drains each node at once (its running jobs finish, no new
one starts), reboots it when it is idle, and brings it back DOWN. ccrhost
then verifies it inside a maintenance reservation of its own (no one else's
job can land there while it is resumed for the check), and before that
reservation goes the node is drained again unless its check said OK: a
check that fails, never ran or runs past its timeout leaves it drained
("not verified"), and the rollout goes on. The rollout stops before the
next batch once ``max_failures`` nodes failed.
"""

from __future__ import annotations

import json
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from ccrhost.fleet.slurm_check import check_script, judge, parse_check_task
from ccrhost.fleet.slurm_client import SlurmError, SlurmNode, node_fields, run_slurm
from ccrhost.model.managed import DRAIN_PREFIX
from ccrhost.model.status import OK, UNKNOWN

REASON_PREFIX = "ccrhost rollout:"
# what a node's check names when a setting waits for the next boot (model/nicfw.py)
OWED_CODES = ("nic_fw_pending",)
# what leaves the question open: the NIC's settings were not read
UNREAD_CODES = ("nic_fw_unreadable", "nic_fw_tool_missing", "nic_fw_never_read", "nic_fw_stale")

SKIPPED, DRY_RUN, NOT_DONE = "SKIPPED", "DRY_RUN", "NOT_DONE"


@dataclass
class Outcome:
    node: str
    status: str          # the verdict's status; UNKNOWN: not verified (left drained); SKIPPED, DRY_RUN or
                         # NOT_DONE (never rebooted: the rollout stopped first)
    note: str            # what happened, in words
    actions: list[str] = field(default_factory=list)  # a dry run: the commands its batch would run


def show(node: str) -> dict[str, str]:
    """``scontrol show node -o``'s fields (State, BootTime, Reason, ...)."""
    return node_fields(run_slurm("scontrol", "show", "node", "-o", node).stdout)


def rebooted(node: str, before: str) -> bool:
    fields = show(node)
    state = fields.get("State", "")
    return fields.get("BootTime") not in (None, "", "None", before) and "REBOOT" not in state


# -- which nodes ---------------------------------------------------------------

def ours(reason: str | None) -> bool:
    return bool(reason) and (reason.startswith(DRAIN_PREFIX) or reason.startswith(REASON_PREFIX))


def why_skip(node: SlurmNode) -> str | None:
    """Why the rollout must not take ``node`` whatever it owes, or None."""
    from ccrhost.model.drain_reason import measured_drain, replace_drain

    state, reason = node.state, node.reason
    said = f" ({reason})" if reason else ""
    if "down" in state or state.endswith("*"):
        return f"DOWN ({state}){said}: not rebooted, left as it is (its batch would wait for it the whole --wait)"
    if "reboot" in state:
        return f"a reboot is already under way ({state})"
    if ("drain" in state or reason) and not ours(reason):
        return f"drained by someone else{said or ' (no reason)'}: its reason and drain are left alone"
    if ours(reason) and (replace_drain(reason) or measured_drain(reason)):
        return f"ccrhost's drain{said} is for a person or a measurement to lift: left alone"
    return None


def owes(verdict_json: str) -> tuple[bool | None, str]:
    """(whether the node owes a reboot, why) from its ``ccrhost check
    --format json``; None: it cannot be told."""
    from ccrhost.model.verdict import Verdict

    try:
        verdict = Verdict.from_dict(json.loads(verdict_json))
    except (ValueError, KeyError, TypeError):
        return None, f"its check gave no verdict: {verdict_json.strip()[-160:] or 'no output'}"
    pending = [r.message for r in verdict.reasons if r.code in OWED_CODES]
    if pending:
        return True, "; ".join(pending)
    unread = [r.message for r in verdict.reasons if r.code in UNREAD_CODES]
    if unread:
        return None, f"its NIC firmware settings were not read: {unread[0]}"
    return False, "owes no reboot (no NIC firmware setting pending)"


def pending_query(remote, ccrhost: str, config: str):
    """``query(node) -> (owed, why)``: the node's own check over ssh (``--refresh-nic``: it reads the
    NICs' firmware settings now, read-only; it changes nothing in Slurm). ``--active-when-busy``: a node
    running a job is asked too (the operator's explicit run, whose reboot waits for the job): the
    stored reading may predate the deploy's write."""
    command = (f"{shlex.quote(ccrhost)} check --config {shlex.quote(config)} --refresh-nic --active-when-busy "
               "--format json")

    def query(node: SlurmNode) -> tuple[bool | None, str]:
        rc, out = remote(node.address, command)
        if rc == 255:
            return None, f"cannot reach it: {out[-160:]}"
        return owes(out)

    return query


def select(nodes: dict[str, SlurmNode], query=None, force: bool = False,
           workers: int = 16) -> tuple[list[str], list[Outcome], dict[str, str]]:
    """(the nodes to reboot, in name order; the skipped ones with why; what each taken node owes).
    ``query(node) -> (owed, why)`` asks a node; ``force``: every node
    that may be taken, asked nothing."""
    take, skipped, ask, owed_what = [], [], [], {}
    for name in sorted(nodes):
        why = why_skip(nodes[name])
        if why:
            skipped.append(Outcome(name, SKIPPED, why))
        elif force:
            take.append(name)
            owed_what[name] = "taken by --force"
        else:
            ask.append(nodes[name])
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(ask)))) as pool:
        answers = list(pool.map(query, ask)) if ask else []
    for node, (owed, why) in zip(ask, answers):
        if owed:
            take.append(node.name)
            owed_what[node.name] = why
        else:
            skipped.append(Outcome(node.name, SKIPPED, why if owed is False else f"cannot tell whether it owes a "
                                                                             f"reboot: {why}"))
    return sorted(take), skipped, owed_what


# -- what is run, as run (the dry run prints these very lines) -----------------

def reboot_args(batch: list[str], reason: str) -> list[str]:
    return ["scontrol", "reboot", "ASAP", "nextstate=DOWN", f"reason={REASON_PREFIX} {reason}", ",".join(batch)]


def reservation(node: str) -> str:
    return f"ccrhost-rollout-{node}"


def reserve_args(node: str) -> list[str]:
    return ["scontrol", "create", "reservation", f"ReservationName={reservation(node)}", f"Nodes={node}",
            "Users=root", "StartTime=now", "Duration=60", "Flags=MAINT,IGNORE_JOBS"]


def check_args(node: str, ccrhost: str, config: str) -> list[str]:
    return ["srun", f"--reservation={reservation(node)}", "-w", node, "-N1", "-n1", "-J", "ccrhost-rollout",
            "/bin/sh", "-c", check_script(ccrhost, config, refresh_nic=True)]


def drain_args(node: str, reason: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]


def planned(batch: list[str], reason: str, ccrhost: str, config: str) -> list[str]:
    """The batch's commands, as the rollout runs them."""
    lines = [shlex.join(reboot_args(batch, reason)), "  then, for each node once it is back (DOWN, booted again):"]
    for n in batch:
        check = check_args(n, ccrhost, config)
        lines += [f"  {shlex.join(reserve_args(n))}",
                  f"  scontrol update NodeName={n} State=RESUME   # only its reservation's job can land",
                  f"  {shlex.join(check[:-1])} '<its check: ccrhost check --refresh-nic>'",
                  f"  {shlex.join(drain_args(n, '<the check reason>'))}   # unless the check said OK",
                  f"  scontrol delete ReservationName={reservation(n)}"]
    return lines


# -- the rollout ---------------------------------------------------------------

def verify(node: str, ccrhost: str, config: str, timeout: float) -> tuple[str, str]:
    """The rebooted node's verdict, from its own check in a reservation of
    its own; it leaves the reservation drained unless the check said OK."""
    from ccrhost.model.drain_reason import drain_reason

    run_slurm(*reserve_args(node))
    status, note, reason = UNKNOWN, "not verified", f"{REASON_PREFIX} not verified: the check did not run"
    try:
        resumed = run_slurm("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        # slurmctld refuses RESUME ("Invalid node state specified") for a node it has already
        # returned to service; only a node still DOWN or drained is an error here
        if resumed.returncode != 0 and any(w in show(node).get("State", "") for w in ("DOWN", "DRAIN")):
            raise SlurmError(f"scontrol update NodeName={node} State=RESUME: {resumed.stderr.strip()}")
        try:
            proc = run_slurm(*check_args(node, ccrhost, config), timeout=timeout, check=False)
        except SlurmError:  # srun ran past the timeout
            reason = f"{REASON_PREFIX} not verified: its check ran past {timeout:g} s"
            return UNKNOWN, f"not verified (its check ran past {timeout:g} s): left drained"
        out = parse_check_task(proc.stdout.splitlines())
        if out is None:  # the prolog refused it (and drained the node with its reason), or srun failed
            why = show(node).get("Reason") or proc.stderr.strip()[-200:]
            reason = why if why and not why.startswith(REASON_PREFIX) else f"{REASON_PREFIX} the check did not run"
            status, note = "FAIL", f"not verified: {why or 'the check did not run'}"
            return status, note
        verdict, _ = judge(out)
        if verdict.status == OK:
            status, reason = OK, None
            return OK, "verified OK, resumed"
        status, reason = verdict.status, drain_reason(verdict)
        return status, f"stays drained: {reason}"
    except SlurmError as exc:
        reason = f"{REASON_PREFIX} not verified: {exc}"[:255]
        return UNKNOWN, f"not verified ({exc}): left drained"
    finally:
        if reason is not None:  # drained before the reservation goes: never back in service without an OK
            run_slurm(*drain_args(node, reason), check=False)
        run_slurm("scontrol", "delete", f"ReservationName={reservation(node)}", check=False)


def rollout(nodes: list[str], max_nodes: int, max_failures: int, reason: str, ccrhost: str, config: str,
            wait: float = 3600, check_timeout: float = 300, say=print, dry_run: bool = False,
            owed: dict[str, str] | None = None) -> list[Outcome]:
    """Reboot ``nodes`` (:func:`select` chose them; ``owed``: why each) ``max_nodes`` at a time."""
    outcomes: list[Outcome] = []
    failures = 0
    for start in range(0, len(nodes), max_nodes):
        batch = nodes[start:start + max_nodes]
        if dry_run:
            lines = planned(batch, reason, ccrhost, config)
            for line in lines:
                say(f"would run: {line}")
            outcomes += [Outcome(n, DRY_RUN, f"would be rebooted and verified ({(owed or {}).get(n, 'owes a reboot')})",
                                 lines) for n in batch]
            continue
        if failures >= max_failures:
            outcomes += [Outcome(n, NOT_DONE, f"not rebooted: the rollout stopped after {failures} failed "
                                              "node(s)") for n in batch]
            continue
        before = {n: show(n).get("BootTime", "") for n in batch}
        say(f"rebooting {','.join(batch)} (Slurm drains each now and reboots it once its jobs have ended)")
        run_slurm(*reboot_args(batch, reason))
        deadline = time.monotonic() + wait
        waiting = set(batch)
        while waiting:
            for n in sorted(waiting):
                if rebooted(n, before[n]):
                    waiting.discard(n)
                    status, note = verify(n, ccrhost, config, check_timeout)
                    failures += status not in (OK, UNKNOWN)  # not verified (a slow check) is no failure
                    say(f"{n}: {note}")
                    outcomes.append(Outcome(n, status, note))
            if waiting and time.monotonic() > deadline:
                for n in sorted(waiting):
                    failures += 1
                    note = f"did not come back within {wait:g} s: left as Slurm has it ({show(n).get('State')})"
                    say(f"{n}: {note}")
                    outcomes.append(Outcome(n, "FAIL", note))
                break
            time.sleep(1)
    return outcomes


def exit_code(outcomes: list[Outcome]) -> int:
    """0 when every node rebooted verified OK (skips and a dry run included), else 2."""
    return 0 if all(o.status in (OK, SKIPPED, DRY_RUN) for o in outcomes) else 2


def to_json(outcomes: list[Outcome], dry_run: bool) -> str:
    return json.dumps({"dry_run": dry_run, "exit_code": exit_code(outcomes),
                       "nodes": [asdict(o) for o in outcomes]}, indent=2) + "\n"


__all__ = ["Outcome", "SlurmError", "exit_code", "rollout", "select", "to_json"]
