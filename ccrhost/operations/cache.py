"""What the stages know of a host: one snapshot read, shared by every stage.

pyinfra reruns a fact's command every time an operation asks for it, and a
remote command is a round trip (on the lab, 0.2 s of the node's sshd). The
stages read one :class:`~ccrhost.probes.node.NodeSnapshot` instead, taken
once per host. Stages write only what they own, and no stage reads what
another one writes, so the snapshot stays valid across them, with two
exceptions: loading a hardware driver's module can create RDMA devices, so
the modules stage then drops it (:func:`drop`), and the verification must
judge the node as tuned, so it asks for a fresh read when anything was
written (:func:`fresh`); the tuning reads it back in its last write
command (:func:`store`), so that read costs no round trip of its own.
"""

from __future__ import annotations

import time
from dataclasses import replace

from ccrhost.model.managed import FILES, UNIT_WANTS

_ATTR = "_ccrhost_snapshot"
_STALE = "_ccrhost_snapshot_stale"
_AT = "_ccrhost_snapshot_at"  # time.monotonic() when it was read
_STATE = "_ccrhost_fabric_state"  # (path, keep): the fabric probe's stored reading, and whether reads replace it
_ASK = "_ccrhost_baseline_ask"  # (sysctls, mount points): what the host baseline probe reads beyond its fixed files
_HOST = "_ccrhost_host_health"  # the host health probe's arguments (probes.host_health.args)
_FIRST = "_ccrhost_fabric_first"  # the run's first fabric reading: the window the verification judges


class NodeReadError(RuntimeError):
    """A probe's output on this host could not be read: the stage that
    needs it fails this host (see ``operations.base.operation``), and the
    host's verdict is UNKNOWN with ``code``: ``rdma_unreadable`` as
    ``ccrhost check`` gives for the same output, ``node_unreadable`` for the
    probes only a deploy reads (modules, QoS, files)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def _real(host):
    # pyinfra's `host` is a context proxy; the cache belongs to the Host behind it.
    getter = getattr(type(host), "_get_module", None)
    return getter(host) if getter else host


def configure(host, state: str, keep: bool, settings=None) -> None:
    """Where the node keeps its last counter reading (``verify_link_state``)
    and whether this run's reads replace it (a deploy that verifies does;
    a dry run never writes). Unconfigured: the default path, read only, no
    sysctl or mount asked for. ``settings``: the host's: the sysctls and
    mount points the host baseline reads (``settings.baseline_ask()``) and
    the host health probe's units and state."""
    _real(host).__dict__[_STATE] = (state, keep)
    if settings is not None:
        from ccrhost.probes.host_health import args

        _real(host).__dict__[_ASK] = settings.baseline_ask()
        _real(host).__dict__[_HOST] = args(settings, keep)  # None: host health off, not read


def _state(host) -> tuple[str, bool]:
    from ccrhost.probes.node import DEFAULT_STATE

    return _real(host).__dict__.get(_STATE, (DEFAULT_STATE, False))


def _ask(host):
    return _real(host).__dict__.get(_ASK, ((), ()))


def _first(host, snap) -> None:
    # The window the verification judges is the run's first: from the
    # node's last stored reading to before this run wrote anything. A
    # later read (after the tuning) only moves the stored reading on, so
    # the next window starts after the tuning, never across it.
    if _FIRST not in host.__dict__ and snap.fabric is not None and "fabric" not in snap.errors:
        host.__dict__[_FIRST] = snap.fabric


def snapshot(host):
    """The host's snapshot, read now if none is held."""
    from ccrhost.facts.node import NodeState

    host = _real(host)
    if _ATTR not in host.__dict__:
        state, keep = _state(host)
        host.__dict__[_ATTR] = host.get_fact(NodeState, paths=list(FILES), wants=UNIT_WANTS, state=state, keep=keep,
                                             ask=_ask(host), host=host.__dict__.get(_HOST))
        host.__dict__[_STALE] = False
        host.__dict__[_AT] = time.monotonic()
        _first(host, host.__dict__[_ATTR])
    return host.__dict__[_ATTR]


