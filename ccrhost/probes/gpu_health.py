"""GPU health on this node: NVML first, ``nvidia-smi -q`` and ``nvidia-smi nvlink`` when NVML cannot load;
XIDs from the kernel log; the GPUs the PCI bus lists; the Fabric Manager service.

Formats (verbatim samples in tests/fixtures/gpu/):
- ``nvidia-smi -q``: one block per GPU opened by ``GPU 00000000:4F:00.0``, ``Key : Value`` lines indented by
  four spaces per level (driver 550 output in thamada/nvidia-smi ``nvsim/A40x10_smi.py``; the ``Fabric`` section
  ``State : Completed`` / ``Status : Success`` as NVIDIA's Fabric Manager user guide shows it; on NVLink
  domain GPUs also ``CliqueId``, ``ClusterUUID`` and a ``Health`` subsection: kubernetes-sigs/dra-driver-nvidia-gpu
  #626, Azure/azhpc-images #506). NVML: nvmlDeviceGetGpuFabricInfoV's healthMask (model/imex.py HEALTH_FIELDS).
- ``nvidia-smi nvlink -s``: ``GPU 0: <name> (UUID: ...)`` then ``\\t Link 0: 26.562 GB/s`` or ``<inactive>``
  (siboehm/bench gpu/nvlink/README.md); ``nvidia-smi nvlink -e``: ``\\t Link 0: Replay Errors: 0``, ``Recovery
  Errors``, ``CRC Errors`` (stas00/ml-engineering, network/README.md).
- Kernel log: the driver's krcReportXid (NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c)
  prints ``NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s`` or, with no process, ``...): %d, %s``; a
  MIG-attributed one adds `` GPU-I:%02u`` and `` GPU-CI:%02u`` inside the parentheses
  (``NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: ...``, NVIDIA's A100 memory-error guide and
  kernel_rc_watchdog comments). Older drivers: ``NVRM: Xid (0000:03:00): 13, 0003 ...`` (no ``PCI:``), some
  with the function (``0000:03:00.0``). NVSwitch errors (src/common/nvswitch/kernel/inc/error_nvswitch.h
  NVSWITCH_PRINT_SXID): ``nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 20009, Non-fatal, Link 28 ...``.
  ``journalctl -k -b -o short-unix`` prefixes epoch seconds; ``dmesg`` prefixes ``[seconds since boot]``.
- A GPU nvidia-smi cannot reach: ``Unable to determine the device handle for GPU0000:18:00.0: Unknown Error``
  (newer: ``for GPU1: 0000:34:00.0: Unknown Error``).
"""

from __future__ import annotations

import ctypes
import math
import re

from ccrhost import numbers
from ccrhost.model.fabric import LinkDown
from ccrhost.model.gpu_health import GpuHealth, GpuHealthReading, NvLink, Xid, merge_line
from ccrhost.model.host_health import LOG_GREP, KernelEvent, match_kernel_line
from ccrhost.model.imex import SMI_HEALTH
from ccrhost.model.nic_log import FATAL, NicLogEvent
from ccrhost.probes import local
from ccrhost.probes.sections import split


class GpuHealthFormatError(ValueError):
    """Output no nvidia-smi version prints; the message quotes it."""


_NVSMI = "timeout -k 5 20 nvidia-smi"
# the kernel-log lines kept: NVIDIA's XIDs and SXids, mlx5e's carrier changes going down,
# mlx5_core's fatal lines (model/nic_log.py FATAL), the host's fatal lines (model/host_health.py PATTERNS)
_LOG_LINES = ("NVRM: Xid|SXid \\(|mlx5_core .*: Link down|mlx5_core .*(Will cause a leak of a command resource"
              "|health compromised - reached miss count|unrecoverable hardware error)|" + LOG_GREP)
