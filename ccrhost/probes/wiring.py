"""The fabric's wiring as this node sees it, in one shell snippet: LLDP
neighbours (RoCE), each InfiniBand port's first-hop switch and subnet
manager, and the P_Keys, GIDs, GUIDs and LIDs in sysfs (issue 48).

Formats (verbatim samples in tests/fixtures/wiring/, sources in its README):

- ``lldpctl -f json`` (lldpd src/client/json_writer.c, ``json_element_cleanup``):
  an array of one member is replaced by the member and an object with a
  ``name`` key becomes ``{name: object}``. So ``lldp.interface`` is
  ``{"eth0": {...}}`` for one neighbour and ``[{"eth0": {...}}, {"eth1": {...}}]``
  for several (one entry per neighbour: two neighbours on one interface
  repeat its name, sonic-utilities tests/lldp_test.py); ``chassis`` is
  ``{"<SysName>": {"id": ...}}``, or ``{"id": ...}`` without a SysName; no
  neighbour at all prints ``"lldp": {}``. Values ``yes``/``on`` and
  ``no``/``off`` become JSON booleans. Without a daemon lldpctl exits 1 after
  ``[WARN/control] unable to connect to socket ...`` (src/ctl.c) and
  ``unable to get configuration from lldpd. Unable to connect to lldpd daemon``
  (src/client/lldpcli.c, src/lib/errors.c).
- ``smpquery -C DEV -P PORT -D nodeinfo 0,PORT`` (infiniband-diags smpquery.c,
  man smpquery(8) "smpquery -D nodeinfo 0 # nodeinfo by direct route"; the
  path's second hop must be the port used, man sminfo(8) -D): the node at the
  far end of PORT's cable. ``# Node info: DR path slid ...; dlid ...; 0,1`` then
  ``Name:<dots>value`` lines padded to 32 columns (libibmad fields.c
  ``_mad_dump_field``); ``NodeType`` is ``Switch``, ``Channel Adapter`` or
  ``Router`` (dump.c ``mad_dump_node_type``), ``Guid`` the node GUID, and
  ``LocalPort`` the number of the port that received the SMP: the switch's
  port this NIC is cabled to (IBA NodeInfo LocalPortNum).
- ``smpquery ... nodedesc 0,PORT``: ``Node Description:<dots><description>``.
- ``sminfo -C DEV -P PORT``: ``sminfo: sm lid %d sm guid 0x%x, activity count %u
  priority %d state %d %s`` (sminfo.c).
- sysfs (drivers/infiniband/core/sysfs.c): ``pkeys/<n>`` ``0x%04x``; ``lid`` and
  ``sm_lid`` ``0x%x``; ``node_guid`` ``%04x:%04x:%04x:%04x``; ``gids/<n>`` ``%pI6``;
  ``gid_attrs/types/<n>`` ``IB/RoCE v1`` | ``RoCE v2`` (shared/reference/roce.md §8).
"""

from __future__ import annotations

import json
import re
import shlex

from ccrhost.model.wiring import Neighbour, NicWiring, SmInfo, WiringReading
from ccrhost.probes import sysfs
from ccrhost.probes.sections import split

IB_ROOT = "/sys/class/infiniband"
WHAT = "lldpctl, smpquery, sminfo and /sys/class/infiniband"
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_T = "timeout -k 1 5"


class WiringFormatError(ValueError):
    """Output the tools never print; the message quotes it."""


def command(devices: tuple[str, ...] = ()) -> str:
    """The snippet. ``devices``: the RDMA devices whose InfiniBand ports are
    asked for their neighbour (all when empty): each query is a MAD round
    trip, bounded by its own timeout."""
    only = " ".join(shlex.quote(d) for d in devices)
    ask = f'case " {only} " in *" $d "*) ;; *) continue;; esac; ' if devices else ""
    smp = (f'{_T} smpquery -C "$d" -P "$n" -D')
    return "; ".join([
        "echo @@lldp; if command -v lldpctl >/dev/null 2>&1; then o=$(" + _T + " lldpctl -f json 2>&1); r=$?;"
        " printf '%s\\n' \"$o\"; else r=none; fi; echo \"@@lldprc $r\"",
        f"echo @@ib; if cd {IB_ROOT} 2>/dev/null; then"
        " grep -Hs '' */node_guid */ports/*/link_layer */ports/*/state */ports/*/lid */ports/*/sm_lid"
        " */ports/*/gid_attrs/types/*;"
        f" grep -Hsv '^{ZERO_GID}$' */ports/*/gids/*; grep -Hsv '^0x0000$' */ports/*/pkeys/*;"
        " echo @@net; for x in */device/net/*; do [ -e \"$x\" ] && echo \"$x\"; done;"
        " for p in */ports/*; do d=${p%%/*}; n=${p##*/}; " + ask +
        "l=; { read -r l < \"$p/link_layer\"; } 2>/dev/null; [ \"$l\" = InfiniBand ] || continue;"
        " if ! command -v smpquery >/dev/null 2>&1; then echo \"@@nodeinfo $d $n\"; echo \"@@nodeinforc none\";"
        " continue; fi;"
        f" echo \"@@nodeinfo $d $n\"; {smp} nodeinfo \"0,$n\" 2>&1; echo \"@@nodeinforc $?\";"
        f" echo \"@@nodedesc $d $n\"; {smp} nodedesc \"0,$n\" 2>&1; echo \"@@nodedescrc $?\";"
        " if command -v sminfo >/dev/null 2>&1; then echo \"@@sminfo $d $n\";"
        f" {_T} sminfo -C \"$d\" -P \"$n\" 2>&1; echo \"@@sminforc $?\"; fi; done; fi",
        "true",
    ])


