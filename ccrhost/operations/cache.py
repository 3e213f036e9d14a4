"""Fact reads shared between ccrhost's operations on one host.

pyinfra reruns a fact's command every time an operation asks for it; the
deploy's stages would read the same RDMA tree five times. Here a read is
kept until an operation of ours yields a command (so the node may have
changed), at which point the host's cache is dropped. A no-op run thus
costs one remote command per fact.
"""

from __future__ import annotations

_ATTR = "_ccrhost_fact_cache"


def _key(cls, kwargs: dict) -> tuple:
    return cls, tuple(sorted((k, repr(v)) for k, v in kwargs.items()))


def _real(host):
    # pyinfra's `host` is a context proxy; the cache belongs to the Host behind it.
    getter = getattr(type(host), "_get_module", None)
    return getter(host) if getter else host


def get(host, cls, **kwargs):
    host = _real(host)
    cache = host.__dict__.setdefault(_ATTR, {})
    key = _key(cls, kwargs)
    if key not in cache:
        cache[key] = host.get_fact(cls, **kwargs)
    return cache[key]


def invalidate(host) -> None:
    _real(host).__dict__.pop(_ATTR, None)


def rdma(host) -> dict:
    """The RdmaDevices fact, shared by every stage."""
    from ccrhost.facts.rdma import RdmaDevices

    return get(host, RdmaDevices)


def qos_state(host, netdevs) -> dict:
    """The QosState fact of ``netdevs``, with the boot unit's systemd state."""
    from ccrhost.facts.qos import QosState
    from ccrhost.model.boot import WANTS

    return get(host, QosState, interfaces=list(netdevs), wants=WANTS)
