"""RDMA devices, ports, GIDs, NIC PCIe links and rdma_cm configfs state.

All of it comes from one shell snippet that prints every file of interest
as ``path:line`` (``grep -H``), split into marked sections, parsed by
:func:`parse_rdma_dump`. The pyinfra fact runs it remotely; ``ccrhost
check`` runs it locally. Device names are whatever ``/sys/class/infiniband``
holds (``mlx5_0``, ``rocep1s0f0``, ``ibp12s0``...); none is assumed.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace

from ccrhost.model.rdma import (  # noqa: F401  (the records this probe fills: the model's vocabulary)
    CmDefaults,
    GidEntry,
    NodeNet,
    PciLink,
    RdmaDevice,
    RdmaPort,
    RdmaReading,
)
from ccrhost import numbers
from ccrhost.probes import local, sysfs
from ccrhost.probes.sections import by_tag

IB_ROOT = "/sys/class/infiniband"
SOURCE = "/sys/class/infiniband and rdma_cm configfs"  # what the probe reads, in messages
CONFIGFS = "/sys/kernel/config"
RDMA_CM = CONFIGFS + "/rdma_cm"

_PORT_FILES = ("state", "phys_state", "rate", "link_layer", "credit_threshold")
_PCI_FILES = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
# The netdev's link (net/core/net-sysfs.c): operstate, and carrier, which
# fails with EINVAL while the netdev is down (grep -s skips it). An EFA
# port's own state file is a constant, so its link is read here, as NVIDIA
# NVSentinel's EFAStateCheck reads it (/sys/class/infiniband/<dev>/device/net/<if>/).
_NET_FILES = ("operstate", "carrier")

# The management path for the SSH guard: every default route and nexthop,
# the kernel's lower_/upper_ links between netdevs (VLAN, bridge, bond,
# macvlan), and the SSH connection: $SSH_CONNECTION, or, when sudo's
# env_reset dropped it, the socket this session's sshd holds (the shell's
# ancestors' fds matched against /proc/net/tcp{,6}; no tool needed).
#
# Unreadable files (unpopulated GIDs give EINVAL) are skipped by grep -s; a
# glob that matches nothing stays literal and is skipped the same way. Zero
# GIDs are left out on the node: a real port has up to 256 table entries.
DEVICES_COMMAND = f"""echo @@ib
if cd {IB_ROOT} 2>/dev/null; then
grep -Hs '' {' '.join(f'*/ports/*/{f}' for f in _PORT_FILES)} \\
 */ports/*/gid_attrs/types/* */ports/*/gid_attrs/ndevs/* \\
 {' '.join(f'*/device/{f}' for f in _PCI_FILES)} */tc/*/traffic_class \\
 {' '.join(f'*/device/net/*/{f}' for f in _NET_FILES)}
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
"""
# what the deploy's SSH guard and NCCL_SOCKET_IFNAME need, and no verdict
# reads: ccrhost check leaves it out (six processes and more on a node)
MANAGEMENT_COMMAND = """echo @@route
ip -o -4 route show default 2>/dev/null
ip -o -6 route show default 2>/dev/null
echo @@links
if cd /sys/class/net 2>/dev/null; then for l in */lower_* */upper_*; do [ -L "$l" ] && echo "$l"; done; fi
echo @@ssh
echo "${SSH_CONNECTION:-}"
if [ -z "${SSH_CONNECTION:-}" ]; then
echo @@session
p=$$; socks=" "; fds=
while [ "${p:-0}" -gt 1 ]; do
c=; { read -r c < /proc/$p/comm; } 2>/dev/null; echo "pid $p $c"; fds="$fds /proc/$p/fd"
q=; while read -r k v; do [ "$k" = PPid: ] && q=$v && break; done 2>/dev/null < /proc/$p/status; p=$q
done
# one ls for every ancestor's sockets, not one (and a sed) each
for i in $(ls -l ${fds:-/dev/null} 2>/dev/null | sed -n 's/.* -> socket:\\[\\([0-9]*\\)\\]$/\\1/p'); do socks="$socks$i "; done
awk -v s="$socks" '$4 == "01" && index(s, " " $10 " ") {print "tcp", $2, $3}' /proc/net/tcp /proc/net/tcp6 2>/dev/null
fi
echo @@addr
ip -o addr show 2>/dev/null
true"""
COMMAND = DEVICES_COMMAND + MANAGEMENT_COMMAND


class RdmaFormatError(sysfs.SysfsFormatError):
    """A file or command of the RDMA snippet printed what its format does
    not allow; the message names the file and quotes the value."""


def _located(path: str, parse, text):
    """Run one sysfs parser, naming the file in its error."""
    try:
        return parse(text)
    except sysfs.SysfsFormatError as exc:
        raise RdmaFormatError(f"{path}: {exc}") from None


def _index(word: str) -> int | None:
    """A port number or table index in a sysfs path (ASCII digits only)."""
    return numbers.integer(word, 0, 1 << 16) if word[:1] != "-" and word[:1] != "+" else None


def parse_rdma_dump(lines: list[str]) -> RdmaReading:
    """Turn the snippet's output into an :class:`RdmaReading`."""
    sections = by_tag(lines)
    devices: dict[str, RdmaDevice] = {}

    def device(name: str) -> RdmaDevice:
        return devices.setdefault(name, RdmaDevice())

    def port(dev: str, num: int) -> RdmaPort:
        return device(dev).ports.setdefault(num, RdmaPort())

    gids: dict[tuple[str, int], dict[int, dict]] = {}
    pci: dict[str, dict] = {}
    links: dict[str, dict] = {}  # netdev -> {"operstate": str, "carrier": int}

    for path, values in sysfs.split_dump(sections.get("ib", [])).items():
        parts = path.split("/")
        dev = parts[0]
        text = "\n".join(values)
        where = f"{IB_ROOT}/{path}"
        num = _index(parts[2]) if len(parts) >= 3 else None
        if len(parts) >= 4 and parts[1] == "ports" and num is not None:
            p = port(dev, num)
            leaf = parts[3]
            if leaf == "state":
                p.state_id, p.state = _located(where, sysfs.parse_port_state, text)
            elif leaf == "phys_state":
                _, p.phys_state = _located(where, sysfs.parse_phys_state, text)
            elif leaf == "rate":
                rate = _located(where, sysfs.parse_rate, text)
                p.rate_gbps, p.lanes, p.speed = rate.gbps, rate.lanes, rate.speed
            elif leaf == "link_layer":
                p.link_layer = _located(where, sysfs.parse_link_layer, text)
            elif leaf == "credit_threshold":
                p.credit_threshold = text.strip()
            elif leaf == "gids" and len(parts) == 5 and _index(parts[4]) is not None:
                entry = gids.setdefault((dev, num), {}).setdefault(_index(parts[4]), {})
                entry["gid"] = text.strip()
                entry["addr"] = _located(where, sysfs.parse_gid, text)
            elif leaf == "gid_attrs" and len(parts) == 6 and _index(parts[5]) is not None:
                entry = gids.setdefault((dev, num), {}).setdefault(_index(parts[5]), {})
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
                link["current_width"] = _located(where, sysfs.parse_pcie_width, text)
            elif parts[2] == "max_link_width":
                link["max_width"] = _located(where, sysfs.parse_pcie_width, text)
        elif len(parts) == 5 and parts[1:3] == ["device", "net"] and parts[4] in _NET_FILES:
            link = links.setdefault(parts[3], {})
            if parts[4] == "operstate":
                link["operstate"] = _located(where, sysfs.parse_operstate, text)
            else:
                link["carrier"] = _located(where, sysfs.parse_carrier, text)
        elif len(parts) == 4 and parts[1] == "tc" and num is not None:
            port(dev, num).traffic_class = [v for v in values if v.strip()]
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
        p = port(dev, num)
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
            link = links.get(p.netdev or "", {})
            p.netdev_operstate, p.netdev_carrier = link.get("operstate"), link.get("carrier")

    for path, values in sysfs.split_dump(sections.get("cm", [])).items():
        parts = path.split("/")
        if len(parts) != 4 or parts[1] != "ports" or parts[0] not in devices or _index(parts[2]) is None:
            continue
        p = port(parts[0], _index(parts[2]))
        cm = p.cm or CmDefaults()
        value = "\n".join(values).strip()
        if parts[3] == "default_roce_tos":
            cm = replace(cm, default_roce_tos=_located(f"{RDMA_CM}/{path}", sysfs.parse_tos, value))
        else:
            cm = replace(cm, default_roce_mode=value)
        p.cm = cm

    configfs = [line.strip() for line in sections.get("configfs", []) if line.strip()]
    mounts = [line.split() for line in configfs if line != "rdma_cm"]
    addresses = _addresses(sections.get("addr", []))
    ssh = " ".join(sections.get("ssh", [])).split()
    ssh_ip, source = (_plain_ip(ssh[2]), "$SSH_CONNECTION") if len(ssh) == 4 else (None, None)
    session = _session(sections.get("session", []))
    if ssh_ip is None and session["ip"]:
        ssh_ip, source = session["ip"], "socket table"
    route_devs = _route_devs(sections.get("route", []))
    node = NodeNet(
        mounted=bool(mounts),
        fstype=mounts[0][1] if mounts and len(mounts[0]) > 1 else None,
        rdma_cm="rdma_cm" in configfs,
        ecn=sorted(ofed["ecn"]),
        qos=sorted(ofed["qos"]),
        default_route_dev=route_devs[0] if route_devs else None,
        default_route_devs=route_devs,
        lowers=_lowers(sections.get("links", [])),
        ssh_server_ip=ssh_ip,
        ssh_source=source,
        ssh_session=session["sshd"],
        addresses=addresses,
        ssh_dev=next((dev for dev, ips in addresses.items() if ssh_ip in ips), None) if ssh_ip else None,
    )
    return RdmaReading(dict(sorted(devices.items())), node)


