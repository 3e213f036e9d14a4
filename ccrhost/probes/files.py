"""Content, mode and owner of the files ccrhost manages, any number of files
in one command (pyinfra's ``files.put`` spends three commands per file)."""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from dataclasses import dataclass

from ccrhost import numbers


class FileFormatError(ValueError):
    """The files snippet printed a line that is not ``path<TAB>stat<TAB>base64``."""


_MODE = re.compile(r"[0-7]{1,4}")


@dataclass(frozen=True)
class FileState:
    mode: str                  # stat -c %a, e.g. "644"
    uid: int                   # stat -c %u
    gid: int                   # stat -c %g
    content: str | None        # the file, base64 on the wire, decoded as UTF-8; None when unreadable
    error: str | None = None   # why content is None: not UTF-8 (which line), unreadable, a symlink or not a file


def command(paths) -> str:
    """``path<TAB>mode uid gid<TAB>base64``; ``path<TAB>-`` when absent;
    ``path<TAB>!<TAB>why`` for a path ccrhost must not replace (a symlink, a
    directory, a file it cannot read)."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    return (
        f"for f in {quoted}; do if [ -L \"$f\" ]; then printf '%s\\t!\\t%s\\n' \"$f\" 'is a symbolic link'; "
        "elif [ -f \"$f\" ]; then if c=$(base64 -w0 \"$f\" 2>&1); then "
        "printf '%s\\t%s\\t%s\\n' \"$f\" \"$(stat -c '%a %u %g' \"$f\")\" \"$c\"; "
        "else printf '%s\\t!\\tcannot be read: %s\\n' \"$f\" \"$(echo $c)\"; fi; "
        "elif [ -e \"$f\" ]; then printf '%s\\t!\\t%s\\n' \"$f\" 'is not a regular file'; "
        "else printf '%s\\t-\\n' \"$f\"; fi; done"
    )


def _not_utf8(path: str, raw: bytes, exc: UnicodeDecodeError) -> str:
    """Where the first byte that is not UTF-8 sits: line number and the line."""
    number = raw.count(b"\n", 0, exc.start) + 1
    line = raw.split(b"\n")[number - 1].decode("utf-8", "backslashreplace").rstrip("\r")
    return f"{path} is not UTF-8: byte {raw[exc.start]:#04x} in line {number}: {line}"


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
        if fields[1] == "!":
            why = "\t".join(fields[2:]).strip() or "cannot be read"
            states[path] = FileState("", 0, 0, None, f"{path} {why}")
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
            states[path] = FileState(mode, uid_n, gid_n, None, _not_utf8(path, raw, exc))
    return states
