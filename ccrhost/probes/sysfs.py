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

from ccrhost import numbers
from ccrhost.model.rdma import OPERSTATES  # operstate_show's names (net/core/net-sysfs.c operstates[])


class SysfsFormatError(ValueError):
    """A sysfs file did not have the format the kernel prints."""


_STATE_RE = re.compile(r"\s*([0-9]{1,3}):[ \t]*(\S[^\n]*?)\s*")


def parse_numbered_state(text: str) -> tuple[int, str]:
    """``state`` and ``phys_state`` print ``"%d: %s"``, e.g. ``4: ACTIVE``."""
    match = _STATE_RE.fullmatch(text)
    if not match:
        raise SysfsFormatError(f"expected '<n>: <NAME>', got {text!r}")
    return int(match.group(1)), match.group(2)


# drivers/infiniband/core/sysfs.c state_show, the same from 4.18 to 6.x:
# state_name[] indexed by enum ib_port_state, else "UNKNOWN".
PORT_STATES = ("NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER")
# phys_state_show: 4.18's switch (case 1..7, default "%d: <unknown>") and
# phys_state_to_str() of 5.x/6.x print the same names; "<unknown>" for 0
# and anything past the table.
PHYS_STATES = ("<unknown>", "Sleep", "Polling", "Disabled", "PortConfigurationTraining", "LinkUp",
               "LinkErrorRecovery", "Phy Test")


def _named(text: str, names: tuple[str, ...], other: str, first: int = 0) -> tuple[int, str]:
    number, name = parse_numbered_state(text)
    expected = names[number] if first <= number < len(names) else other
    if name != expected:
        raise SysfsFormatError(f"expected '{number}: {expected}', got {text!r}")
    return number, name


def parse_port_state(text: str) -> tuple[int, str]:
    """A port's ``state``: the number and the kernel's name for it, which must agree."""
    return _named(text, PORT_STATES, "UNKNOWN")


def parse_phys_state(text: str) -> tuple[int, str]:
    """A port's ``phys_state``: the number and the kernel's name for it, which must agree."""
    return _named(text, PHYS_STATES, "<unknown>")


# link_layer_show: "InfiniBand", "Ethernet", else "Unknown" (4.18 to 6.x alike).
LINK_LAYERS = ("InfiniBand", "Ethernet", "Unknown")


def parse_link_layer(text: str) -> str:
    value = text.strip()
    if value not in LINK_LAYERS:
        raise SysfsFormatError(f"expected one of {', '.join(LINK_LAYERS)}, got {text!r}")
    return value


@dataclass(frozen=True)
class LinkRate:
    gbps: float
    lanes: int
    speed: str  # "NDR", "HDR", ... or "" when the kernel printed none


# rate_show (drivers/infiniband/core/sysfs.c) prints
# "%d%s Gb/sec (%dX%s)" of rate/10, ".5" when rate%10, the lane count and
# " <SPEED>", where rate is the speed's per-lane rate in deci-Gb/s times the
# lanes. 4.18/4.19: `case IB_SPEED_SDR: default: rate = 25` leaves the name
# empty ("10 Gb/sec (4X)"); later kernels set " SDR" there and add NDR and
# XDR. A port whose width the core cannot name (rate < 0) fails the read
# with -EINVAL: no text at all.
RATE_DECI_GBPS = {"": 25, "SDR": 25, "DDR": 50, "QDR": 100, "FDR10": 100, "FDR": 140, "EDR": 250, "HDR": 500,
                  "NDR": 1000, "XDR": 2000}
# ib_width_enum_to_int(): 1X, 2X (5.x on), 4X, 8X, 12X.
RATE_LANES = (1, 2, 4, 8, 12)
_RATE_RE = re.compile(r"\s*([0-9]{1,6})(\.5)? Gb/sec \(([0-9]{1,2})X( [A-Z0-9]{3,5})?\)\s*")


def parse_rate(text: str) -> LinkRate:
    """Parse a port ``rate`` file, e.g. ``400 Gb/sec (4X NDR)``.

    The figure must be the one the kernel computes from the lanes and the
    speed name: any other (``0 Gb/sec (4X NDR)``) is not the kernel's.
    """
    match = _RATE_RE.fullmatch(text)
    if not match:
        raise SysfsFormatError(f"expected '<n> Gb/sec (<w>X <SPEED>)', got {text!r}")
    whole, half, lanes_text, name = match.groups()
    speed, lanes = (name or "").strip(), int(lanes_text)
    if speed not in RATE_DECI_GBPS or lanes not in RATE_LANES:
        raise SysfsFormatError(f"expected a speed of {'/'.join(s for s in RATE_DECI_GBPS if s)} and 1X, 2X, 4X, "
                               f"8X or 12X lanes, got {text!r}")
    deci = RATE_DECI_GBPS[speed] * lanes
    if int(whole) * 10 + (5 if half else 0) != deci:
        raise SysfsFormatError(f"expected {deci // 10}{'.5' if deci % 10 else ''} Gb/sec for {lanes}X "
                               f"{speed or 'SDR'}, got {text!r}")
    return LinkRate(gbps=deci / 10, lanes=lanes, speed=speed)


