"""Helpers shared by ccrhost's operations."""

from __future__ import annotations

import base64
import functools
import sys

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, FunctionCommand, QuoteString, StringCommand
from pyinfra.api import operation as pyinfra_operation

from ccrhost import failures
from ccrhost.model.status import UNKNOWN, Reason
from ccrhost.operations import cache as fact_cache

# pyinfra keeps no "dry run" flag in its state; its CLI's own argument is the source.
DRY = "--dry" in sys.argv


def describe(command) -> str:
    if isinstance(command, PlannedCommand):
        return "\n".join(command.settings)
    if isinstance(command, WriteFileCommand):
        return f"write {command.path} ({command.size} bytes, mode {command.mode})"
    if isinstance(command, StringCommand):
        return command.get_masked_value()
    if isinstance(command, FileUploadCommand):
        return f"upload {command.src} to {command.dest}"
    if isinstance(command, FunctionCommand) and command.function is _report_failure:
        return f"fail: {command.args[0]}"
    return repr(command)


def batched(commands: list) -> list:
    """Join runs of shell commands into one, stopping at the first failure as
    pyinfra would: one SSH round trip instead of one per setting."""
    out, run = [], []

    def flush():
        if len(run) == 1:
            out.append(run[0])
        elif run:
            bits = []
            for i, command in enumerate(run):
                bits += (["&&"] if i else []) + ["{", *command.bits, ";", "}"]
            out.append(StringCommand(*bits))
        run.clear()

    for command in commands:
        if type(command) in (StringCommand, WriteFileCommand, PlannedCommand):
            run.append(command)
        else:
            flush()
            out.append(command)
    flush()
    return out


def planned(stage, hold=None):
    """The commands of one stage's generator, planned whole before any is
    yielded (pyinfra's change detection stops at the first; a stage that
    cannot read the node fails the host without writing anything), listed
    under ``--dry`` and batched into one round trip. ``hold(commands)``
    true: none of them is listed or yielded (a disruptive stage on a busy node)."""
    try:
        commands = list(stage)
    except fact_cache.NodeReadError as exc:
        failures.record_current(str(exc), failures.UNREADABLE, Reason(UNKNOWN, exc.code, str(exc)))
        commands = list(fail(str(exc)))
    except Exception as exc:  # a bug meeting this node's data: this host's failure, not the fleet's
        logger.debug("planning failed", exc_info=True)
        commands = list(fail(f"internal error while planning: {type(exc).__name__}: {exc}"))
    if commands and hold is not None and hold(commands):
        return
    if commands:
        fact_cache.changed(host)
    if DRY:
        for command in commands:
            for line in describe(command).split("\n"):
                host.log(f"would run: {line}")
    yield from batched(commands)


def operation(func):
    """pyinfra's @operation, plus:

    - a node whose output a stage cannot read fails that host with the
      reason, not the run: the generator is planned whole before anything is
      yielded, so a half-planned stage writes nothing;
    - under ``--dry`` each planned command is listed, because pyinfra itself
      shows only which operations would change;
    - an operation that yields commands marks the host's snapshot stale.
    """

    @functools.wraps(func)
    def listed(*args, **kwargs):
        yield from planned(func(*args, **kwargs))

    op = pyinfra_operation()(listed)
    op._inner = func  # composing with `yield from other._inner(...)` must not list twice
    return op


def _report_failure(state, host, reason: str) -> bool:
    # pyinfra only looks at the return value of functions that take
    # (state, host); False then fails this host.
    logger.error(f"{host.print_prefix}{reason}")
    failures.record(host.name, reason)
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


class PlannedCommand(StringCommand):
    """One shell command that applies several settings (a QoS unit); ``--dry``
    lists each of them."""

    def __init__(self, settings: list[str], *bits):
        super().__init__(*bits)
        self.settings = settings


class WriteFileCommand(StringCommand):
    """A file write; knows its path so that ``--dry`` can say what it writes."""

    def __init__(self, path: str, size: int, mode: str, *bits):
        super().__init__(*bits)
        self.path, self.size, self.mode = path, size, mode


READ_BACK_MARK = "@@@@ccrhost-read-back"


class ReadBackCommand(StringCommand):
    """A host's last write command, then the node snapshot read again in the
    same round trip: the verification judges the tuned node from that read
    (``cache.store``) instead of a command of its own. ``probes``: read only
    these again, the rest is kept from the snapshot the stages planned
    from. The read runs only when every write succeeded; a failing write
    fails the host with its own output, as the plain command would."""

    def __init__(self, command: StringCommand, host, probes=None):
        from ccrhost.probes.node import PROBES

        self.command, self.probes = command, PROBES if probes is None else tuple(probes)
        super().__init__("{", *command.bits, ";", "} && { echo", QuoteString(READ_BACK_MARK), ";",
                         fact_cache.read_command(host, self.probes), "; }")

    def execute(self, state, host, connector_arguments):
        from pyinfra.connectors.util import CommandOutput

        from ccrhost.probes.node import parse_snapshot

        status, output = super().execute(state, host, connector_arguments)
        lines = list(output)
        marks = [i for i, line in enumerate(lines) if line.buffer_name == "stdout" and line.line == READ_BACK_MARK]
        if not status or not marks:
            return status, output
        read = [line.line for line in lines[marks[-1] + 1:] if line.buffer_name == "stdout"]
        fact_cache.store(host, parse_snapshot(read, self.probes), self.probes)
        kept = lines[:marks[-1]] + [line for line in lines[marks[-1] + 1:] if line.buffer_name != "stdout"]
        return status, CommandOutput(kept)


def upload_text(content: str, path: str, mode: str = "644") -> list:
    """One command that replaces ``path`` with ``content`` atomically, root-owned.

    The content travels base64-encoded inside the command rather than over
    SFTP: one round trip, and a read-only or full filesystem fails with the
    shell's own message ("Read-only file system", "No space left on device").
    """
    directory = path.rsplit("/", 1)[0] or "/"
    temp = f"{path}.ccrhost-new"
    encoded = base64.b64encode(content.encode()).decode()
    return [WriteFileCommand(
        path, len(content.encode()), mode,
        "mkdir -p", QuoteString(directory), "&& { printf '%s'", QuoteString(encoded), "| base64 -d >", QuoteString(temp),
        "&& chown 0:0", QuoteString(temp), "&& chmod", mode, QuoteString(temp),
        "&& mv -f", QuoteString(temp), QuoteString(path), "|| { rm -f", QuoteString(temp), "; exit 1; }; }",
    )]