def _route_devs(lines: list[str]) -> list[str]:
    """Every ``dev X`` of ``ip -o route show default``: ``default via A dev eth0 ...``,
    and a multipath route's ``nexthop via A dev X weight 1`` parts (one line
    with -o, continuation lines without)."""
    devs: list[str] = []
    for line in lines:
        words = line.replace("\\", " ").split()
        for i, word in enumerate(words[:-1]):
            if word == "dev" and words[i + 1] not in devs:
                devs.append(words[i + 1])
    return devs


def _lowers(lines: list[str]) -> dict[str, list[str]]:
    """``<if>/lower_<dev>`` and ``<dev>/upper_<if>`` -> ``{if: [dev, ...]}``."""
    out: dict[str, list[str]] = {}
    for line in lines:
        dev, sep, link = line.strip().partition("/")
        if not sep or not dev:
            continue
        for prefix, upper in (("lower_", True), ("upper_", False)):
            if link.startswith(prefix) and len(link) > len(prefix):
                other = link[len(prefix):]
                top, low = (dev, other) if upper else (other, dev)
                if low not in out.setdefault(top, []):
                    out[top].append(low)
    return out


def _plain_ip(text: str) -> str | None:
    """An address as ``ip addr`` prints it: a v4-mapped IPv6 address as IPv4, no %scope."""
    try:
        addr = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    mapped = getattr(addr, "ipv4_mapped", None)
    return str(mapped or addr)


