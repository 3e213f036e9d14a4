"""A NIC's serial number from its PCI Vital Product Data.

Source: ``/sys/class/infiniband/<dev>/device/vpd`` (or ``/sys/class/net/
<netdev>/device/vpd``), the binary VPD of the PCI function that the kernel
(drivers/pci/vpd.c) hands out, root-readable. Layout (PCI spec, VPD): a list
of resources, each a tag byte; a large resource (bit 7 set) has a 2-byte
little-endian length: 0x82 the identifier string, 0x90 VPD-R and 0x91 VPD-W,
whose bodies are fields of a 2-byte keyword, a 1-byte length and the data;
a small resource has its length in bits 0-2 and tag 0x0f (byte 0x78) ends
the list. The walk is pciutils' (lspci ls-vpd.c cap_vpd), which prints
``[SN] Serial number: MT2314XZ0JUZ`` for a ConnectX-7 (tests/fixtures/vpd/).

Read only when a NIC-scoped reason fails (the history names the board), so
the check never waits on VPD otherwise; a VPD that cannot be read or is not
VPD is no serial, never an error in the verdict.
"""

from __future__ import annotations

import threading

from ccrhost.model.vpd import Vpd

READ_LIMIT = 1024     # bytes: the identifier and VPD-R come first and fit; VPD-W (read-write area) is not needed
READ_TIMEOUT = 2.0    # seconds for all the NICs together: a VPD read polls the device 4 bytes at a time
_END = 0x0F           # small resource tag "end" (byte 0x78)


class VpdFormatError(ValueError):
    """The bytes do not start as PCI VPD does."""


def _text(data: bytes) -> str:
    # lspci prints the bytes as they are; Mellanox pads fields with spaces (ConnectX-4 Lx: "MCX4421A-ACQN        ")
    return data.decode("ascii", errors="replace").rstrip(" \x00")


def parse_vpd(data: bytes) -> Vpd:
    """The resources of ``data`` up to the end tag or as far as they go
    (a read cut at :data:`READ_LIMIT` keeps what came before the cut)."""
    if not data or data[0] not in (0x82, 0x90):
        raise VpdFormatError(f"VPD starts with {data[:1].hex() or 'nothing'}, not an identifier (82) or VPD-R (90)")
    out = Vpd()
    pos = 0
    while pos < len(data):
        tag = data[pos]
        if tag & 0x80:
            if pos + 3 > len(data):
                break
            size, body = data[pos + 1] | data[pos + 2] << 8, pos + 3
        else:
            tag, size, body = tag >> 3, tag & 7, pos + 1
        if tag == _END:
            break
        chunk = data[body:body + size]
        if tag == 0x82:
            out.product = _text(chunk)
        elif tag == 0x90:
            _read_only(data, body, chunk, out)
        pos = body + size
    return out


def _read_only(data: bytes, start: int, chunk: bytes, out: Vpd) -> None:
    at = 0
    while at + 3 <= len(chunk):
        key, size = chunk[at:at + 2].decode("ascii", errors="replace"), chunk[at + 2]
        value = chunk[at + 3:at + 3 + size]
        if len(value) < size:  # cut short: keep what was whole
            return
        if key == "RV":  # checksum: every byte from the start through RV's first data byte sums to 0
            if size:
                out.checksum_ok = sum(data[:start + at + 4]) & 0xFF == 0
        else:
            out.read_only[key] = _text(value)
        at += 3 + size


def read_vpd(path: str, limit: int = READ_LIMIT) -> Vpd | None:
    """The VPD at ``path``; None where it cannot be read or is not VPD."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit)
        return parse_vpd(data)
    except (OSError, VpdFormatError):
        return None


def nic_serials(names: list[str], sys: str = "/sys", timeout: float = READ_TIMEOUT) -> dict[str, str]:
    """NIC (RDMA device or netdev) -> its board serial, for those whose VPD
    has one and could be read within ``timeout`` (a VPD read that hangs on
    broken firmware leaves the rest unnamed, never the check waiting)."""
    found: dict[str, str] = {}

    def read():
        for name in names:
            for cls in ("infiniband", "net"):
                vpd = read_vpd(f"{sys}/class/{cls}/{name}/device/vpd")
                if vpd is not None:
                    if vpd.serial:
                        found[name] = vpd.serial
                    break

    reader = threading.Thread(target=read, daemon=True, name="vpd")
    reader.start()
    reader.join(timeout)
    return dict(found)
