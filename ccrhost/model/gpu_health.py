"""GPU health: what kills or corrupts a training job on a GPU that still counts and clocks.

Readings (the probe, ccrhost/probes/gpu_health.py) and their judgement
(:func:`check_gpu_health`, called once from ``verdict.evaluate``). Sources
of the thresholds and lists: /work/shared/reference/gpu-fabric-health.md
(Azure azurehpc-health-checks, Meta gcm, NVIDIA DCGM and NVSentinel).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ccrhost.model.fabric import LinkDown
from ccrhost.model.host_health import KernelEvent
from ccrhost.model.nic_log import NicLogEvent
from ccrhost.model.status import FAIL, UNKNOWN, WARN, Reason

# --- which XIDs mean what: one table, ccrhost/model/xids.py -------------------
XID_FELL_OFF = 79  # "GPU has fallen off the bus"
# Codes judged for the whole boot whatever the lookback: what they ask for
# (a reboot) is still owed until the node restarts, as a lost GPU stays lost.
_WHOLE_BOOT_ACTIONS = ("reboot",)
_XID_TEXT_MAX = 160  # characters of a logged line's text a reason quotes

# NVLinks per GPU model (NVML names, as model/gpus.py keys them): every one
# must be up. Sources: NVIDIA H100/H200/B200 SXM datasheets (18 NVLink 4/5
# links), A100 SXM4 datasheet (12 NVLink 3 links).
NVLINKS = {
    "NVIDIA H100 80GB HBM3": 18, "NVIDIA H200 141GB HBM3e": 18, "NVIDIA H200": 18,
    "NVIDIA B200": 18, "NVIDIA B200 180GB HBM3e": 18,
    "NVIDIA A100-SXM4-40GB": 12, "NVIDIA A100-SXM4-80GB": 12, "A100-SXM4-40GB": 12, "A100-SXM4-80GB": 12,
}

FABRIC_DONE, FABRIC_OK = "Completed", "Success"  # nvidia-smi -q "Fabric" / nvmlGpuFabricInfo state 3, status 0


@dataclass
class NvLink:
    link: int
    up: bool | None = None        # nvidia-smi nvlink -s ("<inactive>": down) / nvmlDeviceGetNvLinkState
    replay: int | None = None     # nvidia-smi nvlink -e "Replay Errors" / NVML_NVLINK_ERROR_DL_REPLAY
    recovery: int | None = None   # "Recovery Errors" / NVML_NVLINK_ERROR_DL_RECOVERY
    crc: int | None = None        # "CRC Errors" / NVML_NVLINK_ERROR_DL_CRC_FLIT
    speed_gbs: float | None = None  # nvidia-smi nvlink -s "53.125 GB/s" / NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON

    @property
    def errors(self) -> int | None:
        values = [v for v in (self.replay, self.recovery, self.crc) if v is not None]
        return sum(values) if values else None


@dataclass
class GpuHealth:
    index: int                              # nvidia-smi -q GPU order / NVML index
    pci: str | None = None                  # "0000:18:00.0": -q "GPU 00000000:18:00.0" / nvmlDeviceGetPciInfo busId
    serial: str | None = None               # the board's serial: -q "Serial Number" / nvmlDeviceGetSerial
    ecc_uncorrectable: int | None = None    # -q ECC Errors/Volatile *Uncorrectable* / nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)
    ecc_correctable: int | None = None      # -q ECC Errors/Volatile *Correctable / (CORRECTED, VOLATILE)
    retired_pending: bool | None = None     # -q Retired Pages/Pending Page Blacklist / nvmlDeviceGetRetiredPagesPendingStatus
    remap_pending: bool | None = None       # -q Remapped Rows/Pending / nvmlDeviceGetRemappedRows [2]
    remap_failure: bool | None = None       # -q Remapped Rows/Remapping Failure Occurred / nvmlDeviceGetRemappedRows [3]
    remap_correctable: int | None = None    # -q Remapped Rows/Correctable Error / nvmlDeviceGetRemappedRows [0]
    remap_uncorrectable: int | None = None  # -q Remapped Rows/Uncorrectable Error / nvmlDeviceGetRemappedRows [1]
    pcie_replays: int | None = None         # -q PCI/Replays Since Reset / nvmlDeviceGetPcieReplayCounter
    fabric_state: str | None = None         # -q Fabric/State (None: N/A, no NVSwitch) / nvmlDeviceGetGpuFabricInfo state
    fabric_status: str | None = None        # -q Fabric/Status / nvmlDeviceGetGpuFabricInfo status
    clique_id: int | None = None            # -q Fabric/CliqueId / nvmlGpuFabricInfo cliqueId (model/imex.py judges)
    cluster_uuid: str | None = None         # -q Fabric/ClusterUUID / nvmlGpuFabricInfo clusterUuid
    health_mask: int | None = None          # nvmlGpuFabricInfoV healthMask (NVML_GPU_FABRIC_HEALTH_MASK_*)
    health: dict[str, str] | None = None    # -q Fabric/Health rows that say a fault (model/imex.py SMI_HEALTH)
    nvlinks: list[NvLink] | None = None     # nvidia-smi nvlink -s and -e / NVML per link; None: not read

    @property
    def nvlink_errors(self) -> int | None:
        values = [n.errors for n in self.nvlinks or () if n.errors is not None]
        return sum(values) if values else None


@dataclass
class Xid:
    code: int                 # NVRM: Xid (PCI:<pci>[ GPU-I:nn[ GPU-CI:nn]]): <code>, ... / SXid (PCI:...): <code>, ...
    pci: str                  # as logged: "0000:18:00" (bus, no function)
    age_s: float | None       # seconds before the reading of the latest such line (None: it had no time)
    text: str                 # the rest of the latest such line, as logged
    count: int = 1            # lines of this code for this device (and MIG instance) since boot (an SXid's
                              # detail lines not counted: one per event)
    instance: str | None = None  # "GPU-I:01 GPU-CI:00": the MIG instance the driver attributed it to
    sxid: bool = False        # an NVSwitch SXid (nvidia-nvswitchN: SXid ...), not a GPU's Xid


# An SXid prints a head line ("<code>, Fatal, Link 12 ...") and then lines
# of the same code with the raw data ("<code>, Severity 5 Engine instance
# ...", "<code>, Data {0x...}"; Fabric Manager user guide, SXid reporting).
_SXID_DETAIL = ("Severity ", "Data {")


def sxid_rank(text: str) -> int:
    """2 a fatal SXid's head line, 1 another head line, 0 a detail line."""
    if text.split(",")[0].strip().lower() == "fatal":
        return 2
    return 0 if text.lstrip().startswith(_SXID_DETAIL) else 1