# -- lldpctl -f json ----------------------------------------------------------------

def _one_keyed(value) -> list[tuple[str, dict]]:
    """``{name: object}`` wrappers, alone or in a list (json_writer.c): (name, object) pairs."""
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise WiringFormatError(f"lldpctl -f json: an interface entry {str(item)[:80]!r}")
        for name, body in item.items():
            if not isinstance(body, dict):
                raise WiringFormatError(f"lldpctl -f json: interface {name!r} is {str(body)[:80]!r}")
            out.append((name, body))
    return out


def _text(value) -> str | None:
    """A leaf: a string, or an object whose ``value`` is one (an id keeps its ``type``)."""
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, list):  # the same key twice (two descriptions): the first
        value = value[0] if value else None
        return _text(value)
    return value if isinstance(value, str) else None


def _chassis(value) -> tuple[str | None, str | None]:
    """(SysName, chassis id value): ``{"<SysName>": {"id": ...}}`` or ``{"id": ...}`` without a name."""
    if isinstance(value, list):  # two chassis entries: the first
        value = value[0] if value else {}
    if not isinstance(value, dict):
        return None, None
    if "id" in value and not (len(value) == 1 and isinstance(value["id"], dict) and "id" in value["id"]):
        return None, _text(value["id"])
    if len(value) == 1:
        name, body = next(iter(value.items()))
        if isinstance(body, dict):
            return name, _text(body.get("id"))
    return None, None


def _port(value) -> str | None:
    """The port as the switch names it: an ``ifname`` or ``local`` port id
    (Cumulus ``swp12``, SONiC ``Eth1/1``), else the port description."""
    if isinstance(value, list):
        value = value[0] if value else {}
    if not isinstance(value, dict):
        return None
    pid = value.get("id")
    kind = pid.get("type") if isinstance(pid, dict) else None
    if kind in ("ifname", "local") or (kind is None and _text(pid)):
        return _text(pid)
    return _text(value.get("descr")) or _text(pid)


def parse_lldp_json(text: str) -> dict[str, list[Neighbour]]:
    """Netdev -> its LLDP neighbours, from ``lldpctl -f json`` (lldpctl
    prints ``show neighbors details``)."""
    start = text.find("{")
    if start < 0:
        raise WiringFormatError(f"lldpctl -f json printed no JSON: {text.strip()[:160]!r}")
    try:  # raw_decode: a warning lldpctl prints after the object (stderr is merged) is not the JSON's
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except (ValueError, RecursionError) as exc:
        raise WiringFormatError(f"lldpctl -f json printed what is not JSON ({exc})") from None
    if not isinstance(doc, dict) or "lldp" not in doc:
        raise WiringFormatError(f"lldpctl -f json printed no lldp object: {text.strip()[:160]!r}")
    lldp = doc["lldp"]
    if isinstance(lldp, list):  # json0's shape (never from -f json, but it is the same data)
        lldp = lldp[0] if lldp else {}
    if not isinstance(lldp, dict):
        raise WiringFormatError(f"lldpctl -f json: lldp is {str(lldp)[:80]!r}")
    out: dict[str, list[Neighbour]] = {}
    if "interface" not in lldp:
        return out  # no neighbour on any interface
    for name, body in _one_keyed(lldp["interface"]):
        sysname, chassis_id = _chassis(body.get("chassis"))
        out.setdefault(name, []).append(Neighbour("lldp", sysname, chassis_id, _port(body.get("port"))))
    return out


