"""``nvbandwidth``'s text report: one block per testcase.

Format (NVIDIA/nvbandwidth README and output, fixture
tests/fixtures/nvbandwidth/v0.10_7gpu_ce.txt): ``Running TESTCASE.``, a
description line ending ``bandwidth (GB/s)``, a header of column indices,
rows ``INDEX v v ...`` with ``N/A`` where a pair is itself or not
measured, then ``SUM TESTCASE X``. Bidirectional device testcases print
several matrices (Read1, Read2, Total): only the first of a testcase is kept.
"""

from __future__ import annotations

import re

from ccrhost import numbers
from ccrhost.model.nvbandwidth import Matrix

_RUNNING = re.compile(r"^Running (\w+)\.$")
_SUM = re.compile(r"^SUM (\w+) (\S+)$")


class NvbandwidthFormatError(ValueError):
    """Not nvbandwidth's report."""


def command(binary: str, testcases) -> list[str]:
    return [binary, *(a for t in testcases for a in ("-t", t))]


def parse(text: str) -> dict[str, Matrix]:
    out: dict[str, Matrix] = {}
    sums: dict[str, float] = {}
    current = description = None
    columns: tuple[int, ...] | None = None
    values: dict = {}

    def close():
        if current and columns is not None and current not in out:
            out[current] = Matrix(current, description or "", columns, dict(values))

    for raw in text.splitlines():
        line = raw.strip()
        if m := _RUNNING.match(line):
            close()
            current, description, columns, values = m.group(1), None, None, {}
        elif m := _SUM.match(line):
            close()
            value = numbers.decimal(m.group(2), 0)
            if value is not None:
                sums[m.group(1)] = value
        elif current and description is None and line.endswith("bandwidth (GB/s)"):
            description = line
        elif current and description and columns is None and line and all(w.isdigit() for w in line.split()):
            columns = tuple(int(w) for w in line.split())
        elif current and columns is not None and line:
            words = line.split()
            if not words[0].isdigit() or len(words) != len(columns) + 1:
                continue
            for col, word in zip(columns, words[1:]):
                if word != "N/A":
                    value = numbers.decimal(word, 0)
                    if value is None:
                        raise NvbandwidthFormatError(f"{current}: {word!r} is not a bandwidth")
                    values[(int(words[0]), col)] = value
    close()
    if not out:
        raise NvbandwidthFormatError("no testcase matrix in nvbandwidth's output")
    return {k: Matrix(m.testcase, m.description, m.columns, m.values, sums.get(k)) for k, m in out.items()}
