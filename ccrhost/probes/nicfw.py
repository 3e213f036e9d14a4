"""A ConnectX NIC's firmware settings: ``mlxconfig -d <bdf> -e q`` (MFT), or
``mstconfig -d <bdf> -e q`` (mstflint, which Debian ships) where MFT is absent.

Format (verbatim samples in tests/fixtures/nicfw/; mstflint mlxconfig/mlxcfg_ui.cpp
printConfHeader and printSingleParam): a ``Configurations:`` header naming the
columns (``Default  Current  Next Boot`` with ``-e``, ``Next Boot`` alone
without), then one row per parameter: a ``*`` where the next value differs
from the default or current one, ``RO`` where it is read-only (2023 on), the
name, and a value per column. Each value is printed ``%-Ns`` (N 16 until 2023,
20 until 2026, 33 since) and PRINT_SPACE_IF_NEEDED adds one space after a
value that fills its column, so a long value (``PCI_ATOMIC_DISABLED_EXT_ATOMIC_ENABLED(0)``)
has a single space before the next; until 2023 a value of exactly 16
characters had none (``width > 16``). Names and values hold no spaces, so a
row splits on any run of them. A value is ``Alias(N)`` (``True(1)``,
``_256KB(1)``), a number, ``N/A``, or an array (``Array[0..7]``). Errors are
``-E- <text>`` lines (mlxcfg_ui.cpp ``err``).
"""

from __future__ import annotations

import re

from ccrhost.model.nicfw import FwParam, FwValue, NicFirmware
from ccrhost.probes.sections import split

TOOLS = ("mlxconfig", "mstconfig")
DEADLINE = 60  # seconds per device: a query takes seconds on real NICs, a hung one is killed


class NicFwFormatError(ValueError):
    """Output no mlxconfig or mstconfig prints; the message quotes it."""


_ALIAS = re.compile(r"^(.*)\((\d{1,10})\)$")
# mlxconfig names are upper case but for a few ("EXP_ROM_UEFI_x86_ENABLE")
_NAME = re.compile(r"^[A-Za-z0-9_]+(?:\[\d+\])?$")
_VALUE = re.compile(r"^(?:[^\s()]+\(\d{1,10}\)|\d{1,10}|0x[0-9a-fA-F]+|N/A|Array\[\d+\.\.\d+\])$")
_OLD_WIDTH = 16  # mstflint until 2023: "%-16s", a space only after a value wider than 16


def _unglue(values: list[str], want: int) -> list[str]:
    """Split values the pre-2023 printing ran together (a value of exactly
    16 characters followed by the next with no space), while too few."""
    out = list(values)
    i = 0
    while len(out) < want and i < len(out):
        v = out[i]
        if len(v) > _OLD_WIDTH and _VALUE.match(v[:_OLD_WIDTH]):
            out[i:i + 1] = [v[:_OLD_WIDTH], v[_OLD_WIDTH:]]
        i += 1
    return out


def parse_value(text: str) -> FwValue:
    m = _ALIAS.match(text)
    if m:
        return FwValue(text, m.group(1), int(m.group(2)))
    if text.isdigit() and text.isascii():
        return FwValue(text, None, int(text))
    return FwValue(text)


def parse_query(text: str) -> dict[str, FwParam]:
    """The parameters of one device's query; an ``-E-`` line or a table that
    does not parse raises :class:`NicFwFormatError`, quoting it."""
    columns: list[str] | None = None
    params: dict[str, FwParam] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("-E-"):
            raise NicFwFormatError(stripped[:200])
        if stripped.startswith("Configurations:"):
            words = stripped[len("Configurations:"):].split()
            columns = words[:-2] + [" ".join(words[-2:])]  # "Next Boot" is one column
            if columns[-1] != "Next Boot" or len(columns) not in (1, 3):
                raise NicFwFormatError(f"unexpected columns: {stripped[:200]!r}")
            continue
        if columns is None or not stripped or stripped.startswith("The '"):
            continue
        marked = stripped.startswith("*")
        cells = stripped.lstrip("*").split()
        if len(cells) == len(columns) + 2 and cells[0] == "RO":
            cells = cells[1:]  # a read-only parameter's marker
        if len(cells) >= 2 and len(cells) < len(columns) + 1:
            cells = cells[:1] + _unglue(cells[1:], len(columns))
        if len(cells) != len(columns) + 1 or not _NAME.match(cells[0]):
            raise NicFwFormatError(f"unexpected row: {stripped[:200]!r}")
        values = [parse_value(c) for c in cells[1:]]
        if len(values) == 3:
            params[cells[0]] = FwParam(cells[0], values[2], values[0], values[1], marked)
        else:
            params[cells[0]] = FwParam(cells[0], values[0], marked=marked)
    if columns is None:
        said = " ".join(text.split())[:200]
        raise NicFwFormatError(f"no 'Configurations:' table in the output: {said!r}" if said else "no output")
    return params


