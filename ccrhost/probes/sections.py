"""The one format every probe prints: sections opened by ``@@TAG [ARG]``.

A probe is one shell snippet that prints several sources back to back; each
source starts with a marker line so the parser knows what follows. Lines
before the first marker belong to no section and are dropped (a login
banner or a shell's noise cannot be mistaken for data).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    sections: list[Section] = []
    for line in lines:
        if line.startswith(mark):
            tag, _, arg = line[len(mark):].strip().partition(" ")
            sections.append(Section(tag, arg.strip()))
        elif sections:
            sections[-1].lines.append(line)
    return sections


def by_tag(lines: list[str]) -> dict[str, list[str]]:
    """``{tag: lines}``, for probes whose tags do not repeat (a repeated tag's
    lines are joined)."""
    out: dict[str, list[str]] = {}
    for section in split(lines):
        out.setdefault(section.tag, []).extend(section.lines)
    return out
