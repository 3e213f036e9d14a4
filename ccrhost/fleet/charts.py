"""A plain HTML bar chart (inline SVG, no dependencies) for the reports."""

from __future__ import annotations

import html
from dataclasses import dataclass

from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN

COLOURS = {OK: "#2e7d32", WARN: "#f9a825", FAIL: "#c62828", UNKNOWN: "#757575"}


@dataclass(frozen=True)
class Bar:
    label: str
    value: float | None
    status: str
    text: str
    threshold: float | None = None  # drawn as a dashed line


def bar_chart(title: str, note: str, bars: list[Bar], width: int = 520) -> str:
    top = max([b.value or 0 for b in bars] + [b.threshold or 0 for b in bars] + [1e-12])
    bar_h, parts = 22, []
    for i, b in enumerate(bars):
        y = 10 + i * (bar_h + 6)
        w = width * (b.value or 0) / top
        parts.append(f'<text x="0" y="{y + 15}" font-size="12">{html.escape(b.label)}</text>'
                     f'<rect x="170" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{COLOURS.get(b.status, "#757575")}"/>'
                     f'<text x="{175 + w:.1f}" y="{y + 15}" font-size="11">{html.escape(b.text)}</text>')
        if b.threshold:
            x = 170 + width * b.threshold / top
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y - 2}" y2="{y + bar_h + 2}" stroke="black" '
                         'stroke-dasharray="3,2"/>')
    height = 20 + len(bars) * (bar_h + 6)
    return (f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(note)}</p>"
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 320}" height="{height}">{"".join(parts)}</svg>\n')
