"""RDMA compute ports and what they can carry. Pure.

A :class:`Port` is one port of an RDMA device as the RDMA probe read it
(``/sys/class/infiniband/<dev>/ports/<n>/...`` and the device's PCIe link).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from ccrhost.model.rdma import OPERSTATES_UP, NodeNet, RdmaPort, RdmaReading, efa_link_layer


def natural_key(name: str) -> list:
    """Sort device names as people do: mlx5_2 before mlx5_10."""
    # the split's odd parts are the ASCII digit runs; the rest may hold
    # other digits ("eth0²": "²".isdigit() is True and int("²") raises)
    return [int(part) if i % 2 else part for i, part in enumerate(re.split(r"([0-9]+)", name))]


# Payload bits per transfer after line encoding: 8b/10b up to 5 GT/s,
# 128b/130b for 8-32 GT/s, 242B/256B FLIT for 64 GT/s (PCIe 6).
_PCIE_ENCODING = {2.5: 8 / 10, 5.0: 8 / 10, 8.0: 128 / 130, 16.0: 128 / 130, 32.0: 128 / 130, 64.0: 242 / 256}


def pcie_gbps(gts: float | None, width: int | None) -> float | None:
    """Usable PCIe link bandwidth in Gb/s for a speed (GT/s) and width."""
    if gts is None or not width:
        return None
    encoding = _PCIE_ENCODING.get(gts, 128 / 130)
    return gts * encoding * width


def effective_gbps(link_gbps: float, pcie_gbps: float | None) -> float:
    """What a port can really move: the slower of its link and its NIC's PCIe link."""
    return link_gbps if pcie_gbps is None else min(link_gbps, pcie_gbps)


@dataclass(frozen=True)
class Port:
    device: str
    port: int
    link_layer: str | None
    state: str | None
    phys_state: str | None
    rate_gbps: float | None
    pcie_gts: float | None
    pcie_width: int | None
    pcie_gts_max: float | None
    pcie_width_max: int | None
    measured_gbps: float | None = None
    netdev: str | None = None
    netdev_operstate: str | None = None  # /sys/class/net/<netdev>/operstate, where read
    netdev_carrier: int | None = None    # /sys/class/net/<netdev>/carrier, where read

    @property
    def efa(self) -> bool:
        """An AWS EFA port (link_layer "Unknown"): its state and rate files
        are the driver's constants (model/rdma.py), so its link comes from
        its netdev and it is no InfiniBand or RoCE port to tune or count."""
        return efa_link_layer(self.link_layer)

    @property
    def link_known(self) -> bool:
        """Whether the link state was read: always for IB and RoCE ports; for
        EFA, only when its netdev's operstate was (an EFA-only adapter has no
        netdev, NVSentinel EFAStateCheck)."""
        return not self.efa or self.netdev_operstate is not None

    @property
    def active(self) -> bool:
        if self.efa and self.netdev_operstate is not None:
            # NVSentinel EFAStateCheck: operstate other than up/unknown, or
            # carrier 0, is a down link whatever ports/1/state says
            return self.netdev_operstate in OPERSTATES_UP and self.netdev_carrier != 0
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"

    @property
    def link_text(self) -> str:
        """The link state as read, for messages."""
        if self.efa and self.netdev_operstate is not None:
            carrier = "unreadable" if self.netdev_carrier is None else self.netdev_carrier
            return f"netdev {self.netdev} operstate {self.netdev_operstate}, carrier {carrier}"
        return f"{self.state}/{self.phys_state}"

    @property
    def pcie_gbps(self) -> float | None:
        return pcie_gbps(self.pcie_gts, self.pcie_width)

    @property
    def link_gbps(self) -> float:
        """What the link and the NIC's PCIe allow, before any measurement."""
        return effective_gbps(self.rate_gbps or 0.0, self.pcie_gbps)

    @property
    def effective_gbps(self) -> float:
        return self.link_gbps if self.measured_gbps is None else min(self.link_gbps, self.measured_gbps)

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"


