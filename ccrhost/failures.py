"""Why each host failed during a run, for the reports written at its end.

pyinfra keeps which hosts failed (``state.failed_hosts``) but not why in a
form a report can quote. ccrhost's own failures (``operations.base.fail``,
a fact it cannot read, a lost connection) are recorded here as they happen;
the first reason of a host is the one reported (the ones after follow from it).
"""

from __future__ import annotations

FAILED, UNREACHABLE = "failed", "unreachable"

_REASONS: dict[str, tuple[str, str]] = {}


def record(host: str, reason: str, kind: str = FAILED) -> None:
    """Keep ``reason`` for ``host`` unless it already has one; a lost
    connection replaces a failure it caused."""
    if host not in _REASONS or (kind == UNREACHABLE and _REASONS[host][0] != UNREACHABLE):
        _REASONS[host] = (kind, reason)


def record_current(reason: str, kind: str = FAILED) -> None:
    """:func:`record` for the host pyinfra is working on (a fact's process)."""
    from pyinfra import host

    try:
        name = host.name
    except Exception:  # no host in context (a fact processed outside a run)
        return
    record(name, reason, kind)


def reason(host: str) -> tuple[str, str] | None:
    """``(kind, reason)``, or None when nothing was recorded for ``host``."""
    return _REASONS.get(host)
