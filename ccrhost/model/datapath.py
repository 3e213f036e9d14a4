"""The GPU-to-NIC data path: verdicts and tuning plans. Pure.

Readings come in as plain values (the PCI probe, :mod:`ccrhost.probes.pci`,
builds them); every check returns a list of :class:`Reason` (empty when
all is well) and every planner returns argv lists, so the deploy's
operations and the boot unit only quote and run them. Register layouts,
formats and defaults are those of reference gdr.md (sections in brackets).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, fields

from ccrhost.model.ports import natural_key
from ccrhost.model.status import FAIL, UNKNOWN, WARN, Reason
from ccrhost.model.topology import GDR_LEVELS, Endpoint, Pair, path_bridges
from ccrhost import numbers


class DatapathError(ValueError):
    """A wanted value the hardware cannot take; raised before any plan."""


# --- PCIe ACS [2]: pciutils lib/header.h; the same bits in CAP and CTRL.
ACS_SV, ACS_TB, ACS_RR, ACS_CR, ACS_UF, ACS_EC, ACS_DT = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40
ACS_NAMES = {ACS_SV: "SrcValid", ACS_TB: "TransBlk", ACS_RR: "ReqRedir", ACS_CR: "CmpltRedir",
             ACS_UF: "UpstreamFwd", ACS_EC: "EgressCtrl", ACS_DT: "DirectTrans"}
# Bits that push peer-to-peer traffic up to the root complex.
ACS_REDIRECT = ACS_RR | ACS_CR | ACS_EC
# Bits the tuning clears: redirect, source validation and upstream forwarding
# of redirected requests. Translation blocking and direct translated P2P
# (ATS matters) are left as they are.
ACS_CLEAR = ACS_SV | ACS_RR | ACS_CR | ACS_UF | ACS_EC
ACS_CTRL = "ECAP_ACS+0x6.w"  # setpci register of the ACS Control word


def acs_flags(word: int) -> str:
    """``0x1d`` -> ``SrcValid+ TransBlk- ReqRedir+ ...`` (lspci's order)."""
    return " ".join(f"{name}{'+' if word & bit else '-'}" for bit, name in ACS_NAMES.items())


# --- PCIe Device Control [5]: pciutils lib/header.h.
DEVCTL_RELAXED = 0x0010
DEVCTL_PAYLOAD = 0x00e0
DEVCTL_READRQ = 0x7000
DEVCTL = "CAP_EXP+0x8.w"
READ_REQ_SIZES = (128, 256, 512, 1024, 2048, 4096)
# nic-configuration-operator's pciPerformanceOptimized default for ConnectX.
CONNECTX_MAX_READ_REQ = 4096
CONNECTX_VENDOR = 0x15b3  # Mellanox Technologies (NVIDIA networking)


def devctl_max_read_req(word: int) -> int:
    return 128 << ((word & DEVCTL_READRQ) >> 12)


def devctl_max_payload(word: int) -> int:
    return 128 << ((word & DEVCTL_PAYLOAD) >> 5)


# --- GPUDirect RDMA availability [1] --------------------------------------

PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
GPUDIRECT_UNAVAILABLE = "GPUDirect RDMA unavailable: NCCL will stage through host memory"
DMABUF_MIN_KERNEL = (5, 12)   # Linux Kernel - 5.12 or higher (GPU Operator's DMA-BUF table)
DMABUF_MIN_DRIVER = 515       # perftest README: open GPU kernel modules 515 or later


@dataclass(frozen=True)
class PeerMemory:
    # What proves a peer-memory client is registered: NCCL's three files
    # ("nv_mem", "nv_mem_nc", "nvidia_peermem") and /sys/module/nv_peer_mem.
    loaded: tuple[str, ...]
    shipped: tuple[str, ...]        # peer-memory modules modules.dep lists
    kernel_release: str | None      # uname -r
    nvidia_version: str | None      # /proc/driver/nvidia/version; None: driver not loaded
    nvidia_open: bool | None        # the open GPU kernel module (dma-buf capable)


def _release(text: str | None) -> tuple[int, int] | None:
    match = re.match(r"^([0-9]+)\.([0-9]+)", text or "")  # ASCII: \d and int() take "٥"
    return (int(match.group(1)), int(match.group(2))) if match else None


def dmabuf_ready(pm: PeerMemory) -> tuple[bool, str]:
    """Whether the dma-buf path can work, and if not, the first missing
    prerequisite (kernel >= 5.12, open GPU module >= 515)."""
    kernel = _release(pm.kernel_release)
    if kernel is None or kernel < DMABUF_MIN_KERNEL:
        return False, f"dma-buf needs Linux 5.12 or later, this is {pm.kernel_release or 'unknown'}"
    if pm.nvidia_version is None:
        return False, "the NVIDIA driver is not loaded"
    if not pm.nvidia_open:
        return False, f"dma-buf needs the open GPU kernel module, {pm.nvidia_version} is the proprietary one"
    major = _release(pm.nvidia_version + ".0")
    if major is None or major[0] < DMABUF_MIN_DRIVER:
        return False, f"dma-buf needs driver {DMABUF_MIN_DRIVER} or later, this is {pm.nvidia_version}"
    return True, f"dma-buf available (Linux {pm.kernel_release}, open GPU module {pm.nvidia_version})"


def check_gpudirect(pm: PeerMemory, gpu_count: int) -> list[Reason]:
    """FAIL when NCCL can use neither a peer-memory client nor dma-buf."""
    if gpu_count == 0 or pm.loaded:
        return []
    ready, why = dmabuf_ready(pm)
    if ready:
        return []
    return [Reason(FAIL, "gpudirect_unavailable", f"{GPUDIRECT_UNAVAILABLE} (no peer-memory module loaded; {why})")]


@dataclass(frozen=True)
class PeerMemPlan:
    module: str | None   # the one module to load (and persist), or None
    note: str            # why, for the deploy's log
    possible: bool       # False: nothing can give GPUDirect here


def plan_peermem(pm: PeerMemory) -> PeerMemPlan:
    """Load one peer-memory module, or none when one is loaded already or
    dma-buf does the job; never both (only one can be loaded at any time)."""
    if pm.loaded:
        return PeerMemPlan(None, f"peer memory already registered ({', '.join(pm.loaded)})", True)
    ready, why = dmabuf_ready(pm)
    if ready:
        return PeerMemPlan(None, f"{why}: nothing to load", True)
    for module in PEERMEM_MODULES:
        if module in pm.shipped:
            return PeerMemPlan(module, f"load {module} ({why})", True)
    return PeerMemPlan(None, f"no peer-memory module ships with this driver and {why}", False)


# --- ACS on the GPU-NIC paths [2] ------------------------------------------

def _paths(pairs: list[Pair]) -> dict[str, list[Pair]]:
    """Bridge -> the GPU-NIC pairs whose peer traffic crosses it."""
    out: dict[str, list[Pair]] = {}
    for p in pairs:
        for bdf in path_bridges(p.gpu, p.nic):
            out.setdefault(bdf, []).append(p)
    return out


def check_acs(pairs: list[Pair], acs_ctl: dict[str, int | None]) -> list[Reason]:
    """FAIL each bridge between a GPU and its rail NIC whose ACS control
    redirects peer traffic. ``acs_ctl``: bridge -> ACS Control word, None
    when it could not be read; bridges without ACS are absent."""
    reasons = []
    for bdf, on in _paths(pairs).items():
        if bdf not in acs_ctl:
            continue
        names = ", ".join(f"{p.gpu.name}-{p.nic.name}" for p in on)
        ctl = acs_ctl[bdf]
        if ctl is None:
            reasons.append(Reason(UNKNOWN, "acs_unreadable", f"cannot read ACS control of bridge {bdf} ({names})"))
        elif ctl & ACS_REDIRECT:
            reasons.append(Reason(FAIL, "acs_redirect",
                                  f"ACS redirect enabled on bridge {bdf} between {names} ({acs_flags(ctl)}): "
                                  "peer traffic detours through the root complex"))
    return reasons


def plan_acs(pairs: list[Pair], acs_ctl: dict[str, int | None], force: bool = False) -> list[list[str]]:
    """``setpci`` writes clearing :data:`ACS_CLEAR` on the bridges of the
    GPU-NIC paths only (a data:mask write: other ACS bits stay). ``force``
    (the boot script) writes every ACS bridge of those paths."""
    clear = f"{ACS_CTRL}={0:04x}:{ACS_CLEAR:04x}"
    out = []
    for bdf in _paths(pairs):
        if bdf in acs_ctl and (force or (acs_ctl[bdf] is not None and acs_ctl[bdf] & ACS_CLEAR)):
            out.append(["setpci", "-s", bdf, clear])
    return out


# --- NIC Device Control: MaxReadReq, relaxed ordering [5] -----------------

def plan_devctl(devctl: dict[str, int | None], max_read_req: int | None = None,
                relaxed_ordering: bool | None = None, force: bool = False) -> list[list[str]]:
    """One ``setpci -s BDF CAP_EXP+0x8.w=VALUE:MASK`` per NIC function whose
    Device Control differs (or every one, ``force``); only the fields asked
    for are in the mask. ``devctl``: NIC function -> current word (None:
    unreadable, written only when forced)."""
    if max_read_req is not None and max_read_req not in READ_REQ_SIZES:
        raise DatapathError(f"max_read_req {max_read_req!r}: allowed {', '.join(map(str, READ_REQ_SIZES))}")
    value = mask = 0
    if max_read_req is not None:
        value |= READ_REQ_SIZES.index(max_read_req) << 12
        mask |= DEVCTL_READRQ
    if relaxed_ordering is not None:
        value |= DEVCTL_RELAXED if relaxed_ordering else 0
        mask |= DEVCTL_RELAXED
    if not mask:
        return []
    out = []
    for bdf, word in devctl.items():
        if force or (word is not None and word & mask != value):
            out.append(["setpci", "-s", bdf, f"{DEVCTL}={value:04x}:{mask:04x}"])
    return out


# --- MTU [9] ---------------------------------------------------------------

NETDEV_MTUS = (4200, 9000)
_IB_MTUS = (256, 512, 1024, 2048, 4096)
ROCE_OVERHEAD = 96  # GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4 (iboe_get_mtu)


def roce_active_mtu(netdev_mtu: int) -> int | None:
    """The RDMA active_mtu mlx5 derives from a netdev MTU (4200 -> 4096)."""
    usable = netdev_mtu - ROCE_OVERHEAD
    fits = [m for m in _IB_MTUS if m <= usable]
    return fits[-1] if fits else None


@dataclass
class MtuPlan:
    commands: list[list[str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)   # why a netdev was left alone


def plan_mtu(current: dict[str, int | None], wanted: int, ssh_netdev: str | None,
             route_netdev: str | None = None) -> MtuPlan:
    """``ip link set dev X mtu N`` for RoCE netdevs not at ``wanted``; never
    the netdev carrying SSH or the default route (an MTU change can bounce
    the link)."""
    if wanted not in NETDEV_MTUS:
        raise DatapathError(f"RoCE MTU {wanted!r}: allowed {', '.join(map(str, NETDEV_MTUS))}")
    plan = MtuPlan()
    for netdev in sorted(current, key=natural_key):
        if netdev in (ssh_netdev, route_netdev):
            what = "this SSH connection" if netdev == ssh_netdev else "the default route"
            plan.skipped.append(f"{netdev} carries {what}: MTU left at {current[netdev]}")
        elif current[netdev] != wanted:
            plan.commands.append(["ip", "link", "set", "dev", netdev, "mtu", str(wanted)])
    return plan


# --- IOMMU [3] ---------------------------------------------------------------

@dataclass(frozen=True)
class Iommu:
    units: tuple[str, ...]                  # /sys/class/iommu entries (dmar0, ivhd0, ...)
    group_types: dict[str, str | None]      # /sys/kernel/iommu_groups/<g>/type (None: no type file)
    device_groups: dict[str, str]           # bdf -> its iommu_group
    cmdline: str = ""                       # /proc/cmdline
    arch: str | None = None                 # uname -m


def _cmdline_mode(cmdline: str) -> str | None:
    words = cmdline.split()
    if any(w in ("iommu=pt", "iommu.passthrough=1", "iommu.passthrough=on") for w in words):
        return "passthrough"
    if any(w in ("iommu=off", "intel_iommu=off", "amd_iommu=off") for w in words):
        return "off"
    return None


def iommu_mode(iommu: Iommu, bdf: str) -> str:
    """``off``, ``passthrough`` (identity), ``translated`` (DMA, DMA-FQ) or
    ``unknown`` for one PCI function."""
    if not iommu.units and not iommu.group_types:
        return "off"
    group = iommu.device_groups.get(bdf)
    if group is None:
        return "off"  # not behind any IOMMU
    kind = iommu.group_types.get(group)
    if kind == "identity":
        return "passthrough"
    if kind in ("DMA", "DMA-FQ"):
        return "translated"
    if kind is None:
        return _cmdline_mode(iommu.cmdline) or "unknown"  # kernels before 5.11 have no type file
    return "unknown"


def iommu_fix(iommu: Iommu) -> str:
    if any(u.startswith("ivhd") for u in iommu.units):
        return "iommu=pt (or amd_iommu=off)"
    if any(u.startswith("dmar") for u in iommu.units):
        return "iommu=pt (or intel_iommu=off)"
    return "iommu=pt"


def check_iommu(iommu: Iommu, devices: dict[str, str]) -> list[Reason]:
    """WARN when the IOMMU translates DMA of a GPU or NIC (``devices``:
    name -> bdf). Not on aarch64: Grace platforms want the IOMMU on and
    passthrough off."""
    if (iommu.arch or "").startswith(("aarch64", "arm")):
        return []
    translated = [f"{name} ({bdf}, group {iommu.device_groups[bdf]} {iommu.group_types.get(iommu.device_groups[bdf])})"
                  for name, bdf in devices.items() if iommu_mode(iommu, bdf) == "translated"]
    if not translated:
        return []
    return [Reason(WARN, "iommu_translated",
                   f"IOMMU translates DMA for {', '.join(translated)}: GPUDirect RDMA needs 1:1 addresses; "
                   f"add the kernel parameter {iommu_fix(iommu)}")]


# --- Topology [4] -------------------------------------------------------------

def check_topology(pairs: list[Pair], rail_local: bool) -> list[Reason]:
    """On hardware declared rail-local (one NIC per GPU on its PCIe switch):
    FAIL a GPU whose NIC is across the CPU interconnect, WARN one whose NIC
    is reached through the CPU (NCCL's default GDR level stops at PXB)."""
    if not rail_local:
        return []
    reasons = []
    for p in pairs:
        if p.level == "SYS":
            reasons.append(Reason(FAIL, "nic_numa_far",
                                  f"{p.gpu.name} ({p.gpu.bdf}, NUMA {p.gpu.numa_node}) is SYS to its nearest NIC "
                                  f"{p.nic.name} ({p.nic.bdf}, NUMA {p.nic.numa_node}): traffic crosses the CPU "
                                  "interconnect"))
        elif p.level not in GDR_LEVELS:
            reasons.append(Reason(WARN, "nic_not_rail_local",
                                  f"{p.gpu.name} reaches its nearest NIC {p.nic.name} at {p.level}: through the "
                                  "CPU, so NCCL will not use GPUDirect RDMA by default"))
    return reasons


# --- Link health over a window [7] ------------------------------------------------

COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
            "local_link_integrity_errors", "port_xmit_discards")
# Counter widths of the IB PortCounters attribute; an all-ones value is
# saturated and its delta unknown (gdr.md [7]: 255 / 65535 / 15 seen on a
# real port).
COUNTER_MAX = {"symbol_error": 0xffff, "link_error_recovery": 0xff, "link_downed": 0xff,
               "port_rcv_errors": 0xffff, "local_link_integrity_errors": 0xf, "port_xmit_discards": 0xffff}


@dataclass(frozen=True)
class LinkThresholds:
    """WARN when a counter rises by more than this within the window.
    symbol_error and link_error_recovery: 10, the values infiniband-diags'
    ibqueryerrors documents for its error_thresholds file; the others: 0,
    ibqueryerrors' own default (any error is reported). link_downed: FAIL
    above this (0: any rise is a flapping link, as gcm treats any IB flap)."""
    symbol_error: int = 10
    link_error_recovery: int = 10
    link_downed: int = 0
    port_rcv_errors: int = 0
    local_link_integrity_errors: int = 0
    port_xmit_discards: int = 0


def counter_delta(name: str, before: int | None, after: int | None) -> int | None:
    """Rise of one counter; None when unknown (missing or saturated). A
    counter that went down was cleared: what it shows now is the rise."""
    if before is None or after is None:
        return None
    top = COUNTER_MAX.get(name)
    if top is not None and (before >= top or after >= top):
        return None
    return after - before if after >= before else after


def port_part(key: str) -> dict:
    """Reason fields for a ``mlx5_0/1`` port key (a key without a port: the NIC)."""
    device, _, port = key.partition("/")
    return {"nic": device, "port": int(port)} if port.isdigit() else {"nic": device}


def check_link_health(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]],
                      thresholds: LinkThresholds = LinkThresholds(),
                      window_s: float | None = None, since_boot_per: float | None = None) -> list[Reason]:
    """Error-counter deltas per port (``{"mlx5_0/1": {counter: value}}``)
    between two samples of the same ports.

    ``since_boot_per``: ``before`` is the boot (every counter zero) and the
    thresholds are rises within one window of this many seconds
    (verify_window_max_age). Over a longer time since boot a counter is
    judged by the whole rises an average such window held, so a link that
    went down once weeks ago is no flapping link, while one that flaps every
    few seconds is; a saturated counter still counts its maximum, at least."""
    reasons = []
    boot = since_boot_per is not None
    if window_s is None:
        window = " during the window"
    else:
        window = f" in the {window_s:g} s since boot" if boot else f" in {window_s:g} s"
    windows = max(1.0, window_s / since_boot_per) if boot and window_s and since_boot_per else 1.0
    for port in sorted(set(before) & set(after), key=natural_key):
        part = port_part(port)
        saturated = []
        for f in fields(LinkThresholds):
            name = f.name
            b, a = before[port].get(name), after[port].get(name)
            if b is None or a is None:
                continue
            delta = counter_delta(name, b, a)
            at_least = ""
            if delta is None and boot and a >= COUNTER_MAX.get(name, a + 1):
                delta, at_least = a, "at least "  # at its maximum: it rose this much, or more
            if delta is None:
                saturated.append(name)
                continue
            limit = getattr(thresholds, name)
            if delta <= limit or (boot and delta // windows <= limit):
                if at_least:
                    saturated.append(name)
                continue
            if at_least:
                delta = f"{at_least}{delta}"
            if name == "link_downed":
                reasons.append(Reason(FAIL, "link_flap", f"port {port} link_downed rose by {delta}{window} "
                                                         f"({b} -> {a}): the link is flapping", **part))
            else:
                reasons.append(Reason(WARN, f"link_{name}", f"port {port} {name} rose by {delta}{window} "
                                                            f"({b} -> {a}), above {limit}", **part))
        if saturated:
            reasons.append(Reason(WARN, "link_counter_saturated",
                                  f"port {port} {', '.join(saturated)} saturated: rises cannot be measured "
                                  "until the counters are cleared", **part))
    return reasons


# --- Fleet consistency of firmware and drivers [8] ------------------------------

@dataclass(frozen=True)
class HostVersions:
    nic_fw: dict[str, str] = field(default_factory=dict)       # RDMA device -> fw_ver
    nic_model: dict[str, str] = field(default_factory=dict)    # RDMA device -> board_id/hca_type (groups fw)
    mlx5: str | None = None     # /sys/module/mlx5_core/version, or "inbox <uname -r>"
    nvidia: str | None = None   # NVIDIA driver version
    nic_guid: dict[str, str] = field(default_factory=dict)     # RDMA device -> node_guid (the NIC itself)


@dataclass(frozen=True)
class RequiredVersions:
    """Minimum versions (compared number by number); None: not required."""
    nic_fw: str | None = None
    mlx5: str | None = None
    nvidia: str | None = None


def version_key(version: str) -> tuple[int, ...] | None:
    """The numbers of a release version: ``28.39.3560``, ``23.10-1.1.9``
    (split on ``.``, ``-`` and ``_``), ``535.104.05``. None for anything
    else: a word ("inbox 6.1.0-18-amd64"), a non-ASCII digit, an empty part.
    Numbers and words never sort against each other."""
    parts = [numbers.unsigned(p, 999_999_999) if p.strip() == p else None
             for p in re.split(r"[._-]", version.strip())]
    return None if None in parts else tuple(parts)


def compare_versions(have: str, need: str) -> int | None:
    """-1, 0 or 1 as ``have`` is older than, equal to or newer than
    ``need``; None when they are not both version numbers (not comparable)."""
    a, b = version_key(have), version_key(need)
    if a is None or b is None:
        return None
    return (a > b) - (a < b)


INBOX = "inbox "  # HostVersions.mlx5 of the kernel's own mlx5 driver: "inbox <uname -r>"


def _majority(values: list[str]) -> str | None:
    if not values:
        return None
    value, count = Counter(values).most_common(1)[0]
    return value if count * 2 > len(values) else None


def check_fleet_versions(hosts: dict[str, HostVersions], required: RequiredVersions = RequiredVersions(),
                         minimum_hosts: int = 3) -> dict[str, list[Reason]]:
    """Per host: WARN what differs from the fleet majority (with at least
    ``minimum_hosts`` hosts), FAIL what is below a required version or is
    the kernel's inbox mlx5 driver against a required MLNX_OFED release,
    UNKNOWN a version that is no version number against a requirement."""
    out: dict[str, list[Reason]] = {h: [] for h in hosts}
    compare = len(hosts) >= minimum_hosts

    groups: dict[str, list[str]] = {}
    for h, v in hosts.items():
        for dev, fw in v.nic_fw.items():
            groups.setdefault(v.nic_model.get(dev, ""), []).append(fw)
    majority = {model: _majority(values) for model, values in groups.items()}
    for h, v in hosts.items():
        odd: dict[tuple[str, str, str], list[str]] = {}
        old: dict[str, list[str]] = {}
        unreadable: dict[str, list[str]] = {}
        for dev in sorted(v.nic_fw, key=natural_key):
            fw, model = v.nic_fw[dev], v.nic_model.get(dev, "")
            common = majority.get(model)
            if compare and common is not None and fw != common:
                odd.setdefault((fw, model, common), []).append(dev)
            order = compare_versions(fw, required.nic_fw) if required.nic_fw else 0
            if order is None:
                unreadable.setdefault(fw, []).append(dev)
            elif order < 0:
                old.setdefault(fw, []).append(dev)
        for (fw, model, common), devs in odd.items():
            of = f" {model}" if model else ""
            out[h].append(Reason(WARN, "fw_mismatch", f"NIC {', '.join(devs)} firmware {fw} differs from the "
                                                      f"fleet's{of} {common}"))
        for fw, devs in old.items():
            out[h].append(Reason(FAIL, "fw_required", f"NIC {', '.join(devs)} firmware {fw} is older than the "
                                                      f"required {required.nic_fw}"))
        for fw, devs in unreadable.items():
            out[h].append(Reason(UNKNOWN, "fw_version_unknown", f"NIC {', '.join(devs)} firmware {fw!r} is not a "
                                                                f"version number; cannot compare it with the required "
                                                                f"{required.nic_fw}"))
    for key, label in (("mlx5", "mlx5 driver"), ("nvidia", "NVIDIA driver")):
        values = {h: getattr(v, key) for h, v in hosts.items() if getattr(v, key)}
        common = _majority(list(values.values()))
        need = getattr(required, key)
        for h in hosts:
            have = values.get(h)
            if compare and common is not None and have is not None and have != common:
                out[h].append(Reason(WARN, f"{key}_mismatch", f"{label} {have} differs from the fleet's {common}"))
            if not need:
                continue
            if have is None:
                out[h].append(Reason(FAIL, f"{key}_required", f"{label} not found does not meet the required {need}"))
            elif key == "mlx5" and have.startswith(INBOX):
                out[h].append(Reason(FAIL, "mlx5_inbox", f"mlx5 driver is the kernel's inbox driver "
                                                         f"({have[len(INBOX):]}), not an MLNX_OFED release; "
                                                         f"required {need}"))
            elif (order := compare_versions(have, need)) is None:
                out[h].append(Reason(UNKNOWN, f"{key}_version_unknown", f"{label} version {have!r} is not a version "
                                                                        f"number; cannot compare it with the "
                                                                        f"required {need}"))
            elif order < 0:
                out[h].append(Reason(FAIL, f"{key}_required", f"{label} {have} does not meet the required {need}"))
    return out


# --- Measured GPUDirect bandwidth [6] ---------------------------------------------

GPUDIRECT_UNMEASURABLE = "GPUDirect bandwidth not measurable"


@dataclass(frozen=True)
class GpuDirectBandwidth:
    """ib_write_bw through GPU memory, one loopback run per GPU-NIC pair."""
    measurable: bool                          # ib_write_bw --help offers --use_cuda, numactl is there
    why: str | None = None                    # why it is not measurable
    gbps: dict[str, float] = field(default_factory=dict)      # "GPU0-mlx5_0" -> measured Gb/s
    expected: dict[str, float] = field(default_factory=dict)  # "GPU0-mlx5_0" -> the NIC port's effective rate
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"measurable": self.measurable, "why": self.why, "gbps": dict(self.gbps),
                "expected_gbps": dict(self.expected), "errors": list(self.errors)}


