"""The PCIe tree of an emulated node and each function's config space.

Layout (HGX boards, 2-8-9-400 reference designs): GPU i and NIC i share a
PCIe switch behind their own root port and host bridge. For a NIC at bus
B: host bridge ``pciDDDD:(B-6)``, root port ``(B-6):01.0``, switch
upstream port ``(B-5):00.0``, downstream ports ``(B-4):00.0`` (to the GPU
at ``(B-2):00.0``) and ``(B-4):01.0`` (to the NIC). Root ports and switch
downstream ports carry an ACS capability, upstream ports do not.

Config space follows the PCI/PCIe layout pciutils reads (lib/header.h):
header at 0x00, the Express capability at 0x40, ACS as the first
extended capability at 0x100. IDs: the GPU and the switch are the ones in
the reference's NCCL topology (H100 0x10de:0x2330, Broadcom 0x1000:0xc030),
NICs ConnectX-7 0x15b3:0x1021; the root ports' Intel ID is only a label.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

CAP_EXP = 0x40
ECAP_ACS = 0x100
TYPE = {"endpoint": 0, "root_port": 4, "upstream": 5, "downstream": 6}
ACS_CAP = 0x005f  # SrcValid TransBlk ReqRedir CmpltRedir UpstreamFwd DirectTrans (no EgressCtrl)
ACS_REDIRECT_ON = 0x001d  # SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+, as NCCL #629's enabled line
READ_REQ = (128, 256, 512, 1024, 2048, 4096)
# DevCap: MaxPayload 512, ExtTag, RBE; endpoints add L0s/L1 unlimited and FLReset.
DEVCAP_BRIDGE = 0x2 | 0x20 | 0x8000
DEVCAP_ENDPOINT = DEVCAP_BRIDGE | (7 << 6) | (7 << 9) | 0x10000000
DEVCTL_BRIDGE = (2 << 12) | (1 << 5)  # MaxReadReq 512, MaxPayload 256


def devctl(max_read_req: int, relaxed: bool) -> int:
    """MaxPayload 256, ExtTag+, NoSnoop+, and the given MaxReadReq / RlxdOrd."""
    return READ_REQ.index(max_read_req) << 12 | 1 << 5 | (0x10 if relaxed else 0) | 0x100 | 0x800


@dataclass
class Function:
    bdf: str
    kind: str                 # root_port, upstream, downstream, gpu, nic
    host: str                 # "pci0000:14"
    parent: str | None        # parent bridge's bdf; None under the host bridge
    numa: int
    vendor: int
    device: int
    class_code: int
    revision: int
    driver: str
    acs_ctl: int | None = None          # None: no ACS capability
    devctl: int = DEVCTL_BRIDGE
    buses: tuple[int, int, int] | None = None  # primary, secondary, subordinate (bridges)
    name: str | None = None             # GPU index or NIC name
    acs_cap: int = ACS_CAP              # ACS Capability register, when acs_ctl is not None
    iommu_group: str | None = None      # None: one group per host bridge

    @property
    def exp_type(self) -> int:
        return TYPE.get(self.kind, TYPE["endpoint"])


def bdf(domain: str, bus: int, dev: int = 0, func: int = 0) -> str:
    return f"{domain}:{bus:02x}:{dev:02x}.{func}"


def config(fn: Function) -> bytes:
    """4096 bytes of config space, little-endian as the hardware returns it."""
    b = bytearray(4096)
    struct.pack_into("<HHHH", b, 0, fn.vendor, fn.device, 0x0406, 0x0010)  # Mem+ BusMaster+ DisINTx+, Cap+
    b[0x08] = fn.revision
    b[0x09], b[0x0a], b[0x0b] = fn.class_code & 0xff, (fn.class_code >> 8) & 0xff, fn.class_code >> 16
    b[0x0c] = 0x10  # cache line 64 bytes
    b[0x0e] = 1 if fn.buses else 0
    if fn.buses:
        b[0x18], b[0x19], b[0x1a] = fn.buses
    b[0x34] = CAP_EXP
    struct.pack_into("<BBH", b, CAP_EXP, 0x10, 0, 2 | fn.exp_type << 4)
    endpoint = fn.kind in ("gpu", "nic")
    struct.pack_into("<IHH", b, CAP_EXP + 4, DEVCAP_ENDPOINT if endpoint else DEVCAP_BRIDGE, fn.devctl, 0)
    if fn.acs_ctl is not None:
        struct.pack_into("<IHH", b, ECAP_ACS, 0x000d | 1 << 16, fn.acs_cap, fn.acs_ctl)
    return bytes(b)


# A ConnectX-7's VPD as lspci -vv shows it (tests/fixtures/vpd/lspci_vv_cx7.txt); the lab
# puts each NIC's own serial in [SN] and [VU].
CX7_PRODUCT = ("NVIDIA ConnectX-7 HHHL adapter Card, 200GbE / NDR200 IB, Dual-port QSFP112, PCIe 5.0 x16 "
               "with x16 PCIe extension option, Crypto, Secure Boot Capable")


def vpd(serial: str, product: str = CX7_PRODUCT) -> bytes:
    """A NIC's binary VPD (PCI spec): identifier string (0x82), VPD-R (0x90)
    with the ConnectX-7's fields and ``serial``, an RV checksum with one byte
    reserved, the end tag (0x78)."""
    fields = [("PN", "MCX713106AEHEA_QP1"), ("EC", "A5"), ("V2", "MCX713106AEHEA_QP1"), ("SN", serial),
              ("V3", "0a5efb8958deed118000946dae7db798"),
              ("VA", "MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL=CX713106A"), ("V0", "PCIeGen5 x16"),
              ("VU", f"{serial}MLNXS0D0F0")]
    name = product.encode()
    body = b"".join(k.encode() + bytes([len(v)]) + v.encode() for k, v in fields) + b"RV\x02"
    head = b"\x82" + struct.pack("<H", len(name)) + name + b"\x90" + struct.pack("<H", len(body) + 2)
    data = head + body
    return data + bytes([-sum(data) & 0xFF, 0]) + b"\x78"
