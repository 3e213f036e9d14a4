"""Helpers shared by ccrhost's operations."""

from __future__ import annotations

import functools
import sys
from io import StringIO

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, FunctionCommand, QuoteString, StringCommand
from pyinfra.api import operation as pyinfra_operation

# pyinfra keeps no "dry run" flag in its state; its CLI's own argument is the source.
DRY = "--dry" in sys.argv


def describe(command) -> str:
    if isinstance(command, StringCommand):
        return command.get_masked_value()
    if isinstance(command, FileUploadCommand):
        return f"upload {command.dest}"
    if isinstance(command, FunctionCommand) and command.function is _report_failure:
        return f"fail: {command.args[0]}"
    return repr(command)


def operation(func):
    """pyinfra's @operation, plus: under ``--dry`` each planned command is
    listed, because pyinfra itself shows only which operations would change."""

    @functools.wraps(func)
    def listed(*args, **kwargs):
        # Plan every command first: pyinfra's change detection stops at the first.
        commands = list(func(*args, **kwargs))
        if DRY:
            for command in commands:
                host.log(f"would run: {describe(command)}")
        yield from commands

    op = pyinfra_operation()(listed)
    op._inner = func  # composing with `yield from other._inner(...)` must not list twice
    return op


def _report_failure(state, host, reason: str) -> bool:
    # pyinfra only looks at the return value of functions that take
    # (state, host); False then fails this host.
    logger.error(f"{host.print_prefix}{reason}")
    return False


def fail(reason: str):
    """Fail this host only, with ``reason``, and let the others go on.

    Raising OperationError would abort the run on every host with a
    traceback; a command that returns False fails just this one.
    """
    yield FunctionCommand(_report_failure, (reason,), {})


def write_sysfs(path: str, value: str) -> StringCommand:
    """Write one value to a sysfs/configfs attribute, as ``echo v > f`` does."""
    return StringCommand("printf '%s\\n'", QuoteString(value), ">", QuoteString(path))


def upload_text(content: str, path: str, mode: str = "644") -> list:
    """Commands that replace ``path`` with ``content`` atomically, root-owned."""
    temp = f"{path}.ccrhost-new"
    return [
        StringCommand("mkdir -p", QuoteString(path.rsplit("/", 1)[0] or "/")),
        FileUploadCommand(StringIO(content), temp),
        StringCommand("chown 0:0", QuoteString(temp), "&& chmod", mode, QuoteString(temp),
                      "&& mv -f", QuoteString(temp), QuoteString(path)),
    ]
