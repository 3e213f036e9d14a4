"""Parsers for the sysfs file families ccrhost reads.

Each parser takes the text of one file as the kernel prints it (formats in
drivers/infiniband/core/sysfs.c and drivers/pci/probe.c) and returns plain
data. Nothing here touches a file: facts dump the files remotely in one
command and hand the text to these functions.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass


class SysfsFormatError(ValueError):
    """A sysfs file did not have the format the kernel prints."""


_STATE_RE = re.compile(r"\s*([0-9]{1,3}):[ \t]*(\S[^\n]*?)\s*")


def parse_numbered_state(text: str) -> tuple[int, str]:
    """``state`` and ``phys_state`` print ``"%d: %s"``, e.g. ``4: ACTIVE``."""
    match = _STATE_RE.fullmatch(text)
    if not match:
        raise SysfsFormatError(f"expected '<n>: <NAME>', got {text!r}")
    return int(match.group(1)), match.group(2)


@dataclass(frozen=True)
class LinkRate:
    gbps: float
    lanes: int
    speed: str  # "NDR", "HDR", ... or "" when the kernel printed none


# "%d%s Gb/sec (%dX%s)": the %s after the integer is ".5" for SDR x1 and
# similar; the lane count is whatever the port trained at.
_RATE_RE = re.compile(r"\s*([0-9]{1,6})(\.[0-9]{1,3})?[ \t]+Gb/sec[ \t]+\(([0-9]{1,2})X[ \t]*([A-Za-z0-9]*)\)\s*")


def parse_rate(text: str) -> LinkRate:
    """Parse a port ``rate`` file, e.g. ``400 Gb/sec (4X NDR)``."""
    match = _RATE_RE.fullmatch(text)
    if not match:
        raise SysfsFormatError(f"expected '<n> Gb/sec (<w>X <SPEED>)', got {text!r}")
    whole, frac, lanes, speed = match.groups()
    return LinkRate(gbps=float(whole + (frac or "")), lanes=int(lanes), speed=speed)


# pci_speed_string(): "2.5 GT/s PCIe" ... "64.0 GT/s PCIe"; kernels <= 5.6
# printed "8 GT/s" without the suffix.
_PCIE_SPEED_RE = re.compile(r"\s*([0-9]{1,4}(?:\.[0-9]{1,3})?)[ \t]*GT/s(?:[ \t]+PCIe)?\s*")

def parse_pcie_speed(text: str) -> float | None:
    """GT/s per lane from ``current_link_speed``; None for ``Unknown``."""
    if text.strip() in ("", "Unknown"):
        return None
    match = _PCIE_SPEED_RE.fullmatch(text)
    if not match:
        raise SysfsFormatError(f"expected '<n> GT/s PCIe', got {text!r}")
    return float(match.group(1))


_INT_RE = re.compile(r"\s*(-?)(?:0x([0-9a-fA-F]{1,16})|([0-9]{1,19}))\s*")


def parse_int(text: str) -> int:
    """A decimal or 0x-hex integer, as sysfs prints them."""
    match = _INT_RE.fullmatch(text)
    if not match:
        raise SysfsFormatError(f"expected an integer, got {text!r}")
    sign, hexa, dec = match.groups()
    return (-1 if sign else 1) * (int(hexa, 16) if hexa else int(dec))


def parse_gid(text: str) -> ipaddress.IPv6Address:
    """``gids/<i>`` prints the full ``%pI6`` form."""
    try:
        return ipaddress.IPv6Address(text.strip())
    except ValueError:
        raise SysfsFormatError(f"expected an IPv6-form GID, got {text!r}") from None


def gid_ipv4(gid: ipaddress.IPv6Address) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (``::ffff:a.b.c.d``): RoCE v2
    GIDs of an IPv4-addressed netdev."""
    mapped = gid.ipv4_mapped
    return str(mapped) if mapped else None


GID_TYPES = ("IB/RoCE v1", "RoCE v2")


def parse_gid_type(text: str) -> str:
    value = text.strip()
    if value not in GID_TYPES:
        raise SysfsFormatError(f"expected one of {GID_TYPES}, got {text!r}")
    return value


def split_dump(lines: list[str], root: str = "") -> dict[str, list[str]]:
    """Group ``grep -H '' FILES`` output by file.

    Each line is ``<path>:<one line of the file>``. Paths below ``root``
    contain no ':' (we never dump through resolved PCI paths), so the first
    ':' after the root ends the path. Returns ``{relative_path: [lines]}``.
    """
    files: dict[str, list[str]] = {}
    prefix = root.rstrip("/") + "/" if root else ""
    for line in lines:
        if not line.startswith(prefix):
            continue
        path, sep, value = line[len(prefix):].partition(":")
        if not sep:
            continue
        files.setdefault(path, []).append(value)
    return files