def merge_line(have: Xid, x: Xid, newer: bool) -> None:
    """Fold ``x`` (the same device, instance and code) into ``have``: the
    count is of events (an SXid's detail lines add none); the text and age
    kept are the latest line's, but an SXid keeps its most severe head line
    (a fatal one is never replaced by a non-fatal line, a head never by a
    detail line)."""
    r_have, r_new = (sxid_rank(have.text), sxid_rank(x.text)) if have.sxid else (1, 1)
    if r_new:
        have.count = have.count + x.count if r_have else x.count
    if r_new > r_have or (r_new == r_have and newer):
        have.age_s, have.text = x.age_s, x.text


@dataclass
class CounterWindow:
    """The GPU error counters a previous ``ccrhost check`` stored (its state
    file), for rates, or the boot (every counter zero); None seconds: no
    baseline at all."""
    seconds: float | None
    before: dict[str, dict[str, int]] = field(default_factory=dict)  # pci -> {"nvlink": n, "pcie_replays": n}
    note: str | None = None
    since_boot: bool = False  # no stored reading: the counters' totals over the time since boot


@dataclass
class GpuHealthReading:
    gpus: list[GpuHealth] = field(default_factory=list)
    pci_gpus: list[str] = field(default_factory=list)  # /sys/bus/pci/devices: vendor 0x10de, class 0x0300/0x0302
    xids: list[Xid] = field(default_factory=list)      # journalctl -k -b, else dmesg
    log_source: str | None = None                      # "journalctl" | "dmesg"
    log_error: str | None = None                       # why the kernel log could not be read
    fabric_manager: str | None = None                  # systemctl is-active nvidia-fabricmanager; None: no systemd
    lost: list[str] = field(default_factory=list)      # GPUs NVML or nvidia-smi could not reach ("Unable to
                                                       # determine the device handle for GPU0000:18:00.0"): PCI or index
    error: str | None = None                           # why the GPUs' health could not be read
    source: str = "nvidia-smi"                         # "nvml" | "nvidia-smi"
    window: CounterWindow | None = None                # None: none stored on this path: since boot (uptime_s)
    uptime_s: float | None = None                      # /proc/uptime, read with the kernel log
    # the same kernel-log read: mlx5e "Link down" lines, which the fabric check judges
    link_downs: list[LinkDown] = field(default_factory=list)
    # and mlx5_core's fatal lines (model/nic_log.py), by NIC PCI function
    nic_events: list[NicLogEvent] = field(default_factory=list)
    # and the host's fatal lines (model/host_health.py PATTERNS), by kind
    host_events: list[KernelEvent] = field(default_factory=list)
    # PCI key -> seconds since the GPU's reset this boot (node/gpu_reset.py): its XIDs before it are repaired
    resets: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuHealthPolicy:
    xid_lookback_s: float = 7200          # Azure check_gpu_xid looks back 2 h
    xid_ignore: tuple[int, ...] = ()
    ecc_correctable_max: int = 10000      # Azure check_gpu_ecc: > 10,000 correctable SRAM errors
    nvlink_errors_per_min: float = 1      # DCGM gpu_hardware_limits.h DCGM_LIMIT_MAX_LWLINK_ERROR
    pcie_replays_per_min: float = 8       # DCGM_LIMIT_MAX_PCIREPLAY_RATE ("8 replays per minute ... by RM")
    hw_slowdown_level: str = WARN         # Azure azure_gpu_clock_throttling only warns


