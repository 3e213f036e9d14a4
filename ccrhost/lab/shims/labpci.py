"""PCI functions of an emulated node and their config space, as the lab's
setpci and lspci see them.

Each function is /sys/bus/pci/devices/<bdf> (a link into /sys/devices,
as the kernel lays it out) with a 4096-byte ``config`` file holding its
config space, the file libpci's sysfs access method reads and writes.
Writes go through the write masks hardware has: read-only registers
(IDs, capability words, ACS control bits for features the capability
lacks) keep their value. Standard library only. ``CCRHOST_LAB_SYSFS``
points the tools at another tree (tests run them without a lab).
"""

import os
import re
import struct
import sys

ROOT = os.environ.get("CCRHOST_LAB_SYSFS", "/sys")
CONFIG_SIZE = 4096
CAP_NORMAL, CAP_EXTENDED = 1, 2
CAP_ID_EXP = 0x10
ECAP_ID_ACS = 0x0d
PCI_EXP_DEVCTL = 0x8
PCI_ACS_CAP, PCI_ACS_CTRL = 0x4, 0x6


def die(program, message, code=1):
    sys.stderr.write(f"{program}: {message}\n")
    sys.exit(code)


class Function:
    def __init__(self, bdf):
        self.bdf = bdf
        domain, bus, devfn = bdf.split(":")
        dev, func = devfn.split(".")
        self.domain, self.bus, self.dev, self.func = int(domain, 16), int(bus, 16), int(dev, 16), int(func)
        self.dir = os.path.join(ROOT, "bus", "pci", "devices", bdf)

    @property
    def slot(self):
        return f"{self.domain:04x}:{self.bus:02x}:{self.dev:02x}.{self.func:x}"

    def attr(self, name):
        try:
            with open(os.path.join(self.dir, name)) as f:
                return f.read().strip()
        except OSError:
            return None

    def link(self, name):
        try:
            return os.path.basename(os.readlink(os.path.join(self.dir, name)))
        except OSError:
            return None

    def config(self):
        with open(os.path.join(self.dir, "config"), "rb") as f:
            data = f.read()
        return bytearray(data.ljust(CONFIG_SIZE, b"\xff"))

    def word(self, cfg, addr):
        return struct.unpack_from("<H", cfg, addr)[0]

    def long(self, cfg, addr):
        return struct.unpack_from("<I", cfg, addr)[0]

    @property
    def vendor(self):
        return self.word(self.config(), 0)

    @property
    def device(self):
        return self.word(self.config(), 2)

    @property
    def device_class(self):
        return self.word(self.config(), 0x0a)


