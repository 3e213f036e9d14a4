"""Parsers for the QoS tools' output and the OFED qos/ sysfs files.

Formats: mlnx_qos pretty_print() (Mellanox/mlnx-tools), iproute2 ``dcb``
(dcb_pfc.c, dcb_app.c, dcb_buffer.c, human output with ``-N``), and
MLNX_OFED's ``qos/buffer_size`` and ``qos/prio2buffer``. Every parser skips
lines it does not know: newer tool versions add some.
"""

from __future__ import annotations

import re


class QosFormatError(ValueError):
    pass


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.replace(",", " ").split()]


def parse_mlnx_qos(text: str) -> dict:
    """``mlnx_qos -i IF`` -> trust, dscp2prio, buffers, cable length, PFC."""
    out: dict = {"trust": None, "dscp2prio": {}, "buffer_size": None, "max_buffer_size": None,
                 "cable_len": None, "pfc": None, "prio2buffer": None, "dcbx": None}
    in_pfc = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("DCBX mode:"):
            out["dcbx"] = line.split(":", 1)[1].strip()
        elif line.startswith("Priority trust state:"):
            out["trust"] = line.split(":", 1)[1].strip()
        elif line.startswith("prio:") and "dscp:" in line:
            match = re.match(r"prio:(\d+)\s+dscp:([\d,\s]*)", line)
            if match:
                for dscp in match.group(2).replace(",", " ").split():
                    out["dscp2prio"][int(dscp)] = int(match.group(1))
        elif line.startswith("Receive buffer size (bytes):"):
            values = line.split(":", 1)[1].strip().rstrip(",").split(",")
            sizes = []
            for value in values:
                if value.startswith("max_buffer_size="):
                    out["max_buffer_size"] = int(value.split("=", 1)[1])
                elif value.strip():
                    sizes.append(int(value))
            out["buffer_size"] = sizes
        elif line.startswith("Cable len:"):
            out["cable_len"] = int(line.split(":", 1)[1])
        elif line.startswith("PFC configuration:"):
            in_pfc = True
        elif in_pfc and line.startswith("priority"):
            continue
        elif in_pfc and line.startswith("enabled"):
            out["pfc"] = _ints(line[len("enabled"):])
        elif in_pfc and line.startswith("buffer"):
            out["prio2buffer"] = _ints(line[len("buffer"):])
        elif line.startswith("tc:"):
            in_pfc = False
    if out["trust"] is None:
        raise QosFormatError("no 'Priority trust state' line in mlnx_qos output")
    if out["pfc"] is not None and len(out["pfc"]) != 8:
        raise QosFormatError(f"PFC line has {len(out['pfc'])} priorities, expected 8")
    return out


def _pairs(words: list[str]) -> list[tuple[str, str]]:
    return [tuple(w.split(":", 1)) for w in words if ":" in w]  # type: ignore[misc]


def parse_dcb_pfc(text: str) -> dict:
    """``dcb pfc show dev IF``; the pre-release spelling ``pg-pfc`` too."""
    out = {"pfc_cap": None, "macsec_bypass": None, "delay": None, "prio_pfc": None}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "pfc-cap":
            kv = dict(zip(words[::2], words[1::2]))
            out["pfc_cap"] = int(kv["pfc-cap"]) if "pfc-cap" in kv else None
            out["macsec_bypass"] = kv.get("macsec-bypass")
            out["delay"] = int(kv["delay"]) if "delay" in kv else None
        elif words[0] in ("prio-pfc", "pg-pfc"):
            flags = [0] * 8
            for prio, state in _pairs(words[1:]):
                flags[int(prio)] = 1 if state == "on" else 0
            out["prio_pfc"] = flags
    if out["prio_pfc"] is None:
        raise QosFormatError("no prio-pfc line in dcb pfc output")
    return out


def parse_dcb_app_dscp(text: str) -> dict[int, int]:
    """``dcb -N app show dev IF dscp-prio`` -> {dscp: prio}."""
    table: dict[int, int] = {}
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["dscp-prio"]:
            for dscp, prio in _pairs(words[1:]):
                if not dscp.isdigit():
                    raise QosFormatError(f"DSCP {dscp!r} by name: run dcb with -N")
                table[int(dscp)] = int(prio)
    return table


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)(Mb|Kb|b)$")
_UNITS = {"Mb": 1024 * 1024, "Kb": 1024, "b": 1}


def parse_size(text: str) -> int:
    """iproute2 print_size(): ``10Kb`` is 10 KiB (bytes, not bits)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise QosFormatError(f"expected a size such as 10Kb, got {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def parse_dcb_buffer(text: str) -> dict:
    out = {"prio_buffer": None, "buffer_size": None, "total_size": None}
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["prio-buffer"]:
            flags = [0] * 8
            for prio, buf in _pairs(words[1:]):
                flags[int(prio)] = int(buf)
            out["prio_buffer"] = flags
        elif words[:1] == ["buffer-size"]:
            sizes = [0] * 8
            for buf, size in _pairs(words[1:]):
                sizes[int(buf)] = parse_size(size)
            out["buffer_size"] = sizes
        elif words[:1] == ["total-size"] and len(words) > 1:
            out["total_size"] = parse_size(words[1])
    return out


def parse_ofed_buffer_size(text: str) -> dict:
    """MLNX_OFED ``/sys/class/net/IF/qos/buffer_size``."""
    out: dict = {"port_buffer_size": None, "spare_buffer_size": None, "buffers": []}
    for line in text.splitlines():
        if line.startswith("Port buffer size"):
            out["port_buffer_size"] = int(line.split("=", 1)[1])
        elif line.startswith("Spare buffer size"):
            out["spare_buffer_size"] = int(line.split("=", 1)[1])
        else:
            words = line.split()
            if len(words) == 4 and all(w.isdigit() for w in words):
                index, size, xoff, xon = map(int, words)
                out["buffers"].append({"buffer": index, "size": size, "xoff": xoff, "xon": xon})
    return out


def parse_ofed_prio2buffer(text: str) -> list[int]:
    """MLNX_OFED ``qos/prio2buffer``: a ``Priority Buffer`` header, then rows."""
    table = [0] * 8
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and all(w.isdigit() for w in words):
            table[int(words[0])] = int(words[1])
    return table
