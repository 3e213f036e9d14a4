"""Every ccrhost command's exit codes, in one table, made from the constants
the commands return (docs/failure-behaviour.md shows it; a test holds the
page, this table and the commands alike).

A command whose codes are verdicts (check, monitor, dcgm, and every
``ccrhost slurm`` command) exits 3, UNKNOWN, on a bad option, bad settings
or an error it did not expect (``ccrhost.cli.entry``): click's own 2 would
read as FAIL, and Python's 1 as WARN. The others keep click's codes: 1 an
error, 2 a bad option.
"""

from __future__ import annotations

import click

from ccrhost.fleet.remediate import EXIT_FAILED, EXIT_OK
from ccrhost.model.status import EXIT_CODES, FAIL, OK, UNKNOWN, WARN
from ccrhost.node.formats import NPD_OK, NPD_PROBLEM, NPD_UNKNOWN

ERROR = click.ClickException.exit_code   # 1
USAGE = click.UsageError.exit_code       # 2
NOT_RUN = EXIT_CODES[UNKNOWN]            # 3: a verdict command that could not run
# the commands entry() maps a bad option or an unexpected error to NOT_RUN for
VERDICT_COMMANDS = ("check", "monitor", "dcgm", "slurm", "baseline diff")

_NOT_RUN = "also: a bad option or settings, or the command could not run"
_VERDICTS = [(EXIT_CODES[OK], "OK"), (EXIT_CODES[WARN], "WARN"), (EXIT_CODES[FAIL], "FAIL"),
             (EXIT_CODES[UNKNOWN], f"UNKNOWN ({_NOT_RUN})")]
_PLAIN = [(0, "done"), (ERROR, "an error"), (USAGE, "a bad option")]

TABLE: dict[str, list[tuple[int, str]]] = {
    "check": _VERDICTS,
    "check --format npd": [(NPD_OK, "fit (OK; WARN unless verify_npd_warn_unhealthy)"),
                           (NPD_PROBLEM, "a problem (FAIL)"), (NPD_UNKNOWN, "UNKNOWN"),
                           (NOT_RUN, "a bad option or settings, or an internal error (NPD: Unknown too)")],
    "dcgm": _VERDICTS,  # the worst of the diag's and nvbandwidth's
    "monitor": [(EXIT_CODES[OK], "OK: both targets met"), (EXIT_CODES[FAIL], "FAIL: a target missed"),
                (EXIT_CODES[UNKNOWN], f"UNKNOWN: a figure could not be read ({_NOT_RUN})")],
    "explain": [(0, "explained"), (USAGE, "no code or prefix found, or a bad option")],
    "calc": [(0, "done"), (ERROR, "an error (--chart without matplotlib)"), (USAGE, "a bad option")],
    "nccl-env": _PLAIN,
    "slurm verify": _VERDICTS,  # the worst node's
    "slurm sweep": _VERDICTS,
    "slurm rollout": [(0, "every node verified OK"), (EXIT_CODES[FAIL], "a node did not verify OK"),
                      (NOT_RUN, "not run: Slurm could not be asked, or a bad option")],
    "slurm accept": [(0, "every node certified (or a dry run)"),
                     (EXIT_CODES[FAIL], "a node failed a stage: it stays drained, naming the stage and codes"),
                     (EXIT_CODES[UNKNOWN], f"a node's stage could not run, so it is not certified ({_NOT_RUN})")],
    "slurm remediate": [(EXIT_OK, "nothing failed (a node left alone on purpose is no failure)"),
                        (EXIT_FAILED, "a repair or the check after it failed on a node, which stays drained"),
                        (NOT_RUN, "not run: Slurm could not be asked, or a bad option")],
    "reset-gpu": [(0, "reset (its time kept)"), (ERROR, "bad settings"), (USAGE, "a bad option"),
                  (255, "nvidia-smi could not be run; otherwise nvidia-smi's own non-zero status")],
    "ci run": [(0, "every case passed"), (ERROR, "a case failed, or an error"), (USAGE, "a bad option")],
    "lab": _PLAIN,
    "baseline results": _PLAIN,
    "baseline capture": [(0, "written"), (ERROR, "an error (the node's RDMA ports could not be read)"),
                         (USAGE, "a bad option")],
    "baseline diff": [(EXIT_CODES[OK], "OK: nothing differs from the platform file"),
                      (EXIT_CODES[FAIL], "FAIL: a key differs"),
                      (EXIT_CODES[UNKNOWN], f"UNKNOWN: a key could not be read ({_NOT_RUN}, or the platform file "
                                            "could not be read)")],
    "baseline calibrate": [(0, "figures written"), (ERROR, "refused (too few nodes, versions disagreeing) or an error: "
                                                           "nothing written"), (USAGE, "a bad option")],
}


def cell(command: str) -> str:
    """A command's codes as the page's table cell shows them."""
    return "; ".join(f"{code} {text}" for code, text in TABLE[command])