# -- infiniband-diags ------------------------------------------------------------------

_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9_\[\]]*):\.+(.*)$")


def guid(text: str) -> str | None:
    """A GUID as ``0x`` and 16 lower-case hex digits: from ``0x2c90200259201``
    (libibmad mad_dump_hex drops no digit, sminfo's PRIx64 does) or sysfs's
    ``0c42:a103:0040:29a0``."""
    t = text.strip().lower()
    if re.fullmatch(r"0x[0-9a-f]{1,16}", t):
        return "0x" + t[2:].rjust(16, "0")
    if re.fullmatch(r"[0-9a-f]{4}(:[0-9a-f]{4}){3}", t):
        return "0x" + t.replace(":", "")
    return None


def parse_nodeinfo(lines: list[str]) -> Neighbour:
    fields = {}
    for line in lines:
        m = _FIELD.match(line.strip())
        if m:
            fields[m.group(1)] = m.group(2).strip()
    if not any(x.startswith("# Node info:") for x in lines) or "Guid" not in fields or "LocalPort" not in fields:
        raise WiringFormatError(f"smpquery nodeinfo printed {' '.join(x.strip() for x in lines)[:160]!r}")
    node_guid = guid(fields["Guid"])
    if node_guid is None or not fields["LocalPort"].isdigit():
        raise WiringFormatError(f"smpquery nodeinfo: Guid {fields['Guid'][:40]!r}, LocalPort "
                                f"{fields['LocalPort'][:20]!r}")
    return Neighbour("ib", None, node_guid, fields["LocalPort"], fields.get("NodeType"))


def parse_nodedesc(lines: list[str]) -> str:
    for line in lines:
        m = re.match(r"^Node Description:\.+(.*)$", line.rstrip("\n"))
        if m:
            return m.group(1).strip()
    raise WiringFormatError(f"smpquery nodedesc printed {' '.join(x.strip() for x in lines)[:160]!r}")


_SMINFO = re.compile(r"^sminfo: sm lid (\d+) sm guid (0x[0-9a-fA-F]+), activity count \d+ priority (\d+) "
                     r"state \d+ (\S+)$")


def parse_sminfo(lines: list[str]) -> SmInfo:
    for line in lines:
        m = _SMINFO.match(line.strip())
        if m:
            return SmInfo(int(m.group(1)), guid(m.group(2)) or m.group(2), int(m.group(3)), m.group(4))
    raise WiringFormatError(f"sminfo printed {' '.join(x.strip() for x in lines)[:160]!r}")


# -- the whole snippet ----------------------------------------------------------------------

def _sysfs(lines: list[str], net: list[str]) -> dict[str, NicWiring]:
    files = sysfs.split_dump(lines)
    nics: dict[str, NicWiring] = {}
    guids: dict[str, str | None] = {}
    types: dict[tuple[str, int, int], str] = {}
    gids: dict[tuple[str, int, int], str] = {}
    for path, values in files.items():
        parts = path.split("/")
        value = values[0].strip() if values else ""
        if len(parts) == 2 and parts[1] == "node_guid":
            guids[parts[0]] = guid(value)
            continue
        if len(parts) < 4 or parts[1] != "ports" or not parts[2].isdigit():
            continue
        dev, port = parts[0], int(parts[2])
        nic = nics.setdefault(f"{dev}/{port}", NicWiring(dev, port))
        leaf = parts[3]
        try:
            if leaf == "link_layer":
                nic.link_layer = sysfs.parse_link_layer(value)
            elif leaf == "state":
                nic.state = sysfs.parse_port_state(value)[1]
            elif leaf in ("lid", "sm_lid"):
                setattr(nic, leaf, sysfs.parse_int(value))
            elif leaf == "pkeys" and len(parts) == 5:
                nic.pkeys = (nic.pkeys or []) + [_pkey(value, path)]
            elif leaf == "gids" and len(parts) == 5 and parts[4].isdigit():
                gids[(dev, port, int(parts[4]))] = sysfs.parse_gid(value).exploded  # the %pI6 form again
            elif leaf == "gid_attrs" and len(parts) == 6 and parts[4] == "types" and parts[5].isdigit():
                types[(dev, port, int(parts[5]))] = sysfs.parse_gid_type(value)
        except sysfs.SysfsFormatError as exc:
            raise WiringFormatError(f"{IB_ROOT}/{path}: {exc}") from None
    for nic in nics.values():
        nic.node_guid = guids.get(nic.device)
        # no non-zero entry at all is not read: an InfiniBand port holds at least the default key at index 0
        nic.pkeys = sorted(nic.pkeys) if nic.pkeys is not None else None
        for path in net:  # <dev>/device/net/<if>
            parts = path.strip().split("/")
            if len(parts) == 4 and parts[0] == nic.device and parts[1:3] == ["device", "net"]:
                nic.netdev = nic.netdev or parts[3]
    for (dev, port, index), gid in gids.items():
        nic = nics.get(f"{dev}/{port}")
        if nic is not None:
            nic.gids[index] = (gid, types.get((dev, port, index)))
    return nics