# Every part prints its own section; a part that fails says why in its own.
COMMAND_LOG = (
    # read, a builtin: no process per PCI function
    "echo '@@pcigpus'; for d in /sys/bus/pci/devices/*; do"
    " read -r v < $d/vendor 2>/dev/null || continue; [ \"$v\" = 0x10de ] || continue;"
    " read -r c < $d/class 2>/dev/null; case $c in 0x0300*|0x0302*) echo \"${d##*/}\";; esac; done;"
    " if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then echo '@@fabricmanager';"
    " systemctl is-active nvidia-fabricmanager 2>/dev/null | head -n1; fi;"
    # seconds since boot: the error counters' longest life (rates with no stored reading)
    " up=; { read -r up _ < /proc/uptime; } 2>/dev/null; echo \"@@uptime $up\";"
    # the one read of the kernel log: XIDs, and mlx5e's link-down lines for the fabric check
    " if [ -d /run/systemd/system ] && command -v journalctl >/dev/null 2>&1; then"
    " echo \"@@journal $(date +%s)\"; timeout -k 2 10 journalctl -k -b -q --no-pager -o short-unix 2>&1 |"
    f" grep -E '{_LOG_LINES}|^[^0-9]'; "
    " elif command -v dmesg >/dev/null 2>&1; then"
    f" echo \"@@dmesg $up\"; timeout -k 2 10 dmesg 2>&1 | grep -E '{_LOG_LINES}|^dmesg:';"
    " else echo '@@logerror'; echo 'neither journalctl nor dmesg found'; fi"
)


def nvsmi_command(bound: bool = True) -> str:
    """nvidia-smi's part; ``bound`` as :func:`ccrhost.probes.gpu.command`."""
    smi = _NVSMI if bound else "nvidia-smi"
    silent = "did not answer within 20 s (killed)" if bound else "failed and printed nothing"
    return (
        "if ! command -v nvidia-smi >/dev/null 2>&1; then echo '@@error'; echo 'nvidia-smi not found';"
        f" elif out=$({smi} -q 2>&1); then echo '@@query'; echo \"$out\";"
        f" echo '@@nvlinkstatus'; {smi} nvlink -s 2>&1; echo '@@nvlinkerrors'; {smi} nvlink -e 2>&1;"
        # a driver that stopped answering: one 20 s wait, not three
        f" elif [ -z \"$out\" ]; then echo '@@error'; echo 'nvidia-smi -q {silent}';"
        " else echo '@@error'; echo \"$out\" | head -n 5;"
        # the GPUs it could not reach, each by name (a lost GPU fails every nvidia-smi -q)
        " echo '@@lost'; echo \"$out\" | grep 'Unable to determine the device handle' | head -n 64; fi"
    )


COMMAND_NVSMI = nvsmi_command()
# the kernel log first: a hung nvidia-smi (bounded, but 20 s) never delays or costs it
COMMAND = f"{COMMAND_LOG}; {COMMAND_NVSMI}"

_KV = re.compile(r"^( *)(\S[^:]*?)\s*: ?(.*)$")
_GPU_HEAD = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_NA = ("N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error", "")


def _bdf(text: str) -> str:
    domain, bus, rest = text.lower().split(":")
    return f"{domain[-4:]}:{bus}:{rest}"


def _number(value: str, key: str) -> int | None:
    value = value.strip()
    if value in _NA:
        return None
    if not (value.isascii() and value.isdigit() and len(value) <= 20):  # ASCII digits only (ccrhost.numbers)
        raise GpuHealthFormatError(f"{key} {value!r} is not a count")
    return int(value)


def _yes_no(value: str, key: str) -> bool | None:
    value = value.strip()
    if value in _NA:
        return None
    if value not in ("Yes", "No"):
        raise GpuHealthFormatError(f"{key} {value!r} is neither Yes nor No")
    return value == "Yes"