# current_link_speed and max_link_speed (drivers/pci/pci-sysfs.c):
# - 4.18 to 5.6: a switch on the Current Link Speed field ("2.5 GT/s",
#   "5 GT/s", "8 GT/s", "16 GT/s"; "32 GT/s" from 5.3) and PCIE_SPEED2STR()
#   for the max, both "Unknown speed" for anything else;
# - 5.7 on: pci_speed_string() (drivers/pci/probe.c), "2.5 GT/s PCIe",
#   "5.0 GT/s PCIe" ... "64.0 GT/s PCIe", "Unknown" outside its table.
# No kernel prints a zero or any other figure.
PCIE_SPEEDS_GTS = (2.5, 5.0, 8.0, 16.0, 32.0, 64.0)
PCIE_UNKNOWN = ("Unknown", "Unknown speed")
_PCIE_SPEED_RE = re.compile(r"\s*([0-9]{1,2}(?:\.[05])?) GT/s( PCIe)?\s*")


def parse_pcie_speed(text: str) -> float | None:
    """GT/s per lane from ``current_link_speed``; None where the kernel says it does not know."""
    if text.strip() in PCIE_UNKNOWN:
        return None
    match = _PCIE_SPEED_RE.fullmatch(text)
    gts = float(match.group(1)) if match else None
    if gts not in PCIE_SPEEDS_GTS:
        raise SysfsFormatError(f"expected one of 2.5, 5.0, 8.0, 16.0, 32.0, 64.0 GT/s (PCIe), or Unknown, got {text!r}")
    return gts


# current_link_width: "%u" of the 6-bit Negotiated Link Width (0 while the
# link is down); max_link_width: "%u" of pcie_get_width_cap(), which is
# PCIE_LNK_WIDTH_UNKNOWN (255) when the capability reads as zero. PCIe
# links are at most x32.
PCIE_WIDTH_UNKNOWN = 255


def parse_pcie_width(text: str) -> int | None:
    """Lanes from ``current_link_width``/``max_link_width``; None for the kernel's 255 (unknown)."""
    width = numbers.unsigned(text, 255)
    if width == PCIE_WIDTH_UNKNOWN:
        return None
    if width is None or width > 32:
        raise SysfsFormatError(f"expected a lane count 0 to 32 (or 255: unknown), got {text!r}")
    return width


_INT_RE = re.compile(r"\s*(-?)(?:0x([0-9a-fA-F]{1,16})|([0-9]{1,19}))\s*")


def parse_int(text: str) -> int:
    """A decimal or 0x-hex integer, as sysfs prints them (signed: counts use parse_pcie_width)."""
    match = _INT_RE.fullmatch(text)
    if not match:
        raise SysfsFormatError(f"expected an integer, got {text!r}")
    sign, hexa, dec = match.groups()
    return (-1 if sign else 1) * (int(hexa, 16) if hexa else int(dec))


def parse_tos(text: str) -> int:
    """rdma_cm's ``default_roce_tos``: "%u" of a u8 (drivers/infiniband/core/cma_configfs.c
    default_roce_tos_show), so 0..255 and never signed."""
    tos = numbers.unsigned(text, 255)
    if tos is None:
        raise SysfsFormatError(f"expected a ToS byte 0 to 255, got {text!r}")
    return tos


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


def parse_operstate(text: str) -> str:
    """A netdev's ``operstate``: one of the kernel's RFC 2863 names."""
    value = text.strip()
    if value not in OPERSTATES:
        raise SysfsFormatError(f"expected one of {', '.join(OPERSTATES)}, got {text!r}")
    return value


def parse_carrier(text: str) -> int:
    """A netdev's ``carrier``: carrier_show prints "%d" of !!netif_carrier_ok()
    (net/core/net-sysfs.c), so 0 or 1."""
    value = text.strip()
    if value not in ("0", "1"):
        raise SysfsFormatError(f"expected 0 or 1, got {text!r}")
    return int(value)


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
