"""``mlxlink -d <bdf> -m -c`` (MFT; mstflint's twin is ``mstlink``): the
transceiver's Module Info and the Physical Counters and BER Info.

Format (verbatim samples in tests/fixtures/mlxlink/; gcm check_mlxlink's test,
mstflint mlxlink/modules/mlxlink_commander.cpp): titled sections of
``Name<spaces>: value`` lines; per-lane values comma-separated; DDM values
followed by ``[low..high]``; ``N/A`` where the module does not say. Quirk:
on a terminal mlxlink colours values with ANSI escapes, which are stripped.
"""

from __future__ import annotations

import re

from ccrhost import numbers
from ccrhost.model.optics import CRITICAL_FLAGS, WARN_FLAGS, Ddm, LinkReading

TOOLS = ("mlxlink", "mstlink")
DDM = ("Temperature [C]", "Voltage [mV]", "Bias Current [mA]", "Rx Power Current [dBm]", "Tx Power Current [dBm]")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RANGE = re.compile(r"^(.*?)\s*\[(-?[0-9.]+)\.\.(-?[0-9.]+)\]$")
_LINE = re.compile(r"^([A-Za-z][^:]*?)\s*:\s?(.*)$")


class MlxlinkFormatError(ValueError):
    """Output no mlxlink prints; the message quotes it."""


def _number(text: str) -> float:
    value = numbers.decimal(text.strip())
    if value is None:
        raise MlxlinkFormatError(f"not a number: {text.strip()[:60]!r}")
    return value


def _ber(text: str) -> float | None:
    """``15E-255`` (mlxlink's "none seen"), ``2E-9``."""
    t = text.strip()
    if t in ("N/A", ""):
        return None
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?E-?[0-9]{1,3}", t):
        raise MlxlinkFormatError(f"not a BER: {t[:60]!r}")
    return float(t)


def parse(text: str) -> LinkReading:
    fields = {}
    for line in _ANSI.sub("", text).splitlines():
        if line.strip().startswith("-E-"):
            raise MlxlinkFormatError(line.strip()[:200])
        m = _LINE.match(line.strip())
        if m:
            fields[m.group(1)] = m.group(2).strip()
    if not any(k in fields for k in ("Module State", "Effective Physical BER")):
        said = " ".join(text.split())[:200]
        raise MlxlinkFormatError(f"no Module Info or BER section: {said!r}" if said else "no output")
    out = LinkReading()
    state = fields.get("Module State")
    out.module_state = None if state in (None, "N/A") else state
    lanes = fields.get("DataPath state [per lane]", "")
    out.datapath = [s.strip() for s in lanes.split(",") if s.strip() and s.strip() != "N/A"]
    for name in (*CRITICAL_FLAGS, *WARN_FLAGS):
        value = fields.get(name, fields.get(f"{name} [per lane]"))
        if value is None or value == "N/A":
            continue
        if not re.fullmatch(r"[01](,[01])*", value):
            raise MlxlinkFormatError(f"{name}: {value[:60]!r}")
        out.flags[name] = [int(v) for v in value.split(",")]
    for name in DDM:
        value = fields.get(name)
        if value is None or value.startswith("N/A"):
            continue
        m = _RANGE.match(value)
        values, low, high = (m.group(1), _number(m.group(2)), _number(m.group(3))) if m else (value, None, None)
        out.ddm[name] = Ddm(tuple(_number(v) for v in values.split(",")), low, high)
    out.effective_ber = _ber(fields.get("Effective Physical BER", ""))
    out.raw_ber = _ber(fields.get("Raw Physical BER", ""))
    fec = fields.get("FEC")
    out.fec = fec if fec not in (None, "N/A") else None
    return out
