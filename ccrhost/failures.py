"""Why each host failed during a run, for the reports written at its end.

pyinfra keeps which hosts failed (``state.failed_hosts``) but not why in a
form a report can quote. ccrhost's own failures (``operations.base.fail``,
a fact it cannot read, a lost connection) are recorded here as they happen;
the first reason of a host is the one reported (the ones after follow from it).
"""

from __future__ import annotations

# UNREADABLE: a probe's output on the host could not be read; the host's
# verdict is then UNKNOWN with the probe's own code, as ``ccrhost check`` says.
FAILED, UNREACHABLE, UNREADABLE = "failed", "unreachable", "unreadable"

_REASONS: dict[str, tuple[str, str]] = {}
_CODES: dict[str, str] = {}


def record(host: str, reason: str, kind: str = FAILED, code: str | None = None) -> None:
    """Keep ``reason`` for ``host`` unless it already has one; a lost
    connection replaces a failure it caused. ``code``: the reason code of
    an UNREADABLE one."""
    if host not in _REASONS or (kind == UNREACHABLE and _REASONS[host][0] != UNREACHABLE):
        _REASONS[host] = (kind, reason)
        if code:
            _CODES[host] = code


def record_current(reason: str, kind: str = FAILED, code: str | None = None) -> None:
    """:func:`record` for the host pyinfra is working on (a fact's process)."""
    from pyinfra import host

    try:
        name = host.name
    except Exception:  # no host in context (a fact processed outside a run)
        return
    record(name, reason, kind, code)


def reason(host: str) -> tuple[str, str] | None:
    """``(kind, reason)``, or None when nothing was recorded for ``host``."""
    return _REASONS.get(host)


def code(host: str) -> str | None:
    """The reason code recorded with ``host``'s UNREADABLE failure."""
    return _CODES.get(host)
