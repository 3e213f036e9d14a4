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
_VERDICT_REASONS: dict = {}  # host -> the model's Reason an UNREADABLE failure gives its verdict


def record(host: str, reason: str, kind: str = FAILED, verdict_reason=None) -> None:
    """Keep ``reason`` for ``host`` unless it already has one; a lost
    connection replaces a failure it caused. ``verdict_reason``: the
    ``Reason`` of an UNREADABLE one, for the host's verdict."""
    if host not in _REASONS or (kind == UNREACHABLE and _REASONS[host][0] != UNREACHABLE):
        _REASONS[host] = (kind, reason)
        if verdict_reason is not None:
            _VERDICT_REASONS[host] = verdict_reason


def record_current(reason: str, kind: str = FAILED, verdict_reason=None) -> None:
    """:func:`record` for the host pyinfra is working on (a fact's process)."""
    from pyinfra import host

    try:
        name = host.name
    except Exception:  # no host in context (a fact processed outside a run)
        return
    record(name, reason, kind, verdict_reason)


def reason(host: str) -> tuple[str, str] | None:
    """``(kind, reason)``, or None when nothing was recorded for ``host``."""
    return _REASONS.get(host)


def verdict_reason(host: str):
    """The ``Reason`` recorded with ``host``'s UNREADABLE failure, if any."""
    return _VERDICT_REASONS.get(host)
