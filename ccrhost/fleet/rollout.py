"""``ccrhost slurm rollout``: reboot nodes through Slurm a few at a time, so
that firmware settings written for the next boot (deploys/nic_firmware.py)
take effect, and give back only the nodes that verify.

Slurm does the reboot and its bookkeeping: ``scontrol reboot ASAP
nextstate=DOWN`` drains each node at once (its running jobs finish, no new
one starts), reboots it when it is idle, and brings it back DOWN. ccrhost
then verifies it inside a maintenance reservation of its own (no one else's
job can land there), with the node's own check (``--refresh-nic``: the
NIC readings are taken after the boot), resumes it only when the verdict is
OK, and otherwise leaves it drained with the check's reason. The rollout
stops before the next batch once ``max_failures`` nodes failed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ccrhost.fleet.slurm_check import check_script, judge, parse_check_task
from ccrhost.fleet.slurm_client import SlurmError, node_fields, run_slurm
from ccrhost.model.status import OK

REASON_PREFIX = "ccrhost rollout:"


@dataclass
class Outcome:
    node: str
    status: str          # the verdict's status, or "NOT_DONE" (never rebooted: the rollout stopped first)
    note: str            # what happened, in words


def show(node: str) -> dict[str, str]:
    """``scontrol show node -o``'s fields (State, BootTime, Reason, ...)."""
    return node_fields(run_slurm("scontrol", "show", "node", "-o", node).stdout)


def rebooted(node: str, before: str) -> bool:
    fields = show(node)
    state = fields.get("State", "")
    return fields.get("BootTime") not in (None, "", "None", before) and "REBOOT" not in state


def verify(node: str, ccrhost: str, config: str, timeout: float) -> tuple[str, str]:
    """The rebooted node's verdict, from its own check in a reservation of
    its own; resumed when OK, else drained with the check's reason."""
    from ccrhost.model.drain_reason import drain_reason

    resv = f"ccrhost-rollout-{node}"
    run_slurm("scontrol", "create", "reservation", f"ReservationName={resv}", f"Nodes={node}", "Users=root",
              "StartTime=now", "Duration=60", "Flags=MAINT,IGNORE_JOBS")
    try:
        resumed = run_slurm("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        # slurmctld refuses RESUME ("Invalid node state specified") for a node it has already
        # returned to service; only a node still DOWN or drained is an error here
        if resumed.returncode != 0 and any(w in show(node).get("State", "") for w in ("DOWN", "DRAIN")):
            raise SlurmError(f"scontrol update NodeName={node} State=RESUME: {resumed.stderr.strip()}")
        proc = run_slurm("srun", f"--reservation={resv}", "-w", node, "-N1", "-n1", "-J", "ccrhost-rollout",
                         "/bin/sh", "-c", check_script(ccrhost, config, refresh_nic=True),
                         timeout=timeout, check=False)
        out = parse_check_task(proc.stdout.splitlines())
        if out is None:  # the prolog refused it (and drained the node with its reason), or srun failed
            reason = show(node).get("Reason") or proc.stderr.strip()[-200:]
            run_slurm("scontrol", "update", f"NodeName={node}", "State=DRAIN",
                      f"Reason={reason or f'{REASON_PREFIX} the check did not run'}")
            return "FAIL", f"not verified: {reason}"
        verdict, _ = judge(out)
        if verdict.status == OK:
            return OK, "verified OK, resumed"
        reason = drain_reason(verdict)
        run_slurm("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")
        return verdict.status, f"stays drained: {reason}"
    finally:
        run_slurm("scontrol", "delete", f"ReservationName={resv}", check=False)


def rollout(nodes: list[str], max_nodes: int, max_failures: int, reason: str, ccrhost: str, config: str,
            wait: float = 3600, check_timeout: float = 300, say=print) -> list[Outcome]:
    outcomes: list[Outcome] = []
    failures = 0
    for start in range(0, len(nodes), max_nodes):
        batch = nodes[start:start + max_nodes]
        if failures >= max_failures:
            outcomes += [Outcome(n, "NOT_DONE", f"not rebooted: the rollout stopped after {failures} failed "
                                                "node(s)") for n in batch]
            continue
        before = {n: show(n).get("BootTime", "") for n in batch}
        say(f"rebooting {','.join(batch)} (Slurm drains each now and reboots it once its jobs have ended)")
        run_slurm("scontrol", "reboot", "ASAP", "nextstate=DOWN", f"reason={REASON_PREFIX} {reason}", ",".join(batch))
        deadline = time.monotonic() + wait
        waiting = set(batch)
        while waiting:
            for n in sorted(waiting):
                if rebooted(n, before[n]):
                    waiting.discard(n)
                    status, note = verify(n, ccrhost, config, check_timeout)
                    failures += status != OK
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
    return 0 if all(o.status == OK for o in outcomes) else 2


__all__ = ["Outcome", "SlurmError", "exit_code", "rollout"]
