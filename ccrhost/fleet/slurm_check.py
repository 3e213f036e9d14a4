"""The check step: what each node of the fleet job runs (its own ``ccrhost
check``), reading a node's output, and the node's verdict from it; for a
node the step never reached, the verdict its drain reason or its state gives.

Shared by ``ccrhost slurm verify`` (ccrhost.fleet.slurm_verify) and
``ccrhost slurm rollout`` (ccrhost.fleet.rollout); it imports neither.
"""

from __future__ import annotations

import base64
import json
import shlex
from dataclasses import dataclass, replace

import yaml

from ccrhost import numbers
from ccrhost.fleet.slurm_client import SlurmNode
from ccrhost.model.managed import CHECK_CONFIG, DRAIN_PREFIX
from ccrhost.model.status import Reason
from ccrhost.model.verdict import (
    FAIL,
    UNKNOWN,
    WARN,
    Verdict,
    evaluate,
    unjudged,
    with_measurement,
    worst,
)
from ccrhost.settings import HostSettings, InventoryDataError, validate_host


def check_script(ccrhost: str, config: str, refresh_nic: bool = False) -> str:
    """What each task of the check step runs: the node's name, its check
    settings (so the controller judges with the node's own) and its check
    (``refresh_nic``: a sweep that queries the NICs' tools and stores the readings)."""
    cfg = shlex.quote(config)
    refresh = " --refresh-nic" if refresh_nic else ""
    # base64 in 76-character lines, the config and the check's output both: srun cuts a long output
    # line into several (a long reason message, a certificate's), which would break the JSON
    return (f'echo "@@node $SLURMD_NODENAME"; '
            f'if [ -r {cfg} ]; then echo "@@config"; base64 < {cfg}; else echo "@@config -"; fi; '
            f'echo "@@check base64"; out=$({shlex.quote(ccrhost)} check --config {cfg} --format json{refresh} 2>&1); '
            f'rc=$?; printf "%s\\n" "$out" | base64; echo "@@rc $rc"')


@dataclass
class CheckOutput:
    node: str
    config: str | None   # the node's check.yaml, None when it has none
    text: str            # what ``ccrhost check --format json`` printed
    rc: int | None
    config_error: str | None = None  # the config's base64 did not decode


def parse_check_task(lines: list[str]) -> CheckOutput | None:
    """One task's output of :func:`check_script`; a config that does not
    decode is kept as a note for the judgement (the node's own trouble)."""
    node = rc = None
    encoded = False
    config: list[str] | None = None
    body, part = [], None
    for line in lines:
        if line.startswith("@@node "):
            node = line[7:].strip()
        elif line.startswith("@@config"):
            part, config = ("config", []) if line.strip() == "@@config" else (None, None)
        elif line in ("@@check", "@@check base64"):
            part, encoded = "check", line.endswith("base64")
        elif line.startswith("@@rc ") and part == "check":
            rc, part = numbers.integer(line[5:], 0, 255), None
        elif part == "config":
            config.append(line.strip())
        elif part == "check":
            body.append(line)
    if not node:
        return None
    text = error = None
    if config is not None:
        try:
            text = base64.b64decode("".join(config), validate=True).decode(errors="replace")
        except ValueError as exc:  # binascii.Error
            error = f"its base64 does not decode ({exc})"
    said = "\n".join(body)
    if encoded:
        try:
            said = base64.b64decode("".join(x.strip() for x in body), validate=True).decode(errors="replace")
        except ValueError as exc:
            said = f"the check's output does not decode as base64 ({exc})"
    return CheckOutput(node, text, said, rc, error)


def _unknown(code: str, message: str) -> Verdict:
    return unjudged(UNKNOWN, code, message)


