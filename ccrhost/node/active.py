"""Running an active check's tool: a deadline, the whole process group
killed at it, the output captured, and the results stored safely.

Shared by every active check (all-reduce now; DCGM diag, nvbandwidth). A
launcher (srun, mpirun, a container runtime) starts children of its own: the
tool runs in a new session and the deadline kills that session's whole
process group, so no rank is left holding a GPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass

from ccrhost.model.active import ActiveResult
from ccrhost.output import write_state, write_state_command

TAIL_LINES = 20


@dataclass(frozen=True)
class ToolRun:
    argv: tuple[str, ...]
    rc: int | None          # None: killed at the deadline
    output: str             # stdout and stderr, interleaved as printed
    seconds: float
    timed_out: bool = False
    missing: str | None = None  # the program was not found

    @property
    def tail(self) -> str:
        return "\n".join(self.output.splitlines()[-TAIL_LINES:])


GRACE = 5.0  # seconds between SIGTERM (srun and mpirun pass it on to their remote tasks) and SIGKILL


def _kill_group(proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def run_tool(argv: list[str], deadline: float, env: dict[str, str] | None = None) -> ToolRun:
    """Run ``argv`` (its own session) for at most ``deadline`` seconds."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, start_new_session=True)
    except FileNotFoundError:
        return ToolRun(tuple(argv), None, "", 0.0, missing=f"{argv[0]} not found")
    except PermissionError as exc:
        return ToolRun(tuple(argv), None, "", 0.0, missing=f"{argv[0]} cannot be run: {exc.strerror}")
    try:
        out, _ = proc.communicate(timeout=deadline)
        timed_out = False
    except subprocess.TimeoutExpired:
        # TERM first: a launcher forwards it to its remote tasks, which SIGKILL would orphan
        _kill_group(proc, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=GRACE)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, _ = proc.communicate()
        timed_out = True
    finally:
        _kill_group(proc)  # a child the tool left behind in its group goes too
    text = out.decode(errors="replace")
    return ToolRun(tuple(argv), None if timed_out else proc.returncode, text, time.monotonic() - start, timed_out)


# -- the state file ----------------------------------------------------------------
# {"version": 1, "results": {"CHECK/MODE": ActiveResult.to_dict()}}: one file per
# node, each write replacing it whole through a new temporary name (write_state:
# never through a link planted beside it), so a reader never sees half.

def load(path: str) -> dict[str, ActiveResult]:
    """The stored results; a missing file is none, an unreadable one raises ``ValueError``."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), dict):
        raise ValueError(f"{path}: not an active-check state file")
    return {key: ActiveResult.from_dict(value) for key, value in doc["results"].items()}


def read_stored(path: str, checks: tuple[str, ...], now: float) -> tuple[dict[str, ActiveResult], str | None]:
    """The stored results of ``checks`` ("check/mode" -> result), or none and why the file could not be read:
    what a check and the prolog judge, with the results' age, never a new run."""
    try:
        stored = load(path)
    except ValueError as exc:
        return {}, str(exc)
    return {k: r for k, r in stored.items() if r.check in checks}, None


def store(path: str, results: list[ActiveResult]) -> None:
    """Add or replace ``results`` (by check and mode) in the state file."""
    try:
        current = load(path)
    except ValueError:
        current = {}  # a damaged file is replaced, not merged
    for r in results:
        current[f"{r.check}/{r.mode}"] = r
    write_state(path, state_document(list(current.values())))


def state_document(results: list[ActiveResult]) -> str:
    return json.dumps({"version": 1, "results": {f"{r.check}/{r.mode}": r.to_dict()
                                                for r in sorted(results, key=lambda r: (r.check, r.mode))}},
                      indent=1) + "\n"


def store_script(path: str, results: list[ActiveResult]) -> str:
    """A shell line that replaces the state file at ``path`` whole with
    ``results`` (for the deploy and the Slurm job, which write it remotely):
    :func:`write_state`'s shell twin, so a reader never sees half of it."""
    import base64

    data = base64.b64encode(state_document(results).encode()).decode()
    return write_state_command(path, f'"$(echo {data} | base64 -d)"')


def merged(text: str, results: list[ActiveResult]) -> list[ActiveResult]:
    """``results`` added to (or replacing, by check and mode) those of a state
    file's ``text``: a deploy that stores one check keeps the others'. A file
    that does not parse is replaced, as :func:`store` does."""
    try:
        doc = json.loads(text) if text.strip() else {"results": {}}
        current = {key: ActiveResult.from_dict(value) for key, value in doc["results"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        current = {}
    for r in results:
        current[f"{r.check}/{r.mode}"] = r
    return list(current.values())

