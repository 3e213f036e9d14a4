"""What the RDMA probe reads on a node (probes/rdma.py fills these): the
devices, ports, GIDs, NIC PCIe links, rdma_cm defaults and the node's
management path. The model's vocabulary, so kept in model/: the probe
imports them, never the other way."""

from __future__ import annotations

from dataclasses import dataclass, field

# An AWS Elastic Fabric Adapter port. The efa driver gives no link layer, so
# the core's link_layer_show prints "Unknown" (IB_LINK_LAYER_UNSPECIFIED;
# drivers/infiniband/core/sysfs.c), and efa_query_port() hard-codes
# IB_PORT_ACTIVE, LinkUp and IB_SPEED_EDR x IB_WIDTH_4X
# (drivers/infiniband/hw/efa/efa_verbs.c): its state and rate files say
# nothing about the link. NVIDIA NVSentinel's EFAStateCheck takes the link
# from the netdev under device/net/ instead. The one test of "is EFA".
EFA_LINK_LAYER = "Unknown"


def efa_link_layer(link_layer: str | None) -> bool:
    """Whether a port with this sysfs ``link_layer`` is EFA (or another
    non-Ethernet, non-InfiniBand port, which ccrhost judges the same way)."""
    return link_layer == EFA_LINK_LAYER


# /sys/class/net/<if>/operstate: RFC 2863 names from net/core/net-sysfs.c
# operstates[]. "unknown" is what a driver that never reports carrier
# shows while it forwards traffic (NVSentinel counts it up, as here).
OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")
OPERSTATES_UP = ("up", "unknown")


@dataclass(frozen=True)
class GidEntry:
    index: int              # the <index> of ports/<n>/gids/<index>
    gid: str                # ports/<n>/gids/<index>, %pI6 form
    type: str | None        # ports/<n>/gid_attrs/types/<index>: "IB/RoCE v1" | "RoCE v2"
    ndev: str | None        # ports/<n>/gid_attrs/ndevs/<index>: the netdev behind a RoCE GID
    ipv4: str | None        # the IPv4 address of an IPv4-mapped GID, else None


@dataclass(frozen=True)
class CmDefaults:
    default_roce_mode: str | None = None  # rdma_cm/<dev>/ports/<n>/default_roce_mode
    default_roce_tos: int | None = None   # rdma_cm/<dev>/ports/<n>/default_roce_tos


@dataclass
class RdmaPort:
    state: str | None = None            # ports/<n>/state, "4: ACTIVE" -> "ACTIVE"
    state_id: int | None = None         # ports/<n>/state, "4: ACTIVE" -> 4
    phys_state: str | None = None       # ports/<n>/phys_state, "5: LinkUp" -> "LinkUp"
    rate_gbps: float | None = None      # ports/<n>/rate, "400 Gb/sec (4X NDR)" -> 400.0
    lanes: int | None = None            # ports/<n>/rate -> 4
    speed: str | None = None            # ports/<n>/rate -> "NDR"
    link_layer: str | None = None       # ports/<n>/link_layer: "Ethernet" | "InfiniBand" | "Unknown" (EFA)
    netdev: str | None = None           # the GIDs' ndev, else the device's only netdev
    netdev_operstate: str | None = None  # /sys/class/net/<netdev>/operstate (device/net/<if>/operstate)
    netdev_carrier: int | None = None   # .../carrier, 1 or 0; None: unreadable (EINVAL while admin down)
    gids: list[GidEntry] = field(default_factory=list)  # non-zero entries of ports/<n>/gids/
    traffic_class: list[str] | None = None  # tc/<n>/traffic_class (MLNX_OFED only), raw lines
    credit_threshold: str | None = None     # ports/<n>/credit_threshold, where the driver has one
    cm: CmDefaults | None = None        # rdma_cm configfs group; None when it does not exist

    @property
    def efa(self) -> bool:
        return efa_link_layer(self.link_layer)


@dataclass(frozen=True)
class PciLink:
    current_speed_gts: float | None = None  # device/current_link_speed, "32.0 GT/s PCIe" -> 32.0
    current_width: int | None = None        # device/current_link_width
    max_speed_gts: float | None = None      # device/max_link_speed
    max_width: int | None = None            # device/max_link_width


@dataclass
class RdmaDevice:
    pci: PciLink = field(default_factory=PciLink)
    netdevs: list[str] = field(default_factory=list)  # device/net/* of the device's PCI function
    ofed_tc: bool = False                             # tc/<n>/traffic_class exists (MLNX_OFED only)
    ports: dict[int, RdmaPort] = field(default_factory=dict)


@dataclass
class NodeNet:
    mounted: bool = False                 # something is mounted on /sys/kernel/config (/proc/mounts)
    fstype: str | None = None             # ... and its type
    rdma_cm: bool = False                 # /sys/kernel/config/rdma_cm exists
    ecn: list[str] = field(default_factory=list)   # netdevs with the OFED-only /sys/class/net/<if>/ecn
    qos: list[str] = field(default_factory=list)   # ... and /sys/class/net/<if>/qos
    default_route_dev: str | None = None  # ip -o -4 route show default: the first route's dev
    default_route_devs: list[str] = field(default_factory=list)  # ... every dev of every default route
    #                                       and multipath nexthop, IPv4 and IPv6
    lowers: dict[str, list[str]] = field(default_factory=dict)  # /sys/class/net/<if>/lower_<dev> (and
    #                                       upper_ read backwards): the devices each netdev sits on
    ssh_server_ip: str | None = None      # $SSH_CONNECTION's third field, else the local address of the
    #                                       established /proc/net/tcp{,6} socket this session's sshd holds
    ssh_source: str | None = None         # "$SSH_CONNECTION" | "socket table": where ssh_server_ip came from
    ssh_session: bool = False             # an sshd process is among the remote shell's ancestors (/proc)
    addresses: dict[str, list[str]] = field(default_factory=dict)  # ip -o addr show
    ssh_dev: str | None = None            # the netdev holding ssh_server_ip


@dataclass
class RdmaReading:
    devices: dict[str, RdmaDevice] = field(default_factory=dict)  # by /sys/class/infiniband name
    node: NodeNet = field(default_factory=NodeNet)
