"""Parsers for the QoS tools' output and the OFED qos/ sysfs files.

Formats: mlnx_qos pretty_print() (Mellanox/mlnx-tools), iproute2 ``dcb``
(dcb_pfc.c, dcb_app.c, dcb_buffer.c, human output with ``-N``), and
MLNX_OFED's ``qos/buffer_size`` and ``qos/prio2buffer``. Every parser skips
lines it does not know: newer tool versions add some.
"""

from __future__ import annotations

import re
import shlex

from ccrhost.model.qos import QosInterface, QosReading  # noqa: F401  (the records this probe fills)
from ccrhost import numbers
from ccrhost.probes.sections import split


class QosFormatError(ValueError):
    """A QoS tool or OFED qos/ file printed what its format does not allow;
    the message quotes the offending line."""


def _number(word: str, what: str, line: str, lo: int = 0, hi: int | None = None) -> int:
    word = word.strip()
    value = numbers.integer(word, lo, hi)
    if value is None:
        allowed = f"an integer {lo}..{hi}" if hi is not None else f"an integer >= {lo}"
        raise QosFormatError(f"line {line.strip()!r}: {what} {word!r} is not {allowed}")
    return value


def _eight(words: list[str], what: str, line: str, hi: int | None) -> list[int]:
    if len(words) != 8:
        raise QosFormatError(f"line {line.strip()!r}: {len(words)} {what} values, expected 8")
    return [_number(w, what, line, 0, hi) for w in words]


def _all_eight(entries: list[tuple[int, int]], what: str, line: str) -> list[int]:
    """``(index, value)`` entries of one 8-entry record (a priority or buffer
    map) as a list: every index 0..7 exactly once. A tool's output cut short
    ("prio-pfc 0:off 1:off 2:off 3:on") is no record: the missing entries
    are unknown, not "off" or 0."""
    seen: dict[int, int] = {}
    for index, value in entries:
        if index in seen:
            raise QosFormatError(f"line {line.strip()!r}: {what} {index} appears twice")
        seen[index] = value
    missing = [i for i in range(8) if i not in seen]
    if missing:
        raise QosFormatError(f"line {line.strip()!r}: {what} {', '.join(map(str, missing))} missing; "
                             "expected all eight (0-7)")
    return [seen[i] for i in range(8)]


def _pairs(words: list[str], line: str) -> list[tuple[str, str]]:
    """``KEY:VALUE`` words; a word without ':' is not dcb's format."""
    out = []
    for word in words:
        key, sep, value = word.partition(":")
        if not sep:
            raise QosFormatError(f"line {line.strip()!r}: {word!r} is not KEY:VALUE")
        out.append((key, value))
    return out


_DSCP_LINE = re.compile(r"prio:(\S+)\s+dscp:(.*)")


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
            if out["trust"] not in ("pcp", "dscp"):
                raise QosFormatError(f"line {line!r}: trust state {out['trust']!r} is not pcp or dscp")
        elif line.startswith("prio:"):
            match = _DSCP_LINE.fullmatch(line)
            if not match:
                raise QosFormatError(f"line {line!r}: expected 'prio:N dscp:D,D,...'")
            prio = _number(match.group(1), "priority", line, 0, 7)
            for dscp in match.group(2).replace(",", " ").split():
                number = _number(dscp, "DSCP", line, 0, 63)
                if number in out["dscp2prio"]:
                    raise QosFormatError(f"line {line!r}: DSCP {number} is mapped twice")
                out["dscp2prio"][number] = prio
        elif line.startswith("Receive buffer size (bytes):"):
            values = line.split(":", 1)[1].strip().rstrip(",").split(",")
            sizes = []
            for value in values:
                if value.startswith("max_buffer_size="):
                    out["max_buffer_size"] = _number(value.split("=", 1)[1], "max_buffer_size", line)
                elif value.strip():
                    sizes.append(_number(value, "buffer size", line))
            out["buffer_size"] = _eight([str(x) for x in sizes], "buffer size", line, None)
        elif line.startswith("Cable len:"):
            out["cable_len"] = _number(line.split(":", 1)[1], "cable length", line)
        elif line.startswith("PFC configuration:"):
            in_pfc = True
        elif in_pfc and line.startswith("priority"):
            continue
        elif in_pfc and line.startswith("enabled"):
            out["pfc"] = _eight(line[len("enabled"):].replace(",", " ").split(), "PFC enabled", line, 1)
        elif in_pfc and line.startswith("buffer"):
            out["prio2buffer"] = _eight(line[len("buffer"):].replace(",", " ").split(), "prio2buffer", line, 7)
        elif line.startswith("tc:"):
            in_pfc = False
    # pretty_print()'s record: the table of a dscp trust, the PFC "enabled"
    # row, and a "buffer" row exactly when the buffer sizes are printed
    # (both come from the one buffer query). Output cut short lacks one.
    if out["trust"] is None:
        raise QosFormatError("no 'Priority trust state' line")
    if out["trust"] == "dscp" and not out["dscp2prio"]:
        raise QosFormatError("trust is dscp but no 'prio:N dscp:...' line follows")
    if out["pfc"] is None:
        raise QosFormatError("no PFC 'enabled' row")
    if (out["buffer_size"] is None) != (out["prio2buffer"] is None):
        have, lack = (("'Receive buffer size' line", "PFC 'buffer' row") if out["prio2buffer"] is None
                      else ("PFC 'buffer' row", "'Receive buffer size' line"))
        raise QosFormatError(f"a {have} without the {lack}")
    return out


