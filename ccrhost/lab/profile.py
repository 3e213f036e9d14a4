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
import re
import uuid
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ccrhost.lab import gemm as lab_gemm
from ccrhost.lab import host_health as lab_host_health
from ccrhost.lab import rack as lab_rack
from ccrhost.lab import reach as lab_reach
from ccrhost.lab import pcie


class ProfileError(ValueError):
    pass


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Version 1 is the format before versioning (no format_version key); 2 adds
# what a capture of a real node needs (see FORMAT_2_KEYS). A profile written
# by a newer ccrhost is refused rather than half understood.
FORMAT_VERSION = 2
FORMAT_2_KEYS = {
    "": {"capture", "pci_functions", "iommu_units", "kernel_cmdline", "nvlink_rack", "hugepages"},
    "nic_defaults": {"hca_type", "mtu", "rate", "qos"},
    "nics": {"link_layer", "rate_gbps", "rate", "pcie", "fw_ver", "board_id", "hca_type", "mtu", "qos",
             "gids"},
    "gpus": {"uuids", "serials"},
}


class Pcie(_Model):
    speed_gts: float = Field(32.0, gt=0)
    width: int = Field(16, ge=1, le=32)
    # Device Control at boot (firmware/BIOS default; the tuning may raise it)
    max_read_req: Literal[128, 256, 512, 1024, 2048, 4096] = 512
    relaxed_ordering: bool = True


DEFAULT_BUFFERS = [262016, 0, 0, 0, 0, 0, 0, 0]  # mlx5 at power-on, as the lab's shims start


class QosBoot(_Model):
    """A port's DCB state at power-on: the driver's defaults, or what DCBX
    or the firmware configured. The lab's mlnx_qos and dcb start from it."""
    dscp2prio: dict[int, int] = {}         # DSCP app entries; empty: trust pcp
    pfc: list[int] = [0] * 8               # PFC enabled per priority
    cable_len: int = Field(7, ge=0, lt=1000)  # metres (dcb pfc delay)
    buffer_size: list[int] = DEFAULT_BUFFERS
    prio2buffer: list[int] = [0] * 8
    port_buffer: int = Field(4151520, gt=0)   # mlnx_qos max_buffer_size / dcb buffer total-size
    # OFED ecn/ files (roce_rp/..., roce_np/...) and their values; None: the lab's default set
    ecn: dict[str, int] | None = None

    @model_validator(mode="after")
    def _ranges(self):
        for key, top in (("pfc", 1), ("prio2buffer", 7), ("buffer_size", 1 << 30)):
            values = getattr(self, key)
            if len(values) != 8 or not all(0 <= v <= top for v in values):
                raise ValueError(f"{key} needs 8 values, each 0..{top}")
        for dscp, prio in self.dscp2prio.items():
            if not (0 <= dscp <= 63 and 0 <= prio <= 7):
                raise ValueError(f"dscp2prio {dscp}: {prio}: DSCP 0..63 to priority 0..7")
        for key in self.ecn or {}:
            if not re.fullmatch(r"roce_(rp|np)/[a-z0-9_]+(/[0-7])?", key):
                raise ValueError(f"ecn file {key!r}: expected roce_rp/NAME, roce_np/NAME or roce_xx/enable/PRIO")
        return self


RATE_RE = r"^\d+(\.\d+)? Gb/sec \(\d+X [A-Z]+\)$"


# "Unknown": an AWS EFA device (the efa driver gives no link layer; core
# sysfs.c link_layer_show prints "Unknown"). Its port files are the driver's
# constants (efa_verbs.c efa_query_port), its link is the netdev's.
LinkLayer = Literal["Ethernet", "InfiniBand", "Unknown"]
EFA = "Unknown"


class NicDefaults(_Model):
    link_layer: LinkLayer = "Ethernet"
    rate_gbps: int = 400
    rate: str | None = Field(None, pattern=RATE_RE)  # the port's rate file verbatim; None: from rate_gbps
    pcie: Pcie = Pcie()
    fw_ver: str = Field("28.39.3560", pattern=r"^\d+\.\d+\.\d+$")
    board_id: str = Field("MT_0000000838", pattern=r"^[A-Za-z0-9_]{1,32}$")
    hca_type: str = Field("MT4129", pattern=r"^[A-Za-z0-9_]{1,32}$")
    mtu: int | None = Field(None, ge=68, le=65536)  # None: 4200 on Ethernet, 4092 on InfiniBand
    qos: QosBoot = QosBoot()

    def rate_text(self) -> str:
        if self.rate is not None:
            return self.rate
        if self.rate_gbps not in RATE_STRINGS:
            raise ProfileError(f"rate_gbps {self.rate_gbps}: allowed {sorted(RATE_STRINGS)}, "
                               "or give the port's rate file as rate (e.g. '200 Gb/sec (2X NDR)')")
        return RATE_STRINGS[self.rate_gbps]

    def mtu_value(self) -> int:
        return self.mtu or (4200 if self.link_layer == "Ethernet" else 4092)


class NvidiaDriver(_Model):
    """The NVIDIA kernel driver: /proc/driver/nvidia/version, module
    versions, and which peer-memory module ships with the stack."""
    version: str = Field("535.183.01", pattern=r"^\d+\.\d+(\.\d+)?$")
    open: bool = False  # the open GPU kernel module (dma-buf capable from 515)
    # the peer-memory module modules.dep lists; None: none ships with this stack
    peermem: Literal["nvidia_peermem", "nv_peer_mem"] | None = "nvidia_peermem"
    # a loader (DGX OS nvidia-peermem-loader) inserts it at boot; only with
    # MLNX_OFED, whose peer-memory symbols the module needs
    peermem_at_boot: bool = True


class PcieTopology(_Model):
    # ACS Control of root ports and switch downstream ports at boot (0: off,
    # as DGX systems leave it).
    acs_ctl: int = Field(0, ge=0, le=0x7f)
    iommu: Literal["off", "passthrough", "translated"] = "passthrough"


class Gid(_Model):
    """One populated entry of ports/1/gids/ (format 2)."""
    index: int = Field(ge=0, le=255)
    gid: str                                              # any IPv6 form; rendered as %pI6 does
    type: Literal["IB/RoCE v1", "RoCE v2"] | None = None  # gid_attrs/types/<index>
    ndev: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,15}$")  # gid_attrs/ndevs/<index>

    @model_validator(mode="after")
    def _ipv6(self):
        try:
            ipaddress.IPv6Address(self.gid)
        except ValueError:
            raise ValueError(f"gid {self.gid!r} is not an IPv6 address") from None
        return self


class Nic(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_]{1,31}$")
    netdev: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,15}$")
    pci: str = Field(pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
    # Format 2: this NIC's own values where they differ from nic_defaults.
    link_layer: LinkLayer | None = None
    rate_gbps: int | None = None
    rate: str | None = Field(None, pattern=RATE_RE)
    pcie: Pcie | None = None
    fw_ver: str | None = Field(None, pattern=r"^\d+\.\d+\.\d+$")
    board_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_]{1,32}$")
    hca_type: str | None = Field(None, pattern=r"^[A-Za-z0-9_]{1,32}$")
    mtu: int | None = Field(None, ge=68, le=65536)
    qos: QosBoot | None = None
    # The port's GID table (format 2). None: generated from the lab node's
    # number. Given, a lab's first node booted from this profile carries it
    # as is; each further one adds its position to the last 16 bits.
    gids: list[Gid] | None = None

    def settings(self, defaults: NicDefaults) -> NicDefaults:
        """nic_defaults with this NIC's own values laid over them."""
        keys = NicDefaults.model_fields.keys()
        mine = {k: getattr(self, k) for k in keys if k in type(self).model_fields and getattr(self, k) is not None}
        if "rate_gbps" in mine and "rate" not in mine:
            mine["rate"] = None
        return defaults.model_copy(update=mine)