@dataclass(frozen=True)
class GdrFigure:
    """A platform's ``ib_write_bw.gpudirect`` figure (model/platform.py): FAIL below, per GPU-NIC pair."""
    gbps: float
    source: str    # which figure (published or fleet) and its source


def check_gpudirect_bandwidth(bw: GpuDirectBandwidth, min_fraction: float,
                              figures: tuple[GdrFigure, ...] = ()) -> list[Reason]:
    """UNKNOWN when it cannot be measured (never OK: nothing was proven),
    FAIL each pair below ``min_fraction`` of its NIC's rate, and each pair
    below a platform figure (the published and the fleet's, each named)."""
    if not bw.measurable:
        return [Reason(UNKNOWN, "gpudirect_unmeasurable", f"{GPUDIRECT_UNMEASURABLE}: {bw.why}")]
    reasons = [Reason(UNKNOWN, "gpudirect_measure_failed", e) for e in bw.errors]
    slow = [(name, g, bw.expected[name]) for name, g in bw.gbps.items()
            if bw.expected.get(name) and g < min_fraction * bw.expected[name]]
    if slow:
        text = ", ".join(f"{name} {g:.0f} of {want:.0f} Gb/s" for name, g, want in slow)
        reasons.append(Reason(FAIL, "gpudirect_slow", f"GPUDirect RDMA through GPU memory below "
                                                      f"{min_fraction:.0%} of the NIC rate: {text}"))
    for figure in figures:
        below = [(name, g) for name, g in bw.gbps.items() if g < figure.gbps]
        if below:
            text = ", ".join(f"{name} {g:.0f} Gb/s" for name, g in below)
            reasons.append(Reason(FAIL, "gpudirect_slow", f"GPUDirect RDMA through GPU memory below "
                                                          f"{figure.gbps:g} Gb/s ({figure.source}): {text}"))
    return reasons


