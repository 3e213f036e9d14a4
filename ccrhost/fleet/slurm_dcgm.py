"""``ccrhost slurm verify --dcgm`` and ``ccrhost slurm sweep``: DCGM's
diagnostics as a job step on each node. The node runs ``ccrhost dcgm``
(host engine first, then the level under its deadline, judged by
``ccrhost.model.dcgm.judge_diag`` and stored in the node's state file),
and prints the result, which goes into the node's readings for the same
evaluation as ``ccrhost check`` (the one verdict). With batches, each batch
of at most the cap is its own exclusive job on idle nodes, released before
the next.
"""

from __future__ import annotations

import base64
import json
import shlex
import time
from dataclasses import dataclass

from ccrhost.fleet.slurm_client import run_steps
from ccrhost.fleet.slurm_job import busy_note
from ccrhost.model.active import ActiveReading, ActiveResult
from ccrhost.model.dcgm import CHECK, DEADLINES, ENGINE_DEADLINE, mode
from ccrhost.model.status import UNKNOWN

GRACE = 60  # seconds the step may take beyond the node's own deadlines (srun, ccrhost's start, the GPU query)


@dataclass
class DcgmOptions:
    level: int = 2
    max_nodes: int = 64          # nodes held at once
    timeout: float | None = None  # the step's outer deadline; None: the level's documented one + engine + GRACE
    valid_for: int = 86400       # for a result the controller makes (a node it could not run on)

    @property
    def step_timeout(self) -> float:
        # nvbandwidth, where the nodes run it too, at its longest setting
        return self.timeout or DEADLINES[self.level] + ENGINE_DEADLINE + GRACE + 3600


def step_script(ccrhost: str, config: str, *args: str) -> str:
    """What each node runs: ``ccrhost dcgm ARGS`` (a diag level, or the GEMM
    alone), its result as base64 in 76-character lines (srun cuts a long
    output line into several)."""
    extra = "".join(f" {shlex.quote(a)}" for a in args)
    return (f'echo "@@dcgm"; {shlex.quote(ccrhost)} dcgm --config {shlex.quote(config)}{extra} '
            f'--format json 2>&1 | base64; echo "@@end"')


def parse_step(lines: list[str]) -> list[ActiveResult] | str:
    """The node's results (the diag's, and nvbandwidth's where the node runs it), or what went wrong, in words."""
    try:
        body = lines[lines.index("@@dcgm") + 1:lines.index("@@end")]
    except ValueError:
        return "the step printed no result"
    text = base64.b64decode("".join(body), validate=False).decode(errors="replace")
    try:
        doc = json.loads(text[text.find("["):]) if "[" in text else None
        return [ActiveResult.from_dict(d) for d in doc] if isinstance(doc, list) and doc else \
            f"ccrhost dcgm printed no result: {' '.join(text.split())[-200:]}"
    except (ValueError, TypeError):
        said = " ".join(text.split())[-200:] or "no output"
        return f"ccrhost dcgm printed no result: {said}"


def _not_run(level: int, why: str, valid_for: int, clock) -> ActiveResult:
    return ActiveResult(CHECK, mode(level), UNKNOWN, "dcgm_failed", f"DCGM diag level {level}: not run: {why}",
                        clock(), valid_for)


def run_diag(job: str | None, names: list[str], opts: DcgmOptions, ccrhost: str, config: str, say,
             batches=None, clock=time.time) -> dict[str, ActiveReading]:
    """Every node's diag result, as a reading for its verdict."""
    out: dict[str, list[ActiveResult]] = {}
    chunks = [names] if batches is None else batches.chunks(names)
    for chunk in chunks:
        from contextlib import nullcontext

        with (nullcontext((job, chunk)) if batches is None else batches.hold(chunk)) as (held, taken):
            if taken:
                say(f"DCGM diag level {opts.level}: {len(taken)} node(s) of {len(chunk)} in this batch")
                script = step_script(ccrhost, config, "--level", str(opts.level))
                lines, err = run_steps(held, {n: script for n in taken}, "ccrhost-dcgm", opts.step_timeout)()
                for name in taken:
                    got = parse_step(lines[name]) if name in lines else (err or "no output from the step")
                    out[name] = got if isinstance(got, list) else [_not_run(opts.level, got, opts.valid_for, clock)]
                    say(f"DCGM diag on {name}: {', '.join(r.status for r in out[name])}")
            for name in chunk:
                if name not in taken:
                    out[name] = [_not_run(opts.level, busy_note(batches, name) if batches else "not allocated",
                                          opts.valid_for, clock)]
    now = clock()
    return {n: ActiveReading(now, {f"{r.check}/{r.mode}": r.to_dict() for r in rs}) for n, rs in out.items()}