def parse_query(lines: list[str]) -> list[GpuHealth]:
    """``nvidia-smi -q``: the fields :class:`GpuHealth` holds, per GPU block."""
    blocks: list[tuple[str, dict[str, str]]] = []
    path: list[tuple[int, str]] = []
    for line in lines:
        if not line.strip() or line.startswith("="):
            continue
        head = _GPU_HEAD.match(line)
        if head:
            blocks.append((_bdf(head.group(1)), {}))
            path = []
            continue
        if not blocks:
            continue  # the log's header (Timestamp, Driver Version, Attached GPUs)
        m = _KV.match(line)
        if m:
            depth, key, value = len(m.group(1)), m.group(2).strip(), m.group(3).strip()
        else:  # a section's title ("    ECC Errors"): no colon
            depth, key, value = len(line) - len(line.lstrip(" ")), line.strip(), ""
        while path and path[-1][0] >= depth:
            path.pop()
        name = "/".join([p for _, p in path] + [key])
        if value:
            blocks[-1][1][name] = value
        else:
            path.append((depth, key))
    gpus = []
    for index, (pci, f) in enumerate(blocks):
        unc = cor = None
        for key, value in f.items():
            if not key.startswith("ECC Errors/Volatile/"):
                continue
            leaf = key.rsplit("/", 1)[1] if key.count("/") == 2 else key.split("/", 2)[2]
            n = _number(value, key)
            if n is None:
                continue
            # 550+: SRAM/DRAM Correctable, Uncorrectable (Parity, SEC-DED); older: Single Bit/Total, Double Bit/Total
            if "Uncorrectable" in leaf or leaf == "Double Bit/Total":
                unc = (unc or 0) + n
            elif "Correctable" in leaf or leaf == "Single Bit/Total":
                cor = (cor or 0) + n
        pending = next((v for k, v in f.items() if k.startswith("Retired Pages/Pending")), "N/A")
        state, status = f.get("Fabric/State"), f.get("Fabric/Status")
        serial = f.get("Serial Number", "N/A")
        gpus.append(GpuHealth(
            index=index, pci=pci, serial=None if serial in _NA else serial, ecc_uncorrectable=unc, ecc_correctable=cor,
            retired_pending=_yes_no(pending, "Retired Pages/Pending"),
            remap_pending=_yes_no(f.get("Remapped Rows/Pending", "N/A"), "Remapped Rows/Pending"),
            remap_failure=_yes_no(f.get("Remapped Rows/Remapping Failure Occurred", "N/A"),
                                  "Remapped Rows/Remapping Failure Occurred"),
            remap_correctable=_number(f.get("Remapped Rows/Correctable Error", "N/A"), "Remapped Rows/Correctable Error"),
            remap_uncorrectable=_number(f.get("Remapped Rows/Uncorrectable Error", "N/A"),
                                        "Remapped Rows/Uncorrectable Error"),
            pcie_replays=_number(f.get("PCI/Replays Since Reset", "N/A"), "PCI/Replays Since Reset"),
            fabric_state=None if state in _NA else state,
            fabric_status=None if status in _NA else status,
            clique_id=_number(f.get("Fabric/CliqueId", "N/A"), "Fabric/CliqueId"),
            cluster_uuid=None if f.get("Fabric/ClusterUUID", "N/A") in _NA else f["Fabric/ClusterUUID"].lower(),
            health=_fabric_health(f),
        ))
    return gpus


_HEALTH_OK = {"False", "Full", "None"}  # -q Fabric/Health values that say no fault