# --- The whole data path, as the verification reads it ----------------------------

@dataclass(frozen=True)
class LinkWindow:
    """Two readings of the error counters and the time between them."""
    before: dict[str, dict[str, int]]   # {"mlx5_0/1": {counter: value}}, the window's start
    after: dict[str, dict[str, int]]    # ... its end
    seconds: float | None               # the window's length
    note: str | None = None             # why there is no "before" (no history at all): not judged
    warning: str | None = None          # the reading could not be kept for the next window
    since_boot: bool = False            # no stored reading: "before" is the boot (every counter zero)


@dataclass(frozen=True)
class DatapathReading:
    """What the data-path checks read, gathered remotely (the node snapshot)
    or locally (``ccrhost check``): ``PciSnapshot.datapath()`` builds it,
    :func:`check_datapath` judges it."""
    peer: PeerMemory
    gpus: list[Endpoint]             # topology Endpoints, GPU0...
    nics: list[Endpoint]             # compute NIC Endpoints
    pairs: list[Pair]
    acs_ctl: dict[str, int | None]
    iommu: Iommu
    versions: HostVersions
    link: LinkWindow | None = None
    gpudirect_bw: GpuDirectBandwidth | None = None
    error: str | None = None         # the PCI probe's output could not be read

    def to_dict(self) -> dict:
        from ccrhost.model.topology import matrix

        if self.error:
            return {"error": self.error}
        return {
            "topology": {"matrix": matrix(self.gpus, self.nics), "pairs": [p.to_dict() for p in self.pairs],
                         "numa": {e.name: e.numa_node for e in [*self.gpus, *self.nics]}},
            "peer_memory": {"loaded": list(self.peer.loaded), "dmabuf": dmabuf_ready(self.peer)[1]},
            "versions": {"nic_fw": dict(self.versions.nic_fw), "mlx5": self.versions.mlx5,
                         "nvidia": self.versions.nvidia},
            "link_window": None if self.link is None else {"seconds": self.link.seconds, "note": self.link.note,
                                                           "ports": sorted(self.link.after)},
            "gpudirect_bandwidth": self.gpudirect_bw.to_dict() if self.gpudirect_bw else None,
        }


