"""A check's validated settings, kept for the next check on this node.

Validating every settings key (pydantic, the YAML parser, the settings
model) takes a check longer than all its reads; the inputs rarely change
between two checks. After a full validation the check keeps what it uses
(:class:`ccrhost.model.check_settings.CheckSettings`) in :func:`location`,
with everything the validation depended on: the config file's bytes, the
command-line overrides, the host name, and the size and time of every
source file of the settings and the model (an upgrade or an edit of
ccrhost changes them). A check whose inputs differ in any of these (a
hand-edited config, a new flag, a new ccrhost) validates in full again and
replaces the file.

The file is marshal (built in; importing pickle or hashlib costs a check
some 10 ms each): plain values, and the model's records as their class
name and fields, rebuilt through their constructors, so a record whose
fields changed is a miss, never a half-filled record. It is read only when
it and its folder belong to this user and nobody else may write them.
In /run: a reboot starts over.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import marshal
import os
import stat

PATH = "/run/ccrhost/check-settings.marshal"
FORMAT = 1
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_RECORD = "\0record"  # a dict key no settings value has


def location() -> str:
    # CCRHOST_CHECK_CACHE: another place (the tests keep theirs out of /run)
    return os.environ.get("CCRHOST_CHECK_CACHE") or PATH


def inputs(config: bytes | None, overrides: dict, host: str) -> tuple:
    """What a validation of these inputs depended on."""
    sources = []
    for folder in (_PACKAGE, os.path.join(_PACKAGE, "model")):
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith(".py"):
                    st = entry.stat()
                    sources.append((entry.path, st.st_size, st.st_mtime_ns))
    return FORMAT, config, repr(sorted(overrides.items())), host, tuple(sorted(sources))


def _encode(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {_RECORD: f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, (tuple, list)):
        return type(value)(_encode(v) for v in value)
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot keep a {type(value).__name__}")


def _decode(value):
    if isinstance(value, dict):
        if _RECORD in value:
            module, _, name = value[_RECORD].partition(":")
            if not module.startswith("ccrhost.model."):
                raise ValueError(f"not a model record: {value[_RECORD]}")
            cls = getattr(importlib.import_module(module), name)
            if not dataclasses.is_dataclass(cls):
                raise ValueError(f"not a record: {value[_RECORD]}")
            if set(value["fields"]) != {f.name for f in dataclasses.fields(cls)}:
                raise ValueError(f"{value[_RECORD]} has other fields now")  # a default must not fill a gap
            return cls(**{k: _decode(v) for k, v in value["fields"].items()})
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_decode(v) for v in value)
    return value


def _trusted(path: str) -> bool:
    """Ours alone: owned by this user, writable by nobody else (file and folder)."""
    for p in (path, os.path.dirname(path)):
        try:
            st = os.lstat(p)
        except OSError:
            return False
        if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or stat.S_ISLNK(st.st_mode):
            return False
    return True


def load(given: tuple, path: str | None = None):
    """The kept settings for the inputs ``given``, or None (none kept,
    other inputs, not ours alone, unreadable, or records of another shape)."""
    from ccrhost.model.check_settings import CheckSettings

    path = path or location()
    if not _trusted(path):
        return None
    try:
        with open(path, "rb") as f:
            kept_inputs, encoded = marshal.load(f)
        if kept_inputs != given:
            return None
        settings = _decode(encoded)
    except Exception:  # a torn, foreign or outdated file is only a miss
        return None
    return settings if isinstance(settings, CheckSettings) else None


def store(given: tuple, settings, path: str | None = None) -> None:
    """Keep ``settings`` for the next check with the inputs ``given``; a
    check that cannot (not root, /run read-only) validates in full next
    time too."""
    path = path or location()
    temp = f"{path}.{os.getpid()}"
    try:
        data = marshal.dumps((given, _encode(settings)))
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temp, path)
    except (OSError, TypeError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(temp)