def _hex_ip(text: str) -> str | None:
    """/proc/net/tcp{,6} ``local_address``: the address in host-order 32-bit
    words (little-endian here), then ``:PORT`` in hex."""
    hexa = text.partition(":")[0]
    if len(hexa) not in (8, 32) or any(c not in "0123456789abcdefABCDEF" for c in hexa):
        return None
    raw = b"".join(bytes.fromhex(hexa[i:i + 8])[::-1] for i in range(0, len(hexa), 8))
    return _plain_ip(str(ipaddress.ip_address(raw)))


def _session(lines: list[str]) -> dict:
    """The ``@@session`` section: ``pid N COMM`` for the shell and its
    ancestors, then ``tcp LOCAL REMOTE`` for their established sockets."""
    sshd, ips = False, []
    for line in lines:
        words = line.split()
        if words[:1] == ["pid"] and len(words) >= 3 and words[2].startswith("sshd"):
            sshd = True  # sshd, or sshd-session since OpenSSH 9.8
        elif words[:1] == ["tcp"] and len(words) >= 2:
            ip = _hex_ip(words[1])
            if ip and ip not in ips:
                ips.append(ip)
    return {"sshd": sshd, "ip": ips[0] if len(ips) == 1 else None}


def _addresses(lines: list[str]) -> dict[str, list[str]]:
    """``ip -o addr show``: ``2: eth0    inet 198.18.0.11/24 brd ... scope global eth0``."""
    out: dict[str, list[str]] = {}
    for line in lines:
        words = line.split()
        if len(words) >= 4 and words[2] in ("inet", "inet6"):
            dev = words[1].split("@")[0]
            out.setdefault(dev, []).append(words[3].split("/")[0])
    return out


def read_local(timeout: float = 20, management: bool = True) -> RdmaReading:
    """Run the snippet on this machine (``ccrhost check``: without the
    ``management`` path, its ``node`` then has no routes, links, SSH or
    addresses). Raises ProbeTimeout or RdmaFormatError, naming what could
    not be read."""
    out = local.run(COMMAND if management else DEVICES_COMMAND + "true", timeout,
                    f"the RDMA probe (reading {IB_ROOT})")
    return parse_rdma_dump(out.splitlines())
