"""RDMA devices, ports, GIDs, NIC PCIe links and rdma_cm configfs state.

All of it comes from one shell snippet that prints every file of interest
as ``path:line`` (``grep -H``), split into marked sections, parsed by
:func:`parse_rdma_dump`. The pyinfra fact runs it remotely; ``ccrhost
check`` runs it locally. Device names are whatever ``/sys/class/infiniband``
holds (``mlx5_0``, ``rocep1s0f0``, ``ibp12s0``...); none is assumed.
"""

from __future__ import annotations

import subprocess

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


def parse_rdma_dump(lines: list[str]) -> dict:
    """Turn the fact command's output into the structure documented above."""
    sections = by_tag(lines)
    devices: dict[str, dict] = {}

    def device(name: str) -> dict:
        return devices.setdefault(
            name,
            {"pci": {}, "netdevs": [], "ofed_tc": False, "ports": {}},
        )

    def port(dev: str, num: str) -> dict:
        ports = device(dev)["ports"]
        return ports.setdefault(
            int(num),
            {
                "state": None, "state_id": None, "phys_state": None,
                "rate_gbps": None, "lanes": None, "speed": None,
                "link_layer": None, "netdev": None, "gids": [],
                "traffic_class": None, "credit_threshold": None, "cm": None,
            },
        )

    gids: dict[tuple[str, int], dict[int, dict]] = {}

    for path, values in sysfs.split_dump(sections.get("ib", [])).items():
        parts = path.split("/")
        dev = parts[0]
        text = "\n".join(values)
        if parts[1] == "ports" and len(parts) >= 4:
            p = port(dev, parts[2])
            leaf = parts[3]
            if leaf == "state":
                p["state_id"], p["state"] = sysfs.parse_numbered_state(text)
            elif leaf == "phys_state":
                _, p["phys_state"] = sysfs.parse_numbered_state(text)
            elif leaf == "rate":
                rate = sysfs.parse_rate(text)
                p["rate_gbps"], p["lanes"], p["speed"] = rate.gbps, rate.lanes, rate.speed
            elif leaf == "link_layer":
                p["link_layer"] = text.strip()
            elif leaf == "credit_threshold":
                p["credit_threshold"] = text.strip()
            elif leaf == "gids" and len(parts) == 5:
                entry = gids.setdefault((dev, int(parts[2])), {}).setdefault(int(parts[4]), {})
                entry["gid"] = sysfs.parse_gid(text)
            elif leaf == "gid_attrs" and len(parts) == 6:
                entry = gids.setdefault((dev, int(parts[2])), {}).setdefault(int(parts[5]), {})
                if parts[4] == "types":
                    entry["type"] = sysfs.parse_gid_type(text)
                elif parts[4] == "ndevs":
                    entry["ndev"] = text.strip()
        elif parts[1] == "device" and len(parts) == 3:
            pci = device(dev)["pci"]
            if parts[2] == "current_link_speed":
                pci["current_speed_gts"] = sysfs.parse_pcie_speed(text)
            elif parts[2] == "max_link_speed":
                pci["max_speed_gts"] = sysfs.parse_pcie_speed(text)
            elif parts[2] == "current_link_width":
                pci["current_width"] = sysfs.parse_int(text)
            elif parts[2] == "max_link_width":
                pci["max_width"] = sysfs.parse_int(text)
        elif parts[1] == "tc" and len(parts) == 4:
            port(dev, parts[2])["traffic_class"] = [v for v in values if v.strip()]

    for line in sections.get("net", []):
        parts = line.strip().split("/")
        if len(parts) == 4:
            device(parts[0])["netdevs"].append(parts[3])

    ofed = {"ecn": [], "qos": []}
    for line in sections.get("ofed", []):
        kind, _, rest = line.strip().partition(" ")
        if kind == "tc":
            device(rest.split("/")[0])["ofed_tc"] = True
        elif kind in ofed:
            ofed[kind].append(rest)

    for (dev, num), table in gids.items():
        p = port(dev, str(num))
        for index in sorted(table):
            entry = table[index]
            if "gid" not in entry:
                continue
            gid = sysfs.Gid(index, entry["gid"], entry.get("type"), entry.get("ndev"))
            if gid.is_zero:
                continue
            p["gids"].append(
                {"index": index, "gid": gid.gid, "type": gid.type, "ndev": gid.ndev, "ipv4": gid.ipv4}
            )

    for data in devices.values():
        for p in data["ports"].values():
            ndevs = [g["ndev"] for g in p["gids"] if g["ndev"]]
            if ndevs:
                p["netdev"] = ndevs[0]
            elif len(data["netdevs"]) == 1:
                p["netdev"] = data["netdevs"][0]

    for path, values in sysfs.split_dump(sections.get("cm", [])).items():
        parts = path.split("/")
        if len(parts) != 4 or parts[1] != "ports" or parts[0] not in devices:
            continue
        p = port(parts[0], parts[2])
        cm = p["cm"] if p["cm"] is not None else {}
        value = "\n".join(values).strip()
        if parts[3] == "default_roce_tos":
            cm["default_roce_tos"] = sysfs.parse_int(value)
        else:
            cm["default_roce_mode"] = value
        p["cm"] = cm

    mounts = [line.split() for line in sections.get("configfs", []) if line.strip() and line.strip() != "rdma_cm"]
    configfs = {
        "mounted": bool(mounts),
        "fstype": mounts[0][1] if mounts and len(mounts[0]) > 1 else None,
        "rdma_cm": "rdma_cm" in [line.strip() for line in sections.get("configfs", [])],
        "ecn": sorted(ofed["ecn"]),
        "qos": sorted(ofed["qos"]),
    }
    configfs["default_route_dev"] = _default_route_dev(sections.get("route", []))
    ssh = " ".join(sections.get("ssh", [])).split()
    configfs["ssh_server_ip"] = ssh[2] if len(ssh) == 4 else None
    configfs["addresses"] = _addresses(sections.get("addr", []))
    if configfs["ssh_server_ip"]:
        configfs["ssh_dev"] = next((dev for dev, ips in configfs["addresses"].items()
                                    if configfs["ssh_server_ip"] in ips), None)
    else:
        configfs["ssh_dev"] = None
    return {"devices": dict(sorted(devices.items())), "node": configfs}


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


def read_local() -> dict:
    """Run the snippet on this machine (``ccrhost check``)."""
    out = subprocess.run(["sh", "-c", COMMAND], capture_output=True, text=True, timeout=20)
    return parse_rdma_dump(out.stdout.splitlines())
