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

from ccrhost.model.active import ActiveResult, entry_problem
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
# node. Every path stores by merging (merge_file: here, and on a node the
# deploy or a Slurm step writes to), under an flock on <path>.lock, so two
# writers never lose each other's results; each write replaces the file whole
# through a new temporary name, so a reader never sees half.

def _raw(path: str) -> dict:
    """The file's stored entries as written; a missing file is none, an unreadable one raises ``ValueError``."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), dict):
        raise ValueError(f"{path}: not an active-check state file")
    return doc["results"]


def load(path: str) -> dict[str, ActiveResult]:
    """The stored results (an entry that is not one left out); a missing
    file is none, an unreadable one raises ``ValueError``."""
    return {key: ActiveResult.from_dict(value) for key, value in _raw(path).items() if entry_problem(value) is None}


def read_stored(path: str, checks: tuple[str, ...], now: float) -> tuple[dict[str, dict], str | None]:
    """The stored entries of ``checks`` ("check/mode" -> the entry as
    stored, so the check notes one that is not a result), or none and why
    the file could not be read: what a check and the prolog judge, with the
    results' age, never a new run."""
    try:
        raw = _raw(path)
    except ValueError as exc:
        return {}, str(exc)
    return {k: v for k, v in raw.items()
            if (v.get("check") if isinstance(v, dict) and isinstance(v.get("check"), str) else k.split("/")[0])
            in checks}, None


def mode_of(key: str, entry) -> str:
    """A stored entry's mode (its key's, for one that is not a result)."""
    mode = entry.get("mode") if isinstance(entry, dict) else None
    return mode if isinstance(mode, str) else key.split("/", 1)[-1]


def merge_file(path, new):
    """Merge ``new`` ({"check/mode": entry}) into the state file at ``path``
    under an exclusive flock on ``<path>.lock``: the stored entries kept
    (those that are not results dropped), the new ones added or replacing
    theirs. Standard library only, with :func:`entry_problem` and
    ``output.write_state``: the remote store runs this same source on the node."""
    import fcntl
    import json
    import os

    folder = os.path.dirname(path) or "/"
    os.makedirs(folder, exist_ok=True)
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path, "rb") as f:
                doc = json.loads(f.read(1 << 22))
        except (OSError, ValueError, RecursionError):  # none yet, or damaged: replaced
            doc = {}
        stored = doc.get("results") if isinstance(doc, dict) else None
        current = {k: v for k, v in stored.items() if entry_problem(v) is None} if isinstance(stored, dict) else {}
        current.update(new)
        write_state(path, json.dumps({"version": 1, "results": {k: current[k] for k in sorted(current)}},
                                     indent=1) + "\n")
    finally:
        os.close(lock)


def store(path: str, results: list[ActiveResult]) -> None:
    """Add or replace ``results`` (by check and mode) in the state file: the one store of every path."""
    merge_file(path, {f"{r.check}/{r.mode}": r.to_dict() for r in results})


def state_document(results: list[ActiveResult]) -> str:
    return json.dumps({"version": 1, "results": {f"{r.check}/{r.mode}": r.to_dict()
                                                for r in sorted(results, key=lambda r: (r.check, r.mode))}},
                      indent=1) + "\n"


def store_script(path: str, results: list[ActiveResult], current: str | None = None) -> str:
    """A shell line that stores ``results`` in the state file at ``path`` on
    a node (the deploy, a Slurm step): :func:`merge_file` itself, run by the
    node's python3 under the same lock as a local store. A node without
    python3 gets ``results`` merged into ``current`` (the file's text as the
    caller read it) written whole; without ``current`` it stores nothing and
    fails, rather than replace the other checks' results."""
    import base64
    import inspect
    import shlex

    code = ("from __future__ import annotations\n" + inspect.getsource(entry_problem) + "\n"
            + inspect.getsource(write_state) + "\n" + inspect.getsource(merge_file)
            + "\nimport base64, json, sys\nmerge_file(sys.argv[1], json.loads(base64.b64decode(sys.argv[2])))\n")
    program = base64.b64encode(code.encode()).decode()
    data = base64.b64encode(json.dumps({f"{r.check}/{r.mode}": r.to_dict() for r in results}).encode()).decode()
    q = shlex.quote(path)
    if current is not None:
        whole = base64.b64encode(state_document(merged(current, results)).encode()).decode()
        fallback = write_state_command(path, f'"$(echo {whole} | base64 -d)"')
    else:
        fallback = f"{{ printf 'ccrhost: no python3 on this node to merge into %s: not stored\\n' {q} >&2; false; }}"
    return (f"if command -v python3 >/dev/null 2>&1; then python3 -c \"$(echo {program} | base64 -d)\" {q} {data}; "
            f"else {fallback}; fi")


def merged(text: str, results: list[ActiveResult]) -> list[ActiveResult]:
    """``results`` added to (or replacing, by check and mode) those of a state
    file's ``text`` (an entry that is not a result dropped): a deploy that
    stores one check keeps the others'. A file that does not parse is
    replaced, as :func:`store` does."""
    try:
        doc = json.loads(text) if text.strip() else {"results": {}}
        current = {key: ActiveResult.from_dict(value) for key, value in doc["results"].items()
                   if entry_problem(value) is None}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        current = {}
    for r in results:
        current[f"{r.check}/{r.mode}"] = r
    return list(current.values())
