"""The GPU-to-NIC data path as the node shows it: PCI functions of GPUs and
RDMA NICs with their bridges, ACS and Device Control registers, IOMMU
state, peer memory, driver and firmware versions, port error counters.

One read-only shell snippet (:data:`COMMAND`) prints marked sections
(:mod:`ccrhost.probes.sections`); :func:`parse_pci_dump` turns them into a
:class:`PciSnapshot`. Registers are read with ``setpci`` when it is
installed, else from ``lspci -vvv``, else not at all (both need root for
the extended config space). Formats and paths: reference gdr.md; each
parser names its source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ccrhost.model import datapath
from ccrhost.model.datapath import ACS_NAMES, HostVersions, Iommu, PeerMemory
from ccrhost.model.ports import natural_key
from ccrhost.model.topology import (
    BDF_RE,
    Endpoint,
    Pair,
    TopologyError,
    pair,
    split_path,
)
from ccrhost.probes import sysfs
# at the top, not in the parser: `ccrhost check` parses in a reader thread,
# and a module imported there would define its dataclasses beside the main
# thread's imports (ccrhost.node.gather)
from ccrhost.probes.kernel import module_name
from ccrhost.probes.sections import split


class PciFormatError(ValueError):
    """Probe output that is not in the format the source prints."""


IB_ROOT = "/sys/class/infiniband"
PCI_DEVICES = "/sys/bus/pci/devices"
# NCCL's proof that a peer-memory client is registered (net_ib/gdr.cc), and
# the legacy module's own directory.
PEERMEM_FILES = {
    "/sys/kernel/mm/memory_peers/nv_mem/version": "nv_mem",
    "/sys/kernel/mm/memory_peers/nv_mem_nc/version": "nv_mem_nc",
    "/sys/module/nvidia_peermem/version": "nvidia_peermem",
    "/sys/module/nv_peer_mem": "nv_peer_mem",
}
GPU_VENDOR = 0x10de
GPU_CLASSES = (0x0302, 0x0300)  # 3D controller, VGA compatible controller

_COUNTER_FILES = " ".join(f"*/ports/*/counters/{c}" for c in datapath.COUNTERS)

# Every bridge of a GPU's or NIC's resolved path is listed once, then the
# function itself. ACS is read on the bridges (the checks judge the bridges
# peer traffic crosses) and Device Control on the NICs, with setpci runs
# that each cover every function: the extended capability list is walked
# one hop per run from 0x100 (a header of all ones: the space could not be
# read; zero or a next pointer of 0: the end), then ACS Capability and
# Control are read where ACS was found. A named register (ECAP_ACS) would
# make setpci exit at the first function without it, so one run per
# function; a node has some fifty.
COMMAND = f"""P={PCI_DEVICES}
echo @@kernel
# read, a builtin: a process fewer for each line (the check runs this on every job start)
{{ read -r K < /proc/sys/kernel/osrelease; }} 2>/dev/null || K=$(uname -r)
echo "$K"
uname -m
echo @@cmdline
{{ read -r _l < /proc/cmdline && echo "$_l"; }} 2>/dev/null
echo @@iommu_units
ls -1 /sys/class/iommu 2>/dev/null
echo @@iommu_groups
for g in /sys/kernel/iommu_groups/*; do
[ -d "$g" ] || continue; _t=; {{ read -r _t < "$g/type"; }} 2>/dev/null; echo "${{g##*/}} $_t"
done
echo @@tools
S=; L=
command -v setpci >/dev/null 2>&1 && S=1 && echo setpci
command -v lspci >/dev/null 2>&1 && L=1 && echo lspci
seen=' '; B=; N=
# a folder's resolved path, like readlink -f, without a process per call
rp() {{ _r=; cd -P "$1" 2>/dev/null && _r=$PWD; cd /; }}
dev() {{
case "$seen" in *" $1 "*) return 0;; esac
seen="$seen$1 "
_d=$P/$1
echo "@@dev $1"
echo "role $2"
rp "$_d"; echo "path $_r"
for _f in class vendor device numa_node; do _v=; {{ read -r _v < "$_d/$_f"; }} 2>/dev/null; echo "$_f $_v"; done
rp "$_d/iommu_group"; [ -n "$_r" ] && echo "iommu_group ${{_r##*/}}"
if [ -n "$S" ]; then
case "$2" in bridge) B="$B $1";; nic*) N="$N $1";; esac
elif [ -n "$L" ]; then
echo "@@lspci $1"
lspci -D -vvv -s "$1" 2>&1
fi
}}
chain() {{
rp "$P/$1"; _p=$_r
case "$_p" in /sys/devices/pci*) ;; *) return 0;; esac
_o=$IFS; IFS=/
for _c in ${{_p#/sys/devices/pci*/}}; do
IFS=$_o
[ "$_c" = "$1" ] || dev "$_c" bridge
done
IFS=$_o
dev "$1" "$2"
}}
for x in $P/*; do
[ -e "$x/class" ] || continue
_v=; _c=; {{ read -r _v < "$x/vendor"; }} 2>/dev/null; {{ read -r _c < "$x/class"; }} 2>/dev/null
case "$_v:$_c" in
0x10de:0x0302*|0x10de:0x0300*) chain "${{x##*/}}" gpu;;
esac
done
for i in {IB_ROOT}/*; do
rp "$i/device"; [ -n "$_r" ] && chain "${{_r##*/}}" "nic ${{i##*/}}"
done
if [ -n "$S" ]; then
echo @@acs
todo=; found=; hops=0
for b in $B; do todo="$todo $b=256"; done
while [ -n "$todo" ] && [ $hops -lt 48 ]; do
hops=$((hops + 1))
# one subshell per hop, not one per device (a fork each)
a=$(for t in $todo; do printf ' -s %s %x.l' "${{t%=*}}" "${{t#*=}}"; done)
if ! o=$(setpci $a 2>&1); then
for t in $todo; do echo "${{t%=*}} error $(echo "$o" | tr '\n' ' ')"; done; todo=; break
fi
set -- $o; nx=
for t in $todo; do
b=${{t%=*}}; w=${{1:-}}; [ $# -gt 0 ] && shift
case "$w" in
ffffffff) echo "$b unreadable";;
00000000) echo "$b none";;
*) if [ $((0x$w & 0xffff)) -eq 13 ]; then found="$found $t"
elif [ $(((0x$w >> 20) & 0xffc)) -ge 256 ]; then nx="$nx $b=$(((0x$w >> 20) & 0xffc))"
else echo "$b none"; fi;;
esac
done
todo=$nx
done
for t in $todo; do echo "${{t%=*}} error capability list does not end"; done
a=$(for t in $found; do printf ' -s %s %x.w %x.w' "${{t%=*}}" $((${{t#*=}} + 4)) $((${{t#*=}} + 6)); done)
if [ -n "$a" ]; then
if o=$(setpci $a 2>&1); then
set -- $o
for t in $found; do echo "${{t%=*}} ${{1:-}} ${{2:-}}"; [ $# -gt 1 ] && shift 2; done
else
for t in $found; do echo "${{t%=*}} error $(echo "$o" | tr '\n' ' ')"; done
fi
fi
echo @@devctl
a=
for n in $N; do a="$a -s $n CAP_EXP+0x8.w"; done
if [ -n "$a" ] && o=$(setpci $a 2>&1); then
set -- $o
for n in $N; do echo "$n ${{1:-}}"; [ $# -gt 0 ] && shift; done
else
for n in $N; do echo "$n $(setpci -s "$n" CAP_EXP+0x8.w 2>&1 | tr '\n' ' ')"; done
fi
fi
echo @@peermem
for f in {' '.join(PEERMEM_FILES)}; do [ -e "$f" ] && echo "$f"; done
echo @@shipped
cut -d: -f1 "/lib/modules/$K/modules.dep" 2>/dev/null | grep -E '(nvidia[-_]peermem|nv_peer_mem)[.]ko'
echo @@nvidia
cat /proc/driver/nvidia/version 2>/dev/null
echo @@modinfo
if [ ! -e /proc/driver/nvidia/version ] && command -v modinfo >/dev/null 2>&1; then
modinfo nvidia 2>/dev/null | grep -E '^(version|license):'
fi
echo @@mlx5
{{ read -r _l < /sys/module/mlx5_core/version && echo "$_l"; }} 2>/dev/null
echo @@ib
if cd {IB_ROOT} 2>/dev/null; then
grep -Hs '' */fw_ver */hca_type */board_id */node_guid {_COUNTER_FILES}
fi
true"""


# --- records -------------------------------------------------------------

@dataclass(frozen=True)
class AcsControl:
    present: bool           # False: no ACS extended capability (setpci's "not found" / no ACSCtl line)
    cap: int | None         # ACS Capability register: setpci ECAP_ACS+0x4.w, lspci "ACSCap:"
    ctl: int | None         # ACS Control register: setpci ECAP_ACS+0x6.w, lspci "ACSCtl:"
    error: str | None = None  # why it could not be read (e.g. not root)

    @property
    def redirect(self) -> bool:
        return bool(self.ctl is not None and self.ctl & datapath.ACS_REDIRECT)


@dataclass(frozen=True)
class DevCtl:
    word: int | None        # PCIe Device Control: setpci CAP_EXP+0x8.w; from lspci only its decoded fields
    max_payload: int | None     # bytes, lspci "MaxPayload N bytes" under DevCtl
    max_read_req: int | None    # bytes, lspci "MaxReadReq N bytes"
    relaxed_ordering: bool | None  # lspci "RlxdOrd+"
    error: str | None = None


@dataclass(frozen=True)
class PciFunction:
    bdf: str                   # the /sys/bus/pci/devices/<bdf> entry
    role: str                  # "gpu", "nic" or "bridge": why the snippet listed it
    ibdev: str | None          # /sys/class/infiniband/<ibdev>/device resolves to this function
    path: str                  # readlink -f /sys/bus/pci/devices/<bdf>
    class_code: int | None     # .../class (0x030200)
    vendor: int | None         # .../vendor
    device: int | None         # .../device
    numa_node: int | None      # .../numa_node; -1 (no NUMA information) -> None
    iommu_group: str | None    # basename of readlink .../iommu_group
    acs: AcsControl | None = None   # None: no register tool on the node
    devctl: DevCtl | None = None    # NICs only

    @property
    def bridges(self) -> tuple[str, ...]:
        return split_path(self.path, self.bdf)[1]

    def endpoint(self, name: str | None = None) -> Endpoint:
        return Endpoint(name or self.ibdev or self.bdf, self.bdf, self.path, self.numa_node)


@dataclass(frozen=True)
class NvidiaDriver:
    version: str | None     # "565.57.01": /proc/driver/nvidia/version or modinfo's "version:"
    open: bool              # "Open Kernel Module" / modinfo license "Dual MIT/GPL"
    source: str             # "/proc/driver/nvidia/version" or "modinfo nvidia"


@dataclass(frozen=True)
class NicInfo:
    fw_ver: str | None = None        # /sys/class/infiniband/<dev>/fw_ver
    hca_type: str | None = None      # .../hca_type
    board_id: str | None = None      # .../board_id
    node_guid: str | None = None     # .../node_guid ("%04x:%04x:%04x:%04x"): this very NIC, whatever its firmware
    # .../ports/<n>/counters/<name> for the six error counters
    counters: dict[int, dict[str, int]] = field(default_factory=dict)


@dataclass
class PciSnapshot:
    kernel_release: str | None           # uname -r
    machine: str | None                  # uname -m
    tools: tuple[str, ...]               # setpci / lspci found by command -v
    functions: dict[str, PciFunction]    # every GPU, NIC and bridge on their paths
    iommu: Iommu
    peer: PeerMemory
    nvidia: NvidiaDriver | None
    mlx5_version: str | None             # /sys/module/mlx5_core/version (MLNX_OFED); None: inbox driver
    nics: dict[str, NicInfo]             # per RDMA device
    # pairs() by exclude list: the ACS stage, the boot unit and the
    # verification each ask, and the pairing is the dearest part of a host
    _pairs: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def gpus(self) -> list[Endpoint]:
        """GPUs in PCI order, named as nvidia-smi numbers them (GPU0...)."""
        found = sorted((f for f in self.functions.values() if f.role == "gpu"), key=lambda f: f.bdf)
        return [f.endpoint(f"GPU{i}") for i, f in enumerate(found)]

    def nic_endpoints(self, exclude: tuple[str, ...] = ()) -> list[Endpoint]:
        import fnmatch

        found = [f for f in self.functions.values() if f.role == "nic"
                 and not any(fnmatch.fnmatchcase(f.ibdev or "", p) for p in exclude)]
        return [f.endpoint() for f in sorted(found, key=lambda f: natural_key(f.ibdev or f.bdf))]

    def pairs(self, exclude: tuple[str, ...] = ()) -> list[Pair]:
        key = tuple(exclude)
        if key not in self._pairs:
            self._pairs[key] = pair(self.gpus(), self.nic_endpoints(exclude))
        return list(self._pairs[key])

    def acs_ctl(self) -> dict[str, int | None]:
        """Function -> ACS Control for those with the capability; None where
        it could not be read (no setpci/lspci, not root): those may have it."""
        out: dict[str, int | None] = {}
        for bdf, f in self.functions.items():
            if f.role != "bridge":
                continue  # peer traffic's detour is decided by the bridges it crosses
            if f.acs is None or f.acs.error is not None:
                out[bdf] = None
            elif f.acs.present:
                out[bdf] = f.acs.ctl
        return out

    def devctl(self) -> dict[str, int | None]:
        return {b: (f.devctl.word if f.devctl and f.devctl.error is None else None)
                for b, f in self.functions.items() if f.role == "nic"}

    def counters(self) -> dict[str, dict[str, int]]:
        """``{"mlx5_0/1": {counter: value}}``, the input of check_link_health."""
        return {f"{dev}/{port}": values for dev, info in self.nics.items()
                for port, values in sorted(info.counters.items())}

    def datapath(self, exclude: tuple[str, ...] = (), link: datapath.LinkWindow | None = None,
                 gpudirect_bw: datapath.GpuDirectBandwidth | None = None) -> datapath.DatapathReading:
        """The verification's reading; ``exclude``: RDMA devices that are not
        compute fabric (not paired, not judged)."""
        nics = self.nic_endpoints(exclude)
        return datapath.DatapathReading(
            peer=self.peer, gpus=self.gpus(), nics=nics, pairs=self.pairs(exclude), acs_ctl=self.acs_ctl(),
            iommu=self.iommu, versions=self.versions(), link=link, gpudirect_bw=gpudirect_bw)

    def compute_counters(self, exclude: tuple[str, ...] = ()) -> dict[str, dict[str, int]]:
        """:meth:`counters` of the compute NICs only."""
        return only_compute(self.counters(), exclude)

    def versions(self) -> HostVersions:
        fw = {d: n.fw_ver for d, n in self.nics.items() if n.fw_ver}
        model = {d: (n.board_id or n.hca_type) for d, n in self.nics.items() if n.board_id or n.hca_type}
        mlx5 = self.mlx5_version or (f"inbox {self.kernel_release}" if self.nics and self.kernel_release else None)
        guids = {d: n.node_guid for d, n in self.nics.items() if n.node_guid}
        return HostVersions(nic_fw=fw, nic_model=model, mlx5=mlx5,
                            nvidia=self.nvidia.version if self.nvidia else None, nic_guid=guids)


# --- parsers, one per source format --------------------------------------

_HEX4 = re.compile(r"^[0-9a-f]{4}$")
# setpci.c exec_op(): die("%s: Instance #%d of %s %04x not found - there are no capabilities with that id.")
_SETPCI_NOCAP = re.compile(r"Instance #\d+ of (Extended capability|Capability) [0-9a-f]{4} not found")


def parse_setpci_words(text: str) -> list[int]:
    """setpci register reads: one ``%04x`` (``.w``) per line, e.g. ``0000``."""
    words = text.split()
    if not words or not all(_HEX4.match(w) for w in words):
        raise PciFormatError(f"expected setpci word values (4 hex digits each), got {text.strip()!r}")
    return [int(w, 16) for w in words]


def parse_setpci_acs(text: str) -> AcsControl:
    """``setpci -s BDF ECAP_ACS+0x4.w ECAP_ACS+0x6.w`` (stdout and stderr):
    ``005f 001d``, or setpci's error when the function has no ACS."""
    text = text.strip()
    if _SETPCI_NOCAP.search(text):
        return AcsControl(False, None, None)
    if text.startswith("setpci:") or not text:
        return AcsControl(False, None, None, error=text or "setpci printed nothing")
    words = parse_setpci_words(text)
    if len(words) != 2:
        raise PciFormatError(f"expected the ACS capability and control words, got {text!r}")
    return AcsControl(True, words[0], words[1])


def devctl_from_word(word: int) -> DevCtl:
    return DevCtl(word, datapath.devctl_max_payload(word), datapath.devctl_max_read_req(word),
                  bool(word & datapath.DEVCTL_RELAXED))


def parse_setpci_devctl(text: str) -> DevCtl:
    """``setpci -s BDF CAP_EXP+0x8.w``: the Device Control word."""
    text = text.strip()
    if text.startswith("setpci:") or not text:
        return DevCtl(None, None, None, None, error=text or "setpci printed nothing")
    words = parse_setpci_words(text)
    if len(words) != 1:
        raise PciFormatError(f"expected one Device Control word, got {text!r}")
    return devctl_from_word(words[0])


_ACS_LINE = re.compile(r"^\s*ACS(Cap|Ctl):\s*(.*?)\s*$")


def parse_acs_flags(text: str) -> int:
    """``SrcValid+ TransBlk- ReqRedir+ ...`` (ls-ecaps.c cap_acs()) -> the word."""
    flags = dict(re.findall(r"([A-Za-z]+)([+-])", text))
    if set(flags) != set(ACS_NAMES.values()):
        raise PciFormatError(f"expected lspci's seven ACS flags, got {text!r}")
    return sum(bit for bit, name in ACS_NAMES.items() if flags[name] == "+")


def parse_lspci_acs(lines: list[str]) -> AcsControl:
    """ACS from one device's ``lspci -vvv`` lines: ``ACSCap:``/``ACSCtl:``.
    Without root lspci prints ``Capabilities: <access denied>``."""
    if any("<access denied>" in line for line in lines):
        return AcsControl(False, None, None, error="lspci: capabilities <access denied> (needs root)")
    cap = ctl = None
    for line in lines:
        match = _ACS_LINE.match(line)
        if match:
            word = parse_acs_flags(match.group(2))
            if match.group(1) == "Cap":
                cap = word
            else:
                ctl = word
    if ctl is None:
        if cap is not None:
            raise PciFormatError("lspci printed ACSCap without ACSCtl")
        return AcsControl(False, None, None)
    return AcsControl(True, cap, ctl)


_DEVCTL_SIZES = re.compile(r"MaxPayload ([0-9]+) bytes, MaxReadReq ([0-9]+) bytes")
_RLXD = re.compile(r"RlxdOrd([+-])")


def parse_lspci_devctl(lines: list[str]) -> DevCtl | None:
    """Device Control from ``lspci -vvv`` (ls-caps.c cap_express_dev()): the
    ``DevCtl:`` line and its continuation lines, in the current wording and
    the older ``Report errors:`` one. None when there is no DevCtl."""
    if any("<access denied>" in line for line in lines):
        return DevCtl(None, None, None, None, error="lspci: capabilities <access denied> (needs root)")
    for i, line in enumerate(lines):
        if "DevCtl:" not in line:
            continue
        block = " ".join(lines[i:i + 4])
        block = block.split("DevSta:")[0]
        sizes, rlxd = _DEVCTL_SIZES.search(block), _RLXD.search(block)
        if not sizes or not rlxd:
            raise PciFormatError(f"DevCtl without MaxPayload/MaxReadReq/RlxdOrd: {block.strip()!r}")
        payload, readrq = int(sizes.group(1)), int(sizes.group(2))
        if payload not in datapath.READ_REQ_SIZES or readrq not in datapath.READ_REQ_SIZES:
            raise PciFormatError(f"DevCtl sizes {payload}/{readrq} are not powers of two in 128..4096")
        relaxed = rlxd.group(1) == "+"
        word = (datapath.READ_REQ_SIZES.index(readrq) << 12 | datapath.READ_REQ_SIZES.index(payload) << 5
                | (datapath.DEVCTL_RELAXED if relaxed else 0))
        return DevCtl(word, payload, readrq, relaxed)
    return None


_NVRM = re.compile(r"^NVRM version: NVIDIA UNIX (Open )?.*?Kernel Module\b(.*)$")


def parse_nvidia_version(text: str) -> NvidiaDriver | None:
    """``/proc/driver/nvidia/version``: ``NVRM version: NVIDIA UNIX Open
    Kernel Module for x86_64  565.57.01  Release Build ...`` (open) or
    ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  515.76  ...``. The
    version is the first dotted number after "Module". None: no file."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    match = _NVRM.match(lines[0].strip())
    if not match:
        raise PciFormatError(f"expected 'NVRM version: NVIDIA UNIX ... Kernel Module ...', got {lines[0]!r}")
    version = re.search(r"\b([0-9]+(?:\.[0-9]+)+)\b", match.group(2))  # ASCII: \d takes "٥"
    if not version:
        raise PciFormatError(f"no driver version after 'Kernel Module' in {lines[0]!r}")
    return NvidiaDriver(version.group(1), bool(match.group(1)), "/proc/driver/nvidia/version")


def parse_modinfo(lines: list[str]) -> NvidiaDriver | None:
    """``modinfo nvidia`` lines ``version:        590.44.01`` and
    ``license:        Dual MIT/GPL`` (open) or ``NVIDIA`` (proprietary)."""
    info = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("version", "license"):
            info[key.strip()] = value.strip()
    if not info:
        return None
    if "version" not in info or not re.fullmatch(r"[0-9]+(\.[0-9]+)+", info["version"]):
        raise PciFormatError(f"modinfo nvidia without a dotted version: {info!r}")
    return NvidiaDriver(info["version"], info.get("license") == "Dual MIT/GPL", "modinfo nvidia")


def parse_iommu_groups(lines: list[str]) -> dict[str, str | None]:
    """``<group> <type>`` per /sys/kernel/iommu_groups/<group> (type empty
    before kernel 5.11)."""
    out: dict[str, str | None] = {}
    for line in lines:
        group, _, kind = line.strip().partition(" ")
        if not group:
            continue
        if not (group.isascii() and group.isdigit()):
            raise PciFormatError(f"iommu group {group!r} is not a number")
        kind = kind.strip()
        if kind and kind not in ("identity", "DMA", "DMA-FQ", "blocked", "unmanaged"):
            raise PciFormatError(f"iommu group {group} type {kind!r}: expected identity, DMA or DMA-FQ")
        out[group] = kind or None
    return out


def parse_peermem(lines: list[str]) -> tuple[str, ...]:
    """Which of :data:`PEERMEM_FILES` exist."""
    out = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        if line not in PEERMEM_FILES:
            raise PciFormatError(f"unexpected peer-memory path {line!r}")
        out.append(PEERMEM_FILES[line])
    return tuple(out)


def parse_shipped(lines: list[str]) -> tuple[str, ...]:
    """modules.dep entries (``updates/dkms/nvidia-peermem.ko.zst``) -> names."""
    return tuple(sorted({module_name(line) for line in lines if line.strip()}))


def parse_ib(lines: list[str]) -> dict[str, NicInfo]:
    """``grep -H ''`` of fw_ver, hca_type, board_id and the error counters,
    relative to /sys/class/infiniband."""
    raw: dict[str, dict] = {}
    for path, values in sysfs.split_dump(lines).items():
        parts = path.split("/")
        text = " ".join(values).strip()
        entry = raw.setdefault(parts[0], {"counters": {}})
        if len(parts) == 2 and parts[1] in ("fw_ver", "hca_type", "board_id", "node_guid"):
            entry[parts[1]] = text or None
        elif len(parts) == 5 and parts[1] == "ports" and parts[3] == "counters" and parts[4] in datapath.COUNTERS:
            if not (parts[2].isascii() and parts[2].isdigit()):  # isdigit() alone takes "²"
                raise PciFormatError(f"{path}: port {parts[2]!r} is not a number")
            if not (text.isascii() and text.isdigit()):
                continue  # "N/A (no PMA)": unreadable, not a reading
            entry["counters"].setdefault(int(parts[2]), {})[parts[4]] = int(text)
    return {dev: NicInfo(v.get("fw_ver"), v.get("hca_type"), v.get("board_id"), v.get("node_guid"),
                         v["counters"])
            for dev, v in sorted(raw.items(), key=lambda kv: natural_key(kv[0]))}


def parse_acs_walk(lines: list[str]) -> dict[str, AcsControl]:
    """The ``@@acs`` section: per bridge ``BDF CAP CTL`` (setpci words at
    the ACS capability's +0x4 and +0x6), ``BDF none`` (the extended
    capability list has no ACS), ``BDF unreadable`` (its header read as
    all ones) or ``BDF error <setpci's message>``."""
    out: dict[str, AcsControl] = {}
    for line in lines:
        bdf, _, rest = line.strip().partition(" ")
        if not bdf:
            continue
        if not BDF_RE.match(bdf):
            raise PciFormatError(f"ACS reading for {bdf!r}, which is not a PCI address")
        if rest == "none":
            out[bdf] = AcsControl(False, None, None)
        elif rest == "unreadable":
            out[bdf] = AcsControl(False, None, None, error="the extended config space reads as all ones "
                                                           "(setpci needs root)")
        elif rest.startswith("error"):
            out[bdf] = AcsControl(False, None, None, error=rest[len("error"):].strip() or "setpci failed")
        else:
            words = parse_setpci_words(rest)
            if len(words) != 2:
                raise PciFormatError(f"{bdf}: expected the ACS capability and control words, got {rest!r}")
            out[bdf] = AcsControl(True, words[0], words[1])
    return out


def parse_devctl_batch(lines: list[str]) -> dict[str, DevCtl]:
    """The ``@@devctl`` section: ``BDF WORD`` per NIC, or ``BDF`` and
    setpci's error."""
    out = {}
    for line in lines:
        bdf, _, rest = line.strip().partition(" ")
        if bdf:
            if not BDF_RE.match(bdf):
                raise PciFormatError(f"Device Control reading for {bdf!r}, which is not a PCI address")
            out[bdf] = parse_setpci_devctl(rest)
    return out


def _hex(bdf: str, key: str, value: str) -> int | None:
    if not value:
        return None
    # sysfs prints "0x%04x"/"0x%06x"; int(x, 16) alone would take "١٥b3", "15_b3" and "-1"
    if not re.fullmatch(r"(?:0x)?[0-9a-fA-F]{1,8}", value):
        raise PciFormatError(f"{bdf}: {key} {value!r} is not a hex number")
    return int(value, 16)


def parse_function(bdf: str, lines: list[str], lspci: list[str] | None = None) -> PciFunction:
    """One ``@@dev <bdf>`` section (``key value`` lines) and, without
    setpci, the function's ``lspci -vvv`` output."""
    if not BDF_RE.match(bdf):
        raise PciFormatError(f"{bdf!r} is not a PCI address (dddd:bb:dd.f)")
    info: dict[str, str] = {}
    for line in lines:
        key, _, value = line.strip().partition(" ")
        if key:
            info[key] = value.strip()
    role, _, ibdev = info.get("role", "").partition(" ")
    if role not in ("gpu", "nic", "bridge"):
        raise PciFormatError(f"{bdf}: role {info.get('role')!r}: expected gpu, nic or bridge")
    path = info.get("path", "")
    try:
        split_path(path, bdf)
    except TopologyError as exc:
        raise PciFormatError(str(exc)) from None
    numa = info.get("numa_node", "")
    if numa and not re.fullmatch(r"-?[0-9]+", numa):
        raise PciFormatError(f"{bdf}: numa_node {numa!r} is not a number")
    acs = devctl = None
    if "acs" in info:
        acs = parse_setpci_acs(info["acs"])
    if "devctl" in info:
        devctl = parse_setpci_devctl(info["devctl"])
    if lspci is not None:
        acs = parse_lspci_acs(lspci)
        devctl = parse_lspci_devctl(lspci) if role == "nic" else None
    return PciFunction(
        bdf=bdf, role=role, ibdev=ibdev or None, path=path,
        class_code=_hex(bdf, "class", info.get("class", "")), vendor=_hex(bdf, "vendor", info.get("vendor", "")),
        device=_hex(bdf, "device", info.get("device", "")),
        numa_node=int(numa) if numa and int(numa) >= 0 else None,
        iommu_group=info.get("iommu_group") or None, acs=acs, devctl=devctl,
    )


def parse_pci_dump(lines: list[str]) -> PciSnapshot:
    """The snippet's whole output -> :class:`PciSnapshot`."""
    sections = split(lines)
    one: dict[str, list[str]] = {}
    devs: dict[str, list[str]] = {}
    lspci: dict[str, list[str]] = {}
    for s in sections:
        if s.tag == "dev":
            devs[s.arg] = s.lines
        elif s.tag == "lspci":
            lspci[s.arg] = s.lines
        else:
            one.setdefault(s.tag, []).extend(s.lines)
    kernel = [x.strip() for x in one.get("kernel", []) if x.strip()]
    functions = {bdf: parse_function(bdf, body, lspci.get(bdf)) for bdf, body in devs.items()}
    for bdf, acs in parse_acs_walk(one.get("acs", [])).items():
        if bdf in functions:
            functions[bdf] = replace(functions[bdf], acs=acs)
    for bdf, word in parse_devctl_batch(one.get("devctl", [])).items():
        if bdf in functions:
            functions[bdf] = replace(functions[bdf], devctl=word)
    cmdline = " ".join(x.strip() for x in one.get("cmdline", []) if x.strip())
    nvidia = parse_nvidia_version("\n".join(one.get("nvidia", []))) or parse_modinfo(one.get("modinfo", []))
    mlx5 = " ".join(x.strip() for x in one.get("mlx5", []) if x.strip()) or None
    if mlx5 is not None and len(mlx5.split()) != 1:
        raise PciFormatError(f"/sys/module/mlx5_core/version: expected one version word, got {mlx5!r}")
    iommu = Iommu(
        units=tuple(sorted(x.strip() for x in one.get("iommu_units", []) if x.strip())),
        group_types=parse_iommu_groups(one.get("iommu_groups", [])),
        device_groups={b: f.iommu_group for b, f in functions.items() if f.iommu_group},
        cmdline=cmdline, arch=kernel[1] if len(kernel) > 1 else None,
    )
    peer = PeerMemory(
        loaded=parse_peermem(one.get("peermem", [])), shipped=parse_shipped(one.get("shipped", [])),
        kernel_release=kernel[0] if kernel else None,
        nvidia_version=nvidia.version if nvidia else None, nvidia_open=nvidia.open if nvidia else None,
    )
    return PciSnapshot(
        kernel_release=kernel[0] if kernel else None, machine=kernel[1] if len(kernel) > 1 else None,
        tools=tuple(x.strip() for x in one.get("tools", []) if x.strip()),
        functions=dict(sorted(functions.items())), iommu=iommu, peer=peer, nvidia=nvidia,
        mlx5_version=mlx5, nics=parse_ib(one.get("ib", [])),
    )


# The error counters alone, for the second reading of a window: the
# snapshot holds the first. ``{delay}`` seconds pass on the node first.
COUNTERS_COMMAND = f"""sleep {{delay}}
echo @@ib
if cd {IB_ROOT} 2>/dev/null; then
grep -Hs '' {_COUNTER_FILES}
fi
true"""


def counters_command(delay: float = 0) -> str:
    return COUNTERS_COMMAND.format(delay=f"{max(delay, 0):.1f}")


def parse_counters(lines: list[str]) -> dict[str, dict[str, int]]:
    """:data:`COUNTERS_COMMAND`'s output -> ``{"mlx5_0/1": {counter: value}}``."""
    ib = [x for s in split(lines) if s.tag == "ib" for x in s.lines]
    return {f"{dev}/{port}": values for dev, info in parse_ib(ib).items()
            for port, values in sorted(info.counters.items())}


def only_compute(counters: dict[str, dict[str, int]], exclude: tuple[str, ...] = ()) -> dict:
    import fnmatch

    return {port: v for port, v in counters.items()
            if not any(fnmatch.fnmatchcase(port.split("/")[0], p) for p in exclude)}


def read_local(timeout: float = 20) -> PciSnapshot:
    """Run the snippet on this machine (``ccrhost check``); a snippet still
    running after ``timeout`` s is killed (``local.ProbeTimeout``)."""
    from ccrhost.probes import local

    return parse_pci_dump(local.run(COMMAND, timeout, "the PCI probe (setpci, sysfs)").splitlines())
