"""Writing results: one file writer for every report and output file.

A regular file is replaced atomically (a reader never sees half of it). A
path that is not ours to replace is written through instead: a device such
as /dev/null or /dev/stdout, a FIFO, a socket, or anything reached through
/proc's fd links. Renaming over those would destroy them (run as root,
``--output /dev/stdout`` once replaced the machine's /dev/stdout link).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import threading
from pathlib import Path

# O_EXCL and O_NOFOLLOW: the temporary file is always a new one of ours,
# never a file or link someone put in the folder first. (tempfile.mkstemp
# does the same, but importing tempfile costs every `ccrhost check` 4 ms.)
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

# A link chain longer than this is a loop (the kernel's own limit is 40).
_MAX_LINKS = 40


def _create(tmp: str) -> int:
    try:
        return os.open(tmp, _FLAGS, 0o600)
    except FileExistsError:  # left by a writer of the same pid that died: not in use
        os.unlink(tmp)
        return os.open(tmp, _FLAGS, 0o600)


def _under_proc(path: str) -> bool:
    return path == "/proc" or path.startswith("/proc/")


def _may_follow(link: str) -> None:
    """The kernel's fs.protected_symlinks rule, which a rename of the
    resolved path would bypass: in a sticky world-writable folder (/tmp) a
    link is followed only when it is ours or the folder owner's; anyone
    else's could point a root run at /etc/shadow."""
    folder = os.stat(os.path.dirname(link))
    if not (folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH):
        return
    owner = os.lstat(link).st_uid
    if owner not in (os.geteuid(), folder.st_uid):
        raise PermissionError(f"{link}: a link of uid {owner} in a sticky world-writable folder; not followed")


def _replace_target(path: Path) -> Path | None:
    """The regular file to replace for ``path``, or None to write through.

    Links are followed to their end, so a link to a regular file keeps its
    link and the file it names is replaced, in that file's own folder (a
    rename only works within one file system). A chain that passes through
    /proc (/dev/stdout -> /proc/self/fd/1) names an open file of this
    process: it is written through, as a shell redirection would be.
    """
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        parent, name = os.path.split(current)
        current = os.path.join(os.path.realpath(parent), name)
        if _under_proc(current):
            return None
        if not os.path.islink(current):
            break
        _may_follow(current)
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
    else:
        raise OSError(f"{path}: too many levels of symbolic links")
    try:
        mode = os.stat(current).st_mode
    except FileNotFoundError:
        return Path(current)  # a new file (or a dangling link's target)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{path} is a directory, not a file")
    return Path(current) if stat.S_ISREG(mode) else None


def _write_through(path: Path, text: str) -> None:
    data = text.encode()
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = 0
    if stat.S_ISSOCK(mode):  # open(2) refuses sockets (ENXIO): connect instead
        import socket

        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            with socket.socket(socket.AF_UNIX, kind) as sock:
                try:
                    sock.connect(str(path))
                except OSError as exc:
                    if exc.errno == errno.EPROTOTYPE:  # the other kind of socket
                        continue
                    raise
                if kind == socket.SOCK_STREAM:
                    sock.sendall(data)
                else:
                    sock.send(data)
                return
        raise OSError(f"{path}: a socket that takes neither streams nor datagrams")
    # No O_CREAT: the thing is there, we only write to it. O_TRUNC only for a
    # regular file reached through /proc (as `>` would); devices and FIFOs
    # ignore it anyway.
    flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | (os.O_TRUNC if stat.S_ISREG(mode) else 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path``.

    A regular file (or a new one, or the regular file a link names) is
    replaced so that a reader (a node_exporter scrape, a CI job collecting
    reports) never sees half a file; parent folders are created, the file
    is 0644. Anything else (a device, a FIFO, a socket, /dev/stdout) is
    written through and never replaced; a directory is refused.
    """
    path = Path(path).absolute()
    target = _replace_target(path)
    if target is None:
        _write_through(path, text)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = str(target.parent / f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = _create(tmp)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_output(output: str | Path, text: str) -> None:
    """What every ``--output`` option does: ``-`` is standard output,
    anything else goes through write_atomic."""
    if str(output) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_atomic(output, text)


# --- state files: what a root check replaces on every run ------------------------
# A state file (verify_link_state, verify_gpu_state) is replaced, never
# written through: the new reading goes to a temporary name of its own
# (O_EXCL | O_NOFOLLOW, random: never a file or link someone planted in the
# folder, which may be /tmp where fs.protected_symlinks is 0), then is
# renamed over the path. rename(2) replaces a link at the path itself and
# never follows it.

def write_state(path: str | Path, text: str) -> None:
    """Replace the state file ``path`` with ``text`` (folders created).
    Standard library only and self-contained: node/active.py ships this
    source to the nodes for its remote store."""
    import os

    path = os.path.abspath(path)
    folder, name = os.path.split(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_state_command(path: str, value: str) -> str:
    """:func:`write_state`'s shell twin (the deploy's snapshot): the shell
    words ``value`` (e.g. ``"$r"``) into ``path``; fails (non-zero) when it
    cannot. mktemp creates the temporary name exclusively (O_EXCL, mode
    0600); ``mv -T`` renames it over the path, never into a folder or
    through a link the path names."""
    import shlex

    q = shlex.quote(path)
    folder, name = os.path.split(path)
    d = shlex.quote(folder or "/")
    return (f"{{ mkdir -p {d} && t=$(mktemp {d}/{shlex.quote('.' + name)}.XXXXXXXX) && "
            f"{{ printf '%s\\n' {value} > \"$t\" && mv -fT \"$t\" {q} || {{ rm -f \"$t\"; false; }}; }}; }}")
