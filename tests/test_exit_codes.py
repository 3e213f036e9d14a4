"""One exit-code table for every command (issue 46): the page shows the
table ccrhost/exit_codes.py makes from the constants, every command has a
row, and the commands return what their row says."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from ccrhost import exit_codes
from ccrhost.cli import entry, main

PAGE = Path(__file__).resolve().parent.parent / "docs" / "failure-behaviour.md"


def page_table() -> dict[str, str]:
    section = PAGE.read_text().split("## Exit codes", 1)[1]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `ccrhost ([^`]+)` \| (.*) \|$", section, re.M)}


def leaf_commands() -> list[str]:
    out = []

    def walk(cmd, path, ctx):
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                walk(sub, [*path, name], click.Context(sub, parent=ctx))
        else:
            out.append(" ".join(path))
    walk(main, [], click.Context(main))
    return out


def test_the_page_shows_the_table_the_code_makes():
    assert page_table() == {command: exit_codes.cell(command) for command in exit_codes.TABLE}


def test_every_command_has_a_row():
    for command in leaf_commands():
        assert command in exit_codes.TABLE or command.split()[0] == "lab", command


def codes(command: str) -> dict[int, str]:
    return dict(exit_codes.TABLE[command])


def test_the_verdict_commands_return_the_verdict_constants():
    from ccrhost.model.status import EXIT_CODES

    for command in ("check", "dcgm", "slurm verify", "slurm sweep"):
        assert {code: text.split()[0] for code, text in codes(command).items()} == \
            {code: status for status, code in EXIT_CODES.items()}, command


def test_rollout_and_remediate_return_what_their_rows_say():
    from ccrhost.fleet import remediate as rem
    from ccrhost.fleet import rollout as ro
    from ccrhost.fleet.slurm import RolloutError
    from ccrhost.fleet.slurm_job import VerifyError

    ok, failed = ro.Outcome("n1", "OK", "verified OK"), ro.Outcome("n2", "FAIL", "stays drained")
    assert codes("slurm rollout")[ro.exit_code([ok])] == "every node verified OK"
    assert codes("slurm rollout")[ro.exit_code([ok, failed])] == "a node did not verify OK"
    assert codes("slurm rollout")[RolloutError("x").exit_code].startswith("not run: ")
    assert codes("slurm verify")[VerifyError("x").exit_code].startswith("UNKNOWN")
    log = rem.NodeLog("n1")
    assert codes("slurm remediate")[rem.exit_code([log])].startswith("nothing failed")
    log.fail("nvidia-smi -r -i 2 failed (exit 255)")
    assert codes("slurm remediate")[rem.exit_code([log])].startswith("a repair or the check after it failed")


@pytest.mark.parametrize("argv, command", [
    (["check", "--no-such-option"], "check"), (["dcgm", "--no-such-option"], "dcgm"),
    (["monitor", "--no-such-option"], "monitor"), (["slurm", "verify", "--no-such-option"], "slurm verify"),
    (["slurm", "remediate", "--no-such-option"], "slurm remediate"),
    (["slurm", "rollout", "--no-such-option"], "slurm rollout"),
    (["calc", "--no-such-option"], "calc"), (["explain", "zzzz"], "explain"),
    (["baseline", "diff", "--no-such-option"], "baseline diff"),
    (["baseline", "calibrate", "--no-such-option"], "baseline calibrate"),
])
def test_a_bad_option_exits_as_the_row_says(argv, command, capsys):
    with pytest.raises(SystemExit) as done:
        entry(argv)
    assert "bad option" in codes(command)[done.value.code], (argv, done.value.code)