def reading(device: str, bdf: str | None, tool: str | None, output: str, rc: int | None,
            missing: bool = False, timed_out: bool = False) -> NicFirmware:
    """One NIC's record from its query's output and exit status."""
    if missing or tool is None:
        return NicFirmware(device, bdf, None, missing=True)
    if bdf is None:
        return NicFirmware(device, None, tool, error="its PCI function is not known (no device link in sysfs)")
    if timed_out:
        return NicFirmware(device, bdf, tool, error=f"{tool} -d {bdf} -e q did not answer within {DEADLINE} s")
    try:
        params = parse_query(output)
    except NicFwFormatError as exc:
        return NicFirmware(device, bdf, tool, error=f"{tool} -d {bdf} -e q (exit {rc}): {exc}")
    return NicFirmware(device, bdf, tool, params)


def command(devices: list[str], firmware: bool = True, optics: bool = False) -> str:
    """A shell command querying each RDMA device's PCI function with the
    first tool the node has: ``@@nic DEVICE BDF TOOL`` then the tool's
    output, then ``@@rc N``; with ``optics``, ``@@link TOOL`` then mlxlink's
    (the deploy's remote read)."""
    from ccrhost.probes.mlxlink import TOOLS as LINK_TOOLS

    names = " ".join(d for d in devices if re.fullmatch(r"[A-Za-z0-9_.-]+", d))
    fw = (f'if [ -n "$t" ] && [ -n "$b" ]; then timeout -k 2 {DEADLINE} $t -d $b -e q 2>&1; echo "@@rc $?"; fi; '
          if firmware else "")
    link = ('echo "@@link ${l:--}"; if [ -n "$l" ] && [ -n "$b" ]; then '
            f'timeout -k 2 {DEADLINE} $l -d $b -m -c 2>&1; echo "@@rc $?"; fi; ' if optics else "")
    return (
        "t=; for c in " + " ".join(TOOLS) + "; do command -v $c >/dev/null 2>&1 && { t=$c; break; }; done; "
        "l=; for c in " + " ".join(LINK_TOOLS) + "; do command -v $c >/dev/null 2>&1 && { l=$c; break; }; done; "
        f"for d in {names}; do b=$(readlink -f /sys/class/infiniband/$d/device 2>/dev/null); b=${{b##*/}}; "
        f'echo "@@nic $d ${{b:--}} ${{t:--}}"; {fw}{link}done'
    )


def link_reading(nic: NicFirmware, tool: str | None, output: str, rc: int | None, missing: bool = False,
                 timed_out: bool = False) -> NicFirmware:
    """``nic`` with its mlxlink reading (or why there is none)."""
    from dataclasses import replace

    from ccrhost.probes.mlxlink import MlxlinkFormatError, parse

    if missing or tool is None:
        return replace(nic, link_error="neither mlxlink (MFT) nor mstlink (mstflint) is installed")
    if nic.bdf is None:
        return replace(nic, link_error="its PCI function is not known")
    if timed_out:
        return replace(nic, link_error=f"{tool} -d {nic.bdf} -m -c did not answer within {DEADLINE} s")
    try:
        return replace(nic, link=parse(output))
    except MlxlinkFormatError as exc:
        return replace(nic, link_error=f"{tool} -d {nic.bdf} -m -c (exit {rc}): {exc}")


def parse_dump(lines: list[str]) -> list[NicFirmware]:
    """:func:`command`'s output, one record per device."""
    out: list[NicFirmware] = []
    sections = split(lines)

    def rc_after(i):
        nxt = sections[i + 1] if i + 1 < len(sections) else None
        return int(nxt.arg) if nxt is not None and nxt.tag == "rc" and nxt.arg.strip().lstrip("-").isdigit() else None

    for i, s in enumerate(sections):
        if s.tag == "nic":
            parts = s.arg.split()
            if len(parts) != 3:
                continue
            device, bdf, tool = (None if p == "-" else p for p in parts)
            rc = rc_after(i)
            out.append(reading(device, bdf, tool, "\n".join(s.lines), rc, missing=tool is None, timed_out=rc == 124))
        elif s.tag == "link" and out:
            tool = None if s.arg.strip() in ("", "-") else s.arg.strip()
            rc = rc_after(i)
            out[-1] = link_reading(out[-1], tool, "\n".join(s.lines), rc, missing=tool is None, timed_out=rc == 124)
    return out
