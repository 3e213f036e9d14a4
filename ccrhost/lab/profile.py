"""Hardware profiles for emulated nodes, the faults a test can inject, and
the sysfs tree a profile renders to.

The tree follows the real layouts (kernel drivers/infiniband/core/sysfs.c,
drivers/pci/probe.c, MLNX_OFED's tc/, ecn/ and qos/ trees): class entries
are symlinks into /sys/devices, and ``<ibdev>/device`` points at the PCI
function, as on a real machine.
"""

from __future__ import annotations

import ipaddress
import os
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ProfileError(ValueError):
    pass


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Pcie(_Model):
    speed_gts: float = Field(32.0, gt=0)
    width: int = Field(16, ge=1, le=32)


class NicDefaults(_Model):
    link_layer: Literal["Ethernet", "InfiniBand"] = "Ethernet"
    rate_gbps: int = 400
    pcie: Pcie = Pcie()


class Nic(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_]{1,31}$")
    netdev: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,15}$")
    pci: str = Field(pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


class Modules(_Model):
    available: dict[str, list[str]]
    builtin: list[str] = []
    boot: list[str] = []

    @model_validator(mode="after")
    def _known(self):
        for name in self.boot:
            if name not in self.available:
                raise ValueError(f"boot module {name!r} is not in available")
        for name, deps in self.available.items():
            for dep in deps:
                if dep not in self.available and dep not in self.builtin:
                    raise ValueError(f"module {name!r} depends on unknown {dep!r}")
        return self


class Gpus(_Model):
    model: str
    count: int = Field(ge=0, le=16)
    max_sm_clock_mhz: int = Field(gt=0)
    pcie: dict[str, int] = {"gen": 5, "width": 16}


class Profile(_Model):
    name: str
    description: str = ""
    ofed: bool
    credit_threshold_attr: bool = False  # a driver with the seed's per-port credit_threshold file
    configfs_mounted: bool = True
    modules: Modules
    nic_defaults: NicDefaults = NicDefaults()
    nics: list[Nic]
    gpus: Gpus


# Speeds the kernel names for a RoCE or IB port at each rate (4 lanes except
# where noted); used when a fault retrains a port.
RATE_STRINGS = {
    25: "25 Gb/sec (1X EDR)",
    50: "50 Gb/sec (1X HDR)",
    100: "100 Gb/sec (4X EDR)",
    200: "200 Gb/sec (4X HDR)",
    400: "400 Gb/sec (4X NDR)",
    800: "800 Gb/sec (4X XDR)",
}

FAULT_KINDS = {
    "port_down": "DEV (default: first NIC): port state DOWN, phys_state Disabled",
    "port_rate": "DEV:GBPS: the port trained at a lower rate",
    "pcie_width": "DEV:WIDTH: the NIC's PCIe link trained narrower than its maximum",
    "rdma_missing": "[DEV]: the RDMA device (default: all of them) is absent",
    "gpu_missing": "[INDEX]: one GPU (default: the last) is missing",
    "gpu_throttled": "[INDEX]: one GPU (default: 0) runs at reduced SM clock, HW slowdown",
    "ecn_readonly": "the OFED ecn/ files are read-only",
    "configfs_unmounted": "nothing is mounted on /sys/kernel/config at boot",
    "modprobe_fails": "MODULE: inserting this module fails",
    "gid_index": "DEV:INDEX: the RoCE v2 IPv4 GID of that port sits at INDEX (as in containers)",
    "ssh_on_fabric": "the management link (SSH, default route) is the first NIC's netdev, not eth0",
    "rdma_vanish": "DEV: the device disappears (hot-unplug) at the first QoS or configfs command",
    "etc_readonly": "the node's /etc is mounted read-only",
    "etc_full": "the node's /etc has no space left",
    "link_slow": "MBIT: the node's lab link is shaped to this rate instead of the lab's",
    "perftest_missing": "ib_write_bw is not installed",
    "perftest_hang": "ib_write_bw hangs instead of measuring",
    "fabric_blocked": "ib_write_bw's out-of-band port is blocked: its server never listens, its client cannot connect",
}


class Fault(_Model):
    kind: str
    value: str | None = None

    @model_validator(mode="after")
    def _kind(self):
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; known: {', '.join(FAULT_KINDS)}")
        return self

    def __str__(self) -> str:
        return self.kind if self.value is None else f"{self.kind}={self.value}"


def parse_fault(spec: str) -> tuple[str, Fault]:
    """``NODE:KIND[=VALUE]`` -> (node, Fault)."""
    node, sep, rest = spec.partition(":")
    if not sep or not node or not rest:
        raise ProfileError(f"fault {spec!r}: expected NODE:KIND[=VALUE]")
    kind, eq, value = rest.partition("=")
    try:
        return node, Fault(kind=kind, value=value if eq else None)
    except ValidationError as exc:
        raise ProfileError(f"fault {spec!r}: {exc.errors()[0]['msg']}") from None


def profile_names() -> list[str]:
    folder = resources.files("ccrhost.lab") / "profiles"
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(name_or_path: str) -> Profile:
    """Load a packaged profile by name, or a YAML file by path."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        path = Path(name_or_path)
        if not path.is_file():
            raise ProfileError(f"profile file {name_or_path!r} does not exist")
        text = path.read_text()
    else:
        if name_or_path not in profile_names():
            raise ProfileError(f"unknown profile {name_or_path!r}; known: {', '.join(profile_names())}")
        text = (resources.files("ccrhost.lab") / "profiles" / f"{name_or_path}.yaml").read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile {name_or_path!r} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"profile {name_or_path!r}: expected a mapping at the top level")
    try:
        return Profile(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise ProfileError(f"profile {name_or_path!r}: {where}: {err['msg']}") from None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def _fault_values(faults: list[Fault], kind: str) -> list[str | None]:
    return [f.value for f in faults if f.kind == kind]


def _split_dev_value(value: str | None, kind: str) -> tuple[str, str]:
    dev, sep, rest = (value or "").partition(":")
    if not sep or not dev or not rest:
        raise ProfileError(f"fault {kind} needs DEV:VALUE, got {value!r}")
    return dev, rest


def fabric_ipv4(node_index: int, nic_index: int) -> str:
    """The address a node's RoCE netdev carries in its GID table (198.19.<nic>.<node>)."""
    return str(ipaddress.IPv4Address("198.19.0.0") + (nic_index << 8) + node_index)


def _gid_from_ipv4(ip: str) -> str:
    mapped = ipaddress.IPv6Address(f"::ffff:{ip}").exploded
    return mapped


def _guid(node_index: int, nic_index: int) -> str:
    raw = f"0c42a1{node_index:04x}{nic_index:02x}{0:04x}"[:16]
    return ":".join(raw[i:i + 4] for i in range(0, 16, 4))


# Faults a running node can take and lose again (``ccrhost lab fault``):
# they change what sysfs, nvidia-smi or the lab link report, nothing else.
LIVE_KINDS = ("port_down", "port_rate", "pcie_width", "gpu_missing", "gpu_throttled", "link_slow")


def _link_faults(profile: Profile, faults: list[Fault]) -> tuple[set, set, dict, dict]:
    """(down, missing, rates, widths) by NIC name; refuses values the profile lacks."""
    names = {nic.name for nic in profile.nics}
    for kind in ("port_down", "rdma_missing"):
        for value in _fault_values(faults, kind):
            if value is not None and value not in names:
                raise ProfileError(f"fault {kind}={value}: no NIC named {value!r} in {profile.name}")
    down = {v or profile.nics[0].name for v in _fault_values(faults, "port_down")}
    missing_values = _fault_values(faults, "rdma_missing")
    missing = names if None in missing_values else set(missing_values)
    rates, widths = {}, {}
    for value in _fault_values(faults, "port_rate"):
        dev, gbps = _split_dev_value(value, "port_rate")
        if dev not in names or not gbps.isdigit() or int(gbps) not in RATE_STRINGS:
            raise ProfileError(f"fault port_rate={value}: need a NIC of {profile.name} and one of {sorted(RATE_STRINGS)}")
        rates[dev] = int(gbps)
    for value in _fault_values(faults, "pcie_width"):
        dev, width = _split_dev_value(value, "pcie_width")
        if dev not in names or not width.isdigit():
            raise ProfileError(f"fault pcie_width={value}: need a NIC of {profile.name} and a width")
        widths[dev] = int(width)
    for kind in ("gpu_missing", "gpu_throttled"):
        for value in _fault_values(faults, kind):
            if value is not None and (not value.isdigit() or int(value) >= profile.gpus.count):
                raise ProfileError(f"fault {kind}={value}: {profile.name} has GPUs 0..{profile.gpus.count - 1}")
    for value in _fault_values(faults, "link_slow"):
        if not (value or "").isdigit() or not 10 <= int(value) <= 10000:
            raise ProfileError(f"fault link_slow={value}: give a rate in Mbit/s, 10..10000")
    return down, missing, rates, widths


def link_files(profile: Profile, faults: list[Fault]) -> dict[str, str]:
    """The sysfs files a link fault changes, path under /sys -> content:
    port state, physical state, rate, the netdev's operstate and the NIC's
    trained PCIe width. Boot writes them; a live fault rewrites them."""
    down, missing, rates, widths = _link_faults(profile, faults)
    defaults = profile.nic_defaults
    files = {}
    for nic in profile.nics:
        pci = f"devices/pci0000:00/{nic.pci}"
        is_down = nic.name in down
        files[f"{pci}/current_link_width"] = f"{widths.get(nic.name, defaults.pcie.width)}\n"
        files[f"{pci}/net/{nic.netdev}/operstate"] = ("down" if is_down else "up") + "\n"
        if nic.name in missing:
            continue
        port = f"{pci}/infiniband/{nic.name}/ports/1"
        files[f"{port}/state"] = "1: DOWN\n" if is_down else "4: ACTIVE\n"
        files[f"{port}/phys_state"] = "3: Disabled\n" if is_down else "5: LinkUp\n"
        files[f"{port}/rate"] = RATE_STRINGS[rates.get(nic.name, defaults.rate_gbps)] + "\n"
    return files


def render_sysfs(profile: Profile, faults: list[Fault], root: Path, node_index: int) -> dict:
    """Write the node's boot-time /sys under ``root``; return what was built.

    The return value describes the emulated hardware for the shims
    (``nvidia-smi``) and for tests.
    """
    names = {nic.name for nic in profile.nics}
    missing = _link_faults(profile, faults)[1]
    live = link_files(profile, faults)

    gid_moves = {}
    for value in _fault_values(faults, "gid_index"):
        dev, index = _split_dev_value(value, "gid_index")
        if dev not in names or not index.isdigit() or not 4 <= int(index) < 16:
            raise ProfileError(f"fault gid_index={value}: need a NIC of {profile.name} and an index 4..15")
        gid_moves[dev] = int(index)

    defaults = profile.nic_defaults
    built = {"nics": [], "netdevs": {}}
    for i, nic in enumerate(profile.nics):
        pci = root / "devices" / "pci0000:00" / nic.pci
        speed = f"{defaults.pcie.speed_gts:.1f} GT/s PCIe"
        _write(pci / "vendor", "0x15b3\n")
        _write(pci / "device", "0x1021\n")
        _write(pci / "numa_node", f"{0 if i < len(profile.nics) // 2 else 1}\n")
        _write(pci / "current_link_speed", speed + "\n")
        _write(pci / "max_link_speed", speed + "\n")
        _write(pci / "current_link_width", live[f"devices/pci0000:00/{nic.pci}/current_link_width"])
        _write(pci / "max_link_width", f"{defaults.pcie.width}\n")

        netdir = pci / "net" / nic.netdev
        _write(netdir / "mtu", "4200\n" if defaults.link_layer == "Ethernet" else "4092\n")
        _write(netdir / "operstate", live[f"devices/pci0000:00/{nic.pci}/net/{nic.netdev}/operstate"])
        _link(root / "class" / "net" / nic.netdev, f"../../devices/pci0000:00/{nic.pci}/net/{nic.netdev}")
        _link(netdir / "device", "../../../" + nic.pci)
        if profile.ofed and defaults.link_layer == "Ethernet":
            for point in ("roce_rp", "roce_np"):
                for prio in range(8):
                    _write(netdir / "ecn" / point / "enable" / str(prio), "0\n")
            _write(netdir / "ecn" / "roce_np" / "cnp_dscp", "48\n")
            _write(netdir / "ecn" / "roce_np" / "cnp_802p_prio", "6\n")
            _write(netdir / "ecn" / "roce_np" / "min_time_between_cnps", "4\n")
            _write(netdir / "ecn" / "roce_rp" / "rate_reduce_monitor_period", "4\n")
            _write(netdir / "qos" / "tc_num", "8\n")
            _write(netdir / "qos" / "buffer_size",
                   "Port buffer size = 4151520\nSpare buffer size = 3889504\n"
                   "Buffer\tSize\txoff_threshold\txon_threshold\n"
                   + "".join(f"{b}\t{262016 if b == 0 else 0}\t0\t\t0\n" for b in range(8)))
            _write(netdir / "qos" / "prio2buffer", "Priority\tBuffer\n" + "".join(f"{p}\t\t0\n" for p in range(8)))
        built["netdevs"][nic.netdev] = nic.name

        if nic.name in missing:
            continue
        ib = pci / "infiniband" / nic.name
        _link(root / "class" / "infiniband" / nic.name, f"../../devices/pci0000:00/{nic.pci}/infiniband/{nic.name}")
        _link(ib / "device", "../../../" + nic.pci)
        _write(ib / "fw_ver", "28.39.3560\n")
        _write(ib / "node_type", "1: CA\n")
        _write(ib / "hca_type", "MT4129\n")
        _write(ib / "node_guid", _guid(node_index, i) + "\n")
        port = ib / "ports" / "1"
        for name in ("state", "phys_state", "rate"):
            _write(port / name, live[f"devices/pci0000:00/{nic.pci}/infiniband/{nic.name}/ports/1/{name}"])
        _write(port / "link_layer", defaults.link_layer + "\n")
        _write(port / "lid", "0x0\n" if defaults.link_layer == "Ethernet" else f"0x{node_index * 16 + i + 1:x}\n")
        _write(port / "sm_lid", "0x0\n" if defaults.link_layer == "Ethernet" else "0x1\n")
        for counter in ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                        "port_xmit_data_64", "port_rcv_data_64"):
            _write(port / "counters" / counter, "0\n")
        if profile.ofed:
            for counter in ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets"):
                _write(port / "hw_counters" / counter, "0\n")
        guid = _guid(node_index, i).replace(":", "")
        link_local = ipaddress.IPv6Address(bytes.fromhex("fe80000000000000" + guid)).exploded
        if defaults.link_layer == "Ethernet":
            ip = fabric_ipv4(node_index, i)
            table = [
                (link_local, "IB/RoCE v1"), (link_local, "RoCE v2"),
                (_gid_from_ipv4(ip), "IB/RoCE v1"), (_gid_from_ipv4(ip), "RoCE v2"),
            ]
        else:
            ip = None
            table = [(link_local, "IB/RoCE v1")]
        zero = ipaddress.IPv6Address("::").exploded
        if nic.name in gid_moves:
            table = table[:3] + [(zero, None)] * (gid_moves[nic.name] - 3) + table[3:]
        for index in range(16):
            gid, gid_type = table[index] if index < len(table) else (zero, None)
            _write(port / "gids" / str(index), gid + "\n")
            # Unpopulated entries fail to read (EINVAL) on a real kernel; an
            # absent file reads the same to `grep -s`.
            if gid_type:
                _write(port / "gid_attrs" / "types" / str(index), gid_type + "\n")
                if defaults.link_layer == "Ethernet":
                    _write(port / "gid_attrs" / "ndevs" / str(index), nic.netdev + "\n")
        if profile.ofed:
            _write(ib / "tc" / "1" / "traffic_class", "")
        if profile.credit_threshold_attr:
            _write(port / "credit_threshold", "1024\n")
        built["nics"].append({"name": nic.name, "netdev": nic.netdev, "ipv4": ip, "ports": 1})

    _link(root / "class" / "net" / "eth0", "../../devices/virtual/net/eth0")
    _write(root / "devices" / "virtual" / "net" / "eth0" / "mtu", "1500\n")
    _write(root / "devices" / "virtual" / "net" / "eth0" / "operstate", "up\n")
    for name in profile.modules.boot:
        _write(root / "module" / name / "initstate", "live\n")
    (root / "kernel" / "config").mkdir(parents=True, exist_ok=True)
    (root / "kernel" / "debug").mkdir(parents=True, exist_ok=True)
    return built
