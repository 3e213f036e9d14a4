"""nccl-tests' ``all_reduce_perf``: its command line and its report.

The format is src/common.cu's (src/util.cu's from 2.17 on): a ``# nThread ...`` line, ``#  Rank`` lines,
a column header naming ``size count type redop root time algbw busbw
#wrong`` (then the in-place four again), one row per size, then
``# Out of bounds values : N OK|FAILED`` and ``# Avg bus bandwidth : X``.
Quirks handled here: builds before 2.10 have no ``redop``/``root`` columns
(rows are read by the header's column names, not by position); 2.19's
per-iteration timing adds four columns after each ``#wrong`` and ``-Z`` a
timestamp column (each half is read from its own ``time`` column); an
unvalidated half prints ``N/A`` (older) or ``-1`` (newer) in ``#wrong``;
NCCL's own log lines (``NCCL INFO``/``NCCL WARN``) and launcher noise come
between header lines; ``srun -l`` prefixes each line with ``N: ``; ``#wrong``
is ``%g`` (``1e+06``), and from 2.17 time and bandwidths print ``%.1e`` when
they outgrow their column (``1.7e+07``); builds before 2.13 print an ``error``
column (the largest deviation, ``%le``: ``2e-07``) instead of ``#wrong``.
"""

from __future__ import annotations

import re
import shlex

from ccrhost import numbers
from ccrhost.model.allreduce import MODE_ENV, AllReduceOutput, Half, RunResult, SizeRow


class NcclTestsFormatError(ValueError):
    """Not all_reduce_perf's report."""


_LABEL = re.compile(r"^\s*\d{1,6}: ")
_RANK = re.compile(r"^#\s+Rank\s+\d+\s")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\S+)\s+(OK|FAILED)\b")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_FAILURE = re.compile(r"Test (?:CUDA |NCCL )?failure|Test timeout")
_WARN = re.compile(r"\bNCCL WARN\b")


def _half(fields: list[str], line: str, error_column: bool = False) -> Half:
    # time, algbw and busbw switch to %e when they outgrow their column (getFloatStr, 2.17 on: 1.7e+07 us)
    time_us, algbw, busbw = (numbers.printf_float(x, 0) for x in fields[:3])
    if None in (time_us, algbw, busbw):
        raise NcclTestsFormatError(f"row {line.strip()!r}: time or bandwidth is not a finite number >= 0")
    wrong_text = fields[3]
    if wrong_text == "N/A" or wrong_text.startswith("-"):
        return Half(time_us, algbw, busbw, None)  # not validated
    # "#wrong" is %g (2.13 on: a million prints 1e+06); before 2.13 "error" is the largest
    # deviation (%le, 2e-07), not a count: only the "Out of bounds values" line counts then
    wrong = numbers.printf_float(wrong_text, 0)
    if wrong is None or (not error_column and wrong != int(wrong)):
        raise NcclTestsFormatError(f"row {line.strip()!r}: #wrong {wrong_text!r} is not a count")
    return Half(time_us, algbw, busbw, None if error_column else int(wrong))


def parse_all_reduce(text: str) -> AllReduceOutput:
    """Rank 0's report; raises :class:`NcclTestsFormatError` when no column
    header was printed (the tool never got to measuring)."""
    columns: list[str] | None = None
    rows, ranks, warnings, failures = [], 0, [], []
    oob = avg = version = None
    for raw in text.splitlines():
        line = _LABEL.sub("", raw, count=1)
        stripped = line.strip()
        if _WARN.search(line):
            warnings.append(stripped)
            continue
        if _FAILURE.search(line):
            failures.append(stripped)
            continue
        if stripped.startswith("#"):
            words = stripped.lstrip("#").split()
            if words[:2] == ["size", "count"] and "busbw" in words:
                columns = words
            elif _RANK.match(stripped):
                ranks += 1
            elif m := _OOB.match(stripped):
                oob = numbers.integer(m.group(1), 0)
            elif m := _AVG.match(stripped):
                avg = numbers.printf_float(m.group(1), 0)  # %g
            elif m := _VERSION.match(stripped):
                version = m.group(1)
            continue
        if columns is None:
            continue
        fields = stripped.split()
        # a timestamp column (-Z) prints date and time: one header word, two fields
        wanted = len(columns) - ("timestamp" in columns)
        if len(fields) < wanted or numbers.integer(fields[0], 0) is None:
            continue  # launcher or NCCL noise between rows
        # each half starts at its time column (2.19 can add i_min, i_max, i_p99, i_cv% after #wrong)
        starts = [i for i, c in enumerate(columns) if c in ("time", "cputime")]
        if len(starts) != 2:
            raise NcclTestsFormatError(f"column header {columns!r}: expected two time columns")
        redop = fields[columns.index("redop")] if "redop" in columns else None
        count = numbers.integer(fields[1], 0)
        if count is None:
            raise NcclTestsFormatError(f"row {stripped!r}: count is not a number")
        rows.append(SizeRow(numbers.integer(fields[0], 0), count, fields[2], redop,
                            *(_half(fields[t:t + 4], line, columns[t + 3] == "error") for t in starts)))
    if columns is None and not failures and not warnings:
        raise NcclTestsFormatError("no all_reduce_perf column header found")
    return AllReduceOutput(tuple(rows), ranks, oob, avg, tuple(warnings), tuple(failures), version)


# -- the command ----------------------------------------------------------------

DEFAULT_BINARY = "all_reduce_perf"