def functions():
    """Every function, in bus order (libpci sorts the same way)."""
    base = os.path.join(ROOT, "bus", "pci", "devices")
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return []
    names = [n for n in names if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", n)]
    return [Function(n) for n in sorted(names)]


def caps(cfg):
    """``[(type, id, offset)]`` in chain order, standard then extended."""
    out = []
    if struct.unpack_from("<H", cfg, 0x06)[0] & 0x10:
        where, seen = cfg[0x34] & ~3, set()
        while where and where not in seen:
            seen.add(where)
            out.append((CAP_NORMAL, cfg[where], where))
            where = cfg[where + 1] & ~3
    where, seen = 0x100, set()
    while where and where not in seen:
        seen.add(where)
        header = struct.unpack_from("<I", cfg, where)[0]
        if header in (0, 0xffffffff):
            break
        out.append((CAP_EXTENDED, header & 0xffff, where))
        where = (header >> 20) & 0xffc
    return out


def find_cap(cfg, cap_type, cap_id, number=0):
    """(offset or None, how many such capabilities there are)."""
    found = [w for t, i, w in caps(cfg) if t == cap_type and i == cap_id]
    return (found[number] if number < len(found) else None), len(found)


def write_mask(cfg):
    """Per-byte writable bits of this function's config space."""
    mask = bytearray(CONFIG_SIZE)
    struct.pack_into("<H", mask, 0x04, 0x07ff)              # Command
    if cfg[0x0e] & 0x7f == 1:
        mask[0x18:0x1b] = b"\xff\xff\xff"                    # bus numbers
    exp, _ = find_cap(cfg, CAP_NORMAL, CAP_ID_EXP)
    if exp is not None:
        struct.pack_into("<H", mask, exp + PCI_EXP_DEVCTL, 0x7fff)  # bit 15 (FLR) reads back 0
    acs, _ = find_cap(cfg, CAP_EXTENDED, ECAP_ID_ACS)
    if acs is not None:
        supported = struct.unpack_from("<H", cfg, acs + PCI_ACS_CAP)[0] & 0x7f
        struct.pack_into("<H", mask, acs + PCI_ACS_CTRL, supported)
    return mask


def write(fn, addr, width, value):
    """Store ``value`` as the hardware would: only writable bits change."""
    cfg = fn.config()
    mask = write_mask(cfg)
    for i in range(width):
        byte = (value >> (8 * i)) & 0xff
        cfg[addr + i] = (cfg[addr + i] & ~mask[addr + i] & 0xff) | (byte & mask[addr + i])
    with open(os.path.join(fn.dir, "config"), "r+b") as f:
        f.seek(addr)
        f.write(bytes(cfg[addr:addr + width]))


def read(fn, addr, width):
    cfg = fn.config()
    return int.from_bytes(cfg[addr:addr + width], "little")


# --- filters: pciutils lib/filter.c ------------------------------------------

def _hex_field(text, maximum):
    """None: any (empty or *); raises ValueError when invalid."""
    if text is None or text in ("", "*"):
        return None
    if text[:2] in ("0x", "0X"):
        text = text[2:]
    if not re.fullmatch(r"[0-9a-fA-F]+", text) or int(text, 16) > maximum:
        raise ValueError
    return int(text, 16)


def parse_slot(text):
    """``[[[domain]:][bus]:][slot][.[func]]`` -> filter dict, or an error string."""
    if len(text) >= 64:
        return "Expression too long"
    fields = text.split(":")
    if len(fields) > 3:
        return "Too many fields"
    flt = {}
    i = 0
    if len(fields) == 3:
        try:
            flt["domain"] = _hex_field(fields[0], 0x7fffffff)
        except ValueError:
            return "Invalid domain number"
        i = 1
    if len(fields) > i + 1:
        try:
            flt["bus"] = _hex_field(fields[i], 0xff)
        except ValueError:
            return "Invalid bus number"
        i += 1
    dev = fields[i]
    if dev not in ("", "*"):
        parts = dev.split(".")
        if len(parts) > 2:
            return "Invalid slot/function number"
        try:
            flt["slot"] = _hex_field(parts[0], 0x1f)
        except ValueError:
            return "Invalid slot number"
        try:
            flt["func"] = _hex_field(parts[1] if len(parts) > 1 else None, 7)
        except ValueError:
            return "Invalid function number"
    return flt


def parse_id(text):
    """``[vendor]:[device][:class[:progif]]`` -> filter dict, or an error string."""
    fields = text.split(":")
    if len(fields) > 4:
        return "Too many fields"
    if len(fields) < 2:
        return "At least two fields must be given"
    flt = {}
    for key, index, maximum, error in (("vendor", 0, 0xffff, "Invalid vendor ID"),
                                       ("device_id", 1, 0xffff, "Invalid device ID"),
                                       ("class", 2, 0xffff, "Invalid class code")):
        try:
            flt[key] = _hex_field(fields[index] if index < len(fields) else None, maximum)
        except ValueError:
            return error
    return flt


def match(flt, fn):
    for key, value in (("domain", fn.domain), ("bus", fn.bus), ("slot", fn.dev), ("func", fn.func)):
        if flt.get(key) is not None and flt[key] != value:
            return False
    if flt.get("vendor") is not None and flt["vendor"] != fn.vendor:
        return False
    if flt.get("device_id") is not None and flt["device_id"] != fn.device:
        return False
    if flt.get("class") is not None and flt["class"] != fn.device_class:
        return False
    return True