def parse_dcb_pfc(text: str) -> dict:
    """``dcb pfc show dev IF``; the pre-release spelling ``pg-pfc`` too."""
    out = {"pfc_cap": None, "macsec_bypass": None, "delay": None, "prio_pfc": None}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "pfc-cap":
            kv = dict(zip(words[::2], words[1::2]))
            out["pfc_cap"] = _number(kv["pfc-cap"], "pfc-cap", line, 0, 8) if "pfc-cap" in kv else None
            out["macsec_bypass"] = kv.get("macsec-bypass")
            out["delay"] = _number(kv["delay"], "delay", line) if "delay" in kv else None
        elif words[0] in ("prio-pfc", "pg-pfc"):
            entries = []
            for prio, state in _pairs(words[1:], line):
                if state not in ("on", "off"):
                    raise QosFormatError(f"line {line.strip()!r}: PFC state {state!r} is not on or off")
                entries.append((_number(prio, "priority", line, 0, 7), int(state == "on")))
            out["prio_pfc"] = _all_eight(entries, "priority", line)
    if out["prio_pfc"] is None:
        raise QosFormatError("no prio-pfc line")
    return out


def parse_dcb_app_dscp(text: str) -> dict[int, int]:
    """``dcb -N app show dev IF dscp-prio`` -> {dscp: prio}."""
    table: dict[int, int] = {}
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["dscp-prio"]:
            for dscp, prio in _pairs(words[1:], line):
                if dscp[:1].isalpha():
                    raise QosFormatError(f"line {line.strip()!r}: DSCP {dscp!r} by name: run dcb with -N")
                table[_number(dscp, "DSCP", line, 0, 63)] = _number(prio, "priority", line, 0, 7)
    return table


_SIZE = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,6})?)(Mb|Kb|b)")
_UNITS = {"Mb": 1024 * 1024, "Kb": 1024, "b": 1}


def parse_size(text: str) -> int:
    """iproute2 print_size(): ``10Kb`` is 10 KiB (bytes, not bits)."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise QosFormatError(f"expected a size such as 10Kb, got {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def parse_dcb_buffer(text: str) -> dict:
    out = {"prio_buffer": None, "buffer_size": None, "total_size": None}
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["prio-buffer"]:
            entries = [(_number(prio, "priority", line, 0, 7), _number(buf, "buffer", line, 0, 7))
                       for prio, buf in _pairs(words[1:], line)]
            out["prio_buffer"] = _all_eight(entries, "priority", line)
        elif words[:1] == ["buffer-size"]:
            entries = []
            for buf, size in _pairs(words[1:], line):
                try:
                    entries.append((_number(buf, "buffer", line, 0, 7), parse_size(size)))
                except QosFormatError as exc:
                    raise QosFormatError(f"line {line.strip()!r}: {exc}") from None
            out["buffer_size"] = _all_eight(entries, "buffer", line)
        elif words[:1] == ["total-size"] and len(words) > 1:
            try:
                out["total_size"] = parse_size(words[1])
            except QosFormatError as exc:
                raise QosFormatError(f"line {line.strip()!r}: {exc}") from None
    return out


def parse_ofed_buffer_size(text: str) -> dict:
    """MLNX_OFED ``/sys/class/net/IF/qos/buffer_size``."""
    out: dict = {"port_buffer_size": None, "spare_buffer_size": None, "buffers": []}
    for line in text.splitlines():
        for label, key in (("Port buffer size", "port_buffer_size"), ("Spare buffer size", "spare_buffer_size")):
            if line.startswith(label):
                name, sep, value = line.partition("=")
                if not sep:
                    raise QosFormatError(f"line {line.strip()!r}: expected '{label} = N'")
                out[key] = _number(value, label, line)
                break
        else:
            words = line.split()
            if len(words) == 4 and all(numbers.integer(w) is not None for w in words):
                index = _number(words[0], "buffer", line, 0, 7)
                size, xoff, xon = (_number(w, what, line) for w, what in zip(words[1:], ("size", "xoff", "xon")))
                out["buffers"].append({"buffer": index, "size": size, "xoff": xoff, "xon": xon})
    # mlx5e's qos/buffer_size prints both totals and one row per buffer, 0..7
    for label, key in (("Port buffer size", "port_buffer_size"), ("Spare buffer size", "spare_buffer_size")):
        if out[key] is None:
            raise QosFormatError(f"no '{label} = N' line")
    _all_eight([(b["buffer"], 0) for b in out["buffers"]], "buffer", "buffer rows")
    return out


def parse_ofed_prio2buffer(text: str) -> list[int]:
    """MLNX_OFED ``qos/prio2buffer``: a ``Priority Buffer`` header, then rows."""
    entries = []
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and all(numbers.integer(w) is not None for w in words):
            entries.append((_number(words[0], "priority", line, 0, 7), _number(words[1], "buffer", line, 0, 7)))
    return _all_eight(entries, "priority", "priority rows")


_PER_IF = r"""
echo "@@if $IF"
echo "@@mtu"; _l "/sys/class/net/$IF/mtu"
if command -v mlnx_qos >/dev/null 2>&1 && [ -d "/sys/class/net/$IF/qos" ]; then
  out=$(mlnx_qos -i "$IF" 2>&1); echo "@@mlnx_qos $?"; printf '%s\n' "$out"