class PciFn(_Model):
    """One PCI function of an explicit tree (format 2, what a capture
    writes): the GPUs, the RDMA NICs and every bridge on their paths."""
    bdf: str = Field(pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
    kind: Literal["root_port", "upstream", "downstream", "gpu", "nic"]
    host: str = Field(pattern=r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")  # the host bridge, /sys/devices/<host>
    parent: str | None = None   # the bridge above; None: right under the host bridge
    numa: int = Field(-1, ge=-1, le=63)
    vendor: int = Field(ge=0, le=0xffff)
    device: int = Field(ge=0, le=0xffff)
    class_code: int = Field(ge=0, le=0xffffff)
    revision: int = Field(0, ge=0, le=0xff)
    driver: str = Field("", pattern=r"^[A-Za-z0-9_-]{0,32}$")
    acs_cap: int | None = Field(None, ge=0, le=0xffff)  # None: no ACS capability
    acs_ctl: int | None = Field(None, ge=0, le=0xffff)
    devctl: int | None = Field(None, ge=0, le=0xffff)   # PCIe Device Control; None: the lab's default
    name: str | None = None         # the NIC's RDMA device name; GPUs are numbered in PCI order
    iommu_group: str | None = Field(None, pattern=r"^\d+$")

    @model_validator(mode="after")
    def _acs(self):
        if (self.acs_cap is None) != (self.acs_ctl is None):
            raise ValueError(f"{self.bdf}: give acs_cap and acs_ctl together (or neither: no ACS)")
        return self


class CaptureInfo(_Model):
    """Where a profile was captured (``ccrhost lab capture``)."""
    host: str                      # the node's host name ("node-1" when anonymized)
    date: str                      # UTC, ISO 8601
    ccrhost: str                   # the version that wrote it
    anonymized: bool = False
    # what the node showed that this profile does not replay, and why
    not_replayed: list[str] = []


class Modules(_Model):
    available: dict[str, list[str]]
    builtin: list[str] = []
    boot: list[str] = []

    @model_validator(mode="after")
    def _known(self):
        for name in self.boot:
            if name not in self.available and name not in self.builtin:
                raise ValueError(f"boot module {name!r} is not in available or builtin")
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
    pci_device: int = Field(0x2330, ge=0, le=0xffff)  # H100 SXM5, as NCCL's topology dump shows it
    uuids: list[str] = []  # format 2: nvidia-smi's uuid per GPU index; empty: generated per lab node
    # format 2: nvidia-smi -q "Serial Number" per GPU index (13 digits on NVIDIA boards); empty: generated per node
    serials: list[str] = []

    @model_validator(mode="after")
    def _uuids(self):
        if self.uuids and len(self.uuids) != self.count:
            raise ValueError(f"uuids lists {len(self.uuids)} GPUs, count is {self.count}")
        if self.serials and len(self.serials) != self.count:
            raise ValueError(f"serials lists {len(self.serials)} GPUs, count is {self.count}")
        return self


PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")


class Profile(_Model):
    format_version: int = 1
    name: str
    description: str = ""
    capture: CaptureInfo | None = None
    ofed: bool
    credit_threshold_attr: bool = False  # a driver with the CCR guide's per-port credit_threshold file
    configfs_mounted: bool = True
    modules: Modules
    nic_defaults: NicDefaults = NicDefaults()
    nics: list[Nic]
    gpus: Gpus
    nvidia_driver: NvidiaDriver | None = NvidiaDriver()
    ofed_version: str = Field("23.10-1.1.9", pattern=r"^[0-9][0-9A-Za-z.-]{0,31}$")  # /sys/module/mlx5_core/version
    pcie_topology: PcieTopology = PcieTopology()
    # Format 2: the node's own PCI tree, IOMMU units and kernel command line
    # (a capture writes them); None: the HGX layout of pcie.py, dmar<n> per
    # host bridge, and a command line from pcie_topology.iommu.
    pci_functions: list[PciFn] | None = None
    iommu_units: list[str] | None = None
    kernel_cmdline: str | None = Field(None, pattern=r"^[^\n]*$")
    # a tray of the lab's NVLink rack (lab/rack.py): fabric clique and IMEX domain shared with its kind
    nvlink_rack: bool = False
    # huge pages reserved at boot (nr_hugepages per size, /sys/kernel/mm/hugepages): a tuned profile's
    hugepages: dict[Literal["2048kB", "1048576kB"], int] = {}

    @model_validator(mode="after")
    def _peermem_needs_driver(self):
        if self.nvidia_driver is None and set(self.modules.boot) & set(PEERMEM_MODULES):
            raise ValueError("modules.boot loads a peer-memory module but the profile has no nvidia_driver")
        return self

    @model_validator(mode="after")
    def _tree(self):
        if self.pci_functions is None:
            return self
        seen: dict[str, PciFn] = {}
        for fn in self.pci_functions:
            if fn.bdf in seen:
                raise ValueError(f"pci_functions: {fn.bdf} is listed twice")
            if fn.parent is not None:
                parent = seen.get(fn.parent)
                if parent is None or parent.kind in ("gpu", "nic"):
                    raise ValueError(f"pci_functions: the parent {fn.parent} of {fn.bdf} must be a bridge "
                                     "listed before it")
                if parent.host != fn.host:
                    raise ValueError(f"pci_functions: {fn.bdf} is under host {fn.host}, its parent under {parent.host}")
            seen[fn.bdf] = fn
        nics = {f.bdf: f for f in self.pci_functions if f.kind == "nic"}
        for nic in self.nics:
            if nic.pci not in nics or nics[nic.pci].name != nic.name:
                raise ValueError(f"pci_functions: no nic function {nic.pci} named {nic.name}")
        gpus = sum(1 for f in self.pci_functions if f.kind == "gpu")
        if gpus != self.gpus.count:
            raise ValueError(f"pci_functions has {gpus} GPU functions, gpus.count is {self.gpus.count}")
        return self

    def nic_settings(self, nic: Nic) -> NicDefaults:
        return nic.settings(self.nic_defaults)

    def for_node(self, offset: int) -> Profile:
        """This profile as the lab node ``offset`` places after the first one
        booted from it sees it: given GIDs and GPU UUIDs move by
        ``offset`` in their last 16 bits, so no two nodes share an identity.
        Offset 0 is the profile as written."""
        if offset == 0:
            return self
        nics = []
        for nic in self.nics:
            update = {}
            if nic.gids:
                update["gids"] = [g.model_copy(update={"gid": shift_gid(g.gid, offset)}) for g in nic.gids]
            nics.append(nic.model_copy(update=update))
        gpus = self.gpus.model_copy(update={"uuids": [shift_uuid(u, offset) for u in self.gpus.uuids]})
        return self.model_copy(update={"nics": nics, "gpus": gpus})


def shift_gid(gid: str, offset: int) -> str:
    raw = int(ipaddress.IPv6Address(gid))
    return ipaddress.IPv6Address((raw & ~0xffff) | ((raw + offset) & 0xffff)).exploded


def shift_uuid(text: str, offset: int) -> str:
    """``GPU-<uuid>``: the last 16 bits of the UUID move by ``offset``."""
    prefix, _, rest = text.rpartition("-") if not text.startswith("GPU-") else ("GPU", "-", text[4:])
    try:
        value = uuid.UUID(rest)
    except ValueError:
        return f"{text}-{offset}"
    moved = uuid.UUID(int=(value.int & ~0xffff) | ((value.int + offset) & 0xffff))
    return f"{prefix}-{moved}"


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
    "ecn_readonly": "[NIC]: the OFED ecn/ files (of that NIC's netdev; default: every one) are read-only",
    "configfs_unmounted": "nothing is mounted on /sys/kernel/config at boot",
    "modprobe_fails": "MODULE: inserting this module fails",
    "gid_index": "DEV:INDEX: the RoCE v2 IPv4 GID of that port sits at INDEX (as in containers)",
    "ssh_on_fabric": "the management link (SSH, default route) is the first NIC's netdev, not eth0",
    "rdma_vanish": "DEV: the device disappears (hot-unplug) at the first QoS write or configfs mkdir",
    "etc_readonly": "the node's /etc is mounted read-only",
    "etc_full": "the node's /etc has no space left",
    "link_slow": "MBIT: the node's lab link is shaped to this rate instead of the lab's",
    "perftest_missing": "perftest (ib_write_bw, ib_write_lat) is not installed",
    "perftest_hang": "perftest (ib_write_bw, ib_write_lat) hangs instead of measuring",
    "fabric_blocked": "perftest's out-of-band port is blocked: its server never listens, its client cannot connect",
    lab_reach.KIND: lab_reach.DESCRIPTION,
    "acs_redirect": "[BDF]: ACS redirect on a bridge of a GPU-NIC path (default: the switch port above the first NIC)",
    "no_peermem": "no peer-memory module at boot and no dma-buf (the proprietary GPU module)",
    "nic_numa_far": "[DEV]: that NIC (default: the last of socket 0) sits on a root port of the other socket",
    "link_flap": "[DEV][:SECONDS]: the port's link_downed rises by one every SECONDS (default: the first NIC, 2 s)",
    "fw_mismatch": "[DEV[:FW]]: that NIC (default: the last) runs other firmware (default 28.38.1002)",
    "garble": "PATH:TEXT: the node's file PATH (under /sys or /etc; no ':' in PATH) holds TEXT at boot",
    "garble_tool": "TOOL:FIND=>REPLACE: TOOL's output (mlnx_qos, dcb-app, dcb-pfc, dcb-buffer, nvidia-smi) has FIND "
                   "replaced (an empty FIND replaces the whole output)",
    "gpu_hang": "nvidia-smi hangs instead of answering (a driver that stopped responding)",
    "ssh_over": "KIND[:DEV]: SSH and the default route arrive on a KIND (vlan, bridge, bond or macvlan) over DEV "
                "(default: the first NIC's netdev)",
    "route_multipath": "[DEV]: the default route has a second nexthop through DEV (default: the second NIC's netdev)",
    # GPU health (shims nvidia-smi -q / nvlink, dmesg, journalctl; docs/gpu-health.md)
    "xid": "CODE[:INDEX[:GI[:CI]]]: the kernel log has an NVIDIA XID CODE for GPU INDEX (default 0), attributed "
           "to MIG GPU instance GI (and compute instance CI) when given, as the driver prints it",
    "gpu_fell_off": "[INDEX]: GPU INDEX (default: the last) fell off the bus: Xid 79 logged, the bus lists it, "
                    "nvidia-smi does not see it",
    "row_remap_pending": "[INDEX]: GPU INDEX (default 0) has a row remapping pending",
    "row_remap_failure": "[INDEX]: GPU INDEX (default 0) failed a row remapping",
    "ecc_uncorrectable": "[INDEX]: GPU INDEX (default 0) has uncorrectable volatile ECC errors",
    "nvlink_down": "[INDEX[:LINK]]: NVLink LINK (default 0) of GPU INDEX (default 0) is inactive",
    "fabric_not_ready": "[INDEX]: the NVSwitch fabric of GPU INDEX (default: every GPU) is In Progress",
    "pcie_replay": "[INDEX]: GPU INDEX's (default 0) PCIe replay counter rises (5 a second)",
    "gpu_serial": "INDEX:SERIAL: the board in GPU slot INDEX is the one with SERIAL (a board moved here from "
                  "another node, or a repair's new one: nvidia-smi prints its serial and its own UUID)",
    "pfc_storm": "[DEV]: that NIC's netdev (default: the first) counts a pause-storm event a second and sends PFC "
                 "pause half the time on each PFC priority (ethtool -S)",
    "global_pause": "[DEV]: 802.3x global pause is on at power-on on that NIC's netdev (default: the first; "
                    "ethtool -a)",
    "rx_discards": "[DEV]: that NIC's netdev drops 10 received packets a second (ethtool -S rx_discards_phy)",
    "rnr_retry": "[DEV]: that NIC's port counts a receiver-not-ready retry failure a second "
                 "(hw_counters/rnr_nak_retry_err)",
    # the lab's all_reduce_perf (shims/all_reduce_perf; docs/allreduce.md)
    "allreduce_wrong": "the node corrupts data in a collective: all_reduce_perf counts wrong elements",
    "allreduce_hang": "the node's all_reduce_perf ranks stop after start-up: the run never ends",
    "group_slow": "K: in a ring of K or more nodes the node's edge carries half its rate (a NIC that degrades with "
                  "many peers); pairs and smaller rings are untouched",
    "allreduce_missing": "all_reduce_perf is not installed on the node: the launcher cannot exec it",
    "gpu_busy": "a job's process holds each of the node's GPUs (nvidia-smi --query-compute-apps lists it): CUDA "
                "refuses them to all_reduce_perf",
    # NIC firmware (lab/nicfw.py, shims/labfw.py: mlxconfig, mstconfig; docs/nic-firmware.md)
    "nicfw_wrong": "[DEV[:PARAM=VALUE]]: that NIC's firmware (default: the first NIC's) runs PARAM=VALUE, Current "
                   "and Next Boot (default MAX_ACC_OUT_READ=64)",
    "nicfw_pending": "[DEV[:PARAM=VALUE]]: PARAM=VALUE is written for that NIC's next boot (default: the first "
                     "NIC, MAX_ACC_OUT_READ=128); a reboot makes it Current",
    "mlx_tools_missing": "none of mlxconfig, mstconfig, mlxlink and mstlink is installed on the node",
    "module_fault": "[DEV[:FLAG]]: that NIC's transceiver (default: the first NIC's) sets FLAG in mlxlink -m: rx_los "
                    "(lane 2, the default), tx_fault (lane 2), module_fw_fault or cdr_lol (Tx, lane 0)",
    "ddm_out_of_range": "[DEV]: that NIC's transceiver (default: the first) reads 85 C against mlxlink's [-10..80]",
    "high_ber": "[DEV]: that NIC's link (default: the first) has an effective physical BER of 1E-10 in mlxlink -c",
    "mlx5_fatal": "[DEV[:KIND]]: the kernel log has an mlx5_core fatal line for that NIC (default: the first) of "
                  "KIND cmd_exec_timeout, health_poll_failed (default) or unrecoverable_err",
    # the lab's dcgmi (shims/dcgmi; docs/dcgm.md)
    "dcgm_hostengine_hung": "the DCGM host engine takes connections and never answers: every dcgmi command hangs",
    "dcgm_diag_hang": "dcgmi diag never ends (the host engine still answers discovery)",
    "dcgm_stress_fail": "[INDEX]: that GPU (default: 0) fails DCGM's targeted_stress test only (level 3 and up)",
    "dcgm_missing": "dcgmi is not installed on the node",
    "gpu_pcie_slow": "INDEX[:WIDTH]: GPU INDEX copies as if its PCIe link had WIDTH lanes (default 4) while "
                     "nvidia-smi reads the full width (shims/nvbandwidth)",
    # the host baseline (lab/host.py; docs/host-baseline.md)
    "cpu_offline": "[CPU]: that CPU (default: the last) is offline: /sys/devices/system/cpu/online skips it and "
                   "/proc/cpuinfo lacks it",
    "memory_short": "[KIB]: MemTotal is KIB kB (default: an eighth short, a DIMM gone)",
    "swap_on": "[KIB]: a swap file of KIB kB (default 8388604) is in use: /proc/swaps lists it, SwapTotal counts it",
    "mount_readonly": "the node's data mount /mnt/scratch is mounted read-only",
    "cmdline_wrong": "[WORD]: the kernel command line ends with WORD (default iommu=nopt, which overrides iommu=pt)",
}
FAULT_KINDS.update(lab_host_health.FAULTS)  # host health (lab/host_health.py; docs/host-health.md)
FAULT_KINDS.update(lab_rack.FAULTS)  # an NVLink rack's trays (lab/rack.py; docs/rack.md)
FAULT_KINDS.update(lab_gemm.FAULTS)  # the GEMM's (lab/gemm.py; docs/lab.md)
GPU_HEALTH_KINDS = ("xid", "gpu_fell_off", "row_remap_pending", "row_remap_failure", "ecc_uncorrectable",
                    "nvlink_down", "fabric_not_ready", "pcie_replay", "gpu_serial")
# The six error counters the data-path check reads, plus one more the
# reference's sample shows (Documentation/ABI/stable/sysfs-class-infiniband).
ERROR_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                  "local_link_integrity_errors", "port_xmit_discards", "excessive_buffer_overrun_errors")
# Peer-memory clients each module registers (nvidia-peermem.c: "nv_mem" and
# "nv_mem_nc"; nv_peer_mem: "nv_mem").
PEER_CLIENTS = {"nvidia_peermem": ("nv_mem", "nv_mem_nc"), "nv_peer_mem": ("nv_mem",)}
OTHER_FW = "28.38.1002"
# link_downed is 8 bits wide and stops at 255: one flap per 2 s leaves a
# lab about 8 minutes before the counter saturates.
FLAP_SECONDS = 2