def _fabric_health(f: dict[str, str]) -> dict[str, str] | None:
    """-q ``Fabric/Health`` (newer drivers; samples in tests/fixtures/gpu/): the rows that say a
    fault, by model/imex.py's field names; a value no driver prints under ``unreadable``.
    None: no health printed (N/A, Not Supported, an older driver)."""
    out: dict[str, str] = {}
    rows = {**{row: name for name, (row, _) in SMI_HEALTH.items()}, "Incorrect Configuration": "incorrect_configuration"}
    seen = False
    for row, name in rows.items():
        value = f.get(f"Fabric/Health/{row}", "N/A").strip()
        if value in _NA or value == "Not Supported":
            continue
        seen = True
        fault = SMI_HEALTH[name][1] if name in SMI_HEALTH else None
        if value == fault or (name == "incorrect_configuration" and value not in _HEALTH_OK):
            out[name] = value
        elif value not in _HEALTH_OK:
            out["unreadable"] = f"{row} {value!r}"
    summary = f.get("Fabric/Health/Summary", "N/A").strip()
    if summary == "Unhealthy" and not out:
        # the driver calls the fabric unhealthy and no row it printed says why: not a pass
        out["unreadable"] = "Summary 'Unhealthy' and no row that says why"
    return out if seen or summary == "Unhealthy" else None


_NVGPU = re.compile(r"^GPU (\d+): ")
_ERROR_FIELDS = {"Replay": "replay", "Recovery": "recovery", "CRC": "crc"}
_SPEED = re.compile(r"\d+(\.\d+)? GB/s")


def parse_nvlink(status: list[str], errors: list[str]) -> dict[int, list[NvLink]]:
    """``nvidia-smi nvlink -s`` and ``-e``: GPU index -> its links (a GPU
    listed with no link line has none up: "all links are inActive")."""
    links: dict[int, dict[int, NvLink]] = {}
    for lines, is_status in ((status, True), (errors, False)):
        gpu = None
        for line in lines:
            if line.startswith("GPU "):
                head = _NVGPU.match(line)
                if head:
                    gpu = int(head.group(1))
                    links.setdefault(gpu, {})
                    continue
            # "\t Link 3: 26.562 GB/s", "\t Link 3: Replay Errors: 0" (string
            # operations: some 600 such lines a node, every host of a deploy)
            body = line.lstrip()
            if gpu is None or body == line or not body.startswith("Link "):
                continue  # blank lines, NVML's notes
            index, sep, text = body[5:].partition(": ")
            if not sep or not (index.isascii() and index.isdigit()):
                continue
            n = int(index)
            link = links[gpu].setdefault(n, NvLink(n))
            text = text.strip()
            if is_status:
                if text == "<inactive>":
                    link.up = False
                elif _SPEED.fullmatch(text):
                    link.up = True
                    link.speed_gbs = float(text.split()[0])
                else:
                    raise GpuHealthFormatError(f"nvlink -s: link {n} {text!r}")
            else:
                kind, sep, value = text.partition(" Errors: ")
                if sep and kind in _ERROR_FIELDS and value and not any(c.isspace() for c in value):
                    setattr(link, _ERROR_FIELDS[kind], _number(value, f"link {n} {kind} Errors"))
    return {gpu: [by[n] for n in sorted(by)] for gpu, by in links.items()}


_HEX4 = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
# krcReportXid's three attributions (device; GPU instance; GPU and compute
# instance); the ".N" function and a missing "PCI:" of older drivers
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(" + _HEX4 + r")(?:\.[0-7])?((?: GPU-I:\d{1,5})(?: GPU-CI:\d{1,5})?)?\): "
                  r"(\d{1,5}),(.*)$")
_SXID = re.compile(r"nvidia-nvswitch\d{0,4}: SXid \((?:PCI:)?(" + _HEX4 + r")(?:\.[0-7])?\): (\d{1,6}),(.*)$")
_DMESG_TIME = re.compile(r"^\[\s*(\d{1,12}\.\d{1,9})\]")
_JOURNAL_TIME = re.compile(r"^(\d{1,12}\.\d{1,9}) ")
_LOG_ERROR_MAX = 300
# journalctl's warnings about one journal file it skips (systemd src/shared/journal-util.c
# journal_access_check_and_warn, printed even with -q): it reads every other file, so they
# are no failure of the read
_JOURNAL_SKIPS = re.compile(
    r"^(?:Journal file .+ (?:is truncated|uses an unsupported feature|corrupted), ignoring file\."
    r"|Use SYSTEMD_LOG_LEVEL=debug journalctl --file=.+ to see the details\."
    r"|Too many journal files \(limit is at \d+\) in scope, ignoring file '.+'\."
    r"|An error was encountered while opening journal file or directory .+, ignoring file: .+)$")


