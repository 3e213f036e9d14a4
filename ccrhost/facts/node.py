"""The whole node in one remote command (see :mod:`ccrhost.probes.node`)."""

from __future__ import annotations

from pyinfra.api import FactBase

from ccrhost.probes.node import DEFAULT_STATE, PROBES, NodeSnapshot, command, parse_snapshot


class NodeState(FactBase):
    """
    Returns a :class:`~ccrhost.probes.node.NodeSnapshot`: RDMA devices and
    ports, kernel modules, QoS of every RoCE netdev, the managed files and
    the GPUs. A probe whose output cannot be read is named in ``errors``;
    this fact itself never fails.

    .. code:: python

        snap = host.get_fact(NodeState, paths=["/etc/nccl.conf"], wants=UNIT_WANTS)
        snap.rdma.devices["mlx5_0"].ports[1].state   # "ACTIVE"
    """

    def default(self):
        # what the stages see when the command itself failed (a lost
        # connection): every probe unread, so none of them acts on it
        return NodeSnapshot(errors={name: "the node's state could not be read" for name in PROBES})

    def command(self, paths, wants, state=DEFAULT_STATE, keep=False, ask=((), ()), host=None) -> str:
        # keep: the fabric probe's reading now becomes the node's stored one; ask: the host baseline's
        # sysctls and mount points; host: the host health probe's arguments (probes.host_health.args)
        return command(paths, wants, state=state, keep=keep, ask=ask, host=host)

    def process(self, output):
        return parse_snapshot(output)