SSH_OVER = ("vlan", "bridge", "bond", "macvlan")


def ssh_over(faults: list[Fault], profile: Profile) -> tuple[str, str] | None:
    """The ssh_over fault as (kind, lower netdev), if the node has one."""
    for value in _fault_values(faults, "ssh_over"):
        kind, _, dev = (value or "").partition(":")
        dev = dev or profile.nics[0].netdev
        if kind not in SSH_OVER or dev not in {n.netdev for n in profile.nics}:
            raise ProfileError(f"fault ssh_over={value}: need one of {', '.join(SSH_OVER)} and a netdev of "
                               f"{profile.name}")
        return kind, dev
    return None


def upper_name(kind: str, dev: str) -> str:
    """The name the stacked device gets: ens1np0.100, br0, bond0, mv0."""
    return {"vlan": f"{dev}.100", "bridge": "br0", "bond": "bond0", "macvlan": "mv0"}[kind]


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
    check_format(name_or_path, data)
    try:
        return Profile(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise ProfileError(f"profile {name_or_path!r}: {where}: {err['msg']}") from None


def check_format(name: str, data: dict) -> None:
    """Refuse a format this ccrhost does not read, and format-2 keys in a
    profile that says it is format 1, with what is supported."""
    version = data.get("format_version", 1)
    if type(version) is not int or version < 1:
        raise ProfileError(f"profile {name!r}: format_version {version!r}: expected a whole number, "
                           f"1 to {FORMAT_VERSION}")
    if version > FORMAT_VERSION:
        raise ProfileError(
            f"profile {name!r} has format_version {version}; this ccrhost reads format versions 1 to "
            f"{FORMAT_VERSION}: upgrade ccrhost, or capture the node again with this version")
    if version >= 2:
        return
    nics = data.get("nics") if isinstance(data.get("nics"), list) else []
    where = {"": data, "nic_defaults": data.get("nic_defaults"), "gpus": data.get("gpus"),
             **{f"nics.{i}": nic for i, nic in enumerate(nics)}}
    for place, block in where.items():
        keys = FORMAT_2_KEYS["nics" if place.startswith("nics.") else place]
        newer = sorted(keys & set(block)) if isinstance(block, dict) else []
        if newer:
            at = f"{place}." if place else ""
            raise ProfileError(f"profile {name!r}: {at}{newer[0]} needs format_version: 2 (the profile says "
                               f"{version}{'' if 'format_version' in data else ', by leaving it out'})")


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


FABRIC_PREFIX = 21  # a /21 per NIC: 32 NICs (an EFA node has 32) of up to 2,046 nodes in 198.19.0.0/16


def fabric_ipv4(node_index: int, nic_index: int) -> str:
    """The address a node's RoCE netdev carries in its GID table: NIC n's
    rail is 198.19.<8 n>.0/21, the node's index its host part."""
    return str(ipaddress.IPv4Address("198.19.0.0") + (nic_index << (32 - FABRIC_PREFIX)) + node_index)


def _gid_from_ipv4(ip: str) -> str:
    mapped = ipaddress.IPv6Address(f"::ffff:{ip}").exploded
    return mapped


def _guid(node_index: int, nic_index: int) -> str:
    raw = f"0c42a1{node_index:04x}{nic_index:02x}{0:04x}"[:16]
    return ":".join(raw[i:i + 4] for i in range(0, 16, 4))


# Faults a running node can take and lose again (``ccrhost lab fault``):
# they change what sysfs, nvidia-smi or the lab link report, nothing else.
FABRIC_FAULTS = ("pfc_storm", "global_pause", "rx_discards", "rnr_retry")
LIVE_KINDS = ("port_down", "port_rate", "pcie_width", "gpu_missing", "gpu_throttled", "link_slow",
              "allreduce_wrong", "allreduce_hang", "allreduce_missing", "gpu_busy", "group_slow",
              "dcgm_hostengine_hung", "dcgm_diag_hang", "dcgm_stress_fail", "dcgm_missing", "gpu_pcie_slow",
              *GPU_HEALTH_KINDS, *FABRIC_FAULTS, "mlx5_fatal", "module_fault", "ddm_out_of_range", "high_ber",
              *lab_host_health.LIVE, *lab_rack.LIVE, lab_reach.KIND, *lab_gemm.LIVE)


def _nic_bus(nic: Nic) -> tuple[str, int]:
    domain, bus, _ = nic.pci.split(":")
    return domain, int(bus, 16)


def nic_serial(node_index: int, nic_index: int) -> str:
    """A lab NIC's board serial, one per node and NIC, shaped as a ConnectX's (MT2314XZ0JUZ)."""
    return f"MT2314X{node_index:03d}{nic_index:02d}"


def _socket(index: int, count: int) -> int:
    return 0 if index < count // 2 else 1


def pci_tree(profile: Profile, faults: list[Fault]) -> list[pcie.Function]:
    """Every PCI function of the node, bridges before what hangs below them
    (layout in :mod:`ccrhost.lab.pcie`). Faults that move or reconfigure
    functions are resolved here, so a bad value fails before any file."""
    if profile.pci_functions is not None:
        return _explicit_tree(profile, faults)
    names = [n.name for n in profile.nics]
    far = set()
    for value in _fault_values(faults, "nic_numa_far"):
        dev = value or names[max(len(names) // 2 - 1, 0)]
        if dev not in names:
            raise ProfileError(f"fault nic_numa_far={value}: no NIC named {value!r} in {profile.name}")
        far.add(dev)
    topo = profile.pcie_topology
    d = profile.nic_defaults
    out: list[pcie.Function] = []
    used: dict[tuple[str, int], str] = {}

    def take(domain: str, bus: int, what: str) -> None:
        if not 0 <= bus <= 0xff or (domain, bus) in used:
            raise ProfileError(f"profile {profile.name}: {what} needs PCI bus {bus:#04x} in domain {domain}, "
                               f"which {'is out of range' if not 0 <= bus <= 0xff else 'holds ' + used[(domain, bus)]}"
                               "; space the NICs' buses at least 8 apart, from 0x06 up")
        used[(domain, bus)] = what

    def bridge(domain, bus, dev, kind, host, parent, numa, secondary, subordinate):
        rp = kind == "root_port"
        return pcie.Function(pcie.bdf(domain, bus, dev), kind, host, parent, numa,
                             0x8086 if rp else 0x1000, 0x352a if rp else 0xc030, 0x060400, 0x04 if rp else 0xb0,
                             "pcieport", acs_ctl=None if kind == "upstream" else topo.acs_ctl,
                             buses=(bus, secondary, subordinate))

    gpu_count = profile.gpus.count
    nic_class = {n.name: 0x020700 if profile.nic_settings(n).link_layer == "InfiniBand" else 0x020000
                 for n in profile.nics}
    for i in range(max(len(profile.nics), gpu_count)):
        nic = profile.nics[i] if i < len(profile.nics) else None
        if nic is not None:
            domain, b = _nic_bus(nic)
        else:
            domain, b = "0000", 0xa6 + 8 * (i - len(profile.nics))
        numa = _socket(i, len(profile.nics) if nic is not None else gpu_count)
        host = f"pci{domain}:{b - 6:02x}"
        for bus, what in ((b - 6, "a root port"), (b - 5, "a switch"), (b - 4, "switch ports"), (b - 2, "a GPU")):
            take(domain, bus, f"{what} of pair {i}")
        rp = bridge(domain, b - 6, 1, "root_port", host, None, numa, b - 5, b)
        up = bridge(domain, b - 5, 0, "upstream", host, rp.bdf, numa, b - 4, b)
        dn_gpu = bridge(domain, b - 4, 0, "downstream", host, up.bdf, numa, b - 2, b - 2)
        dn_nic = bridge(domain, b - 4, 1, "downstream", host, up.bdf, numa, b, b)
        out += [rp, up, dn_gpu, dn_nic]
        if i < gpu_count:
            out.append(pcie.Function(pcie.bdf(domain, b - 2), "gpu", host, dn_gpu.bdf, _socket(i, gpu_count),
                                     0x10de, profile.gpus.pci_device, 0x030200, 0xa1,
                                     "nvidia" if profile.nvidia_driver else "",
                                     devctl=pcie.devctl(d.pcie.max_read_req, d.pcie.relaxed_ordering), name=str(i)))
        if nic is None:
            continue
        take(domain, b, f"NIC {nic.name}")
        parent, nic_host, nic_numa = dn_nic.bdf, host, numa
        if nic.name in far:
            nic_numa = 1 - numa
            nic_host = f"pci{domain}:{b - 1:02x}"
            take(domain, b - 1, f"the far root port of {nic.name}")
            far_rp = bridge(domain, b - 1, 1, "root_port", nic_host, None, nic_numa, b, b)
            out.append(far_rp)
            parent = far_rp.bdf
        nd = profile.nic_settings(nic)
        # an EFA: Amazon 0x1d0f, device 0xefa0 (ibv_devinfo's vendor_id and
        # vendor_part_id 61344 of an EFA), bound to the efa driver
        vendor, device, driver = (0x1d0f, 0xefa0, "efa") if nd.link_layer == EFA else (0x15b3, 0x1021, "mlx5_core")
        out.append(pcie.Function(nic.pci, "nic", nic_host, parent, nic_numa, vendor, device, nic_class[nic.name], 0,
                                 driver, devctl=pcie.devctl(nd.pcie.max_read_req, nd.pcie.relaxed_ordering),
                                 name=nic.name))
    return _acs_faults(profile, faults, out)


def _explicit_tree(profile: Profile, faults: list[Fault]) -> list[pcie.Function]:
    """A profile's own tree (a capture's): functions as listed, GPUs named
    by PCI order as nvidia-smi numbers them, bridges' bus ranges from what
    hangs below them."""
    for kind in ("nic_numa_far",):
        if _fault_values(faults, kind):
            raise ProfileError(f"fault {kind}: {profile.name} lists its own PCI tree (pci_functions), "
                               "where the lab cannot move a NIC; edit the tree instead")
    fns = profile.pci_functions or []
    gpu_index = {f.bdf: i for i, f in enumerate(sorted((f for f in fns if f.kind == "gpu"), key=lambda f: f.bdf))}
    by_nic = {n.pci: profile.nic_settings(n) for n in profile.nics}

    def bus(bdf: str) -> int:
        return int(bdf.split(":")[1], 16)

    below: dict[str, list[str]] = {}
    for fn in fns:
        if fn.parent:
            below.setdefault(fn.parent, []).append(fn.bdf)

    def subtree(bdf: str) -> list[str]:
        out = []
        for child in below.get(bdf, []):
            out += [child, *subtree(child)]
        return out

    out: list[pcie.Function] = []
    for fn in fns:
        if fn.devctl is not None:
            dc = fn.devctl
        elif fn.kind in ("gpu", "nic"):
            p = (by_nic.get(fn.bdf) or profile.nic_defaults).pcie
            dc = pcie.devctl(p.max_read_req, p.relaxed_ordering)
        else:
            dc = pcie.DEVCTL_BRIDGE
        buses = None
        if fn.kind in ("root_port", "upstream", "downstream"):
            kids = [bus(b) for b in below.get(fn.bdf, [])]
            every = [bus(b) for b in subtree(fn.bdf)]
            secondary = min(kids) if kids else bus(fn.bdf) + 1
            buses = (bus(fn.bdf), secondary, max(every + [secondary]))
        name = str(gpu_index[fn.bdf]) if fn.kind == "gpu" else fn.name
        out.append(pcie.Function(fn.bdf, fn.kind, fn.host, fn.parent, fn.numa, fn.vendor, fn.device, fn.class_code,
                                 fn.revision, fn.driver, acs_ctl=fn.acs_ctl, devctl=dc, buses=buses, name=name,
                                 acs_cap=fn.acs_cap if fn.acs_cap is not None else pcie.ACS_CAP,
                                 iommu_group=fn.iommu_group))
    return _acs_faults(profile, faults, out)


def _acs_faults(profile: Profile, faults: list[Fault], out: list[pcie.Function]) -> list[pcie.Function]:
    by_bdf = {f.bdf: f for f in out}
    on_paths = [b for b in gpu_nic_bridges(out) if by_bdf[b].acs_ctl is not None]
    for value in _fault_values(faults, "acs_redirect"):
        if value is None and not on_paths:
            raise ProfileError(f"fault acs_redirect: {profile.name} has no GPU-NIC path through an ACS bridge")
        target = on_paths[0] if value is None else value
        if target not in on_paths:
            raise ProfileError(f"fault acs_redirect={value}: need a bridge with ACS on a GPU-NIC path of "
                               f"{profile.name}: {', '.join(on_paths)}")
        by_bdf[target].acs_ctl = pcie.ACS_REDIRECT_ON
    return out


def gpu_nic_bridges(tree: list[pcie.Function]) -> list[str]:
    """Bridges GPU-NIC peer traffic crosses, the NIC side of each pair first."""
    from ccrhost.model.topology import Endpoint, pair, path_bridges

    def endpoint(fn):
        return Endpoint(fn.name or fn.bdf, fn.bdf, "/sys/devices/" + path_of(tree, fn.bdf), fn.numa)

    gpus = [endpoint(f) for f in tree if f.kind == "gpu"]
    nics = [endpoint(f) for f in tree if f.kind == "nic"]
    out: list[str] = []
    for p in pair(gpus, nics):
        for b in reversed(path_bridges(p.gpu, p.nic)):
            if b not in out:
                out.append(b)
    return out


def path_of(tree: list[pcie.Function], bdf: str) -> str:
    """``pci0000:14/0000:14:01.0/.../<bdf>``, relative to /sys/devices."""
    by_bdf = {f.bdf: f for f in tree}
    parts, fn = [], by_bdf[bdf]
    while fn is not None:
        parts.append(fn.bdf)
        fn = by_bdf.get(fn.parent) if fn.parent else None
    return "/".join([by_bdf[bdf].host] + parts[::-1])


def module_table(profile: Profile, faults: list[Fault]) -> tuple[dict[str, list[str]], list[str], dict[str, str]]:
    """(modules.dep as {name: deps}, modules loaded at boot, MODULE_VERSION
    strings). The NVIDIA driver brings ``nvidia`` and its peer-memory
    module; without it neither exists, whatever ``available`` lists."""
    deps = {n: list(d) for n, d in profile.modules.available.items()}
    boot = list(profile.modules.boot)
    versions = {"mlx5_core": profile.ofed_version} if profile.ofed else {}
    drv = profile.nvidia_driver
    for name in PEERMEM_MODULES:
        deps.pop(name, None)
    if drv is not None:
        deps["nvidia"] = []
        boot.append("nvidia")
    if drv is not None and drv.peermem is not None:
        deps[drv.peermem] = ["ib_core", "nvidia"]
        versions[drv.peermem] = drv.version  # nvidia-peermem.c: MODULE_VERSION(NV_VERSION_STRING)
        if drv.peermem_at_boot and not _fault_values(faults, "no_peermem") and profile.ofed:
            boot.append(drv.peermem)
    return deps, boot, versions


def nvidia_proc_version(drv: NvidiaDriver) -> str:
    """/proc/driver/nvidia/version in the two verbatim formats of
    gdr.md section 8 (the fixtures' samples), with this driver's version."""
    if drv.open:
        return (f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {drv.version}  Release Build  "
                "(dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024\n"
                "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n")
    return (f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {drv.version}  Mon Sep 12 19:21:56 UTC 2022\n"
            "GCC version:  gcc version 7.5.0 (Ubuntu 7.5.0-3ubuntu1~18.04)\n")


def kernel_cmdline(profile: Profile) -> str:
    if profile.kernel_cmdline is not None:
        return profile.kernel_cmdline + "\n"
    extra = {"off": "", "passthrough": " intel_iommu=on iommu=pt", "translated": " intel_iommu=on"}
    return "BOOT_IMAGE=/boot/vmlinuz ro quiet" + extra[profile.pcie_topology.iommu] + "\n"


def effective_driver(profile: Profile, faults: list[Fault]) -> NvidiaDriver | None:
    drv = profile.nvidia_driver
    if drv is not None and _fault_values(faults, "no_peermem"):
        drv = drv.model_copy(update={"open": False, "peermem_at_boot": False})
    return drv


def _render_pci(tree: list[pcie.Function], root: Path, profile: Profile) -> None:
    by_nic = {n.pci: profile.nic_settings(n) for n in profile.nics}
    for fn in tree:
        d = by_nic.get(fn.bdf, profile.nic_defaults)
        rel = path_of(tree, fn.bdf)
        path = root / "devices" / rel
        path.mkdir(parents=True, exist_ok=True)
        (path / "config").write_bytes(pcie.config(fn))
        _write(path / "vendor", f"0x{fn.vendor:04x}\n")
        _write(path / "device", f"0x{fn.device:04x}\n")
        _write(path / "class", f"0x{fn.class_code:06x}\n")
        _write(path / "revision", f"0x{fn.revision:02x}\n")
        _write(path / "numa_node", f"{fn.numa}\n")
        if fn.kind in ("gpu", "nic"):
            speed = f"{d.pcie.speed_gts:.1f} GT/s PCIe"
            _write(path / "current_link_speed", speed + "\n")
            _write(path / "max_link_speed", speed + "\n")
            _write(path / "current_link_width", f"{d.pcie.width}\n")
            _write(path / "max_link_width", f"{d.pcie.width}\n")
        _link(root / "bus" / "pci" / "devices" / fn.bdf, f"../../../devices/{rel}")
        if fn.driver:
            (root / "bus" / "pci" / "drivers" / fn.driver).mkdir(parents=True, exist_ok=True)
            _link(path / "driver", os.path.relpath(root / "bus" / "pci" / "drivers" / fn.driver, path))


def _render_iommu(tree: list[pcie.Function], root: Path, mode: str, units: list[str] | None = None) -> None:
    (root / "kernel" / "iommu_groups").mkdir(parents=True, exist_ok=True)
    (root / "class" / "iommu").mkdir(parents=True, exist_ok=True)
    if mode == "off":
        return
    hosts = sorted({f.host for f in tree})
    for unit in units if units is not None else [f"dmar{i}" for i in range(len(hosts))]:
        (root / "devices" / "virtual" / "iommu" / unit).mkdir(parents=True, exist_ok=True)
        _link(root / "class" / "iommu" / unit, f"../../devices/virtual/iommu/{unit}")
    for fn in tree:
        # without ACS isolation below the root port, one group per host bridge
        name = fn.iommu_group if fn.iommu_group is not None else str(hosts.index(fn.host))
        group = root / "kernel" / "iommu_groups" / name
        if not (group / "type").exists():
            _write(group / "type", ("identity" if mode == "passthrough" else "DMA-FQ") + "\n")
        rel = path_of(tree, fn.bdf)
        _link(group / "devices" / fn.bdf, f"../../../../devices/{rel}")
        _link(root / "devices" / rel / "iommu_group", os.path.relpath(group, root / "devices" / rel))


# The OFED ecn/ files a lab NIC starts with, and their values.
DEFAULT_ECN = {
    **{f"{point}/enable/{prio}": 0 for point in ("roce_rp", "roce_np") for prio in range(8)},
    "roce_np/cnp_dscp": 48, "roce_np/cnp_802p_prio": 6, "roce_np/min_time_between_cnps": 4,
    "roce_rp/rate_reduce_monitor_period": 4,
}


def ofed_buffer_size(qos: QosBoot, speed_gbps: int, mtu: int) -> str:
    """OFED qos/buffer_size for a DCB state, with xoff/xon as the lab's
    shims compute them after a change (mlx5 port_buffer.c)."""
    lossless = {qos.prio2buffer[p] for p in range(8) if qos.pfc[p]}
    headroom = (301 + 216 * qos.cable_len // 100) * max(speed_gbps, 40) // 1000 + 272 * mtu // 100
    rows = []
    for i, size in enumerate(qos.buffer_size):
        x_off = size - headroom if i in lossless and size else 0
        rows.append(f"{i}\t{size}\t{x_off}\t\t{x_off - mtu if x_off else 0}\n")
    return (f"Port buffer size = {qos.port_buffer}\nSpare buffer size = {qos.port_buffer - sum(qos.buffer_size)}\n"
            "Buffer\tSize\txoff_threshold\txon_threshold\n" + "".join(rows))


def gid_table(nic: Nic, node_index: int, nic_index: int, ethernet: bool) -> list[Gid]:
    """The port's populated GIDs: the profile's, else a link-local GID from
    the node GUID and, on RoCE, the fabric address (v1 and v2 each)."""
    if nic.gids is not None:
        return list(nic.gids)
    guid = _guid(node_index, nic_index).replace(":", "")
    link_local = ipaddress.IPv6Address(bytes.fromhex("fe80000000000000" + guid)).exploded
    if not ethernet:
        return [Gid(index=0, gid=link_local, type="IB/RoCE v1")]
    mapped = _gid_from_ipv4(fabric_ipv4(node_index, nic_index))
    return [Gid(index=i, gid=g, type=t, ndev=nic.netdev) for i, (g, t) in enumerate(
        [(link_local, "IB/RoCE v1"), (link_local, "RoCE v2"), (mapped, "IB/RoCE v1"), (mapped, "RoCE v2")])]


def _move_gid(table: list[Gid], index: int, what: str) -> list[Gid]:
    """The RoCE v2 IPv4 GID moved to ``index`` (as in containers)."""
    v2 = [g for g in table if g.type == "RoCE v2" and ipaddress.IPv6Address(g.gid).ipv4_mapped]
    if not v2 or any(g.index == index for g in table if g is not v2[0]):
        raise ProfileError(f"{what}: the port has {'no RoCE v2 IPv4 GID' if not v2 else f'a GID at index {index}'}")
    return [g.model_copy(update={"index": index}) if g is v2[0] else g for g in table]


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
    for value in _fault_values(faults, "group_slow"):
        if not (value or "").isdigit() or int(value) < 3:
            raise ProfileError(f"fault group_slow={value}: give the ring size K it slows from, 3 or more (pairs "
                               "are never slowed)")
    return down, missing, rates, widths


def _gpu_health_faults(profile: Profile, faults: list[Fault]) -> None:
    """Refuse a GPU health fault (and an mlx5_fatal one) the shims could not render (before anything changes)."""
    last = profile.gpus.count - 1
    for kind in ("module_fault", "ddm_out_of_range", "high_ber"):
        for value in _fault_values(faults, kind):
            dev, _, flag = (value or "").partition(":")
            if (dev and dev not in [n.name for n in profile.nics]) or \
                    flag not in ("", *(("rx_los", "tx_fault", "module_fw_fault", "cdr_lol") if kind == "module_fault" else ())):
                raise ProfileError(f"fault {kind}={value}: need [DEV" + (":FLAG" if kind == "module_fault" else "")
                                   + f"] with a NIC of {profile.name}")
    for value in _fault_values(faults, "mlx5_fatal"):
        dev, _, kind = (value or "").partition(":")
        nics = [n.name for n in profile.nics if n.pci]
        if (dev and dev not in nics) or kind not in ("", "cmd_exec_timeout", "health_poll_failed", "unrecoverable_err"):
            raise ProfileError(f"fault mlx5_fatal={value}: need [DEV[:KIND]] with a NIC of {profile.name} and a "
                               "KIND cmd_exec_timeout, health_poll_failed or unrecoverable_err")
    for f in faults:
        if f.kind not in GPU_HEALTH_KINDS:
            continue
        parts = (f.value or "").split(":") if f.value is not None else []
        if f.kind == "xid":
            ok = 1 <= len(parts) <= 4 and parts[0].isdigit() and 1 <= int(parts[0]) <= 65535 and \
                (len(parts) == 1 or (parts[1].isdigit() and int(parts[1]) <= last)) and \
                all(p.isascii() and p.isdigit() and int(p) <= 99 for p in parts[2:])
            want = f"CODE[:INDEX[:GI[:CI]]] with a code 1..65535, a GPU 0..{last} and MIG instances 0..99"
        elif f.kind == "gpu_serial":
            ok = len(parts) == 2 and parts[0].isdigit() and int(parts[0]) <= last and parts[1].isalnum()
            want = f"INDEX:SERIAL with a GPU 0..{last} and a serial of letters and digits"
        elif f.kind == "nvlink_down":
            ok = len(parts) <= 2 and all(p.isdigit() for p in parts) and (not parts or int(parts[0]) <= last) and \
                (len(parts) < 2 or int(parts[1]) < 18)
            want = f"[INDEX[:LINK]] with a GPU 0..{last} and a link 0..17"
        else:
            ok = len(parts) <= 1 and all(p.isdigit() and int(p) <= last for p in parts)
            want = f"[INDEX] with a GPU 0..{last}"
        if not ok:
            raise ProfileError(f"fault {f}: need {want} ({profile.name})")


def link_files(profile: Profile, faults: list[Fault]) -> dict[str, str]:
    """The sysfs files a link fault changes, path under /sys -> content:
    port state, physical state, rate, the netdev's operstate and the NIC's
    trained PCIe width. Boot writes them; a live fault rewrites them."""
    names = {nic.name for nic in profile.nics}
    for kind in FABRIC_FAULTS:  # the ethtool shim and labsysfsd act on them; only their NIC is checked here
        for value in _fault_values(faults, kind):
            if value and value not in names:
                raise ProfileError(f"fault {kind}={value}: need a NIC of {profile.name} "
                                   f"({', '.join(sorted(names))})")
    down, missing, rates, widths = _link_faults(profile, faults)
    _gpu_health_faults(profile, faults)
    tree = pci_tree(profile, faults)
    files = {}
    for nic in profile.nics:
        nd = profile.nic_settings(nic)
        pci = f"devices/{path_of(tree, nic.pci)}"
        is_down = nic.name in down
        efa = nd.link_layer == EFA
        files[f"{pci}/current_link_width"] = f"{widths.get(nic.name, nd.pcie.width)}\n"
        files[f"{pci}/net/{nic.netdev}/operstate"] = ("down" if is_down else "up") + "\n"
        if efa:
            # a lost link: the netdev stays admin up, its carrier reads 0 (net-sysfs.c carrier_show)
            files[f"{pci}/net/{nic.netdev}/carrier"] = ("0" if is_down else "1") + "\n"
        if nic.name in missing:
            continue
        port = f"{pci}/infiniband/{nic.name}/ports/1"
        # efa_query_port() reports ACTIVE/LinkUp whatever the link does
        files[f"{port}/state"] = "1: DOWN\n" if is_down and not efa else "4: ACTIVE\n"
        files[f"{port}/phys_state"] = "3: Disabled\n" if is_down and not efa else "5: LinkUp\n"
        files[f"{port}/rate"] = (RATE_STRINGS[rates[nic.name]] if nic.name in rates else nd.rate_text()) + "\n"
    why = lab_host_health.refused(faults) or lab_rack.refused(faults) or lab_gemm.refused(faults, profile.gpus.count)
    if why:
        raise ProfileError(why)
    files.update(lab_host_health.sys_files(faults))
    return files


def render_sysfs(profile: Profile, faults: list[Fault], root: Path, node_index: int) -> dict:
    """Write the node's boot-time /sys under ``root``; return what was built.

    The return value describes the emulated hardware for the shims
    (``nvidia-smi``) and for tests.
    """
    names = {nic.name for nic in profile.nics}
    _, missing, rates, _ = _link_faults(profile, faults)
    live = link_files(profile, faults)

    gid_moves = {}
    for value in _fault_values(faults, "gid_index"):
        dev, index = _split_dev_value(value, "gid_index")
        if dev not in names or not index.isdigit() or not 4 <= int(index) < 16:
            raise ProfileError(f"fault gid_index={value}: need a NIC of {profile.name} and an index 4..15")
        gid_moves[dev] = int(index)

    fw = {}
    for value in _fault_values(faults, "fw_mismatch"):
        dev, _, version = (value or "").partition(":")
        dev = dev or profile.nics[-1].name
        if dev not in names or (version and not re.fullmatch(r"\d+\.\d+\.\d+", version)):
            raise ProfileError(f"fault fw_mismatch={value}: need a NIC of {profile.name} and a version like 28.38.1002")
        fw[dev] = version or OTHER_FW
    flapping = []
    for value in _fault_values(faults, "link_flap"):
        dev, _, seconds = (value or "").partition(":")
        dev = dev or profile.nics[0].name
        if dev not in names or (seconds and not (seconds.isdigit() and 1 <= int(seconds) <= 3600)):
            raise ProfileError(f"fault link_flap={value}: need a NIC of {profile.name} and seconds 1..3600")
        flapping.append([dev, int(seconds or FLAP_SECONDS)])

    tree = pci_tree(profile, faults)
    _render_pci(tree, root, profile)
    _render_iommu(tree, root, profile.pcie_topology.iommu, profile.iommu_units)
    built = {"nics": [], "netdevs": {}, "flap": flapping,
             "gpus": [{"index": int(f.name), "bdf": f.bdf} for f in tree if f.kind == "gpu"]}
    built["qos"] = {}
    for i, nic in enumerate(profile.nics):
        nd = profile.nic_settings(nic)
        ethernet = nd.link_layer == "Ethernet"
        efa = nd.link_layer == EFA
        rel = path_of(tree, nic.pci)
        pci = root / "devices" / rel
        _write(pci / "current_link_width", live[f"devices/{rel}/current_link_width"])
        if not efa:  # the board's serial (lspci -vv "[SN] Serial number"), as a ConnectX's VPD holds it
            (pci / "vpd").write_bytes(pcie.vpd(nic_serial(node_index, i)))

        netdir = pci / "net" / nic.netdev
        _write(netdir / "mtu", f"{nd.mtu_value()}\n")
        _write(netdir / "operstate", live[f"devices/{rel}/net/{nic.netdev}/operstate"])
        if efa:
            _write(netdir / "carrier", live[f"devices/{rel}/net/{nic.netdev}/carrier"])
        _link(root / "class" / "net" / nic.netdev, f"../../devices/{rel}/net/{nic.netdev}")
        _link(netdir / "device", "../../../" + nic.pci)
        rate = RATE_STRINGS[rates[nic.name]] if nic.name in rates else nd.rate_text()
        qos = nd.qos
        if not efa:  # the ENA netdev beside an EFA has no DCB (no dcbnl_ops): no state to keep
            built["qos"][nic.netdev] = {"pfc": list(qos.pfc), "delay": qos.cable_len,
                                        "app": {str(d): p for d, p in sorted(qos.dscp2prio.items())},
                                        "buffer_size": list(qos.buffer_size), "prio2buffer": list(qos.prio2buffer),
                                        "macsec_bypass": "off", "port_buffer": qos.port_buffer}
        if profile.ofed and ethernet:
            for name, value in (DEFAULT_ECN if qos.ecn is None else qos.ecn).items():
                _write(netdir / "ecn" / name, f"{value}\n")
            _write(netdir / "qos" / "tc_num", "8\n")
            _write(netdir / "qos" / "buffer_size", ofed_buffer_size(qos, int(float(rate.split()[0])), nd.mtu_value()))
            _write(netdir / "qos" / "prio2buffer",
                   "Priority\tBuffer\n" + "".join(f"{p}\t\t{b}\n" for p, b in enumerate(qos.prio2buffer)))
        built["netdevs"][nic.netdev] = nic.name

        if nic.name in missing:
            continue
        ib = pci / "infiniband" / nic.name
        _link(root / "class" / "infiniband" / nic.name, f"../../devices/{rel}/infiniband/{nic.name}")
        _link(ib / "device", "../../../" + nic.pci)
        if not efa:  # fw_ver, board_id, hca_type: what mlx5 provides; the lab gives an EFA none
            _write(ib / "fw_ver", fw.get(nic.name, nd.fw_ver) + "\n")
            _write(ib / "board_id", nd.board_id + "\n")
            _write(ib / "node_type", "1: CA\n")
            _write(ib / "hca_type", nd.hca_type + "\n")
        _write(ib / "node_guid", _guid(node_index, i) + "\n")
        port = ib / "ports" / "1"
        for name in ("state", "phys_state", "rate"):
            _write(port / name, live[f"devices/{rel}/infiniband/{nic.name}/ports/1/{name}"])
        _write(port / "link_layer", nd.link_layer + "\n")
        _write(port / "lid", "0x0\n" if ethernet or efa else f"0x{node_index * 16 + i + 1:x}\n")
        _write(port / "sm_lid", "0x0\n" if ethernet or efa else "0x1\n")
        if efa:
            # no IB PMA counters/ on efa (its own hw_counters only, none of which ccrhost reads)
            table = gid_table(nic, node_index, i, False)
            for entry in table:
                _write(port / "gids" / str(entry.index), ipaddress.IPv6Address(entry.gid).exploded + "\n")
                _write(port / "gid_attrs" / "types" / str(entry.index), (entry.type or "IB/RoCE v1") + "\n")
            built["nics"].append({"name": nic.name, "netdev": nic.netdev, "ipv4": None, "ports": 1, "driver": "efa"})
            continue
        for counter in ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                        "port_xmit_data_64", "port_rcv_data_64"):
            _write(port / "counters" / counter, "0\n")
        for counter in ERROR_COUNTERS:
            _write(port / "counters" / counter, "0\n")
        if profile.ofed:
            for counter in ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "out_of_sequence",
                            "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err", "implied_nak_seq_err"):
                _write(port / "hw_counters" / counter, "0\n")
        table = gid_table(nic, node_index, i, ethernet)
        ip = next((str(ipaddress.IPv6Address(g.gid).ipv4_mapped) for g in table
                   if g.type == "RoCE v2" and ipaddress.IPv6Address(g.gid).ipv4_mapped), None)
        if nic.name in gid_moves:
            table = _move_gid(table, gid_moves[nic.name], f"fault gid_index={nic.name}:{gid_moves[nic.name]}")
        by_index = {g.index: g for g in table}
        zero = ipaddress.IPv6Address("::").exploded
        for index in range(max([15, *by_index]) + 1):
            entry = by_index.get(index)
            _write(port / "gids" / str(index), (ipaddress.IPv6Address(entry.gid).exploded if entry else zero) + "\n")
            # Unpopulated entries fail to read (EINVAL) on a real kernel; an
            # absent file reads the same to `grep -s`.
            if entry and entry.type:
                _write(port / "gid_attrs" / "types" / str(index), entry.type + "\n")
                if entry.ndev:
                    _write(port / "gid_attrs" / "ndevs" / str(index), entry.ndev + "\n")
        if profile.ofed:
            _write(ib / "tc" / "1" / "traffic_class", "")
        if profile.credit_threshold_attr:
            _write(port / "credit_threshold", "1024\n")
        # pci and ethernet: the kernel log's mlx5e lines name the function (lab dmesg, link_flap)
        built["nics"].append({"name": nic.name, "netdev": nic.netdev, "ipv4": ip, "ports": 1, "pci": nic.pci,
                              "ethernet": ethernet})

    stacked = ssh_over(faults, profile)
    if stacked:
        # the kernel's view of a stacked netdev: upper_<if> in the lower one,
        # lower_<dev> in the upper one (netdev_upper_dev_link())
        kind, dev = stacked
        upper = upper_name(kind, dev)
        virtual = root / "devices" / "virtual" / "net" / upper
        _write(virtual / "mtu", "4200\n")
        _link(root / "class" / "net" / upper, f"../../devices/virtual/net/{upper}")
        nic = next(n for n in profile.nics if n.netdev == dev)
        lower_dir = root / "devices" / "pci0000:00" / nic.pci / "net" / dev
        _link(virtual / f"lower_{dev}", os.path.relpath(lower_dir, virtual))
        _link(lower_dir / f"upper_{upper}", os.path.relpath(virtual, lower_dir))
    _link(root / "class" / "net" / "eth0", "../../devices/virtual/net/eth0")
    _write(root / "devices" / "virtual" / "net" / "eth0" / "mtu", "1500\n")
    _write(root / "devices" / "virtual" / "net" / "eth0" / "operstate", "up\n")
    _, boot, versions = module_table(profile, faults)
    for name in boot:
        _write(root / "module" / name / "initstate", "live\n")
        if name in versions:
            _write(root / "module" / name / "version", versions[name] + "\n")
        if name in PEERMEM_MODULES:
            # ib_core (MLNX_OFED) lists each registered peer-memory client
            for client in PEER_CLIENTS[name]:
                _write(root / "kernel" / "mm" / "memory_peers" / client / "version", versions[name] + "\n")
    (root / "kernel" / "config").mkdir(parents=True, exist_ok=True)
    (root / "kernel" / "debug").mkdir(parents=True, exist_ok=True)
    for rel, text in lab_host_health.sys_files(faults).items():  # the EDAC counters (validated by link_files)
        _write(root / rel, text)
    return built