def pci_key(address: str | None) -> str | None:
    """``00000000:18:00.0`` / ``0000:18:00`` / ``18:00.0`` -> ``0000:18:00`` (domain, bus, device)."""
    if not address:
        return None
    parts = address.strip().lower().split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) != 3:
        return None
    domain, bus, dev = parts
    return f"{domain[-4:].rjust(4, '0')}:{bus.rjust(2, '0')}:{dev.split('.')[0].rjust(2, '0')}"


def _where(g: GpuHealth) -> str:
    return f"GPU {g.index} ({g.pci or 'PCI address not read'})"


# bit -> name (nvml.h nvmlClocksEventReason*): the hardware ones a setting judges
HW_SLOWDOWN = {0x8: "HW slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake slowdown"}


def check_gpu_health(reading: GpuHealthReading, gpus: list, policy: GpuHealthPolicy,
                     gpus_unread: bool = False) -> list[Reason]:
    """The reasons ``reading`` gives; ``gpus`` (the GPU probe's readings) for
    clock-event reasons. SW power capping is informational: never a reason.
    ``gpus_unread``: the GPU probe could not read the GPUs either, and its
    own UNKNOWN says so (the same nvidia-smi or NVML): not said twice."""
    reasons: list[Reason] = []
    by_index = {g.index: g for g in reading.gpus}
    if reading.error and not gpus_unread:
        reasons.append(Reason(UNKNOWN, "gpu_health_unreadable", f"cannot read the GPUs' health: {reading.error}"))
    if reading.log_error:
        reasons.append(Reason(UNKNOWN, "gpu_health_unreadable",
                              f"cannot read XIDs from the kernel log: {reading.log_error}"))
    index_of = {pci_key(g.pci): g.index for g in reading.gpus}
    fell: set = set()
    reasons += _xid_reasons(reading.xids, index_of, policy, fell, reading.resets)
    reasons += _lost_reasons(reading, fell)
    fabric_seen = False
    for g in reading.gpus:
        where = _where(g)
        if g.remap_pending:
            reasons.append(Reason(FAIL, "gpu_row_remap_pending",
                                  f"{where} has a row remapping pending: the GPU needs a reset", gpu=g.index))
        if g.remap_failure:
            reasons.append(Reason(FAIL, "gpu_row_remap_failure",
                                  f"{where} failed a row remapping (uncorrectable remaps "
                                  f"{g.remap_uncorrectable if g.remap_uncorrectable is not None else 'not read'})", gpu=g.index))
        if g.ecc_uncorrectable:
            reasons.append(Reason(FAIL, "gpu_ecc_uncorrectable",
                                  f"{where} has {g.ecc_uncorrectable} uncorrectable volatile ECC errors", gpu=g.index))
        if g.retired_pending:
            reasons.append(Reason(FAIL, "gpu_retired_pages_pending",
                                  f"{where} has retired pages pending: the GPU needs a reset", gpu=g.index))
        if g.ecc_correctable is not None and g.ecc_correctable > policy.ecc_correctable_max:
            reasons.append(Reason(WARN, "gpu_ecc_correctable",
                                  f"{where} has {g.ecc_correctable} correctable volatile ECC errors "
                                  f"(threshold {policy.ecc_correctable_max})", gpu=g.index))
        links = g.nvlinks if g.nvlinks is not None else []
        down = [n.link for n in links if n.up is False]
        expected = NVLINKS.get(_name(gpus, g.index) or "")
        up = sum(1 for n in links if n.up)
        if down or (g.nvlinks is not None and expected and up < expected and not any(n.up is None for n in links)):
            what = f"links {', '.join(map(str, down))} down" if down else "links missing"
            reasons.append(Reason(FAIL, "gpu_nvlink_down",
                                  f"{where} NVLink {what}: {up} of {expected or len(links)} up", gpu=g.index))
        if g.fabric_state is not None:
            fabric_seen = True
            if g.fabric_state != FABRIC_DONE or g.fabric_status != FABRIC_OK:
                reasons.append(Reason(FAIL, "gpu_fabric_not_ready",
                                      f"{where} fabric not ready: state {g.fabric_state}, "
                                      f"status {g.fabric_status or 'N/A'}", gpu=g.index))
    if fabric_seen and reading.fabric_manager is not None and reading.fabric_manager != "active":
        reasons.append(Reason(FAIL, "gpu_fabric_not_ready",
                              f"fabric not ready: the nvidia-fabricmanager service is {reading.fabric_manager}"))
    reasons += _rates(reading, policy)
    # at WARN the GPU probe's own gpu_throttled warning already names these reasons
    for g in gpus if policy.hw_slowdown_level == FAIL else ():
        bits = [name for bit, name in HW_SLOWDOWN.items() if (g.clock_reasons or 0) & bit]
        if bits:
            h = by_index.get(g.index)
            reasons.append(Reason(FAIL, "gpu_hw_slowdown",
                                  f"{_where(h) if h else f'GPU {g.index}'} clocks held down by "
                                  f"{', '.join(bits)} (clock event reasons {g.clock_reasons:#x})", gpu=g.index))
    return reasons