def compute_ports(rdma: RdmaReading, exclude: tuple[str, ...] = ()) -> list[Port]:
    """Ports that carry compute traffic: every port of every RDMA device
    not matched by an ``exclude`` pattern (storage, management), in natural
    device order."""
    ports = []
    for dev, data in sorted(rdma.devices.items(), key=lambda kv: natural_key(kv[0])):
        if any(fnmatch.fnmatchcase(dev, pattern) for pattern in exclude):
            continue
        pci = data.pci
        for num, p in sorted(data.ports.items()):
            ports.append(Port(
                device=dev, port=int(num), link_layer=p.link_layer, state=p.state,
                phys_state=p.phys_state, rate_gbps=p.rate_gbps,
                pcie_gts=pci.current_speed_gts, pcie_width=pci.current_width,
                pcie_gts_max=pci.max_speed_gts, pcie_width_max=pci.max_width, netdev=p.netdev,
                netdev_operstate=p.netdev_operstate, netdev_carrier=p.netdev_carrier,
            ))
    return ports


def ethernet_ports(rdma: RdmaReading) -> list[tuple[str, int, RdmaPort]]:
    """Every Ethernet-link-layer (RoCE) port, excluded devices included (the
    rdma_cm defaults are per device), in natural device order."""
    return [(dev, num, port)
            for dev, data in sorted(rdma.devices.items(), key=lambda kv: natural_key(kv[0]))
            for num, port in sorted(data.ports.items())
            if port.link_layer == "Ethernet"]


def efa_ports(rdma: RdmaReading, exclude: tuple[str, ...] = ()) -> list[Port]:
    """The compute EFA ports (what the deploy says it leaves untuned)."""
    return [p for p in compute_ports(rdma, exclude) if p.efa]


def roce_netdevs(rdma: RdmaReading, exclude: tuple[str, ...] = ()) -> dict[str, dict]:
    """Compute RoCE netdevs -> ``{"rate_gbps", "ports": [(dev, num)]}``."""
    out: dict[str, dict] = {}
    for p in compute_ports(rdma, exclude):
        if p.link_layer == "Ethernet" and p.netdev:
            entry = out.setdefault(p.netdev, {"rate_gbps": 0.0, "ports": []})
            entry["rate_gbps"] = max(entry["rate_gbps"], p.rate_gbps or 0.0)
            entry["ports"].append((p.device, p.port))
    return dict(sorted(out.items(), key=lambda kv: natural_key(kv[0])))


def effective_rates(rdma: RdmaReading, exclude=()) -> dict[str, float]:
    """Active compute ports and the rate the verification counts them at."""
    return {p.name: p.link_gbps for p in compute_ports(rdma, exclude) if p.active}


def lower_paths(lowers: dict[str, list[str]], top: str) -> dict[str, list[str]]:
    """``top`` and every netdev it sits on, through any stack of VLAN, bridge,
    bond or macvlan (the kernel's lower_/upper_ links), each with its path from ``top``."""
    paths = {top: [top]}
    todo = [top]
    while todo:
        dev = todo.pop(0)
        for low in lowers.get(dev, []):
            if low not in paths:
                paths[low] = paths[dev] + [low]
                todo.append(low)
    return paths


def management_hits(node: NodeNet, netdevs) -> tuple[list[str], str | None]:
    """``(hits, unknown)``: each of ``netdevs`` that carries this SSH
    connection or a default route (itself, or under the netdev that does),
    and why the SSH connection's interface could not be told, if it could not."""
    carriers, unknown = [], None
    if node.ssh_server_ip and node.ssh_dev:
        carriers.append((node.ssh_dev, f"this SSH connection ({node.ssh_server_ip}, from {node.ssh_source})"))
    elif node.ssh_server_ip:
        unknown = f"this SSH connection's address {node.ssh_server_ip} is on no interface `ip addr` shows"
    elif node.ssh_session:
        unknown = ("$SSH_CONNECTION is empty (sudo's env_reset drops it) and no established socket of this "
                   "session's sshd is in /proc/net/tcp or /proc/net/tcp6")
    carriers += [(dev, "a default route") for dev in node.default_route_devs]
    hits = []
    for top, what in carriers:
        for dev, path in lower_paths(node.lowers, top).items():
            if dev in netdevs:
                through = f" through {' -> '.join(path)}" if len(path) > 1 else ""
                hit = f"{dev} carries {what}{through}"
                if hit not in hits:
                    hits.append(hit)
    return hits, unknown
