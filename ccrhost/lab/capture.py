"""``ccrhost lab capture``: a lab profile from what ccrhost's probes read on
a real node, so a lab node can stand in for it in CI.

Read-only. The readings are the deploy's own (:mod:`ccrhost.probes.node`,
:mod:`ccrhost.probes.pci`, NVML or nvidia-smi) plus modules.dep for what
modprobe could load. :func:`build_profile` maps them back onto the profile
fields the lab renders (pure, so tests feed it readings); what the format
cannot replay is listed under ``capture.not_replayed`` with the reason.

A capture records the hardware type, not a moment: transient states (a
port down, a link trained narrow, a throttled GPU, error counters) are
listed with the ``--fault`` that reproduces them instead of being baked in.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import socket
import subprocess
import uuid
from collections import Counter
from dataclasses import dataclass, field

import yaml

from ccrhost.lab.profile import (
    DEFAULT_ECN,
    FORMAT_VERSION,
    PEERMEM_MODULES,
    NicDefaults,
    Profile,
)
from ccrhost.model.managed import FILES, UNIT_WANTS
from ccrhost.model.ports import natural_key
from ccrhost.probes import gpu, kernel, pci
from ccrhost.probes.node import NodeSnapshot, command, parse_snapshot


class CaptureError(RuntimeError):
    pass


@dataclass
class Readings:
    """Everything a capture reads on the node."""
    snapshot: NodeSnapshot                 # probes/node.py: RDMA, modules, QoS, GPUs (nvidia-smi)
    pci: pci.PciSnapshot | None            # probes/pci.py; None when its output could not be read
    gpus: gpu.GpuProbe                     # probes/gpu.py read_local(): NVML, else nvidia-smi
    modules_dep: dict[str, list[str]] = field(default_factory=dict)  # probes/kernel.py DEP_COMMAND
    hostname: str = ""                     # socket.gethostname()
    errors: list[str] = field(default_factory=list)  # probes whose output could not be read


def _sh(script: str, timeout: int = 60) -> list[str]:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=timeout).stdout.splitlines()


def read_local() -> Readings:
    """Run every probe on this node (as the deploy would, but locally)."""
    snap = parse_snapshot(_sh(command(list(FILES), UNIT_WANTS)))
    errors = [f"{name}: {why}" for name, why in snap.errors.items() if name != "gpus"]
    try:
        pci_snap = pci.parse_pci_dump(_sh(pci.COMMAND))
    except pci.PciFormatError as exc:
        pci_snap = None
        errors.append(f"pci: {exc}")
    deps = kernel.parse_modules_dep(_sh(kernel.DEP_COMMAND))
    return Readings(snap, pci_snap, gpu.read_local(), deps, socket.gethostname(), errors)


# --- anonymizing ------------------------------------------------------------

_IPV4 = re.compile(r"(?<![\d.])(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})(?![\d.])")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_MAC = re.compile(r"\b[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}\b")


class Anonymizer:
    """Consistent stand-ins: the same value always gets the same
    replacement within one capture, different values different ones.

    IPv4: each /24 becomes 198.19.<n>.0/24, host part kept (a rail's
    subnet stays one subnet). GIDs: IPv4-mapped ones follow their address;
    others keep fe80::/64 (not identifying), other prefixes become
    fd00:0:0:<n>::/64, and each interface ID (a MAC or a port GUID)
    becomes 0200:00ff:fe00:<n>. GPU UUIDs, MACs and UUIDs in the kernel
    command line, and the host name get sequence-numbered stand-ins.
    """

    def __init__(self, hostname: str, gids=(), ipv4s=()):
        """``gids``, ``ipv4s``: every such value of the capture, so that no
        stand-in is one of the node's real values (a reader could not tell)."""
        self.hostname = hostname
        self._maps: dict[str, dict] = {}
        self._real: dict[str, set] = {"ipv4net": set(), "prefix": set(), "iid": set()}
        for addr in ipv4s:
            self._real["ipv4net"].add(ipaddress.IPv4Network(f"{addr}/24", strict=False))
        for gid in gids:
            ip = ipaddress.IPv6Address(gid)
            if ip.ipv4_mapped:
                self._real["ipv4net"].add(ipaddress.IPv4Network(f"{ip.ipv4_mapped}/24", strict=False))
            else:
                self._real["prefix"].add(int(ip) >> 64)
                self._real["iid"].add(int(ip) & (2**64 - 1))

    def _next(self, kind: str, value, make):
        """``value``'s stand-in: the next of ``make(1)``, ``make(2)``, ...
        that is not taken, not ``value`` itself and none of the node's real
        values."""
        table = self._maps.setdefault(kind, {})
        if value not in table:
            n = len(table) + 1
            real = self._real.get(kind, set())
            while make(n) == value or make(n) in table.values() or make(n) in real:
                n += 1
                if n > 1 << 16:
                    raise CaptureError(f"no stand-in left for {kind} {value}")
            table[value] = make(n)
        return table[value]

    def ipv4(self, addr: str) -> str:
        ip = ipaddress.IPv4Address(addr)
        if ip.is_loopback or ip.is_unspecified:
            return addr
        net = ipaddress.IPv4Network(f"{addr}/24", strict=False)
        subnet = self._next("ipv4net", net, lambda n: ipaddress.IPv4Network(f"198.19.{(n - 1) % 256}.0/24"))
        if len(self._maps["ipv4net"]) > 255:
            raise CaptureError("more than 255 /24 subnets to anonymize")
        return str(subnet.network_address + (int(ip) & 0xff))

    def gid(self, gid: str) -> str:
        ip = ipaddress.IPv6Address(gid)
        if ip.ipv4_mapped:
            return ipaddress.IPv6Address(f"::ffff:{self.ipv4(str(ip.ipv4_mapped))}").exploded
        raw = int(ip)
        prefix, iid = raw >> 64, raw & (2**64 - 1)
        if prefix != 0xfe80 << 48:
            prefix = self._next("prefix", prefix, lambda n: (0xfd00 << 48) | n)
        iid = self._next("iid", iid, lambda n: 0x020000fffe000000 | n)
        return ipaddress.IPv6Address((prefix << 64) | iid).exploded

    def gpu_uuid(self, text: str) -> str:
        return self._next("gpu", text, lambda n: "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"ccrhost-gpu-{n}")))

    def host(self, name: str) -> str:
        return self._next("host", name, lambda n: f"node-{n}")

    def serial(self, text: str) -> str:
        # 13 digits, as NVIDIA prints a board's serial; a board's history follows its serial (issue 40)
        return self._next("serial", text, lambda n: f"{9 * 10**12 + n}")

    def text(self, text: str) -> str:
        """Free text (the kernel command line): addresses, UUIDs, MACs and
        the host name replaced."""
        text = _IPV4.sub(lambda m: self.ipv4(m.group(1)) if _valid_ipv4(m.group(1)) else m.group(1), text)
        text = _UUID.sub(lambda m: self._next("uuid", m.group(0).lower(),
                                              lambda n: str(uuid.uuid5(uuid.NAMESPACE_URL, f"ccrhost-{n}"))), text)
        text = _MAC.sub(lambda m: self._next("mac", m.group(0).lower(), lambda n: f"02:00:00:00:{n >> 8:02x}:{n & 0xff:02x}"),
                        text)
        if self.hostname:
            text = re.sub(rf"\b{re.escape(self.hostname)}\b", self.host(self.hostname), text)
        return text


def short_gid(gid: str) -> str:
    """The shortest readable form: ``::ffff:198.19.0.1`` for an IPv4-mapped GID."""
    ip = ipaddress.IPv6Address(gid)
    return f"::ffff:{ip.ipv4_mapped}" if ip.ipv4_mapped else ip.compressed


def _valid_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
        return True
    except ValueError:
        return False


class _Plain:
    """No anonymizing: every value as read."""

    def ipv4(self, addr): return addr
    def gid(self, gid): return ipaddress.IPv6Address(gid).exploded
    def gpu_uuid(self, text): return text
    def serial(self, text): return text
    def host(self, name): return name
    def text(self, text): return text


# --- readings -> profile ----------------------------------------------------

# Modules the deploy may load (rdma_modules' default and its usual
# additions); kept available in the profile when modules.dep lists them.
_STACK = re.compile(r"^(ib_|rdma_|mlx4|mlx5|iw_cm$|irdma$|bnxt_re$|configfs$)")


class Hex(int):
    """An int the YAML file shows in hex (PCI IDs and registers)."""
    digits = 4


class Hex6(Hex):
    digits = 6  # class codes


def _modules(r: Readings, driver_modules: set[str]) -> dict:
    mods = r.snapshot.modules
    builtin = sorted(mods.builtin)
    loaded = [m for m in mods.loaded if m not in driver_modules]
    deps = r.modules_dep
    available: dict[str, list[str]] = {}
    todo = [m for m in loaded if m not in builtin] + sorted(m for m in deps if _STACK.match(m))
    while todo:
        name = todo.pop(0)
        if name in available or name in builtin or name in driver_modules:
            continue
        available[name] = [d for d in deps.get(name, []) if d not in driver_modules]
        todo += available[name]
    return {"available": available, "builtin": builtin, "boot": loaded}


def _pci_functions(snap: pci.PciSnapshot, nvidia: bool, notes: list[str]) -> list[dict]:
    """The functions the probe listed, parents first, as PciFn entries."""
    from ccrhost.model.topology import split_path

    fns = sorted(snap.functions.values(), key=lambda f: (len(split_path(f.path, f.bdf)[1]), f.bdf))
    kinds: dict[str, str] = {}
    out = []
    unreadable = []
    for f in fns:
        host, bridges = split_path(f.path, f.bdf)
        parent = bridges[-1] if bridges else None
        if f.role == "bridge":
            above = kinds.get(parent or "")
            kind = "root_port" if parent is None else "upstream" if above in ("root_port", "downstream") else "downstream"
        else:
            kind = f.role
        kinds[f.bdf] = kind
        entry = {"bdf": f.bdf, "kind": kind, "host": host, "parent": parent,
                 "numa": f.numa_node if f.numa_node is not None else -1,
                 "vendor": Hex(f.vendor or 0), "device": Hex(f.device or 0), "class_code": Hex6(f.class_code or 0),
                 # the driver links are not read; named as the lab's own tree names them
                 "driver": {"gpu": "nvidia" if nvidia else "", "nic": "mlx5_core"}.get(kind, "pcieport")}
        if f.acs is None or f.acs.error:
            unreadable.append(f.bdf)
        elif f.acs.present:
            entry["acs_cap"], entry["acs_ctl"] = Hex(f.acs.cap or 0), Hex(f.acs.ctl or 0)
        if f.devctl is not None and f.devctl.word is not None and f.devctl.error is None:
            entry["devctl"] = Hex(f.devctl.word)
        if kind == "nic":
            entry["name"] = f.ibdev
        if f.iommu_group is not None:
            entry["iommu_group"] = f.iommu_group
        out.append(entry)
    if unreadable:
        notes.append(f"ACS of {len(unreadable)} functions ({unreadable[0]}, ...) could not be read (setpci/lspci "
                     "need root): the profile shows them without ACS")
    return out


def _nic_settings(r: Readings, dev: str, notes: list[str]) -> dict:
    """One NIC's values, named as NicDefaults names them."""
    device = r.snapshot.rdma.devices[dev]
    port = device.ports.get(1)
    info = r.pci.nics.get(dev) if r.pci else None
    out: dict = {}
    if port is not None:
        out["link_layer"] = port.link_layer or "Ethernet"
        if port.rate_gbps is not None:
            gbps = f"{port.rate_gbps:g}"
            # old kernels print no name for SDR ("10 Gb/sec (4X)"): the lab renders today's form
            out["rate"] = f"{gbps} Gb/sec ({port.lanes}X {port.speed or 'SDR'})"
        if port.state != "ACTIVE":
            notes.append(f"{dev} port 1 was {port.state} ({port.phys_state}) at capture; the profile boots it "
                         f"ACTIVE (reproduce with --fault NODE:port_down={dev})")
    link = device.pci
    if link.max_speed_gts and link.max_width:
        out["pcie"] = {"speed_gts": link.max_speed_gts, "width": link.max_width}
        fn = next((f for f in (r.pci.functions.values() if r.pci else []) if f.ibdev == dev), None)
        if fn and fn.devctl and fn.devctl.error is None and fn.devctl.max_read_req:
            out["pcie"].update(max_read_req=fn.devctl.max_read_req, relaxed_ordering=bool(fn.devctl.relaxed_ordering))
        if link.current_width and link.current_width < link.max_width:
            notes.append(f"{dev}'s PCIe link ran at x{link.current_width} of x{link.max_width}; the profile boots "
                         f"it at its maximum (reproduce with --fault NODE:pcie_width={dev}:{link.current_width})")
    if info is not None:
        for key in ("fw_ver", "board_id", "hca_type"):
            if getattr(info, key):
                out[key] = getattr(info, key)
        bad = {f"{p}/{c}": v for p, counters in info.counters.items() for c, v in counters.items() if v}
        if bad:
            notes.append(f"{dev}'s error counters were not zero ({', '.join(f'{k}={v}' for k, v in sorted(bad.items()))}); "
                         "a lab node starts them at zero")
    netdev = device.netdevs[0] if device.netdevs else None
    q = r.snapshot.qos.interfaces.get(netdev or "")
    if q is not None:
        if q.mtu:
            out["mtu"] = q.mtu
        if q.errors:
            notes.append(f"{netdev}: QoS state not fully read ({'; '.join(q.errors)}): lab defaults kept")
        elif q.backend != "none" and q.pfc is not None and q.buffer_size is not None:
            qos = {"dscp2prio": dict(sorted(q.dscp2prio.items())), "pfc": q.pfc, "cable_len": q.cable_len or 0,
                   "buffer_size": q.buffer_size, "prio2buffer": q.prio2buffer or [0] * 8}
            if q.port_buffer:
                qos["port_buffer"] = q.port_buffer
            if q.ecn is not None and q.ecn != DEFAULT_ECN:
                qos["ecn"] = dict(sorted(q.ecn.items()))
            out["qos"] = qos
        if q.cc_params is not None:
            notes.append(f"{netdev}: debugfs cc_params (DCQCN) is not emulated by the lab")
    return out


def _common(values: list[dict]) -> tuple[dict, list[dict]]:
    """The most common value of each key as the default, and per item only
    the keys where it differs."""
    defaults = {}
    for key in sorted({k for v in values for k in v}):
        seen = Counter(yaml.safe_dump(v[key]) for v in values if key in v)
        pick = seen.most_common(1)[0][0]
        defaults[key] = next(v[key] for v in values if key in v and yaml.safe_dump(v[key]) == pick)
    rest = [{k: x for k, x in v.items() if yaml.safe_dump(x) != yaml.safe_dump(defaults[k])} for v in values]
    return defaults, rest


def build_profile(r: Readings, name: str | None = None, anonymize: bool = False,
                  now: datetime.datetime | None = None, version: str | None = None) -> dict:
    """The profile (as the YAML mapping) for these readings; raises
    CaptureError when there is nothing a lab node could replay."""
    rdma = r.snapshot.rdma
    gids = [g.gid for d in rdma.devices.values() for pt in d.ports.values() for g in pt.gids]
    ipv4s = [a for addrs in rdma.node.addresses.values() for a in addrs if _valid_ipv4(a)]
    anon = Anonymizer(r.hostname, gids, ipv4s) if anonymize else _Plain()
    notes: list[str] = list(r.errors)
    if not rdma.devices:
        raise CaptureError("no RDMA device under /sys/class/infiniband: a lab profile needs at least one "
                           "(is the NIC driver loaded?)")
    if r.pci is None:
        raise CaptureError("the PCI probe's output could not be read: " + "; ".join(r.errors))
    nic_fn = {f.ibdev: f for f in r.pci.functions.values() if f.role == "nic"}
    devs = sorted(rdma.devices, key=natural_key)
    nics, settings = [], []
    for dev in devs:
        device = rdma.devices[dev]
        if dev not in nic_fn:
            raise CaptureError(f"{dev}: its PCI function was not found (/sys/class/infiniband/{dev}/device)")
        if set(device.ports) - {1}:
            notes.append(f"{dev}: ports {sorted(set(device.ports) - {1})} not replayed (a lab NIC has port 1 only)")
        if not device.netdevs:
            raise CaptureError(f"{dev} has no netdev (device/net/ is empty): the lab needs one per NIC")
        if len(device.netdevs) > 1:
            notes.append(f"{dev}: only its first netdev {device.netdevs[0]} is replayed, not {device.netdevs[1:]}")
        nic = {"name": dev, "netdev": device.netdevs[0], "pci": nic_fn[dev].bdf}
        port = device.ports.get(1)
        if port is not None:
            nic["gids"] = [{"index": g.index, "gid": short_gid(anon.gid(g.gid)), **({"type": g.type} if g.type else {}),
                            **({"ndev": g.ndev} if g.ndev else {})} for g in port.gids]
        nics.append(nic)
        settings.append(_nic_settings(r, dev, notes))
    defaults, own = _common(settings)
    for nic, mine in zip(nics, own):
        gids = nic.pop("gids", None)
        nic.update(mine)
        if gids is not None:
            nic["gids"] = gids
    defaults = NicDefaults(**defaults).model_dump(exclude_defaults=True)

    p = r.pci
    nvidia = p.nvidia
    shipped = [m for m in ("nvidia_peermem", "nv_peer_mem") if m in p.peer.shipped]
    ofed = p.mlx5_version is not None or any(d.ofed_tc for d in rdma.devices.values()) or bool(rdma.node.ecn)
    driver = None
    if nvidia is not None:
        peermem = shipped[0] if shipped else None
        at_boot = bool(peermem and peermem in p.peer.loaded)
        if at_boot and not ofed:
            notes.append(f"{peermem} was loaded without MLNX_OFED; the lab loads it only with OFED")
        driver = {"version": nvidia.version, "open": nvidia.open, "peermem": peermem, "peermem_at_boot": at_boot}
    driver_modules = {"nvidia", *PEERMEM_MODULES} if driver else set()

    probe = r.gpus
    readings = probe.gpus
    gpu_fns = sorted((f for f in p.functions.values() if f.role == "gpu"), key=lambda f: f.bdf)
    if probe.error:
        notes.append(f"GPUs could not be read ({probe.error})")
    if len(readings) != len(gpu_fns):
        raise CaptureError(f"{probe.source} reports {len(readings)} GPUs, the PCI bus shows {len(gpu_fns)}: "
                           "a lab node needs both to agree (is the NVIDIA driver loaded?)")
    models = sorted({g.name for g in readings})
    if len(models) > 1:
        notes.append(f"mixed GPU models {models}: the profile gives every GPU {models[0]}")
    for g in readings:
        if g.clock_reasons and g.clock_reasons & ~0x1:
            notes.append(f"GPU {g.index} was throttled (reasons {g.clock_reasons:#x}); the profile boots it at "
                         f"full clock (reproduce with --fault NODE:gpu_throttled={g.index})")
    gpus = {
        "model": models[0] if models else "none",
        "count": len(readings),
        "max_sm_clock_mhz": max((g.max_sm_clock_mhz or 0 for g in readings), default=0) or 1,
        "pcie": {"gen": max((g.pcie_gen_max or 0 for g in readings), default=5) or 5,
                 "width": max((g.pcie_width_max or 0 for g in readings), default=16) or 16},
        "pci_device": Hex(gpu_fns[0].device or 0) if gpu_fns else Hex(0x2330),
        "uuids": [anon.gpu_uuid(g.uuid or f"GPU-{i}") for i, g in enumerate(readings)],
    }
    # the boards' serials (nvidia-smi -q), where every GPU has one: a replayed node keeps its boards
    serials = [g.serial for g in sorted(r.snapshot.gpu_health.gpus, key=lambda g: g.index)]
    if serials and len(serials) == len(readings) and all(serials):
        gpus["serials"] = [anon.serial(s) for s in serials]

    types = set(p.iommu.group_types.values())
    iommu = "off" if not p.iommu.group_types else "passthrough" if "identity" in types else "translated"
    if p.kernel_release:
        notes.append(f"kernel {p.kernel_release} ({p.machine}): a lab node shows the lab machine's kernel")
    if not {"setpci", "lspci"} & set(p.tools):
        notes.append("neither setpci nor lspci was installed; lab nodes have both")

    host = anon.host(r.hostname or "unknown")
    profile = {
        "format_version": FORMAT_VERSION,
        "name": name or f"capture-{host}",
        "description": f"captured from {host} by ccrhost lab capture",
        "capture": {
            "host": host,
            "date": (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "ccrhost": version or _version(),
            "anonymized": anonymize,
            "not_replayed": notes,
        },
        "ofed": ofed,
        "credit_threshold_attr": any(pt.credit_threshold is not None for d in rdma.devices.values()
                                     for pt in d.ports.values()),
        "configfs_mounted": rdma.node.mounted,
        "modules": _modules(r, driver_modules),
        "nic_defaults": defaults,
        "nics": nics,
        "gpus": gpus,
        "nvidia_driver": driver,
        **({"ofed_version": p.mlx5_version} if p.mlx5_version else {}),
        "pcie_topology": {"iommu": iommu},
        "pci_functions": _pci_functions(p, driver is not None, notes),
        "iommu_units": list(p.iommu.units),
        "kernel_cmdline": anon.text(p.iommu.cmdline),
    }
    try:
        Profile(**yaml.safe_load(dump(profile)))
    except Exception as exc:  # a reading the format cannot take: say which
        raise CaptureError(f"the readings do not make a valid profile: {exc}") from None
    return profile


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ccrhost")
    except PackageNotFoundError:
        return "unknown"


# --- YAML -------------------------------------------------------------------

class _Dumper(yaml.SafeDumper):
    pass


def _scalar(v) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _represent_list(dumper, data):
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=all(_scalar(v) for v in data))


def _represent_dict(dumper, data):
    flow = all(_scalar(v) for v in data.values()) and 0 < len(data) <= 12
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=flow)


_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(dict, _represent_dict)
for _cls in (Hex, Hex6):
    _Dumper.add_representer(_cls, lambda d, v: d.represent_scalar("tag:yaml.org,2002:int", f"0x{int(v):0{v.digits}x}"))

HEADER = """\
# ccrhost lab profile, format {version}: the hardware of {host} as ccrhost's probes read it.
# Boot lab nodes from it:  ccrhost lab up --profile THIS_FILE
#                     or:  ccrhost ci run INVENTORY.py --profile GROUP=THIS_FILE
# capture.not_replayed lists what the node showed that the lab does not reproduce.
# GIDs and GPU UUIDs are the first lab node's; each further node booted from this
# file adds its position to their last 16 bits. Fields: docs/lab.md, "Lab profiles".
"""


def dump(profile: dict) -> str:
    return yaml.dump(profile, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)


def render(profile: dict) -> str:
    return HEADER.format(version=profile["format_version"], host=profile["capture"]["host"]) + dump(profile)


__all__ = ["Anonymizer", "CaptureError", "Readings", "build_profile", "read_local", "render"]
