"""The lossless-fabric counters, with the node's last stored reading.

One read-only-but-for-its-state snippet (:func:`command`) prints the
reading the node kept last time (each line prefixed with ``=``), reads the
counters now, prints them and, when asked to, keeps them as the next
window's start. So every rate is a change since the node's own last
reading, taken in the command that reads everything else: nothing sleeps.
With no such reading, the counters are totals since boot (/proc/uptime).

Formats (verbatim samples in tests/fixtures/fabric/):

- ``ethtool -S <dev>``: ``NIC statistics:`` then ``     <name>: <value>``
  (ethtool's ``ethtool.c`` dump_stats); the names kept are those
  :func:`ccrhost.model.fabric.kept` judges (mlx5 counters.rst).
- ``ethtool -a <dev>``: ``Pause parameters for <dev>:``, then
  ``Autonegotiate:``, ``RX:``, ``TX:`` each ``on``/``off`` (ethtool's
  netlink/pause.c; the ioctl path prints the same); "Cannot get device
  pause settings: Operation not supported" where the driver has none.
- RDMA ports: ``grep -H ''`` of ``counters/<name>`` and
  ``hw_counters/<name>`` under /sys/class/infiniband (the kernel's
  sysfs-class-infiniband ABI).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace

from ccrhost.model import datapath
from ccrhost.model.fabric import (DISCARDED, SINCE_BOOT, TRANSPORT_COUNTERS, FabricReading, PauseSetting, kept,
                                  window_from_state)
from ccrhost import numbers
from ccrhost.probes.sections import split
from ccrhost.probes.sysfs import split_dump

IB_ROOT = "/sys/class/infiniband"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
UPTIME = "/proc/uptime"  # "<seconds since boot> <idle seconds>": the counters' longest possible life
_PORT_FILES = " ".join([f"*/ports/*/counters/{c}" for c in datapath.COUNTERS]
                       + [f"*/ports/*/hw_counters/{c}" for c in TRANSPORT_COUNTERS])
# the lines kept, by one grep over every netdev's output: markers, headers,
# ethtool -a and error lines (no indent), and the ethtool -S counters judged
_STATS = (r"^[^ ]|^ +((rx|tx)_prio[0-7]_pause(_duration|_transition)?|tx_pause_storm_(warning|error)_events|"
          r"rx_discards_phy|rx_crc_errors_phy|rx_symbol_err_phy|rx_out_of_buffer):")
PREVIOUS = "="   # prefix of the stored reading's lines


class FabricFormatError(ValueError):
    """Output that is not in the format its source prints."""


def reading_command() -> str:
    """The reading now: time, boot id, RDMA port counters, then per compute
    netdev its ethtool counters and pause setting."""
    return f"""echo "@@t $(date +%s.%N)"
