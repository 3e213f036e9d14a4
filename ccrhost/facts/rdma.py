"""The RDMA state of a node as a pyinfra fact (see ``ccrhost.probes.rdma``)."""

from __future__ import annotations

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError

from ccrhost.probes import sysfs
from ccrhost.probes.rdma import COMMAND, CONFIGFS, IB_ROOT, RDMA_CM, parse_rdma_dump

__all__ = ["RdmaDevices", "CONFIGFS", "IB_ROOT", "RDMA_CM"]


class RdmaDevices(FactBase):
    """
    Returns the node's RDMA devices and its rdma_cm configfs state:

    .. code:: python

        {"devices": {
            "mlx5_0": {
                "pci": {"current_speed_gts": 32.0, "current_width": 16,
                        "max_speed_gts": 32.0, "max_width": 16},
                "netdevs": ["ens1np0"],
                "ofed_tc": True,          # tc/<port>/traffic_class exists (MLNX_OFED only)
                "ports": {
                    1: {"state": "ACTIVE", "state_id": 4, "phys_state": "LinkUp",
                        "rate_gbps": 400.0, "lanes": 4, "speed": "NDR",
                        "link_layer": "Ethernet", "netdev": "ens1np0",
                        "gids": [{"index": 3, "gid": "...", "type": "RoCE v2",
                                  "ndev": "ens1np0", "ipv4": "10.0.0.1"}],
                        "traffic_class": None, "credit_threshold": None,
                        "cm": {"default_roce_mode": "RoCE v2", "default_roce_tos": 106},
                        # cm is None when the configfs group does not exist
                    },
                },
            }},
         "node": {"mounted": True,        # something is mounted on /sys/kernel/config
                  "fstype": "configfs",
                  "rdma_cm": True,        # rdma_cm registered its configfs subsystem
                  "ecn": ["ens1np0"],     # netdevs with the OFED-only ecn/ tree
                  "qos": ["ens1np0"]}}    # ... and qos/ tree
    """

    default = dict

    def command(self) -> str:
        return COMMAND

    def process(self, output):
        try:
            return parse_rdma_dump(output)
        except sysfs.SysfsFormatError as exc:
            raise FactProcessError(f"unexpected sysfs content: {exc}") from exc