def parse_log(tag: str, arg: str, lines: list[str]) -> tuple[list[Xid], str | None]:
    """XIDs (and NVSwitch SXids) in ``journalctl -k -b -o short-unix``
    (``arg``: the node's epoch seconds) or ``dmesg`` (``arg``: seconds since
    boot) lines, with their age; lines of one code for one device (and MIG
    instance) merge into one record with their count and the latest line,
    so a storm of 100,000 lines is one record. A line cut by a wrapped ring
    buffer that no longer holds a whole XID is not one; a line that is no
    log line is the tool's error."""
    try:
        now = float(arg)
    except ValueError:
        now = None
    if now is not None and not math.isfinite(now):
        now = None
    merged: dict[tuple, Xid] = {}
    errors: list[str] = []
    size = 0
    stamp = _JOURNAL_TIME if tag == "journal" else _DMESG_TIME
    for line in lines:
        m = _XID.search(line)
        s = None if m else _SXID.search(line)
        if m or s:
            t = stamp.match(line)
            age = round(max(0.0, now - float(t.group(1))), 1) if t and now is not None else None
            if m:
                instance = m.group(2).strip() if m.group(2) else None
                key = (False, m.group(1).lower(), instance, int(m.group(3)))
                text = m.group(4).strip()
            else:
                key = (True, s.group(1).lower(), None, int(s.group(2)))
                text = s.group(3).strip()
            have = merged.get(key)
            line = Xid(key[3], key[1], age, text, 1, key[2], key[0])
            if have is None:
                merged[key] = line
            else:  # the log runs oldest first
                merge_line(have, line, age is None or have.age_s is None or age <= have.age_s)
        elif size < _LOG_ERROR_MAX and (
                (tag == "dmesg" and line.startswith("dmesg:"))  # "dmesg: read kernel buffer failed: ..."
                or (tag == "journal" and line.strip() and not stamp.match(line) and "NVRM" not in line
                    and "SXid" not in line and not line.startswith("-- ")  # "No journal files were found."
                    and not _JOURNAL_SKIPS.match(line.strip()))):
            errors.append(line.strip()[:_LOG_ERROR_MAX])
            size += len(errors[-1]) + 2
    return list(merged.values()), ("; ".join(errors)[:_LOG_ERROR_MAX] or None)


_LINK_DOWN = re.compile(r"mlx5_core ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) (\S+): Link down\s*$")


def parse_link_downs(tag: str, arg: str, lines: list[str]) -> list[LinkDown]:
    """mlx5e's ``mlx5_core 0000:01:00.0 enp1s0f0np0: Link down`` lines
    (netdev_info in en_main.c) in the same log as :func:`parse_log`, aged
    the same way."""
    now = numbers.decimal(arg)
    stamp = _JOURNAL_TIME if tag == "journal" else _DMESG_TIME
    downs = []
    for line in lines:
        m = _LINK_DOWN.search(line)
        if m:
            t = stamp.match(line)
            age = round(max(0.0, now - float(t.group(1))), 1) if t and now is not None else None
            downs.append(LinkDown(m.group(2), m.group(1).lower(), age))
    return downs


_NIC_LINE = re.compile(r"mlx5_core ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): (.*)$")