def command(binary: str, mode: str, gpus: int, min_bytes: str = "1G", max_bytes: str = "16G",
            iters: int = 20, per_process: bool = False) -> list[str]:
    """The argv of one run. ``per_process``: one GPU per process (srun or
    mpirun starts one task per GPU, ``-g 1``); else all the node's GPUs in
    one process (``-g N``). Sizes after the anchors: one large size judges
    bandwidth (active-checks.md §2, Azure's 16G); ``-c 1`` validates every size."""
    return [binary, "-b", min_bytes, "-e", max_bytes, "-f", "2", "-n", str(int(iters)), "-c", "1",
            "-g", "1" if per_process else str(int(gpus))]


def environment(mode: str) -> dict[str, str]:
    """What the mode sets, plus NCCL_DEBUG=WARN so that NCCL's warnings reach the report."""
    return {"NCCL_DEBUG": "WARN", **MODE_ENV[mode]}


def shell_line(binary: str, mode: str, gpus: int, **kw) -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in environment(mode).items())
    return f"env {env} " + " ".join(shlex.quote(a) for a in command(binary, mode, gpus, **kw))


# What a launcher prints when the program is not there: slurmstepd's execve
# error (srun), a shell's (mpirun over ssh, a plain run), Open MPI's.
_NOT_FOUND = re.compile(r"execve\(\): (\S+): No such file or directory|(\S+): command not found"
                        r"|was unable to find the (?:specified )?executable")
_OMPI_WHERE = re.compile(r"^Node:\s+(\S+)\s*\nExecutable:\s+(\S+)", re.M)
# srun's per-node summary: the tasks that exited by themselves (execve's failure: 2; a shell's: 127)
_SRUN_EXIT = re.compile(r"^srun: error: (\S+): tasks? [0-9,-]+: Exited with exit code (?:2|127)$", re.M)


def run_result(text: str, rc: int | None, timed_out: bool = False, missing: str | None = None,
               error: str | None = None) -> RunResult:
    """One launch's output as the verdict takes it: parsed when it is a
    report (a partial one too), else kept as its tail for the message. A
    launcher's "not found" is a missing binary, whoever printed it."""
    where: tuple[str, ...] = ()
    if missing is None and not timed_out:
        found = [_LABEL.sub("", line).strip() for line in text.splitlines() if _NOT_FOUND.search(line)]
        ompi = _OMPI_WHERE.search(text)  # Open MPI names the node and program on lines of their own
        if found and ompi:
            found = [f"Open MPI could not find {ompi.group(2)} on {ompi.group(1)}"]
            where = (ompi.group(1),)
        elif found:
            where = tuple(dict.fromkeys(_SRUN_EXIT.findall(text)))
        if found:
            missing = "not installed: " + "; ".join(dict.fromkeys(found))[:300]
            if where and not ompi:
                missing += f" (on {', '.join(where)})"
    try:
        output = parse_all_reduce(text) if not missing else None
    except NcclTestsFormatError:
        output = None
    tail = "\n".join(text.splitlines()[-20:])
    return RunResult(output, rc, timed_out, missing, error, tail, where)


# The remote script of one single-node run (the deploy's fact): ``timeout``
# puts itself and the tool in one process group and kills that group.
def run_script(binary: str, mode: str, gpus: int, max_bytes: str, iters: int, timeout: int) -> str:
    line = shell_line(binary, mode, gpus, min_bytes=max_bytes, max_bytes=max_bytes, iters=iters)
    return (f"if ! command -v {shlex.quote(binary)} >/dev/null 2>&1; then echo '@@missing'; exit 0; fi; "
            f"timeout -k 5 {int(timeout)} {line} 2>&1; echo \"@@rc $?\"")


def parse_run_script(lines: list[str], _split=None) -> tuple[str, int | None, bool, str | None]:
    """(output, rc, timed_out, missing) from :func:`run_script`'s output."""
    if "@@missing" in lines:
        return "", None, False, "not found on PATH (command -v)"
    rc = None
    body = []
    for line in lines:
        if line.startswith("@@rc "):
            rc = numbers.integer(line[5:], 0, 255)
        else:
            body.append(line)
    timed_out = rc in (124, 137)  # timeout's own status, or its SIGKILL after the grace
    return "\n".join(body), None if timed_out else rc, timed_out, None


def mpirun_argv(mpirun: str, binary: str, hosts: list[str], gpus: int, root: str, max_bytes: str,
                iters: int) -> list[str]:
    """The pair mode under Open MPI's mpirun (mpirun(1), 4.1): ``gpus`` ranks
    on each host in order (``-H host:slots``; rank 0 on the first), one GPU
    per rank, the mode's variables and the root's ``NCCL_COMM_ID`` exported
    to every rank with ``-x VAR=value``."""
    env = {**environment("pair"), "NCCL_COMM_ID": root}
    return [mpirun, "-np", str(len(hosts) * gpus), "-H", ",".join(f"{h}:{gpus}" for h in hosts),
            *(a for k, v in env.items() for a in ("-x", f"{k}={v}")),
            *command(binary, "pair", gpus, min_bytes=max_bytes, max_bytes=max_bytes, iters=iters, per_process=True)]


def mpirun_script(argv: list[str], timeout: int) -> str:
    """The remote script of one pair run from its first host: the launcher
    missing is said apart (``@@missing``), then the run under ``timeout``."""
    return (f"if ! command -v {shlex.quote(argv[0])} >/dev/null 2>&1; then echo '@@missing'; exit 0; fi; "
            f"timeout -k 5 {int(timeout)} {' '.join(shlex.quote(a) for a in argv)} 2>&1; echo \"@@rc $?\"")