def _pkey(value: str, path: str) -> int:
    if not re.fullmatch(r"0x[0-9a-f]{4}", value):
        raise WiringFormatError(f"{IB_ROOT}/{path}: expected 0x and four hex digits, got {value[:40]!r}")
    return int(value, 16)


def parse_command_output(lines: list[str]) -> WiringReading:
    """:func:`command`'s output."""
    sections = split(lines)
    parts = {s.tag: s for s in sections}
    reading = WiringReading()
    ib, net = parts.get("ib"), parts.get("net")
    reading.nics = _sysfs(ib.lines if ib else [], net.lines if net else [])
    reading.lldp_error, lldp = _lldp(parts.get("lldp"), parts.get("lldprc"))
    for nic in reading.nics.values():
        if nic.link_layer == "Ethernet" and lldp is not None and nic.netdev:
            nic.neighbours = list(lldp.get(nic.netdev, []))
        elif nic.link_layer == "Ethernet" and lldp is not None:
            nic.error = "no netdev under device/net: its LLDP interface is not known"
    _ib(sections, reading)
    return reading


_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d ")


def _lldp(section, rc) -> tuple[str | None, dict | None]:
    text = section.text if section is not None else ""
    code = rc.arg if rc is not None else None
    if code is None:
        return "the probe printed no lldpctl result", None
    if code == "none":
        return "lldpctl is not installed (Debian/Ubuntu package lldpd)", None
    if code == "124":
        return "lldpctl -f json did not answer within 5 s", None
    if code != "0":
        # lldpd's log lines start with their time (src/log.c): dropped, so one fault reads the same each time
        said = " ".join(_STAMP.sub("", x.strip()) for x in section.lines if x.strip())[:240] if section else ""
        return f"lldpctl -f json exit {code}: {said or 'no output'} (is lldpd running?)", None
    return None, parse_lldp_json(text)


def _ib(sections, reading: WiringReading) -> None:
    """The per-port smpquery and sminfo sections, in order (their tags repeat)."""
    current: NicWiring | None = None
    held: list[str] = []
    for s in sections:
        if s.tag in ("nodeinfo", "nodedesc", "sminfo"):
            dev, _, port = s.arg.partition(" ")
            current = reading.nics.get(f"{dev}/{port}")
            held = s.lines
            continue
        if current is None or s.tag not in ("nodeinforc", "nodedescrc", "sminforc"):
            continue
        what = {"nodeinforc": "smpquery nodeinfo", "nodedescrc": "smpquery nodedesc", "sminforc": "sminfo"}[s.tag]
        said = " ".join(x.strip() for x in held if x.strip())[:200]
        if s.arg == "none":
            current.error = "smpquery is not installed (Debian/Ubuntu package infiniband-diags)"
        elif s.arg != "0":
            # no SM answer is the fleet's to judge; a node description not read leaves the switch known by
            # its GUID (the judge asks for the name only where the plan names leaves)
            if s.tag == "nodeinforc" or (s.tag == "nodedescrc" and not current.neighbours):
                current.error = current.error or f"{what} exit {s.arg}: {said or 'no output'}"
        elif s.tag == "nodeinforc":
            current.neighbours = [parse_nodeinfo(held)]
        elif s.tag == "nodedescrc" and current.neighbours:
            n = current.neighbours[0]
            current.neighbours = [Neighbour(n.source, parse_nodedesc(held), n.guid, n.port, n.node_type)]
        elif s.tag == "sminforc":
            current.sm = parse_sminfo(held)


def read_local(devices: tuple[str, ...] = (), timeout: float = 60) -> WiringReading:
    """:func:`command` here, bounded."""
    from ccrhost.probes import local

    try:
        lines = local.run(command(devices), timeout, f"the wiring probe ({WHAT})").splitlines()
    except local.ProbeTimeout as exc:
        return WiringReading(error=str(exc))
    try:
        return parse_command_output(lines)
    except WiringFormatError as exc:
        return WiringReading(error=f"cannot read {WHAT}: {exc}")