def parse_nic_events(tag: str, arg: str, lines: list[str]) -> list[NicLogEvent]:
    """mlx5_core's fatal lines in the same log as :func:`parse_log`, aged the
    same way; lines of one kind for one function merge into one record."""
    now = numbers.decimal(arg)
    stamp = _JOURNAL_TIME if tag == "journal" else _DMESG_TIME
    merged: dict[tuple[str, str], NicLogEvent] = {}
    for line in lines:
        m = _NIC_LINE.search(line)
        if not m:
            continue
        kind = next((k for k, text in FATAL.items() if text in m.group(2)), None)
        if kind is None:
            continue
        t = stamp.match(line)
        age = round(max(0.0, now - float(t.group(1))), 1) if t and now is not None else None
        key = (m.group(1).lower(), kind)
        have = merged.get(key)
        if have is None:
            merged[key] = NicLogEvent(key[0], kind, age, m.group(2).strip())
        else:
            have.count += 1
            have.age_s, have.text = age, m.group(2).strip()  # the log runs oldest first
    return list(merged.values())


def parse_kernel_events(tag: str, arg: str, lines: list[str]) -> list[KernelEvent]:
    """The host's fatal kernel-log lines (model/host_health.py PATTERNS) in
    the same log as :func:`parse_log`, aged the same way; lines of one kind
    merge into one record with their count and the latest line."""
    now = numbers.decimal(arg)
    stamp = _JOURNAL_TIME if tag == "journal" else _DMESG_TIME
    merged: dict[str, KernelEvent] = {}
    for line in lines:
        kind = match_kernel_line(line)
        if kind is None:
            continue
        t = stamp.match(line)
        age = round(max(0.0, now - float(t.group(1))), 1) if t and now is not None else None
        text = line[t.end():].strip() if t else line.strip()
        if tag == "journal":  # "<host> kernel: text"
            text = text.split(" kernel: ", 1)[-1]
        have = merged.get(kind)
        if have is None:
            merged[kind] = KernelEvent(kind, 1, age, text[:300])
        else:  # the log runs oldest first
            have.count += 1
            have.age_s, have.text = age, text[:300]
    return list(merged.values())


def parse_command_output(lines: list[str]) -> GpuHealthReading:
    """:data:`COMMAND`'s output (the deploy's snapshot and the check's fallback)."""
    reading = GpuHealthReading()
    sections = split(lines)
    parts = {s.tag: s for s in sections}
    errors = [s for s in sections if s.tag == "error"]
    if errors:
        why = " ".join([errors[0].arg, *(x.strip() for x in errors[0].lines)]).strip()
        reading.error = why or "nvidia-smi failed"
    elif "query" in parts:
        try:
            gpus = parse_query(parts["query"].lines)
            links = parse_nvlink(parts.get("nvlinkstatus", _EMPTY).lines, parts.get("nvlinkerrors", _EMPTY).lines)
        except GpuHealthFormatError as exc:
            reading.error = f"unexpected nvidia-smi output: {exc}"
        else:
            for g in gpus:
                g.nvlinks = links.get(g.index) if "nvlinkstatus" in parts else None
            reading.gpus = gpus
    elif parts.get("nvml") is None:
        reading.error = "no nvidia-smi output"
    if "nvml" in parts:
        reading.source = "nvml"
    reading.lost = [x.strip()[:200] for x in parts.get("lost", _EMPTY).lines if x.strip()][:64]
    reading.pci_gpus = [x.strip().lower() for x in parts.get("pcigpus", _EMPTY).lines if x.strip()]
    if "fabricmanager" in parts:
        reading.fabric_manager = next((x.strip() for x in parts["fabricmanager"].lines if x.strip()), "unknown")
    if "uptime" in parts:
        reading.uptime_s = numbers.decimal(parts["uptime"].arg, 0)
    log = parts.get("journal") or parts.get("dmesg")
    if log is not None:
        reading.log_source = "journalctl" if log.tag == "journal" else "dmesg"
        reading.xids, error = parse_log(log.tag, log.arg, log.lines)
        reading.link_downs = parse_link_downs(log.tag, log.arg, log.lines)
        reading.nic_events = parse_nic_events(log.tag, log.arg, log.lines)
        reading.host_events = parse_kernel_events(log.tag, log.arg, log.lines)
        if error:
            reading.log_error = f"{reading.log_source}: {error}"
    elif "logerror" in parts:
        reading.log_error = " ".join(parts["logerror"].lines).strip()
    else:
        reading.log_error = "no kernel log output"
    return reading


