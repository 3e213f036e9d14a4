"""The one format every probe prints: sections opened by ``@@TAG [ARG]``.

A probe is one shell snippet that prints several sources back to back; each
source starts with a marker line so the parser knows what follows. Lines
before the first marker belong to no section and are dropped (a login
banner or a shell's noise cannot be mistaken for data).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress, count, repeat

MARK = "@@"


@dataclass
class Section:
    tag: str                                         # the word after @@
    arg: str = ""                                    # the rest of the marker line
    lines: list[str] = field(default_factory=list)   # the lines up to the next marker

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def split(lines: list[str], mark: str = MARK) -> list[Section]:
    """Every section in output order (a tag may repeat). The node snapshot
    nests probes' own sections under ``@@@`` markers."""
    # the markers' positions, then slices: a node's snapshot is thousands of
    # lines, split a dozen times per deploy, per host
    starts = list(compress(count(), map(str.startswith, lines, repeat(mark))))
    ends = starts[1:] + [len(lines)]
    sections: list[Section] = []
    for start, end in zip(starts, ends):
        tag, _, arg = lines[start][len(mark):].strip().partition(" ")
        sections.append(Section(tag, arg.strip(), list(lines[start + 1:end])))
    return sections


def by_tag(lines: list[str]) -> dict[str, list[str]]:
    """``{tag: lines}``, for probes whose tags do not repeat (a repeated tag's
    lines are joined)."""
    out: dict[str, list[str]] = {}
    for section in split(lines):
        out.setdefault(section.tag, []).extend(section.lines)
    return out