def _when(age_s: float | None) -> str:
    return f"{age_s / 60:.0f} min ago" if age_s is not None else "since boot"


def _xid_reasons(xids: list[Xid], index_of: dict, policy: GpuHealthPolicy, fell: set,
                 resets: dict[str, float] | None = None) -> list[Reason]:
    """One reason per device and code (and MIG instance): its level and
    action from the XID table, how many lines since boot and the latest.
    ``resets``: PCI key -> seconds since that GPU's reset; a line logged
    before it is what the reset repaired (one that asks for a reboot is not)."""
    if not xids:  # the table is loaded only when a node logged one (each check would pay its import)
        return []
    from ccrhost.model.xids import SXID_LEVELS, XID_RECOVERY, xid154_action, xid_entry

    merged: dict[tuple, Xid] = {}
    for x in xids:  # the probe merges already; readings from elsewhere may not
        key = (x.sxid, pci_key(x.pci), x.instance, x.code)
        have = merged.get(key)
        if have is None:
            merged[key] = Xid(x.code, x.pci, x.age_s, x.text, x.count, x.instance, x.sxid)
        else:
            merge_line(have, x, x.age_s is None or (have.age_s is not None and x.age_s <= have.age_s))
    reasons = []
    for (sxid, key, instance, code), x in merged.items():
        text = " ".join(x.text.split())
        text = text if len(text) <= _XID_TEXT_MAX else text[:_XID_TEXT_MAX - 3] + "..."
        times = f"{x.count} times since boot, latest " if x.count > 1 else ""
        if sxid:
            level, _ = SXID_LEVELS.get(text.split(",")[0].strip().lower(), (WARN, "investigate"))
            if code in policy.xid_ignore or (x.age_s is not None and x.age_s > policy.xid_lookback_s):
                continue
            message = f"NVSwitch at {x.pci} SXid {code} {times}{_when(x.age_s)}: {text}"
            reasons.append(Reason(FAIL, "gpu_sxid_fatal", message) if level == FAIL else
                           Reason(WARN, "gpu_sxid", message))  # a switch: the node's part, no GPU index
            continue
        entry = xid_entry(code)
        level, action, words = entry.level, entry.action, None
        if code == XID_RECOVERY:
            level, action, words = xid154_action(x.text)
        whole_boot = action in _WHOLE_BOOT_ACTIONS or code == XID_FELL_OFF
        if code in policy.xid_ignore or (not whole_boot and x.age_s is not None and x.age_s > policy.xid_lookback_s):
            continue
        if not whole_boot and x.age_s is not None and key in (resets or {}) and x.age_s > resets[key]:
            continue  # the latest such line is older than the GPU's reset
        gpu = f"GPU {index_of[key]} ({x.pci})" if key in index_of else f"GPU at {x.pci}"
        if instance:
            gpu += f" {instance}"
        if code == XID_FELL_OFF:
            if key in fell:
                continue
            fell.add(key)
            reasons.append(Reason(FAIL, "gpu_fell_off_bus", f"{gpu} fell off the bus: Xid 79 {times}"
                                  f"{_when(x.age_s)} ({text}); lost until the node reboots", gpu=index_of.get(key)))
            continue
        what = f"recovery action {words!r}" if words else entry.name
        message = (f"{gpu} Xid {code} ({what}) {times}{_when(x.age_s)}: {text} "
                   f"[NVIDIA: {entry.resolution or 'no resolution given'}; action: {action}]")
        reasons.append(Reason(FAIL, "gpu_xid_critical", message, gpu=index_of.get(key), action=action)
                       if level == FAIL else Reason(WARN, "gpu_xid", message, gpu=index_of.get(key), action=action))
    return reasons