elif command -v dcb >/dev/null 2>&1; then
  out=$(dcb -N app show dev "$IF" dscp-prio 2>&1); echo "@@dcb_app $?"; printf '%s\n' "$out"
  out=$(dcb pfc show dev "$IF" 2>&1); echo "@@dcb_pfc $?"; printf '%s\n' "$out"
  out=$(dcb buffer show dev "$IF" 2>&1); echo "@@dcb_buffer $?"; printf '%s\n' "$out"
fi
if [ -d "/sys/class/net/$IF/ecn" ]; then
  echo "@@ecn"; (cd "/sys/class/net/$IF/ecn" && grep -Hs '' roce_rp/* roce_np/* roce_rp/enable/* roce_np/enable/*)
fi
[ -r "/sys/class/net/$IF/qos/buffer_size" ] && { echo "@@ofed_buffer"; _l "/sys/class/net/$IF/qos/buffer_size"; }
[ -r "/sys/class/net/$IF/qos/prio2buffer" ] && { echo "@@ofed_prio2buffer"; _l "/sys/class/net/$IF/qos/prio2buffer"; }
pci=$(cd -P "/sys/class/net/$IF/device" 2>/dev/null && printf '%s' "${PWD##*/}")
cc="/sys/kernel/debug/mlx5/$pci/cc_params"
if [ -n "$pci" ] && [ -d "$cc" ]; then echo "@@cc_params $cc"; (cd "$cc" && grep -Hs '' *); fi
"""

def command(interfaces, wants: str) -> str:
    """One command reading every interface's QoS state, and whether systemd
    runs and the boot unit is enabled (``wants``: its .wants/ link)."""
    return _command(" ".join(shlex.quote(i) for i in interfaces), wants)


# The netdevs of every RDMA device with an Ethernet (RoCE) port, found on
# the node itself so that the snapshot needs no earlier read.
_ROCE_NETDEVS = ("$(for d in /sys/class/infiniband/*; do e=; for l in \"$d\"/ports/*/link_layer; do "
                 "v=; { read -r v < \"$l\"; } 2>/dev/null; [ \"$v\" = Ethernet ] && e=1; done; [ -n \"$e\" ] && "
                 "for n in \"$d\"/device/net/*; do [ -e \"$n\" ] && echo \"${n##*/}\"; done; done | sort -u)")


def command_roce(wants: str) -> str:
    """:func:`command` for every RoCE netdev of the node."""
    return _command(_ROCE_NETDEVS, wants)


# A file's lines with builtins only (as cat prints them): the snippet reads
# some forty small files a node, and a process each was most of its time.
_LINES = "_l() { while IFS= read -r _v || [ -n \"$_v\" ]; do printf '%s\\n' \"$_v\"; done < \"$1\"; } 2>/dev/null; "


def _command(names: str, wants: str) -> str:
    return (f"{_LINES}for IF in {names}; do {_PER_IF} done; "
            f"echo @@systemd; [ -d /run/systemd/system ] && echo running; "
            # with the host's PIDs (a hostPID container) but not its /run: systemd runs, unseen
            f"[ \"$(cat /proc/1/comm 2>/dev/null)\" = systemd ] && echo pid1; "
            f"[ -e {shlex.quote(wants)} ] && echo enabled; true")


def _grep_values(lines: list[str], where: str) -> dict[str, int]:
    """``grep -H`` lines ``path:value`` of integer files (relative to ``where``)."""
    out = {}
    for line in lines:
        path, sep, value = line.partition(":")
        if not sep:
            continue
        number = numbers.integer(value)
        if number is None:
            raise QosFormatError(f"{where}/{path} holds {value!r}, not an integer")
        out[path] = number
    return out


# what each section of an interface's output was read from, for messages
_SOURCES = {
    "mtu": "/sys/class/net/{i}/mtu", "mlnx_qos": "mlnx_qos -i {i}",
    "dcb_app": "dcb -N app show dev {i} dscp-prio", "dcb_pfc": "dcb pfc show dev {i}",
    "dcb_buffer": "dcb buffer show dev {i}", "ecn": "/sys/class/net/{i}/ecn",
    "ofed_buffer": "/sys/class/net/{i}/qos/buffer_size", "ofed_prio2buffer": "/sys/class/net/{i}/qos/prio2buffer",
    "cc_params": "{arg}",
}


def parse_qos_dump(lines: list[str]) -> QosReading:
    """The output of :func:`command` -> a :class:`QosReading`. Output one
    interface's parser cannot read is kept in that interface's ``errors``."""
    reading = QosReading()
    st, iface = None, ""
    for section in split(lines):
        tag, arg, body, text = section.tag, section.arg, section.lines, section.text
        if tag == "if":
            iface = arg
            st = reading.interfaces[arg] = QosInterface()
            continue
        if tag == "systemd":
            words = {line.strip() for line in body}
            reading.systemd, reading.unit_enabled = "running" in words, "enabled" in words
            reading.systemd_pid1 = "pid1" in words
            st = None
            continue
        if st is None:
            continue
        source = _SOURCES.get(tag, tag).format(i=iface, arg=arg)
        try:
            _read_section(st, tag, arg, body, text, source)
        except QosFormatError as exc:
            # this interface's reading is incomplete: its stage refuses it, the others go on
            st.errors.append(f"cannot read {source}: {exc}")
    return reading


def _read_section(st: QosInterface, tag: str, arg: str, body: list[str], text: str, source: str) -> None:
    """Fill ``st`` from one section of the interface's output."""
    if tag in ("mlnx_qos", "dcb_app", "dcb_pfc", "dcb_buffer") and arg != "0":
        st.errors.append(f"{source} failed: {text.strip().splitlines()[-1] if text.strip() else 'exit ' + arg}")
    elif tag == "mtu" and text.strip():
        st.mtu = numbers.integer(text, 68, 1 << 20)
        if st.mtu is None:
            raise QosFormatError(f"{text.strip()!r} is not an MTU")
    elif tag == "mlnx_qos":
        q = parse_mlnx_qos(text)
        st.backend, st.trust, st.dscp2prio, st.pfc = "ofed", q["trust"], q["dscp2prio"], q["pfc"]
        st.cable_len, st.buffer_size, st.prio2buffer = q["cable_len"], q["buffer_size"], q["prio2buffer"]
        st.port_buffer = q["max_buffer_size"]
    elif tag == "dcb_app":
        st.backend = "upstream"
        st.dscp2prio = parse_dcb_app_dscp(text)
        st.trust = "dscp" if st.dscp2prio else "pcp"
    elif tag == "dcb_pfc":
        pfc = parse_dcb_pfc(text)
        st.pfc, st.cable_len = pfc["prio_pfc"], pfc["delay"]
    elif tag == "dcb_buffer":
        buf = parse_dcb_buffer(text)
        st.buffer_size, st.prio2buffer, st.port_buffer = buf["buffer_size"], buf["prio_buffer"], buf["total_size"]
    elif tag == "ecn":
        st.ecn = _grep_values(body, source)
    elif tag == "ofed_buffer":
        parsed = parse_ofed_buffer_size(text)
        st.ofed_buffers = parsed["buffers"]
        st.port_buffer = st.port_buffer or parsed["port_buffer_size"]
    elif tag == "ofed_prio2buffer":
        st.prio2buffer = st.prio2buffer or parse_ofed_prio2buffer(text)
    elif tag == "cc_params":
        st.cc_params_dir = arg
        st.cc_params = _grep_values(body, source)
