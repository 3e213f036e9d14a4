"""Every XID code: its level, NVIDIA's resolution, and the action it asks for.

One table (:data:`XIDS`), built from NVIDIA's Xid catalogue with the
Azure and gcm lists as documented overrides; ``check_gpu_health`` judges
each XID by it, docs/gpu-health.md and ``ccrhost explain`` print it, and
each XID reason carries its row's ``action`` (Reason.action).

Source: :data:`CATALOG_VERSION`. Each catalogue row gives an "immediate
resolution bucket"; :data:`_BUCKETS` turns a bucket into a level and an
action word (model/actions.py's ``ACTIONS``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ccrhost.model.actions import ACTIONS  # noqa: F401  (one vocabulary: the reason codes' actions)
from ccrhost.model.status import FAIL, WARN

CATALOG_VERSION = ("NVIDIA Xid catalog, docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html "
                   "(Xid-Catalog.xlsx, sheet Catalog, as published 2025-10: codes 1-172)")


@dataclass(frozen=True)
class XidEntry:
    code: int
    name: str          # the catalogue's description
    resolution: str    # NVIDIA's immediate resolution bucket ("" where the catalogue gives none)
    level: str         # WARN | FAIL: what this code makes the node
    action: str        # one of ACTIONS
    source: str        # who set the level: "NVIDIA", "Azure", "gcm" or "ccrhost" (with why, in _OVERRIDES)


# NVIDIA's immediate resolution bucket -> (level, action). Every logged XID
# is at least WARN: the catalogue gives each one a resolution, and even an
# IGNORE row is worth a line in the report (never nothing).
_BUCKETS = {
    "IGNORE": (WARN, "none"),
    "RESTART_APP": (WARN, "restart_job"),
    "WORKFLOW_XID_45": (WARN, "restart_job"),     # preemptive cleanup after another XID: that one decides
    "CONTACT_SUPPORT": (WARN, "investigate"),     # rows marked Unused on A100/H100/B100/GB200
    "UPDATE_SWFW": (WARN, "investigate"),
    "CHECK_UVM": (WARN, "investigate"),
    "WORKFLOW_NVLINK5_ERR": (WARN, "investigate"),  # the fatal sub-codes come with an Xid 154 that says so
    "XID_154": (WARN, "investigate"),             # replaced by the action its text names (xid154_action)
    "RESET_GPU": (FAIL, "reset_gpu"),
    "WORKFLOW_XID_48": (FAIL, "reset_gpu"),       # double-bit ECC: reset to retire or remap the row
    "WORKFLOW_NVLINK_ERR": (FAIL, "reset_gpu"),
    "CHECK_MECHANICALS": (FAIL, "investigate"),   # 54: auxiliary power not connected
    "RESTART_BM": (FAIL, "reboot"),
    "RESTART_VM": (FAIL, "reboot"),
}

# code -> (immediate resolution bucket, description), as the catalogue gives them
_CATALOG = {
    1: ("CONTACT_SUPPORT", "Unused"),
    2: ("CONTACT_SUPPORT", "Unused"),
    3: ("CONTACT_SUPPORT", "Unused"),
    4: ("CONTACT_SUPPORT", "Unused"),
    5: ("CONTACT_SUPPORT", "Unused"),
    6: ("CONTACT_SUPPORT", "Unused"),
    7: ("CONTACT_SUPPORT", "Unused"),
    8: ("RESTART_APP", "GPU stopped processing"),
    9: ("CONTACT_SUPPORT", "Unused"),
    10: ("CONTACT_SUPPORT", "Unused"),
    11: ("RESTART_APP", "Invalid or corrupted push buffer stream"),
    12: ("CONTACT_SUPPORT", "Unused"),
    13: ("RESTART_APP", "Graphics Engine Exception"),
    14: ("IGNORE", "Unused"),
    15: ("CONTACT_SUPPORT", "Unused"),
    16: ("CONTACT_SUPPORT", "Unused"),
    17: ("CONTACT_SUPPORT", "Unused"),
    18: ("CONTACT_SUPPORT", "Unused"),
    19: ("CONTACT_SUPPORT", "Unused"),
    20: ("CONTACT_SUPPORT", "Unused"),
    21: ("CONTACT_SUPPORT", "Unused"),
    22: ("CONTACT_SUPPORT", "Unused"),
    23: ("CONTACT_SUPPORT", "Unused"),
    24: ("CONTACT_SUPPORT", "Unused"),
    25: ("RESTART_APP", "Invalid or illegal push buffer stream"),
    26: ("CONTACT_SUPPORT", "Unused"),
    27: ("CONTACT_SUPPORT", "Unused"),
    28: ("CONTACT_SUPPORT", "Unused"),
    29: ("CONTACT_SUPPORT", "Unused"),
    30: ("CONTACT_SUPPORT", "Unused"),
    31: ("RESTART_APP", "GPU memory page fault"),
    32: ("RESTART_APP", "Invalid or corrupted push buffer stream"),
    33: ("CONTACT_SUPPORT", "Unused"),
    34: ("CONTACT_SUPPORT", "Unused"),
    35: ("CONTACT_SUPPORT", "Unused"),
    36: ("CONTACT_SUPPORT", "Unused"),
    37: ("IGNORE", "Driver firmware error"),
    38: ("IGNORE", "Driver firmware error"),
    39: ("RESTART_APP", "Copy Engine Exception"),
    40: ("RESTART_APP", "Copy Engine Exception"),
    41: ("RESTART_APP", "Copy Engine Exception"),
    42: ("CONTACT_SUPPORT", "Unused"),
    43: ("IGNORE", "GPU stopped processing"),
    44: ("IGNORE", "Graphics Engine fault during context switch"),
    45: ("WORKFLOW_XID_45", "Preemptive cleanup, due to previous errors"),
    46: ("RESET_GPU", "GPU stopped processing"),
    47: ("CONTACT_SUPPORT", "Unused"),
    48: ("WORKFLOW_XID_48", "Double Bit ECC Error"),
    49: ("CONTACT_SUPPORT", "Unused"),
    50: ("CONTACT_SUPPORT", "Unused"),
    51: ("CONTACT_SUPPORT", "Unused"),
    52: ("CONTACT_SUPPORT", "Unused"),
    53: ("CONTACT_SUPPORT", "Unused"),
    54: ("CHECK_MECHANICALS", "Auxiliary power is not connected to the GPU board"),
    55: ("CONTACT_SUPPORT", "Unused"),
    56: ("CONTACT_SUPPORT", "Unused"),
    57: ("CONTACT_SUPPORT", "Unused"),
    58: ("CONTACT_SUPPORT", "Unused"),
    59: ("CONTACT_SUPPORT", "Unused"),
    60: ("RESTART_APP", "Video processor exception"),
    61: ("CONTACT_SUPPORT", "Unused"),
    62: ("RESET_GPU", "Internal micro-controller halt"),
    63: ("IGNORE", "GPU memory remapping event"),
    64: ("RESET_GPU", "GPU memory remapping failure"),
    65: ("CONTACT_SUPPORT", "Unused"),
    66: ("IGNORE", "Illegal access by driver"),
    67: ("IGNORE", "Illegal access by driver"),
    68: ("RESTART_APP", "NVDEC0 Exception"),
    69: ("RESTART_APP", "Graphics Engine class error"),
    70: ("RESTART_APP", "CE3: Unknown Error"),
    71: ("RESTART_APP", "CE4: Unknown Error"),
    72: ("RESTART_APP", "CE5: Unknown Error"),
    73: ("CONTACT_SUPPORT", "Unused"),
    74: ("WORKFLOW_NVLINK_ERR", "NVLINK Error"),
    75: ("RESTART_APP", "CE6: Unknown Error"),
    76: ("RESTART_APP", "CE7: Unknown Error"),
    77: ("RESTART_APP", "CE8: Unknown Error"),
    78: ("UPDATE_SWFW", "vGPU Start Error"),
    79: ("RESTART_BM", "GPU has fallen off the bus"),
    80: ("RESTART_APP", "Corrupted data sent to GPU"),
    81: ("CONTACT_SUPPORT", "Unused"),
    82: ("RESTART_APP", "NVJPG0 Error"),
    83: ("RESTART_APP", "NVDEC1 Error"),
    84: ("RESTART_APP", "NVDEC2 Error"),
    85: ("RESTART_APP", "CE9: Unknown Error"),
    86: ("RESTART_APP", "OFA Exception"),
    87: ("CONTACT_SUPPORT", "Unused"),
    88: ("RESTART_APP", "NVDEC3 Error"),
    89: ("RESTART_APP", "NVDEC4 Error"),
    90: ("CONTACT_SUPPORT", "Unused"),
    91: ("CONTACT_SUPPORT", "Unused"),
    92: ("IGNORE", "High single-bit ECC error rate"),
    93: ("IGNORE", "Non-fatal violation of provisioned InfoROM wear limit"),
    94: ("RESTART_APP", "Contained memory error"),
    95: ("RESET_GPU", "Uncontained memory error"),
    96: ("RESTART_APP", "NVDEC5 Error"),
    97: ("RESTART_APP", "NVDEC6 Error"),
    98: ("RESTART_APP", "NVDEC7 Error"),
    99: ("RESTART_APP", "NVJPG1 Error"),
    100: ("RESTART_APP", "NVJPG2 Error"),
    101: ("RESTART_APP", "NVJPG3 Error"),
    102: ("RESTART_APP", "NVJPG4 Error"),
    103: ("RESTART_APP", "NVJPG5 Error"),
    104: ("RESTART_APP", "NVJPG6 Error"),
    105: ("RESTART_APP", "NVJPG7 Error"),
    106: ("IGNORE", "SMBPBI Test Message"),
    107: ("IGNORE", "SMBPBI Test Message Silent"),
    108: ("IGNORE", "Unused"),
    109: ("RESET_GPU", "Context Switch Timeout Error"),
    110: ("RESET_GPU", "Security Fault Error"),
    111: ("CONTACT_SUPPORT", "Unused"),
    112: ("CONTACT_SUPPORT", "Unused"),
    113: ("CONTACT_SUPPORT", "Unused"),
    114: ("CONTACT_SUPPORT", "Unused"),
    115: ("CONTACT_SUPPORT", "Unused"),
    116: ("CONTACT_SUPPORT", "Unused"),
    117: ("CONTACT_SUPPORT", "Unused"),
    118: ("CONTACT_SUPPORT", "Unused"),
    119: ("RESET_GPU", "GSP RPC Timeout"),
    120: ("RESET_GPU", "GSP Error"),
    121: ("IGNORE", "C2C Error"),
    122: ("CONTACT_SUPPORT", "Unused"),
    123: ("CONTACT_SUPPORT", "Unused"),
    124: ("CONTACT_SUPPORT", "Unused"),
    125: ("CONTACT_SUPPORT", "Unused"),
    126: ("RESTART_APP", "CE10: Unknown Error"),
    127: ("RESTART_APP", "CE11: Unknown Error"),
    128: ("RESTART_APP", "CE12: Unknown Error"),
    129: ("RESTART_APP", "CE13: Unknown Error"),
    130: ("RESTART_APP", "CE14: Unknown Error"),
    131: ("RESTART_APP", "CE15: Unknown Error"),
    132: ("RESTART_APP", "CE16: Unknown Error"),
    133: ("RESTART_APP", "CE17: Unknown Error"),
    134: ("RESTART_APP", "CE18: Unknown Error"),
    135: ("RESTART_APP", "CE19: Unknown Error"),
    136: ("RESET_GPU", "Link Training Failed"),
    137: ("IGNORE", "NVLink Privilege Error"),
    138: ("CONTACT_SUPPORT", "Unused"),
    139: ("RESTART_APP", "OFA1 Error"),
    140: ("RESET_GPU", "ECC Unrecovered Error"),
    141: ("IGNORE", "CUDA Fast Path Error"),
    142: ("CONTACT_SUPPORT", "NVENC3 Error"),
    143: ("RESET_GPU", "GPU Initialization Error"),
    144: ("WORKFLOW_NVLINK5_ERR", "NVLINK: SAW Error"),
    145: ("WORKFLOW_NVLINK5_ERR", "NVLINK: RLW Error"),
    146: ("WORKFLOW_NVLINK5_ERR", "NVLINK: TLW Error"),
    147: ("WORKFLOW_NVLINK5_ERR", "NVLINK: TREX Error"),
    148: ("WORKFLOW_NVLINK5_ERR", "NVLINK: NVLPW_CTRL Error"),
    149: ("WORKFLOW_NVLINK5_ERR", "NVLINK: NETIR Error"),
    150: ("WORKFLOW_NVLINK5_ERR", "NVLINK: MSE Error"),
    151: ("RESTART_VM", "Key rotation Error"),
    152: ("IGNORE", "DLA SMMU Error"),
    153: ("IGNORE", "DLA timeout Error"),
    154: ("XID_154", "GPU Recovery Action Changed"),
    155: ("RESET_GPU", "NVLINK: SW Defined Error"),
    156: ("RESET_GPU", "Resource Retirement Event"),
    157: ("IGNORE", "Resource Retirement Failure"),
    158: ("RESET_GPU", "GPU Fatal Timeout"),
    159: ("CHECK_UVM", "CHI Non-Data Error"),
    160: ("IGNORE", "Channel Retirement Event"),
    161: ("IGNORE", "Channel Retirement Failure"),
    162: ("", "Power Smoothing HW Circuitry capability reengaged"),
    163: ("", "Power Smoothing HW Circuitry capability disengaged"),
    164: ("", "Power Smoothing HW Circuitry low lifetime reached"),
    165: ("", "Power Smoothing HW Circuitry lifetime exhausted"),
    166: ("", "CC traffic seen prior to link properly being configured for encrypted traffic"),
    167: ("", "PCIE_FATAL_TIMEOUT"),
    168: ("", "Errors found in WPR (write protected region)"),
    169: ("", "Internal micro-controller halt"),
    170: ("", "Interrupt seen in CC mode"),
    171: ("", "Uncorrectable DRAM error (details to Xid 48)"),
    172: ("", "Uncorrectable SRAM error (details to Xid 48)"),
}

# Levels the catalogue alone would set otherwise, and why.
# - Azure azurehpc-health-checks check_gpu_xid fails a node on 48, 56, 57, 58,
#   62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120; those the
#   catalogue leaves at WARN FAIL here, except 63, 68 and 92 (below).
# - Meta gcm treats 13, 31, 43, 45, 63, 68, 92, 109 as non-critical. It and
#   Azure disagree on 63, 68 and 92: gcm is followed (WARN), since each has a
#   direct reading that FAILs when the hardware is really bad: 63 (a remap
#   was recorded; a pending or failed one FAILs via the row-remap reading),
#   68 (NVDEC, an engine training does not use), 92 (corrected errors; the
#   correctable-count threshold judges them). gcm's 109 is not followed: the
#   catalogue asks for a GPU reset after a context-switch timeout.
# - Rows the catalogue gives no resolution (162-172) get one from what they
#   name: "fatal", a halt or uncorrectable memory FAIL; power smoothing and
#   confidential-computing notices WARN.
AZURE_CRITICAL = frozenset({48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120})
GCM_NON_CRITICAL = frozenset({13, 31, 43, 45, 63, 68, 92, 109})
_OVERRIDES = {
    **{c: (FAIL, None, "Azure") for c in AZURE_CRITICAL - {63, 68, 92}},
    **{c: (WARN, None, "gcm") for c in (63, 68, 92)},
    162: (WARN, "none", "ccrhost"), 163: (WARN, "investigate", "ccrhost"), 164: (WARN, "investigate", "ccrhost"),
    165: (WARN, "replace", "ccrhost"), 166: (WARN, "investigate", "ccrhost"), 170: (WARN, "investigate", "ccrhost"),
    167: (FAIL, "reset_gpu", "ccrhost"), 169: (FAIL, "reset_gpu", "ccrhost"),
    168: (FAIL, "reboot", "ccrhost"),  # AWS's catalogue mapping: REBOOT
    171: (FAIL, "reset_gpu", "ccrhost"), 172: (FAIL, "reset_gpu", "ccrhost"),
}


def _entry(code: int, resolution: str, name: str) -> XidEntry:
    level, action = _BUCKETS.get(resolution, (WARN, "investigate"))
    source = "NVIDIA"
    if code in _OVERRIDES:
        new_level, new_action, source = _OVERRIDES[code]
        if new_level == level and new_action in (None, action) and source == "Azure":
            source = "NVIDIA"  # Azure agreeing with the catalogue changes nothing; gcm's three settle a disagreement
        level, action = new_level, new_action or action
    return XidEntry(code, name, resolution, level, action, source)


XIDS: dict[int, XidEntry] = {code: _entry(code, *row) for code, row in _CATALOG.items()}
XID_FELL_OFF = 79   # "GPU has fallen off the bus"
XID_RECOVERY = 154  # "GPU Recovery Action Changed": its text names the action


def xid_entry(code: int) -> XidEntry:
    """The table's row, or a WARN to investigate for a code it does not list
    (a driver newer than the catalogue): never nothing."""
    return XIDS.get(code) or XidEntry(code, "not in the catalogue", "", WARN, "investigate", "ccrhost")


# Xid 154's text: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU
# Reset Required)"; drivers word the same number differently ("0x1 (PF FLR)",
# "0x2 (OS Reboot)"), so the number decides. Numbers: nvml.h
# nvmlDeviceGpuRecoveryAction_t, 0-4 alike in every version (5 on is
# GPU_RESET_BUS in some, RECOVER_IMEX_DOMAIN in others: its words decide).
_RECOVERY_TEXT = re.compile(r"\bto (?:0x([0-9a-fA-F]{1,8})\b ?)?(?:\(([^()]{1,40})\))?")
_RECOVERY_NUMBERS = {
    0: (WARN, "none"),         # NVML_GPU_RECOVERY_ACTION_NONE
    1: (FAIL, "reset_gpu"),    # _GPU_RESET
    2: (FAIL, "reboot"),       # _NODE_REBOOT
    3: (FAIL, "reset_gpu"),    # _DRAIN_P2P
    4: (FAIL, "reset_gpu"),    # _DRAIN_AND_RESET
}
_RECOVERY = {
    "none": (WARN, "none"),
    "drain p2p": (FAIL, "reset_gpu"),
    "drain and reset": (FAIL, "reset_gpu"),
    "gpu reset required": (FAIL, "reset_gpu"),
    "pf flr": (FAIL, "reset_gpu"),
    "node reboot required": (FAIL, "reboot"),
    "os reboot": (FAIL, "reboot"),
}


def xid154_action(text: str) -> tuple[str, str, str | None]:
    """(level, action, the action as logged) Xid 154's text asks for: by
    its number, else by its words; text that names neither WARNs to
    investigate."""
    m = next((m for m in _RECOVERY_TEXT.finditer(text) if m.group(1) or m.group(2)), None)
    if m is None:
        return WARN, "investigate", None
    number = int(m.group(1), 16) if m.group(1) else None
    words = m.group(2).strip() if m.group(2) else None
    shown = " ".join(x for x in (m.group(1) and f"0x{m.group(1)}", words and f"({words})") if x)
    if number in _RECOVERY_NUMBERS:
        return (*_RECOVERY_NUMBERS[number], shown)
    return (*_RECOVERY.get((words or "").lower(), (WARN, "investigate")), shown)


# NVSwitch SXids (nvidia-nvswitchN: SXid (PCI:...): NNNNN, Fatal|Non-fatal, ...):
# the driver says which; a fatal one needs the switch and its GPUs reset
# (NVIDIA Fabric Manager user guide).
SXID_LEVELS = {"fatal": (FAIL, "reset_gpu"), "non-fatal": (WARN, "investigate")}


# --- the table as ccrhost explain and docs/gpu-health.md print it -----------------

def _source(e: XidEntry) -> str:
    if e.source == "Azure":
        return "Azure (fails on it; the catalogue alone: WARN)"
    if e.source == "gcm":
        return "gcm (non-critical; Azure fails on it)"
    if e.source == "ccrhost":
        return "ccrhost (the catalogue gives no resolution)" if e.code in XIDS else "ccrhost (not in the catalogue)"
    return "NVIDIA catalogue"


def entry_line(e: XidEntry) -> str:
    """One code on one line (``ccrhost explain xid-95``)."""
    resolution = e.resolution or "none given"
    extra = "; its text names the action, by number: 0x1 GPU Reset Required (or PF FLR), 0x3 Drain P2P, " \
            "0x4 Drain and Reset FAIL (reset_gpu), 0x2 Node Reboot Required FAIL (reboot), 0x0 None WARN" \
        if e.code == XID_RECOVERY else ""
    return (f"Xid {e.code}: {e.name} - {e.level}, action {e.action} (NVIDIA: {resolution}; level from "
            f"{_source(e)}){extra}")


def table_text(level: str) -> str:
    """The codes at ``level``, for ``ccrhost explain gpu_xid_critical`` / ``gpu_xid``."""
    rows = [e for e in XIDS.values() if e.level == level]
    out = [f"XID codes at {level} ({CATALOG_VERSION}; any code not listed: WARN, investigate):"]
    out += [f"  {e.code:>3}  {e.name[:44]:<44}  {e.action:<11}  {_source(e).split(' (')[0]}" for e in rows]
    return "\n".join(out) + "\n"


def table_md() -> str:
    """Every code's level, action, NVIDIA's resolution and the source of the level (docs/gpu-health.md)."""
    out = [f"Source: {CATALOG_VERSION}. A code this table does not list WARNs (action `investigate`).", "",
           "| Xid | Catalogue description | Level | Action | NVIDIA's resolution | Level from |",
           "|---|---|---|---|---|---|"]
    for e in XIDS.values():
        name = e.name.replace("|", "/")
        out.append(f"| {e.code} | {name} | {e.level} | `{e.action}` | {e.resolution or 'none given'} | "
                   f"{_source(e)} |")
    return "\n".join(out) + "\n"