_LOST_ADDRESS = re.compile(r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?")


def _lost_reasons(reading: GpuHealthReading, fell: set) -> list[Reason]:
    """GPUs that fell off the bus without (or before) an Xid 79: named
    unreachable by NVML or nvidia-smi, or listed on the PCI bus and not seen
    by them. Judged whatever else failed to read: a lost GPU is what makes
    NVML and nvidia-smi fail."""
    reasons = []
    tool = "NVML" if reading.source == "nvml" else "nvidia-smi"
    unnamed = []  # "GPU 1 (NVML: ...)": an index, no address; the bus comparison names it
    for what in reading.lost:
        m = _LOST_ADDRESS.search(what)
        if not m:
            unnamed.append(what)
            continue
        key = pci_key(m.group(0))
        if key not in fell:
            fell.add(key)
            reasons.append(Reason(FAIL, "gpu_fell_off_bus", f"GPU at {key} fell off the bus: {tool} cannot reach it"))
    if reading.gpus or not reading.error:  # which GPUs it sees is known: every GPU the bus lists must be there
        seen = {pci_key(g.pci) for g in reading.gpus}
        for address in reading.pci_gpus:
            key = pci_key(address)
            if key not in seen and key not in fell:
                fell.add(key)
                also = f" ({unnamed.pop(0)})" if unnamed else ""
                reasons.append(Reason(FAIL, "gpu_fell_off_bus", f"GPU at {address} fell off the bus: the PCI bus "
                                                                f"lists it, {tool} does not see it{also}"))
    reasons += [Reason(FAIL, "gpu_fell_off_bus", f"{what} fell off the bus: {tool} cannot reach it")
                for what in unnamed]
    return reasons


def _name(gpus: list, index: int) -> str | None:
    return next((g.name for g in gpus if g.index == index), None)


def counters(reading: GpuHealthReading) -> dict[str, dict[str, int]]:
    """What a check stores for the next one's rates: per PCI address."""
    out = {}
    for g in reading.gpus:
        if g.pci is None:
            continue
        values = {"nvlink": g.nvlink_errors, "pcie_replays": g.pcie_replays}
        out[g.pci] = {k: v for k, v in values.items() if v is not None}
    return out


def since_boot(reading: GpuHealthReading) -> CounterWindow | None:
    """The counters' totals over the time since boot: "Replays Since Reset"
    and the NVLink error counters start at the driver's load or a GPU reset,
    never before boot, so the rate over it never overstates."""
    if reading.uptime_s is None or reading.uptime_s <= 0:
        return None
    zero = {pci: dict.fromkeys(values, 0) for pci, values in counters(reading).items()}
    return CounterWindow(round(reading.uptime_s, 1), zero, since_boot=True)


def _rates(reading: GpuHealthReading, policy: GpuHealthPolicy) -> list[Reason]:
    window = reading.window if reading.window is not None else since_boot(reading)
    if window is None or not window.seconds or window.seconds <= 0:
        return []
    since = " since boot" if window.since_boot else ""
    minutes = window.seconds / 60
    reasons = []

    def rise(g: GpuHealth, key: str, now: int | None, limit: float, what: str) -> str | None:
        before = window.before.get(g.pci or "", {})
        if now is None or key not in before or now < before[key]:  # not read, or a reset restarted the counter
            return None
        up = now - before[key]
        if up / minutes <= limit:
            return None
        return (f"{_where(g)} {what} rose by {up} in {window.seconds:.0f} s{since} "
                f"({up / minutes:.1f}/min, threshold {limit:g}/min)")

    for g in reading.gpus:
        text = rise(g, "nvlink", g.nvlink_errors, policy.nvlink_errors_per_min, "NVLink errors (CRC, replay, recovery)")
        if text:
            reasons.append(Reason(WARN, "gpu_nvlink_errors", text, gpu=g.index))
        text = rise(g, "pcie_replays", g.pcie_replays, policy.pcie_replays_per_min, "PCIe replays")
        if text:
            reasons.append(Reason(WARN, "gpu_pcie_replay", text, gpu=g.index))
    return reasons
