"""RDMA devices, ports, GIDs, NIC PCIe links and rdma_cm configfs state.

All of it comes from one shell snippet that prints every file of interest
as ``path:line`` (``grep -H``), split into marked sections, parsed by
:func:`parse_rdma_dump`. The pyinfra fact runs it remotely; ``ccrhost
check`` runs it locally. Device names are whatever ``/sys/class/infiniband``
holds (``mlx5_0``, ``rocep1s0f0``, ``ibp12s0``...); none is assumed.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field, replace

from ccrhost.probes import sysfs
from ccrhost.probes.sections import by_tag

IB_ROOT = "/sys/class/infiniband"
CONFIGFS = "/sys/kernel/config"
RDMA_CM = CONFIGFS + "/rdma_cm"

_PORT_FILES = ("state", "phys_state", "rate", "link_layer", "credit_threshold")
_PCI_FILES = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")

# Unreadable files (unpopulated GIDs give EINVAL) are skipped by grep -s; a
# glob that matches nothing stays literal and is skipped the same way. Zero
# GIDs are left out on the node: a real port has up to 256 table entries.
COMMAND = f"""echo @@ib
if cd {IB_ROOT} 2>/dev/null; then
grep -Hs '' {' '.join(f'*/ports/*/{f}' for f in _PORT_FILES)} \\
 */ports/*/gid_attrs/types/* */ports/*/gid_attrs/ndevs/* \\
 {' '.join(f'*/device/{f}' for f in _PCI_FILES)} */tc/*/traffic_class