def unreadable(why: str) -> DatapathReading:
    return DatapathReading(PeerMemory((), (), None, None, None), [], [], [], {}, Iommu((), {}, {}),
                           HostVersions(), error=why)


@dataclass(frozen=True)
class DatapathPolicy:
    rail_local: bool = False                          # declared hardware: one NIC per GPU on its switch
    thresholds: LinkThresholds = LinkThresholds()
    required: RequiredVersions = RequiredVersions()
    measure_min_fraction: float = 0.9
    gpudirect_figures: tuple[GdrFigure, ...] = ()     # the platform's ib_write_bw.gpudirect figures


def check_datapath(reading: DatapathReading, policy: DatapathPolicy = DatapathPolicy()) -> list[Reason]:
    """Every data-path check on one node; the fleet-majority comparison of
    versions needs the fleet and is the fleet report's."""
    if reading.error:
        return [Reason(UNKNOWN, "pci_unreadable", f"cannot read the GPU-NIC data path: {reading.error}")]
    reasons = check_gpudirect(reading.peer, len(reading.gpus))
    reasons += check_acs(reading.pairs, reading.acs_ctl)
    devices = {e.name: e.bdf for e in [*reading.gpus, *reading.nics]}
    reasons += check_iommu(reading.iommu, devices)
    reasons += check_topology(reading.pairs, policy.rail_local)
    if reading.link is not None:
        reasons += check_link_health(reading.link.before, reading.link.after, policy.thresholds,
                                     reading.link.seconds)
        if reading.link.warning:
            reasons.append(Reason(WARN, "link_state_unwritable", reading.link.warning))
    reasons += [r for r in check_fleet_versions({"": reading.versions}, policy.required)[""]]
    if reading.gpudirect_bw is not None:
        reasons += check_gpudirect_bandwidth(reading.gpudirect_bw, policy.measure_min_fraction,
                                             policy.gpudirect_figures)
    return reasons
