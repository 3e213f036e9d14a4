"""GPU health: what kills or corrupts a training job on a GPU that still counts and clocks.

Readings (the probe, ccrhost/probes/gpu_health.py) and their judgement
(:func:`check_gpu_health`, called once from ``verdict.evaluate``). Sources
of the thresholds and lists: /work/shared/reference/gpu-fabric-health.md
(Azure azurehpc-health-checks, Meta gcm, NVIDIA DCGM and NVSentinel).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.model.status import FAIL, UNKNOWN, WARN, Reason

# --- which XIDs mean what ----------------------------------------------------
# Azure azurehpc-health-checks check_gpu_xid: the critical list it fails a node on.
AZURE_CRITICAL = frozenset({48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120})
# Meta gcm health_checks: XIDs it treats as non-critical (application or recoverable).
GCM_NON_CRITICAL = frozenset({13, 31, 43, 45, 63, 68, 92, 109})
# The two disagree on 63, 68 and 92; we follow gcm (WARN) for all three because
# each has a direct reading that FAILs when the hardware is really bad:
# - 63 (a row remap / page retirement was recorded): the remap itself worked;
#   a pending remap (reset needed) or a failed one (64) FAILs via the row-remap
#   reading, a retirement still pending via retired_pages.pending.
# - 68 (video decoder exception): raised by an application's NVDEC use; a
#   training job does not use the engine, and the GPU keeps working.
# - 92 (high single-bit ECC rate): corrected errors; the correctable-count
#   threshold judges them, an uncorrectable one FAILs on its own.
XID_FAIL = AZURE_CRITICAL - {63, 68, 92}
XID_WARN = GCM_NON_CRITICAL
XID_FELL_OFF = 79  # "GPU has fallen off the bus"

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
    nvlinks: list[NvLink] | None = None     # nvidia-smi nvlink -s and -e / NVML per link; None: not read

    @property
    def nvlink_errors(self) -> int | None:
        values = [n.errors for n in self.nvlinks or () if n.errors is not None]
        return sum(values) if values else None


@dataclass
class Xid:
    code: int                 # NVRM: Xid (PCI:<pci>): <code>, ...
    pci: str                  # as logged: "0000:18:00" (bus, no function)
    age_s: float | None       # seconds before the reading (None: the log line had no time)
    text: str                 # the rest of the line, as logged


@dataclass
class CounterWindow:
    """The GPU error counters a previous ``ccrhost check`` stored (its state
    file), for rates; None seconds: no baseline (first check, new boot)."""
    seconds: float | None
    before: dict[str, dict[str, int]] = field(default_factory=dict)  # pci -> {"nvlink": n, "pcie_replays": n}
    note: str | None = None


@dataclass
class GpuHealthReading:
    gpus: list[GpuHealth] = field(default_factory=list)
    pci_gpus: list[str] = field(default_factory=list)  # /sys/bus/pci/devices: vendor 0x10de, class 0x0300/0x0302
    xids: list[Xid] = field(default_factory=list)      # journalctl -k -b, else dmesg
    log_source: str | None = None                      # "journalctl" | "dmesg"
    log_error: str | None = None                       # why the kernel log could not be read
    fabric_manager: str | None = None                  # systemctl is-active nvidia-fabricmanager; None: no systemd
    error: str | None = None                           # why the GPUs' health could not be read
    source: str = "nvidia-smi"                         # "nvml" | "nvidia-smi"
    window: CounterWindow | None = None                # None: rates not judged on this path


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
    seen = {pci_key(g.pci) for g in reading.gpus}
    index_of = {pci_key(g.pci): g.index for g in reading.gpus}
    fell = set()
    for x in reading.xids:
        if x.code in policy.xid_ignore or (x.age_s is not None and x.age_s > policy.xid_lookback_s):
            continue
        key = pci_key(x.pci)
        gpu = f"GPU {index_of[key]} ({x.pci})" if key in index_of else f"GPU at {x.pci}"
        when = f"{x.age_s / 60:.0f} min ago" if x.age_s is not None else "since boot"
        if x.code == XID_FELL_OFF:
            if key not in fell:
                fell.add(key)
                reasons.append(Reason(FAIL, "gpu_fell_off_bus",
                                      f"{gpu} fell off the bus: Xid 79 {when} ({x.text.strip()})",
                                      gpu=index_of.get(key)))
        elif x.code in XID_FAIL:
            reasons.append(Reason(FAIL, "gpu_xid_critical", f"{gpu} Xid {x.code} {when}: {x.text.strip()}",
                                  gpu=index_of.get(key)))
        elif x.code in XID_WARN:
            reasons.append(Reason(WARN, "gpu_xid", f"{gpu} Xid {x.code} {when}: {x.text.strip()}",
                                  gpu=index_of.get(key)))
    if not reading.error:
        for address in reading.pci_gpus:
            key = pci_key(address)
            if key not in seen and key not in fell:
                fell.add(key)
                reasons.append(Reason(FAIL, "gpu_fell_off_bus",
                                      f"GPU at {address} fell off the bus: the PCI bus lists it, "
                                      f"{'NVML' if reading.source == 'nvml' else 'nvidia-smi'} does not see it"))
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


def _rates(reading: GpuHealthReading, policy: GpuHealthPolicy) -> list[Reason]:
    window = reading.window
    if window is None or not window.seconds or window.seconds <= 0:
        return []
    minutes = window.seconds / 60
    reasons = []

    def rise(g: GpuHealth, key: str, now: int | None, limit: float, what: str) -> str | None:
        before = window.before.get(g.pci or "", {})
        if now is None or key not in before or now < before[key]:  # not read, or a reset restarted the counter
            return None
        up = now - before[key]
        if up / minutes <= limit:
            return None
        return (f"{_where(g)} {what} rose by {up} in {window.seconds:.0f} s "
                f"({up / minutes:.1f}/min, threshold {limit:g}/min)")

    for g in reading.gpus:
        text = rise(g, "nvlink", g.nvlink_errors, policy.nvlink_errors_per_min, "NVLink errors (CRC, replay, recovery)")
        if text:
            reasons.append(Reason(WARN, "gpu_nvlink_errors", text, gpu=g.index))
        text = rise(g, "pcie_replays", g.pcie_replays, policy.pcie_replays_per_min, "PCIe replays")
        if text:
            reasons.append(Reason(WARN, "gpu_pcie_replay", text, gpu=g.index))
    return reasons