def fabric_first(host):
    """The run's first fabric reading (``probes.fabric.FabricDump``), or None."""
    return _real(host).__dict__.get(_FIRST)


def cached(host) -> bool:
    """Whether a snapshot is held (none yet, or dropped: the next use reads)."""
    return _ATTR in _real(host).__dict__


def store(host, snap, probes) -> None:
    """Keep ``snap``, read just now after this host's last write (see
    :class:`ccrhost.operations.base.ReadBackCommand`), as the current one;
    ``probes``: the ones it read, the others kept from the snapshot held."""
    from ccrhost.probes.node import merge

    host = _real(host)
    held = host.__dict__.get(_ATTR)
    if held is not None:
        snap = merge(held, snap, probes)
    host.__dict__[_ATTR] = snap
    host.__dict__[_STALE] = False
    host.__dict__[_AT] = time.monotonic()
    _first(host, snap)


def read_command(host, probes) -> str:
    """The snapshot's shell command for ``probes``, as :func:`snapshot` runs it."""
    from ccrhost.probes.node import command

    state, keep = _state(host)
    return command(list(FILES), UNIT_WANTS, probes, state=state, keep=keep, ask=_ask(host),
                   host=_real(host).__dict__.get(_HOST))


def changed(host) -> None:
    """An operation wrote to this host: the snapshot may be out of date."""
    host = _real(host)
    if _ATTR in host.__dict__:
        host.__dict__[_STALE] = True


def drop(host) -> None:
    """Forget the snapshot: the next stage reads the node again."""
    _real(host).__dict__.pop(_ATTR, None)
    _real(host).__dict__.pop(_AT, None)  # the run's first fabric reading stays: it is the judged window


def fresh(host) -> None:
    """Read again before the next use if anything was written since."""
    if _real(host).__dict__.get(_STALE):
        drop(host)


def _probe(host, name: str):
    snap = snapshot(host)
    if name in snap.errors:
        if name == "rdma":
            raise NodeReadError("rdma_unreadable", snap.errors[name])
        raise NodeReadError("node_unreadable", snap.errors[name])
    return getattr(snap, name)


def rdma(host):
    """:class:`~ccrhost.probes.rdma.RdmaReading`"""
    return _probe(host, "rdma")


def modules(host):
    """:class:`~ccrhost.probes.kernel.Modules`"""
    return _probe(host, "modules")


def qos_state(host, netdevs):
    """:class:`~ccrhost.probes.qos.QosReading` with (at least) ``netdevs``.
    The snapshot holds every netdev of a RoCE device; one it lacks (a name
    only a GID table gave) costs one read of its own."""
    reading = _probe(host, "qos")
    missing = [n for n in netdevs if n not in reading.interfaces]
    if not missing:
        return reading
    from ccrhost.facts.qos import QosState

    extra = _real(host).get_fact(QosState, interfaces=missing, wants=UNIT_WANTS)
    return replace(reading, interfaces={**reading.interfaces, **extra.interfaces})


def global_pause(host) -> dict:
    """``{netdev: PauseSetting}`` (``ethtool -a``) as the snapshot read it;
    empty where the fabric probe could not be read or ethtool is missing."""
    snap = snapshot(host)
    if "fabric" in snap.errors or snap.fabric is None:
        return {}
    return dict(snap.fabric.now.pause)


def gpus(host):
    """:class:`~ccrhost.probes.gpu.GpuProbe`"""
    return _probe(host, "gpus")


def pci(host):
    """:class:`~ccrhost.probes.pci.PciSnapshot`"""
    return _probe(host, "pci")


def snapshot_age(host) -> float | None:
    """Seconds since this host's current snapshot was read (None: not read)."""
    at = _real(host).__dict__.get(_AT)
    return None if at is None else time.monotonic() - at


def files(host, paths) -> dict:
    """``{path: FileState | None}``; paths outside the managed set (an
    operation called with its own path) cost one read of their own."""
    paths = list(paths)
    if all(p in FILES for p in paths):
        states = _probe(host, "files")
        return {p: states.get(p) for p in paths}
    from ccrhost.facts.files import FileStates

    return _real(host).get_fact(FileStates, paths=paths)
