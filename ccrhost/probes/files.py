"""Content, mode and owner of the files ccrhost manages, any number of files
in one command (pyinfra's ``files.put`` spends three commands per file)."""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from dataclasses import dataclass

from ccrhost.probes import numbers


class FileFormatError(ValueError):
    """The files snippet printed a line that is not ``path<TAB>stat<TAB>base64``."""


_MODE = re.compile(r"[0-7]{1,4}")


@dataclass(frozen=True)
class FileState:
    mode: str                  # stat -c %a, e.g. "644"
    uid: int                   # stat -c %u
    gid: int                   # stat -c %g
    content: str | None        # the file, base64 on the wire, decoded as UTF-8; None when unreadable
    error: str | None = None   # why content is None: the file is not UTF-8, or could not be read


def command(paths) -> str:
    quoted = " ".join(shlex.quote(p) for p in paths)
    return (
        f"for f in {quoted}; do if [ -f \"$f\" ]; then "
        "printf '%s\\t%s\\t' \"$f\" \"$(stat -c '%a %u %g' \"$f\")\"; base64 -w0 \"$f\"; echo; "
        "else printf '%s\\t-\\n' \"$f\"; fi; done"
    )


def parse_states(lines: list[str]) -> dict[str, FileState | None]:
    """``{path: FileState}``, ``None`` for a path that does not exist."""
    states: dict[str, FileState | None] = {}
    for line in lines:
        fields = line.split("\t")
        if len(fields) < 2:
            continue
        path = fields[0]
        if fields[1] == "-":
            states[path] = None
            continue
        stat = fields[1].split()
        uid_n, gid_n = (numbers.integer(x, 0) for x in (stat[1:3] if len(stat) == 3 else ("-", "-")))
        if len(stat) != 3 or not _MODE.fullmatch(stat[0]) or uid_n is None or gid_n is None:
            raise FileFormatError(f"cannot read the state of {path}: stat printed {fields[1]!r}, "
                                  "expected '<octal mode> <uid> <gid>'")
        mode = stat[0]
        try:
            raw = base64.b64decode(fields[2] if len(fields) > 2 else "", validate=True)
        except (ValueError, binascii.Error) as exc:
            raise FileFormatError(f"cannot read the content of {path}: {exc}") from None
        try:
            states[path] = FileState(mode, uid_n, gid_n, raw.decode())
        except UnicodeDecodeError as exc:
            # a site's Latin-1 comment: ccrhost must not rewrite what it cannot read back
            states[path] = FileState(mode, uid_n, gid_n, None,
                                     f"{path} is not UTF-8 (byte {raw[exc.start]:#04x} at offset {exc.start})")
    return states