grep -Hsv '^0000:0000:0000:0000:0000:0000:0000:0000$' */ports/*/gids/*
echo @@net
for n in */device/net/*; do [ -e "$n" ] && echo "$n"; done
echo @@ofed
for t in */tc/*/traffic_class; do [ -e "$t" ] && echo "tc $t"; done
for n in */device/net/*; do i=${{n##*/}}
[ -d "/sys/class/net/$i/ecn" ] && echo "ecn $i"
[ -d "/sys/class/net/$i/qos" ] && echo "qos $i"
done
fi
echo @@configfs
awk '$2 == "{CONFIGFS}" {{print $1, $3}}' /proc/mounts
[ -d {RDMA_CM} ] && echo rdma_cm
echo @@cm
if cd {RDMA_CM} 2>/dev/null; then
grep -Hs '' */ports/*/default_roce_mode */ports/*/default_roce_tos
fi
echo @@route
ip -o -4 route show default 2>/dev/null
echo @@ssh
echo "${{SSH_CONNECTION:-}}"
echo @@addr
ip -o addr show 2>/dev/null
true"""


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
    link_layer: str | None = None       # ports/<n>/link_layer: "Ethernet" | "InfiniBand"
    netdev: str | None = None           # the GIDs' ndev, else the device's only netdev
    gids: list[GidEntry] = field(default_factory=list)  # non-zero entries of ports/<n>/gids/
    traffic_class: list[str] | None = None  # tc/<n>/traffic_class (MLNX_OFED only), raw lines
    credit_threshold: str | None = None     # ports/<n>/credit_threshold, where the driver has one
    cm: CmDefaults | None = None        # rdma_cm configfs group; None when it does not exist


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
    default_route_dev: str | None = None  # ip -o -4 route show default
    ssh_server_ip: str | None = None      # $SSH_CONNECTION's third field
    addresses: dict[str, list[str]] = field(default_factory=dict)  # ip -o addr show
    ssh_dev: str | None = None            # the netdev holding ssh_server_ip


@dataclass
class RdmaReading:
    devices: dict[str, RdmaDevice] = field(default_factory=dict)  # by /sys/class/infiniband name
    node: NodeNet = field(default_factory=NodeNet)


def _located(path: str, parse, text):
    """Run one sysfs parser, naming the file in its error."""
    try:
        return parse(text)
    except sysfs.SysfsFormatError as exc:
        raise sysfs.SysfsFormatError(f"{path}: {exc}") from None


def parse_rdma_dump(lines: list[str]) -> RdmaReading:
    """Turn the snippet's output into an :class:`RdmaReading`."""
    sections = by_tag(lines)
    devices: dict[str, RdmaDevice] = {}

    def device(name: str) -> RdmaDevice:
        return devices.setdefault(name, RdmaDevice())

    def port(dev: str, num: str) -> RdmaPort:
        return device(dev).ports.setdefault(int(num), RdmaPort())

    gids: dict[tuple[str, int], dict[int, dict]] = {}
    pci: dict[str, dict] = {}

    for path, values in sysfs.split_dump(sections.get("ib", [])).items():
        parts = path.split("/")
        dev = parts[0]
        text = "\n".join(values)
        where = f"{IB_ROOT}/{path}"
        if len(parts) >= 4 and parts[1] == "ports" and parts[2].isdigit():
            p = port(dev, parts[2])
            leaf = parts[3]
            if leaf == "state":
                p.state_id, p.state = _located(where, sysfs.parse_numbered_state, text)
            elif leaf == "phys_state":
                _, p.phys_state = _located(where, sysfs.parse_numbered_state, text)
            elif leaf == "rate":
                rate = _located(where, sysfs.parse_rate, text)
                p.rate_gbps, p.lanes, p.speed = rate.gbps, rate.lanes, rate.speed
            elif leaf == "link_layer":
                p.link_layer = text.strip()
            elif leaf == "credit_threshold":
                p.credit_threshold = text.strip()
            elif leaf == "gids" and len(parts) == 5 and parts[4].isdigit():
                entry = gids.setdefault((dev, int(parts[2])), {}).setdefault(int(parts[4]), {})
                entry["gid"] = text.strip()
                entry["addr"] = _located(where, sysfs.parse_gid, text)
            elif leaf == "gid_attrs" and len(parts) == 6 and parts[5].isdigit():
                entry = gids.setdefault((dev, int(parts[2])), {}).setdefault(int(parts[5]), {})
                if parts[4] == "types":
                    entry["type"] = _located(where, sysfs.parse_gid_type, text)
                elif parts[4] == "ndevs":
                    entry["ndev"] = text.strip()
        elif len(parts) == 3 and parts[1] == "device":
            link = pci.setdefault(dev, {})
            if parts[2] == "current_link_speed":
                link["current_speed_gts"] = _located(where, sysfs.parse_pcie_speed, text)
            elif parts[2] == "max_link_speed":
                link["max_speed_gts"] = _located(where, sysfs.parse_pcie_speed, text)
            elif parts[2] == "current_link_width":
                link["current_width"] = _located(where, sysfs.parse_int, text)
            elif parts[2] == "max_link_width":
                link["max_width"] = _located(where, sysfs.parse_int, text)
        elif len(parts) == 4 and parts[1] == "tc" and parts[2].isdigit():
            port(dev, parts[2]).traffic_class = [v for v in values if v.strip()]
    for dev, link in pci.items():
        device(dev).pci = PciLink(**link)

    for line in sections.get("net", []):
        parts = line.strip().split("/")
        if len(parts) == 4:
            device(parts[0]).netdevs.append(parts[3])

    ofed = {"ecn": [], "qos": []}
    for line in sections.get("ofed", []):
        kind, _, rest = line.strip().partition(" ")
        if kind == "tc":
            device(rest.split("/")[0]).ofed_tc = True
        elif kind in ofed:
            ofed[kind].append(rest)

    for (dev, num), table in gids.items():
        p = port(dev, str(num))
        for index in sorted(table):
            entry = table[index]
            if "gid" not in entry:
                continue
            if int(entry["addr"]):  # a real port has up to 256 entries; unused ones read as zero
                p.gids.append(GidEntry(index, entry["gid"], entry.get("type"), entry.get("ndev"),
                                       sysfs.gid_ipv4(entry["addr"])))

    for data in devices.values():
        for p in data.ports.values():
            ndevs = [g.ndev for g in p.gids if g.ndev]
            if ndevs:
                p.netdev = ndevs[0]
            elif len(data.netdevs) == 1:
                p.netdev = data.netdevs[0]

    for path, values in sysfs.split_dump(sections.get("cm", [])).items():
        parts = path.split("/")
        if len(parts) != 4 or parts[1] != "ports" or parts[0] not in devices or not parts[2].isdigit():
            continue
        p = port(parts[0], parts[2])
        cm = p.cm or CmDefaults()
        value = "\n".join(values).strip()
        if parts[3] == "default_roce_tos":
            cm = replace(cm, default_roce_tos=_located(f"{RDMA_CM}/{path}", sysfs.parse_int, value))
        else:
            cm = replace(cm, default_roce_mode=value)
        p.cm = cm

    configfs = [line.strip() for line in sections.get("configfs", []) if line.strip()]
    mounts = [line.split() for line in configfs if line != "rdma_cm"]
    addresses = _addresses(sections.get("addr", []))
    ssh = " ".join(sections.get("ssh", [])).split()
    ssh_ip = ssh[2] if len(ssh) == 4 else None
    node = NodeNet(
        mounted=bool(mounts),
        fstype=mounts[0][1] if mounts and len(mounts[0]) > 1 else None,
        rdma_cm="rdma_cm" in configfs,
        ecn=sorted(ofed["ecn"]),
        qos=sorted(ofed["qos"]),
        default_route_dev=_default_route_dev(sections.get("route", [])),
        ssh_server_ip=ssh_ip,
        addresses=addresses,
        ssh_dev=next((dev for dev, ips in addresses.items() if ssh_ip in ips), None) if ssh_ip else None,
    )
    return RdmaReading(dict(sorted(devices.items())), node)


def _default_route_dev(lines: list[str]) -> str | None:
    """``default via 198.18.0.1 dev eth0 ...`` -> ``eth0``."""
    for line in lines:
        words = line.split()
        if "dev" in words[:-1]:
            return words[words.index("dev") + 1]
    return None


def _addresses(lines: list[str]) -> dict[str, list[str]]:
    """``ip -o addr show``: ``2: eth0    inet 198.18.0.11/24 brd ... scope global eth0``."""
    out: dict[str, list[str]] = {}
    for line in lines:
        words = line.split()
        if len(words) >= 4 and words[2] in ("inet", "inet6"):
            dev = words[1].split("@")[0]
            out.setdefault(dev, []).append(words[3].split("/")[0])
    return out


def read_local() -> RdmaReading:
    """Run the snippet on this machine (``ccrhost check``)."""
    out = subprocess.run(["sh", "-c", COMMAND], capture_output=True, text=True, timeout=20)
    return parse_rdma_dump(out.stdout.splitlines())
