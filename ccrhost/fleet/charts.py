"""A plain HTML bar chart (inline SVG, no dependencies) for the reports."""

from __future__ import annotations

import html
import math
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


def _length(value: float | None) -> float:
    """A bar's drawn value: none for a missing or non-finite one (its text says what it is)."""
    return value if value is not None and math.isfinite(value) else 0.0


def bar_chart(title: str, note: str, bars: list[Bar], width: int = 520) -> str:
    top = max([_length(b.value) for b in bars] + [_length(b.threshold) for b in bars] + [1e-12])
    bar_h, parts = 22, []
    for i, b in enumerate(bars):
        y = 10 + i * (bar_h + 6)
        w = width * _length(b.value) / top
        parts.append(f'<text x="0" y="{y + 15}" font-size="12">{html.escape(b.label)}</text>'
                     f'<rect x="170" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{COLOURS.get(b.status, "#757575")}"/>'
                     f'<text x="{175 + w:.1f}" y="{y + 15}" font-size="11">{html.escape(b.text)}</text>')
        if _length(b.threshold):
            x = 170 + width * b.threshold / top
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y - 2}" y2="{y + bar_h + 2}" stroke="black" '
                         'stroke-dasharray="3,2"/>')
    height = 20 + len(bars) * (bar_h + 6)
    return (f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(note)}</p>"
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 320}" height="{height}">{"".join(parts)}</svg>\n')


def _tick(value: float) -> str:
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 or value == 0 else f"{value:.2e}"


def histogram(values: list[tuple[float, str]], thresholds: list[float], bins: int = 30,
              width: int = 640, height: int = 220, label: str = "CCR") -> str:
    """An inline SVG histogram of (value, status) pairs, each bar stacked by
    status, with a dashed line per threshold and labelled axes."""
    # an infinite CCR (no inter-node traffic) has no place on an axis; the page counts those hosts apart
    values = [(v, s) for v, s in values if v is not None and math.isfinite(v)]
    thresholds = [t for t in thresholds if t is not None and math.isfinite(t)]
    if not values:
        return '<p class="empty">No host has a finite CCR to show.</p>'
    points = [v for v, _ in values] + list(thresholds)
    lo, hi = min(points), max(points)
    if hi - lo < abs(hi) * 1e-9 or not (hi - lo) / bins > 0:  # one value, or too close to draw apart
        lo, hi = (lo - abs(lo) * 0.1, hi + abs(hi) * 0.1) if hi else (lo, 1.0)
        if not (hi - lo) / bins > 0:  # subnormal CCRs: 10% of them is nothing
            hi = lo + 1e-300
    if max(abs(lo), abs(hi)) > 1e300:  # near the float range's end the axis arithmetic overflows
        return '<p class="empty">No host has a CCR this chart can draw.</p>'

    step = (hi - lo) / bins
    counts = [dict.fromkeys(COLOURS, 0) for _ in range(bins)]
    for v, status in values:
        counts[min(bins - 1, int((v - lo) / step))][status if status in COLOURS else "UNKNOWN"] += 1
    top = max(sum(c.values()) for c in counts)
    left, plot_w, plot_h = 48, width - 90, height - 50
    x = lambda v: left + plot_w * ((v - lo) / (hi - lo))  # noqa: E731  (the fraction first: no overflow)
    y = lambda n: 24 + (plot_h - 14) * (1 - n / top)  # noqa: E731
    parts = [f'<line x1="{left}" y1="{10 + plot_h}" x2="{left + plot_w}" y2="{10 + plot_h}" stroke="#333"/>',
             f'<line x1="{left}" y1="10" x2="{left}" y2="{10 + plot_h}" stroke="#333"/>']
    for i, c in enumerate(counts):
        base = 0
        for status in ("OK", "WARN", "UNKNOWN", "FAIL"):
            n = c[status]
            if not n:
                continue
            parts.append(f'<rect x="{x(lo + i * step) + 0.5:.1f}" y="{y(base + n):.1f}" width="{max(plot_w / bins - 1, 1):.1f}" '
                         f'height="{y(base) - y(base + n):.1f}" fill="{COLOURS[status]}"><title>{n} {status}: '
                         f'{_tick(lo + i * step)} to {_tick(lo + (i + 1) * step)}</title></rect>')
            base += n
        if base:  # the count on top: a handful of FAIL hosts beside a thousand OK ones stays visible
            parts.append(f'<text x="{x(lo + (i + 0.5) * step):.1f}" y="{y(base) - 3:.1f}" font-size="10" '
                         f'text-anchor="middle">{base}</text>')
    for k in range(5):
        v = lo + (hi - lo) * (k / 4)
        parts.append(f'<text x="{x(v):.1f}" y="{height - 18}" font-size="11" text-anchor="middle">{_tick(v)}</text>')
    for n in sorted({0, top // 2, top}):
        parts.append(f'<text x="{left - 6}" y="{y(n) + 4:.1f}" font-size="11" text-anchor="end">{n}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 4}" font-size="12" text-anchor="middle">'
                 f'{html.escape(label)}</text>')
    parts.append(f'<text x="12" y="{10 + plot_h / 2}" font-size="12" text-anchor="middle" '
                 f'transform="rotate(-90 12 {10 + plot_h / 2})">hosts</text>')
    for t in sorted(set(thresholds))[:3]:
        # the label on the side of the line with room for it: a threshold
        # near the left edge once drew "..14e-05", cut off by the SVG's edge
        left_half = x(t) < width / 2
        anchor, tx = ("start", x(t) + 4) if left_half else ("end", x(t) - 4)
        parts.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="14" y2="{10 + plot_h}" stroke="#000" '
                     f'stroke-dasharray="4,3"/><text x="{tx:.1f}" y="10" font-size="11" text-anchor="{anchor}">'
                     f'fail below {_tick(t)}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="{html.escape(label)} histogram">{"".join(parts)}</svg>')
