"""perftest's ib_write_lat report -> :class:`LatencyReading` rows.

Three tables, each perftest's own (tests/fixtures/perftest_lat/README.md
names the source lines): the one since perftest 4.4 (2016) with t_avg,
t_stdev and the 99%/99.9% percentiles; the older one with only t_min,
t_max and t_typical; and the ``-D`` (duration) one with t_avg and tps.
``--cpu_util`` adds a CPU_Util[%] column to any. Warning lines ("Conflicting
CPU frequency values detected") may sit between the header and the rows.
A ``#bytes`` header or a row that none of these prints is refused with a
:class:`PerftestFormatError` naming the line.
"""

from __future__ import annotations

import re

from ccrhost import numbers
from ccrhost.model.latency import LatencyReading
from ccrhost.probes.perftest import _NUMBERISH, NotAMeasurement, PerftestFormatError

_SEP = r"\s+"
_CPU = r"(?P<cpu>\s+CPU_Util\[%\])?\s*"
FULL = re.compile(r"\s*#bytes\s+#iterations\s+t_min\[usec\]\s+t_max\[usec\]\s+t_typical\[usec\]\s+t_avg\[usec\]"
                  r"\s+t_stdev\[usec\]\s+99% percentile\[usec\]\s+99\.9% percentile\[usec\]" + _CPU)
OLD = re.compile(r"\s*#bytes\s+#iterations\s+t_min\[usec\]\s+t_max\[usec\]\s+t_typical\[usec\]" + _CPU)
DURATION = re.compile(r"\s*#bytes\s+#iterations\s+t_avg\[usec\]\s+tps average" + _CPU)
# the values each table's row holds after #bytes and #iterations
_COLUMNS = {
    FULL: ("t_min", "t_max", "t_typical", "t_avg", "t_stdev", "p99", "p99_9"),
    OLD: ("t_min", "t_max", "t_typical"),
    DURATION: ("t_avg", "tps"),
}
_NO_P99 = {
    OLD: "this perftest (before 4.4, 2016) prints no 99% percentile",
    DURATION: "a -D (duration) run prints no 99% percentile",
}
_RESULT_LINE = re.compile(r"-{20,}\s*")
_HISTOGRAM = re.compile(r"#, (usec|cycles)|\d+, \S+")  # -H / -U print these before the table


def parse_ib_write_lat(text: str) -> list[LatencyReading]:
    """Every result row (one per size; ``-a`` gives many)."""
    table, cpu, rows = None, False, []
    for line in text.splitlines():
        if "#bytes" in line:
            table = next((t for t in _COLUMNS if t.fullmatch(line)), None)
            if table is None:
                raise PerftestFormatError(f"line {line.strip()!r}: not a header ib_write_lat prints")
            cpu = bool(table.fullmatch(line).group("cpu"))
            continue
        if table is None or _HISTOGRAM.fullmatch(line.strip()):
            continue
        if _RESULT_LINE.fullmatch(line):
            if rows:
                break
            continue
        fields = line.split()
        if not fields or not _NUMBERISH.fullmatch(fields[0]):
            continue  # a warning line between the header and the rows
        rows.append(_row(line, fields, table, cpu))
    if table is None:
        raise PerftestFormatError("no ib_write_lat report header found")
    if not rows:
        raise PerftestFormatError("no ib_write_lat result row found")
    return rows


def _row(line: str, fields: list[str], table: re.Pattern, cpu: bool) -> LatencyReading:
    names = _COLUMNS[table]
    if len(fields) != 2 + len(names) + cpu:
        raise PerftestFormatError(f"line {line.strip()!r}: {len(fields)} values where ib_write_lat prints "
                                  f"{2 + len(names) + cpu}")
    size, iters = numbers.unsigned(fields[0]), numbers.unsigned(fields[1])
    if size is None or iters is None:
        raise PerftestFormatError(f"line {line.strip()!r}: #bytes and #iterations are not counts")
    values = {}
    for name, cell in zip(names, fields[2:]):
        if not _NUMBERISH.fullmatch(cell):
            raise PerftestFormatError(f"line {line.strip()!r}: {name} {cell!r} is not a number")
        value = numbers.decimal(cell, 0)
        if value is None:
            raise NotAMeasurement(f"line {line.strip()!r}: {name} is not a finite number >= 0")
        values[name] = value
    values.pop("tps", None)
    return LatencyReading(bytes=size, iterations=iters, error=_NO_P99.get(table), **values)


def read_report(text: str, pair: str = "", nic: str | None = None) -> LatencyReading:
    """The first row (the smallest size: Imbue's gate is for ib_write_lat's
    default 2 bytes) as the reading to judge, or a reading whose ``error``
    says why none was read (the tool's last line when it failed before
    printing a report)."""
    try:
        row = parse_ib_write_lat(text)[0]
    except NotAMeasurement as exc:
        return LatencyReading(error=f"ib_write_lat: {exc}", pair=pair, nic=nic)
    except PerftestFormatError as exc:
        last = next((x.strip() for x in reversed(text.splitlines()) if x.strip()), "no output")
        return LatencyReading(error=f"ib_write_lat failed: {last} ({exc})", pair=pair, nic=nic)
    return LatencyReading(**{**row.__dict__, "pair": pair, "nic": nic})
