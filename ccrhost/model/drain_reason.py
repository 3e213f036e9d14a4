"""What ccrhost writes into a Slurm node's reason and comment, and reads
back: the drain reason (its codes first, its action last), the comment of
a node the drain cap held, and what a reason says about lifting its drain.
The node's check writes them (node/drain.py); the fleet commands read them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ccrhost.model.managed import DRAIN_PREFIX
from ccrhost.model.status import FAIL, UNKNOWN
from ccrhost.model.verdict import Verdict, reason_action
from ccrhost.model.verdict_line import REPLACE_CODES, bounded_summary, reason_codes

# A drain that rests on a fleet measurement (ib_write_bw between nodes): the
# node-local check cannot see what it found, so only another measurement or
# an operator lifts it. Its reason names the code; an older ccrhost's began
# with this prefix instead.
MEASURED_PREFIX = "ccrhost: measured:"
# codes only a fleet measurement gives (ib_write_bw, the all-reduce pairs): the node-local check cannot see them
MEASURED_CODES = ("measured_slow", "allreduce_slow", "allreduce_wrong", "ccr_measured_low", "rack_nvlink_slow")

# The reason runs to its " [user@time]" (the time: group 2) and the fields newer Slurm prints after it
REASON_FIELD = re.compile(r"\bReason=(.*?)(?:\s+\[[^\]@]*@([^\]]*)\])?"
                          r"(?=\s+(?:Comment|Extra|InstanceId|InstanceType|ResumeAfter)=|\s*$)")
# `scontrol show node -o`: Key=Value words; a comment may hold spaces, so it
# runs to the next Key=
COMMENT_FIELD = re.compile(r"\bComment=(.*?)(?=\s+[A-Z][A-Za-z]*=|\s*$)")
# The node comment ccrhost sets where the drain cap kept a failing node from
# jobs without draining it; the health check clears it once the node is fit.
HELD_PREFIX = "ccrhost: held:"

# `ccrhost slurm rollout`'s reboot reason (its own constant, fleet/rollout.py;
# a test holds the two alike).
ROLLOUT_PREFIX = "ccrhost rollout:"

# Every prefix ccrhost writes into a node's reason or comment, and what it
# means: `ccrhost explain` prints it for a line that carries one (a test
# enumerates the prefixes the code writes against this table).
WRITTEN_PREFIXES = {
    DRAIN_PREFIX: "a drain ccrhost check set (the prolog, the health check or `ccrhost slurm verify`): the reason "
    "codes follow, then what was found, then [action ...]. The health check lifts it once the node is OK or WARN; "
    "an operator's reason is never changed.",
    MEASURED_PREFIX: "a drain an older ccrhost set for a fleet measurement (ib_write_bw between nodes): the "
    "node-local check cannot repeat it, so only another measurement (`ccrhost slurm verify --measure`) or an "
    "operator (`scontrol update NodeName=N State=RESUME`) lifts it.",
    HELD_PREFIX: "a node comment, not a drain: the drain cap (slurm_drain_cap_*) kept this failing node from "
    "jobs without draining it, because too many nodes were drained for the same code at once. The codes follow; "
    "the health check clears the comment once the node is fit. Look for a fleet-wide cause first.",
    ROLLOUT_PREFIX: "`ccrhost slurm rollout` asked Slurm to reboot this node (scontrol reboot ASAP nextstate=DOWN) "
    "with the rollout's reason after the prefix. After the reboot the rollout checks the node and resumes it on "
    "OK, or drains it with the check's own reason. A node still carrying this reason after the rollout ended did "
    "not come back within --wait, or the rollout stopped: see its boot (scontrol show node N: BootTime), run "
    "`ccrhost check` on it, and resume it (scontrol update NodeName=N State=RESUME) once the check is OK.",
}


def written_prefix(line: str) -> str | None:
    """The longest prefix of :data:`WRITTEN_PREFIXES` that ``line`` (a
    reason, a line of `sinfo -R`, a pasted comment) carries; None for none."""
    found = [p for p in WRITTEN_PREFIXES if re.search(rf"(?:^|[\s\[\"'=]){re.escape(p)}", line)]
    return max(found, key=len) if found else None


# Slurm keeps a node's reason whole in slurmctld, but its accounting database
# (slurmdbd) stores it as a MySQL TINYTEXT, 255 bytes (the event table's
# "reason" column, src/plugins/accounting_storage/mysql/accounting_storage_mysql.c),
# and `sinfo -R` shows its first 20 characters ("%20E %9u %19H %N", sinfo(1)).
# So the codes come first, right after "ccrhost: ", and the reason is cut
# at 255 bytes, never inside the codes.
REASON_BYTES = 255


def fit(text: str, limit: int) -> str:
    return text.encode()[:limit].decode(errors="ignore")


def drain_reason(verdict: Verdict) -> str:
    """The drain reason for ``verdict``: ``ccrhost: <codes>: <messages>``,
    ``ccrhost: <codes>: UNKNOWN: <what could not be read>`` for UNKNOWN,
    closed by `` [evidence NAME]`` where a bundle was kept and ``[action
    ACTION gpu N,M]``, never cut; :func:`parse_drain_reason` and
    :func:`parse_drain_action` read it back."""
    codes = reason_codes(verdict) or ["check_error"]
    tail = drain_action(verdict)
    if verdict.evidence:  # the bundle's name (its folder is verify_evidence_dir)
        tail = f" [evidence {os.path.basename(verdict.evidence)}]{tail}"
    head = f"{DRAIN_PREFIX} {','.join(codes)}:"
    shown = len(codes)
    while len(head.encode()) > REASON_BYTES // 2 and shown > 1:  # room for a message too
        shown -= 1
        head = f"{DRAIN_PREFIX} {','.join(codes[:shown])} +{len(codes) - shown} more:"
    marker = " UNKNOWN:" if verdict.status == UNKNOWN else ""
    room = REASON_BYTES - len(f"{head}{marker} ".encode()) - len(tail.encode())
    return fit(f"{head}{marker} {bounded_summary(verdict, room)}", REASON_BYTES - len(tail.encode())) + tail


# what scontrol shows after a reason: " [root@2026-12-05T10:00:00]"
_SLURM_STAMP = re.compile(r"\s+\[[^\]\s]*@[^\]]*\]\s*$")
_DRAIN = re.compile(r"^ccrhost: (?P<codes>[a-z0-9_]+(?:,[a-z0-9_]+)*)(?: \+(?P<more>[0-9]+) more)?:"
                    r"(?P<unknown> UNKNOWN:)? ?(?P<text>.*)$", re.S)


@dataclass(frozen=True)
class DrainReason:
    """What a ccrhost drain reason says (:func:`drain_reason`)."""
    status: str              # FAIL, or UNKNOWN
    codes: tuple[str, ...]   # the codes it names, worst first
    text: str                # the messages after them
    more: int = 0            # codes left out for the length


def parse_drain_reason(reason: str | None) -> DrainReason | None:
    """The codes of a reason :func:`drain_reason` wrote (as Slurm shows it:
    ``scontrol`` adds `` [user@time]``, which is dropped); None for another
    reason, or one of an older ccrhost that named no codes, or one whose
    codes the registry does not know."""
    from ccrhost.model.reasons import REGISTRY

    if not reason:
        return None
    match = _DRAIN.match(_SLURM_STAMP.sub("", reason.strip()))
    if not match or not all(c in REGISTRY for c in match.group("codes").split(",")):
        return None
    return DrainReason(UNKNOWN if match.group("unknown") else FAIL, tuple(match.group("codes").split(",")),
                       match.group("text"), int(match.group("more") or 0))


_EVIDENCE = " [evidence "


def same_drain(reason: str | None, text: str) -> bool:
    """Whether the drain ``reason`` (as Slurm shows it) says what ``text``
    would: the same status, codes and action, whatever its messages (an
    XID's age, an evidence name). Rewriting it would only restamp its time,
    and its time is what the drain cap and remediate read."""
    old, new = parse_drain_reason(reason), parse_drain_reason(text)
    return (old is not None and new is not None and (old.status, old.codes, old.more) == (new.status, new.codes, new.more)
            and parse_drain_action(reason or "") == parse_drain_action(text)
            # a bundle kept after the drain (the prolog keeps none) is named once
            and (_EVIDENCE in (reason or "") or _EVIDENCE not in text))


def measured_drain(reason: str) -> bool:
    """A drain that rests on a measurement (``measured_slow``; an older
    ccrhost wrote ``ccrhost: measured: ...``)."""
    parsed = parse_drain_reason(reason)
    if parsed is None:
        return reason.startswith(MEASURED_PREFIX)
    return any(c in MEASURED_CODES for c in parsed.codes)


def replace_drain(reason: str) -> bool:
    """A drain for a node to replace (its history, a lemon GPU): only an
    operator lifts it."""
    parsed = parse_drain_reason(reason)
    return parsed is not None and any(c in REPLACE_CODES for c in parsed.codes)


_DRAIN_ACTION = re.compile(r" \[action ([a-z_]+)(?: gpu ([0-9]+(?:,[0-9]+)*))?\](?:\s+\[[^\]\s]*@[^\]]*\])?\s*$")


def drain_action(verdict: Verdict) -> str:
    """`` [action reset_gpu gpu 2,5]``: the node's action and the GPUs it is
    for, short enough never to be cut (``ccrhost slurm remediate`` reads it
    back with :func:`parse_drain_action`)."""
    gpus = sorted({r.gpu for r in verdict.reasons if r.gpu is not None and r.level == verdict.status
                   and reason_action(r) == verdict.action})
    return f" [action {verdict.action}" + (f" gpu {','.join(map(str, gpus[:16]))}" if gpus else "") + "]"


def parse_drain_action(reason: str) -> tuple[str, list[int]] | None:
    """(action, GPU indexes) of a drain reason :func:`drain_reason` wrote;
    None for any other (an operator's, an older ccrhost's)."""
    match = _DRAIN_ACTION.search(reason)
    return (match.group(1), [int(g) for g in match.group(2).split(",")] if match.group(2) else []) if match else None
