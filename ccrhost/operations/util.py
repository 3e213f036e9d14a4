"""Helpers shared by ccrhost's operations."""

from __future__ import annotations

from io import StringIO

from pyinfra import logger
from pyinfra.api import FileUploadCommand, FunctionCommand, QuoteString, StringCommand


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
