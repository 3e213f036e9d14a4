"""The port error counters again, after a wait on the node: the second
reading of the verification's link-health window (the snapshot holds the
first)."""

from __future__ import annotations

from pyinfra.api import FactBase

from ccrhost.probes.pci import counters_command, parse_counters


class PortErrorCounters(FactBase):
    """
    Returns ``{"mlx5_0/1": {counter: value}}`` for the six error counters of
    every RDMA port, read ``delay`` seconds after the command starts.

    .. code:: python

        after = host.get_fact(PortErrorCounters, delay=4.2)
    """

    default = dict

    def command(self, delay) -> str:
        return counters_command(delay)

    def process(self, output):
        return parse_counters(output)