class _Empty:
    lines: list[str] = []


_EMPTY = _Empty()


# --- NVML -------------------------------------------------------------------

_FABRIC_STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}  # nvml.h NVML_GPU_FABRIC_STATE_*


def _fabric_info(nvml, h, call):
    """nvmlDeviceGetGpuFabricInfoV (v2 adds healthMask; its constructor sets the version), else the
    older call; None where neither answers (no NVSwitch, an older driver). nvidia-ml-py hands its
    argument to NVML as given: the struct goes by reference (ctypes.byref), as nvml.h's pointer
    parameter asks; passed as is, ctypes would copy it by value and NVML would fill nothing."""
    struct = getattr(nvml, "c_nvmlGpuFabricInfo_v2_t", None)
    if struct is not None:
        info = struct()
        if call("nvmlDeviceGetGpuFabricInfoV", h, ctypes.byref(info)) is not None:
            return info
    return call("nvmlDeviceGetGpuFabricInfo", h)


def _uuid(raw) -> str | None:
    """clusterUuid's 16 bytes as nvidia-smi prints them (8-4-4-4-12, lower case)."""
    if raw is None:
        return None
    data = bytes(raw)
    if len(data) != 16:
        return None
    text = data.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def _nvlink_speed(nvml, h, call) -> float | None:
    """NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON (field 90: the active links' common speed, MB/s) in GB/s."""
    field_id = getattr(nvml, "NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON", 90)
    values = call("nvmlDeviceGetFieldValues", h, [field_id])
    if not values:
        return None
    v = values[0]
    if getattr(v, "nvmlReturn", 1) != 0:
        return None
    mbps = getattr(getattr(v, "value", None), "uiVal", None)
    return mbps / 1000 if isinstance(mbps, int) and mbps > 0 else None