def judge(out: CheckOutput, measured=None, allreduce=None, dcgm=None) -> tuple[Verdict, HostSettings | None]:
    """The node's verdict as its own ``ccrhost check`` made it: taken, never
    judged again from part of its readings. A check that printed no verdict
    is UNKNOWN with what it said. With a ``measured`` bandwidth the node's
    whole readings (the document carries them all) and the measurement go
    through the same node evaluation, with the node's own settings; a node
    whose check judged no readings (a probe that hung) stays as it said."""
    start, end = out.text.find("{"), out.text.rfind("}")
    try:
        doc = json.loads(out.text[start:end + 1]) if start >= 0 else None
        verdict = Verdict.from_dict(doc) if isinstance(doc, dict) else None
    except (ValueError, KeyError, TypeError):  # pydantic's ValidationError is a ValueError
        verdict = None
    if verdict is None:
        said = " ".join(out.text.split())[-300:] or "no output"
        return _unknown("check_failed", f"ccrhost check on {out.node} exited {out.rc}: {said}"), None
    try:
        if out.config_error:
            raise ValueError(out.config_error)
        settings = validate_host(out.node, yaml.safe_load(out.config or "") or {})
    except (InventoryDataError, yaml.YAMLError, ValueError) as exc:
        return _unknown("check_config", f"{out.node}: {CHECK_CONFIG}: {exc}"), None
    except RecursionError:  # the YAML loader recurses per level: "[[[[..." thousands deep
        return _unknown("check_config", f"{out.node}: {CHECK_CONFIG}: nested too deep to read"), None
    if (measured is None and allreduce is None and dcgm is None) or not verdict.evaluated:
        return verdict, settings
    readings = with_measurement(verdict.readings, measured) if measured is not None else verdict.readings
    if allreduce is not None:  # the all-reduce results of this run (ccrhost.fleet.slurm_nccl)
        readings = replace(readings, allreduce=allreduce)
    if dcgm is not None:  # the DCGM diag result of this run (ccrhost.fleet.slurm_dcgm)
        readings = replace(readings, dcgm=dcgm)
    # the bundle the node's check kept stays named (the report and the drain reason name it)
    return replace(evaluate(readings, settings.expectation(), settings.policy()), evidence=verdict.evidence), settings


def drained_verdict(node: SlurmNode) -> Verdict:
    """A node that left the job before its check step ran, by its drain
    reason: ccrhost's own prolog or health check said FAIL or UNKNOWN there
    and named the codes, which become the verdict's reasons (each at its
    registry level), so the node reads as its check read it. A ccrhost
    reason without codes (an older ccrhost) is ``drained_fail`` or
    ``drained_unknown``; any other reason is not a verdict of ours."""
    from ccrhost.model.reasons import REGISTRY
    from ccrhost.model.drain_reason import parse_drain_reason

    if node.held and not node.reason:
        return held_verdict(node)
    reason = node.reason or ""
    said = f"drained by its own check before the check step: {reason}"
    parsed = parse_drain_reason(reason)
    if parsed is not None:
        docs = [REGISTRY[code] for code in parsed.codes]
        reasons = [Reason(doc.level, doc.code, said if i == 0 else "named in the same drain reason")
                   for i, doc in enumerate(docs)]
        if parsed.more:
            more = f"and {parsed.more} more code(s) the drain reason had no room for"
            reasons.append(Reason(FAIL, "drained_fail", more) if parsed.status == FAIL
                           else Reason(UNKNOWN, "drained_unknown", more))
        return replace(_unknown("drained_unknown", said), status=parsed.status, reasons=reasons)
    if reason.startswith(f"{DRAIN_PREFIX} UNKNOWN:"):
        return _unknown("drained_unknown", said)
    if reason.startswith(DRAIN_PREFIX):
        return unjudged(FAIL, "drained_fail", said)
    return _unknown("not_checked", f"not checked: {node.state}" + (f" ({node.reason})" if node.reason else ""))


def held_verdict(node: SlurmNode) -> Verdict:
    """A node whose own check failed past the drain cap: not drained, kept
    from jobs by its prolog; its comment names the codes and the cap."""
    from ccrhost.model.reasons import REGISTRY

    text = node.held or ""
    codes = text[len("ccrhost: held: "):].split(":", 1)[0].split(",")
    docs = [REGISTRY[c] for c in codes if c in REGISTRY]
    reasons = [Reason(doc.level, doc.code, f"its own check failed here ({text})") for doc in docs]
    reasons.append(Reason(WARN, "drain_capped", f"the drain cap held: kept from jobs, not drained ({text})"))
    return replace(_unknown("drained_unknown", text), status=worst(r.level for r in reasons), reasons=reasons)


def busy_verdict(node: SlurmNode) -> Verdict:
    return _unknown("not_checked", f"not checked: {node.state}: running another job (only idle nodes are "
                                   "checked; --include-busy waits for them)")