b=; {{ read -r b < {BOOT_ID}; }} 2>/dev/null; echo "@@boot $b"
u=; {{ read -r u _ < {UPTIME}; }} 2>/dev/null; echo "@@uptime $u"
echo @@ib
cd {IB_ROOT} 2>/dev/null && grep -Hs '' {_PORT_FILES}
if command -v ethtool >/dev/null 2>&1; then
# $3 is `exec` in a background job: its last tool replaces the job's shell
# rather than being one more process
e() {{ echo "@@stats $2 $1"; ethtool -S "$1" 2>&1; echo "@@pause $2 $1"; $3 ethtool -a "$1" 2>&1; }}
# every netdev at once, each into a file of its own, then one grep over
# them all (one after another where no temporary folder can be made)
w() {{ for n in {IB_ROOT}/*/device/net/*; do [ -e "$n" ] || continue
d=${{n#{IB_ROOT}/}}; d=${{d%%/*}}; i=${{n##*/}}
if [ -n "$t" ]; then e "$i" "$d" exec > "$t/$i" & else e "$i" "$d"; fi
done; }}
t=$(mktemp -d 2>/dev/null) || t=
if [ -n "$t" ]; then w; wait; grep -hE '{_STATS}' "$t"/* 2>/dev/null; rm -rf "$t"
else w | grep -E '{_STATS}'; fi
else echo @@noethtool; fi
true"""


def command(state: str, keep: bool = True) -> str:
    """The stored reading (``@@previous``, lines prefixed ``=``), then the
    reading now; with ``keep``, the reading now replaces the stored one
    (atomically: written aside, then renamed)."""
    from ccrhost.output import write_state_command

    path = shlex.quote(state)
    read = reading_command()
    out = f"echo @@previous; sed 's/^/{PREVIOUS}/' {path} 2>/dev/null; r=$( ( {read}\n) 2>/dev/null ); printf '%s\\n' \"$r\""
    if keep:  # the one safe state writer's shell twin (ccrhost.output)
        write = write_state_command(state, '"$r"')
        out += f"; {write} 2>/dev/null || echo \"@@unkept cannot write {state}\""
    return out + "; true"


@dataclass
class Counters:
    """One reading of the counters."""
    time: float | None = None      # date +%s.%N on the node
    boot_id: str | None = None     # /proc/sys/kernel/random/boot_id
    counters: dict[str, dict[str, int]] = field(default_factory=dict)  # "mlx5_0/1" or netdev -> {name: value}
    netdevs: dict[str, str] = field(default_factory=dict)              # netdev -> RDMA device
    pause: dict[str, PauseSetting] = field(default_factory=dict)       # netdev -> ethtool -a (absent: none)
    unreadable: dict[str, str] = field(default_factory=dict)           # "ethtool -S <dev>" -> text seen
    no_ethtool: bool = False       # ethtool is not installed: no netdev counter was read
    uptime: float | None = None    # /proc/uptime, its first field: seconds since boot

    def state(self) -> dict:
        """The stored-reading dict :func:`ccrhost.model.fabric.window_from_state` takes."""
        return {"boot_id": self.boot_id, "time": self.time, "counters": self.counters}


@dataclass
class FabricDump:
    previous: Counters | None    # the stored reading (None: none kept, or not readable)
    now: Counters
    unkept: str | None = None    # why the reading could not be stored
    discarded: str | None = None  # why the stored reading could not be read (it is replaced all the same)


_STAT_LINE = re.compile(r"^\s+([A-Za-z0-9_.\[\]-]+): (-?\d+)\s*$")
_PAUSE_LINE = re.compile(r"^(Autonegotiate|RX|TX):\s+(on|off)\s*$")
_UNSUPPORTED = ("Operation not supported", "not supported")


def parse_stats(lines: list[str]) -> dict[str, int] | None:
    """``ethtool -S`` lines (those kept) -> the judged counters; None when
    the driver has no statistics; raises on anything else."""
    out: dict[str, int] = {}
    for line in lines:
        if not line.strip() or line.startswith("NIC statistics:"):
            continue
        m = _STAT_LINE.match(line)
        if m:
            if kept(m.group(1)):
                if len(m.group(2)) > 21:  # over 64 bits (and int() refuses 4,300 digits and more)
                    raise FabricFormatError(f"ethtool -S {m.group(1)}: {m.group(2)[:24]}... is not a 64-bit count")
                out[m.group(1)] = int(m.group(2))
            continue
        if any(u in line for u in _UNSUPPORTED) or line.startswith("no stats available"):
            return None
        raise FabricFormatError(f"ethtool -S printed {line.strip()[:120]!r}")
    return out


def parse_pause(lines: list[str]) -> PauseSetting | None:
    """``ethtool -a`` -> its setting; None where the driver has none."""
    values: dict[str, bool] = {}
    header = False
    for line in lines:
        if not line.strip() or line.startswith(("RX negotiated:", "TX negotiated:")):
            continue
        if line.startswith("Pause parameters for "):
            header = True
            continue
        m = _PAUSE_LINE.match(line)
        if m and header:
            values[m.group(1)] = m.group(2) == "on"
            continue
        if any(u in line for u in _UNSUPPORTED):
            return None
        raise FabricFormatError(f"ethtool -a printed {line.strip()[:120]!r}")
    if not header or "RX" not in values or "TX" not in values:
        raise FabricFormatError(f"ethtool -a printed no RX/TX pause setting ({' | '.join(lines)[:120]!r})")
    return PauseSetting(values.get("Autonegotiate"), values["RX"], values["TX"])


def parse_reading(lines: list[str]) -> Counters:
    """:func:`reading_command`'s output -> :class:`Counters`; a time that is
    no time raises, a netdev's unreadable ethtool output is recorded."""
    c = Counters()
    for s in split(lines):
        if s.tag == "t":
            c.time = numbers.decimal(s.arg, 0)  # float() and isdigit() take nan, inf and Unicode digits
            if c.time is None:
                raise FabricFormatError(f"reading time {s.arg!r} (date +%s.%N) is not a time")
        elif s.tag == "boot":
            c.boot_id = s.arg.strip() or None
        elif s.tag == "uptime":
            c.uptime = numbers.decimal(s.arg, 0)  # None when unreadable: then rates start from now
        elif s.tag == "ib":
            for path, values in split_dump(s.lines).items():
                parts = path.split("/")
                text = " ".join(values).strip()
                if len(parts) != 5 or parts[1] != "ports" or not (parts[2].isascii() and parts[2].isdigit()):
                    continue
                if parts[3] not in ("counters", "hw_counters") or not (text.isascii() and text.isdigit()):
                    continue  # "N/A (no PMA)": unreadable, not a reading
                if len(text) > 20:  # over 64 bits (and int() refuses 4,300 digits and more)
                    raise FabricFormatError(f"{path}: {text[:24]}... is not a 64-bit count")
                c.counters.setdefault(f"{parts[0]}/{int(parts[2])}", {})[parts[4]] = int(text)
        elif s.tag in ("stats", "pause"):
            dev, _, netdev = s.arg.partition(" ")
            if not netdev:
                raise FabricFormatError(f"@@{s.tag} {s.arg!r}: no netdev named")
            c.netdevs[netdev] = dev
            try:
                if s.tag == "stats":
                    stats = parse_stats(s.lines)
                    if stats is not None:
                        c.counters[netdev] = stats
                else:
                    pause = parse_pause(s.lines)
                    if pause is not None:
                        c.pause[netdev] = pause
            except FabricFormatError as exc:
                c.unreadable[f"ethtool -{'S' if s.tag == 'stats' else 'a'} {netdev}"] = str(exc)
        elif s.tag == "noethtool":
            c.no_ethtool = True
    return c


def parse_fabric_dump(lines: list[str]) -> FabricDump:
    """:func:`command`'s output. A stored reading that cannot be read is no
    baseline (rates start from now), never an error."""
    sections = split(lines)
    prev_lines = [x[len(PREVIOUS):] for s in sections if s.tag == "previous" for x in s.lines
                  if x.startswith(PREVIOUS)]
    rest: list[str] = []
    unkept = None
    for s in sections:
        if s.tag == "previous":
            continue
        if s.tag == "unkept":
            unkept = s.arg or "the reading could not be stored"
            continue
        rest += [f"@@{s.tag}" + (f" {s.arg}" if s.arg else ""), *s.lines]
    previous = None
    discarded = None
    if prev_lines:
        try:
            previous = parse_reading(prev_lines)
        except FabricFormatError as exc:
            previous, discarded = None, str(exc)[:160]
        if previous is not None and previous.time is None:
            previous, discarded = None, "no '@@t' time"
    now = parse_reading(rest)
    if now.time is None:
        raise FabricFormatError("the fabric probe printed no '@@t' time")
    return FabricDump(previous, now, unkept, discarded)


WHAT = "the fabric probe (ethtool, sysfs)"


def read_local(state: str, keep: bool = True, timeout: float = 20, now=None) -> FabricDump:
    """What :func:`command` gives, here (``ccrhost check``): the reading now
    (``now``: a function giving it, the read already under way since before
    the settings were known, node.gather), joined here with the stored one,
    which it replaces when ``keep``."""
    from ccrhost.probes import local

    text = now() if now is not None else local.run(reading_command(), timeout, WHAT)
    return parse_fabric_dump(with_stored(state, text, keep))


def with_stored(state: str, now: str, keep: bool) -> list[str]:
    """:func:`command`'s output for the reading ``now``, done in Python: the
    stored reading (lines prefixed), the reading now, and ``@@unkept`` when
    it cannot be kept (written aside, then renamed, as the shell does)."""

    lines = ["@@previous"]
    try:
        with open(state) as f:
            lines += [PREVIOUS + line for line in f.read().splitlines()]
    except (OSError, UnicodeDecodeError):
        pass
    body = now.rstrip("\n")  # what $( ) keeps of it
    lines += body.splitlines()
    if keep:
        from ccrhost.output import write_state

        try:
            write_state(state, body + "\n")
        except OSError:
            lines.append(f"@@unkept cannot write {state}")
    return lines


def _compute(c: Counters, exclude: tuple[str, ...]) -> Counters:
    """``c`` without the RDMA devices in ``exclude`` (rdma_exclude_devices) and their netdevs."""
    import fnmatch

    def out(dev: str) -> bool:
        return any(fnmatch.fnmatchcase(dev, p) for p in exclude)

    netdevs = {n: d for n, d in c.netdevs.items() if not out(d)}
    counters = {k: v for k, v in c.counters.items()
                if (not out(k.split("/")[0]) if "/" in k else k in netdevs)}
    return Counters(c.time, c.boot_id, counters, netdevs, {n: p for n, p in c.pause.items() if n in netdevs},
                    {w: t for w, t in c.unreadable.items() if w.split()[-1] in netdevs}, c.no_ethtool, c.uptime)


def fabric_reading(first: FabricDump, latest: FabricDump | None = None, exclude: tuple[str, ...] = (),
                   max_age: float | None = None) -> FabricReading:
    """The one rule for the deploy and ``ccrhost check``: rates over the
    window from the node's stored reading to ``first`` (the run's first
    read), or since boot where no stored reading serves; settings (global
    pause) as ``latest`` shows them (the node after the tuning; ``first``
    when nothing was read since)."""
    latest = latest or first
    now = _compute(first.now, exclude)
    previous = _compute(first.previous, exclude).state() if first.previous is not None else None
    window = window_from_state(previous, now.counters, now.boot_id, now.time or 0.0, max_age, now.uptime)
    if first.discarded:
        then = SINCE_BOOT if window.since_boot else "rates are judged from the next reading on"
        window = replace(window, note=f"{DISCARDED} ({first.discarded}): discarded and replaced by this reading; "
                                      f"{then}")
    if latest.unkept:
        window = replace(window, warning=f"{latest.unkept}: the next reading cannot measure rates")
    last = _compute(latest.now, exclude)
    return FabricReading(netdevs=dict(last.netdevs), pause=dict(last.pause), window=window,
                         unreadable=dict(last.unreadable))