def read_nvml(nvml, lost: list[str] | None = None) -> list[GpuHealth]:
    """The same record through a loaded ``pynvml`` (passed in so tests can
    fake it); a call the GPU does not support leaves its field None. A GPU
    whose handle NVML cannot get (NVML_ERROR_GPU_IS_LOST, Unknown Error) is
    added to ``lost`` and the others are still read."""

    def call(function, *args):
        try:
            return getattr(nvml, function)(*args)
        except Exception:  # NVMLError_NotSupported, a function this pynvml lacks, ...
            return None

    nvml.nvmlInit()
    try:
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
            except Exception as exc:  # a GPU that fell off the bus: the rest are still read
                if lost is None:
                    raise
                lost.append(f"GPU {i} (NVML: {str(exc)[:120] or type(exc).__name__})")
                continue
            pci = call("nvmlDeviceGetPciInfo", h)
            bus = getattr(pci, "busId", None)
            bus = bus.decode() if isinstance(bus, bytes) else bus
            remap = call("nvmlDeviceGetRemappedRows", h) or (None, None, None, None)
            pending = call("nvmlDeviceGetRetiredPagesPendingStatus", h)
            fabric = _fabric_info(nvml, h, call)
            speed = _nvlink_speed(nvml, h, call)
            links = []
            for n in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
                state = call("nvmlDeviceGetNvLinkState", h, n)
                if state is None:
                    continue  # beyond this GPU's links, or no NVLink
                # nvml.h nvmlNvLinkErrorCounter_t: DL_REPLAY 0, DL_RECOVERY 1, DL_CRC_FLIT 2
                replay, recovery, crc = (call("nvmlDeviceGetNvLinkErrorCounter", h, n, getattr(nvml, name, code))
                                         for name, code in (("NVML_NVLINK_ERROR_DL_REPLAY", 0),
                                                            ("NVML_NVLINK_ERROR_DL_RECOVERY", 1),
                                                            ("NVML_NVLINK_ERROR_DL_CRC_FLIT", 2)))
                links.append(NvLink(n, bool(state), replay, recovery, crc, speed if state else None))
            state = _FABRIC_STATES.get(getattr(fabric, "state", None)) if fabric is not None else None
            status = getattr(fabric, "status", None) if fabric is not None else None
            # nvml.h: NVML_MEMORY_ERROR_TYPE_CORRECTED 0, _UNCORRECTED 1; NVML_VOLATILE_ECC 0
            serial = call("nvmlDeviceGetSerial", h)
            serial = serial.decode() if isinstance(serial, bytes) else serial
            gpus.append(GpuHealth(
                index=i, pci=_bdf(bus) if bus else None, serial=serial or None,
                ecc_uncorrectable=call("nvmlDeviceGetTotalEccErrors", h, 1, 0),
                ecc_correctable=call("nvmlDeviceGetTotalEccErrors", h, 0, 0),
                retired_pending=None if pending is None else bool(pending),
                remap_correctable=remap[0], remap_uncorrectable=remap[1],
                remap_pending=None if remap[2] is None else bool(remap[2]),
                remap_failure=None if remap[3] is None else bool(remap[3]),
                pcie_replays=call("nvmlDeviceGetPcieReplayCounter", h),
                fabric_state=state,
                fabric_status=None if state is None else ("Success" if status == 0 else
                                                          str(call("nvmlErrorString", status) or status)),
                clique_id=None if state is None else getattr(fabric, "cliqueId", None),
                cluster_uuid=None if state is None else _uuid(getattr(fabric, "clusterUuid", None)),
                health_mask=None if state is None else getattr(fabric, "healthMask", None),
                nvlinks=links,
            ))
        return gpus
    finally:
        nvml.nvmlShutdown()


def read_log(timeout: float = 20) -> list[str]:
    """:data:`COMMAND_LOG`'s lines here (kernel log, PCI bus, Fabric Manager):
    a shell of its own, bounded, independent of NVML and nvidia-smi."""
    try:
        return local.run(COMMAND_LOG, timeout, "the GPU health probe (kernel log, PCI bus)").splitlines()
    except local.ProbeTimeout as exc:
        return ["@@logerror", str(exc)]


def read_gpus(nvml=None, timeout: float = 20) -> GpuHealthReading:
    """The GPUs' own readings (no kernel log): through pynvml where it
    loads, else ``nvidia-smi -q`` and ``nvlink`` (bounded)."""
    lost: list[str] = []
    try:
        if nvml is None:
            import ctypes

            ctypes.CDLL("libnvidia-ml.so.1")
            import pynvml as nvml
        gpus = read_nvml(nvml, lost)
    except Exception:  # NVML cannot load: nvidia-smi answers instead
        gpus = None
    if gpus is not None:
        return GpuHealthReading(gpus=gpus, source="nvml", lost=lost)
    try:
        lines = local.run(nvsmi_command(bound=False), timeout, "the GPU health probe (nvidia-smi -q)").splitlines()
    except local.ProbeTimeout as exc:
        lines = ["@@error", str(exc)]
    return parse_command_output(lines)


def join(gpus: GpuHealthReading, log: list[str] | None) -> GpuHealthReading:
    """One reading from the GPUs' part and :data:`COMMAND_LOG`'s lines
    (None: the log read did not finish)."""
    reading = parse_command_output(log if log is not None else ["@@logerror", "the kernel log probe did not finish"])
    reading.gpus, reading.error, reading.source, reading.lost = gpus.gpus, gpus.error, gpus.source, gpus.lost
    return reading
