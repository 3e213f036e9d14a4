"""Writing results: one atomic file write for every report and output file."""

from __future__ import annotations

import os
import threading
from pathlib import Path

# O_EXCL and O_NOFOLLOW: the temporary file is always a new one of ours,
# never a file or link someone put in the folder first. (tempfile.mkstemp
# does the same, but importing tempfile costs every `ccrhost check` 4 ms.)
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _create(tmp: str) -> int:
    try:
        return os.open(tmp, _FLAGS, 0o600)
    except FileExistsError:  # left by a writer of the same pid that died: not in use
        os.unlink(tmp)
        return os.open(tmp, _FLAGS, 0o600)


def write_atomic(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader (a node_exporter scrape,
    a CI job collecting reports) never sees half a file; parent folders are
    created, the file is 0644."""
    path = Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = str(path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = _create(tmp)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
