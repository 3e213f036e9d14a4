"""The RDMA state of a node as a pyinfra fact (see :mod:`ccrhost.probes.rdma`)."""

from __future__ import annotations

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError

from ccrhost import failures
from ccrhost.probes import sysfs
from ccrhost.probes.rdma import (
    COMMAND,
    CONFIGFS,
    IB_ROOT,
    RDMA_CM,
    RdmaReading,
    parse_rdma_dump,
)

__all__ = ["RdmaDevices", "CONFIGFS", "IB_ROOT", "RDMA_CM"]


class RdmaDevices(FactBase):
    """
    Returns the node's RDMA devices, ports, GIDs, NIC PCIe links and
    rdma_cm configfs state as an :class:`~ccrhost.probes.rdma.RdmaReading`:

    .. code:: python

        reading.devices["mlx5_0"].ports[1].rate_gbps   # 400.0
        reading.node.ssh_dev                           # "eth0"
    """

    default = RdmaReading

    def command(self) -> str:
        return COMMAND

    def process(self, output):
        try:
            return parse_rdma_dump(output)
        except sysfs.SysfsFormatError as exc:
            failures.record_current(f"unexpected sysfs content: {exc}")
            raise FactProcessError(f"unexpected sysfs content: {exc}") from exc
