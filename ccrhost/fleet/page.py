"""The fleet report as one self-contained HTML page an operator opens first.

Built for 1,000 hosts and more: the counts per verdict and the hosts that
need attention (FAIL, UNKNOWN, WARN, with their reasons) come first, so a
failure is on screen without scrolling; then the CCR distribution against
the fail threshold; every host's ports, rates, PCIe links and GPUs sit in a
closed <details>, which the browser does not lay out until opened. Each
reason's code links to its handbook entry, which the page carries for the
codes it shows (the same text as ``ccrhost explain CODE``), so it works
offline; with a docs site URL (``docs_url``, or $CCRHOST_DOCS_URL) each entry
also links to the site's page. No script, no external resource otherwise.
"""

from __future__ import annotations

import html
import math
import os
import re
import time

from ccrhost.fleet.charts import COLOURS, histogram
from ccrhost.model import reasons as handbook
from ccrhost.model.certificate_view import cells
from ccrhost.model.verdict import FAIL, OK, UNKNOWN, WARN, Verdict, reason_action, scope_text

_ORDER = {FAIL: 0, UNKNOWN: 1, WARN: 2, OK: 3}

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#111}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:18px 0 6px}
.meta{color:#555;margin:0 0 8px}
.counts{display:flex;gap:8px;list-style:none;padding:0;margin:0 0 6px}
.counts li{border-radius:4px;padding:4px 10px;color:#fff;font-weight:600}
.counts .zero{opacity:.35}
.badge{display:inline-block;min-width:5.5em;text-align:center;border-radius:3px;color:#fff;font-weight:600;font-size:12px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;vertical-align:top;padding:3px 8px;border-bottom:1px solid #ddd}
th{background:#f4f4f4;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.reasons{max-width:60em}
details>summary{cursor:pointer;color:#1a55a0}
.detail table{width:auto;margin:4px 0 8px;font-size:12px}
.bad{color:#c62828;font-weight:600}
a.code{font:12px ui-monospace,monospace;color:#1a55a0}
.reason{border-top:1px solid #ddd;padding:4px 0}.reason h3{font-size:14px;margin:6px 0 2px}
.reason pre{background:#f4f4f4;padding:4px 8px;overflow-x:auto}
"""


def _badge(status: str) -> str:
    return f'<span class="badge" style="background:{COLOURS.get(status, "#757575")}">{status}</span>'


def _num(value, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) else "–"


def _detail(v: Verdict) -> str:
    r = v.readings
    rows = []
    top_rate = max((p.rate_gbps or 0 for p in r.ports), default=0)
    for p in r.ports:
        width_bad = p.pcie_width and p.pcie_width_max and p.pcie_width < p.pcie_width_max
        rate_bad = (p.rate_gbps or 0) < top_rate
        rows.append(
            f"<tr><td>{html.escape(p.name)}</td><td{' class=bad' if not p.active else ''}>"
            f"{html.escape(f'{p.state}/{p.phys_state}')}</td><td class='num{' bad' if rate_bad else ''}'>"
            f"{_num(p.rate_gbps, 'g')}</td>"
            f"<td class='num{' bad' if width_bad else ''}'>{_num(p.pcie_gts, 'g')} GT/s x{_num(p.pcie_width, 'd')}"
            f" (max x{_num(p.pcie_width_max, 'd')})</td><td class=num>{_num(p.measured_gbps, '.0f')}</td>"
            f"<td class=num>{_num(p.effective_gbps, '.0f')}</td></tr>")
    ports = ("<table><tr><th>port</th><th>state</th><th>rate Gb/s</th><th>NIC PCIe</th><th>measured</th>"
             f"<th>effective Gb/s</th></tr>{''.join(rows)}</table>" if rows else "<p>No RDMA port.</p>")
    gpus = "".join(
        f"<tr><td>{g.index}</td><td>{html.escape(g.name)}</td><td class=num>{_num(g.sm_clock_mhz, 'd')}/"
        f"{_num(g.max_sm_clock_mhz, 'd')} MHz</td><td class=num>gen {_num(g.pcie_gen, 'd')} x{_num(g.pcie_width, 'd')}</td>"
        f"<td>{html.escape(', '.join(g.throttle_reasons)) or '–'}</td></tr>"
        for g in r.gpus)
    gpu_table = (f"<table><tr><th>GPU</th><th>model</th><th>SM clock</th><th>PCIe</th><th>throttled</th></tr>{gpus}"
                 "</table>" if gpus else f"<p>{html.escape(r.gpu_error or 'No GPU read.')}</p>")
    c = v.ccr
    ccr = (f"<p>CCR {c.ccr:.3e} = B {c.bandwidth_gbps:g} Gb/s ({c.model}) / (beta {c.beta:g} x F {c.tflops:.1f} TFLOPS)"
           + (f"; fails below {v.fail_below:.3e}" if v.fail_below else "") + "</p>") if c else ""
    m = v.measured_ccr
    if m:
        ccr += (f"<p>measured CCR {m.ccr:.3e} = B {m.bandwidth_gbps:g} Gb/s (two-node ring all-reduce busbw x 8) / "
                f"(beta {m.beta:g} x F {m.tflops:.1f} TFLOPS, {m.compute or 'nominal'} compute)</p>")
    return f'<details class="detail"><summary>ports, PCIe, GPUs</summary>{ccr}{ports}{gpu_table}</details>'


def _reasons(v: Verdict) -> str:
    """The non-OK reasons, each message first, then its code linking to the
    handbook entry below."""
    bad = [r for r in v.reasons if r.level != OK]
    if not bad:
        return html.escape(v.summary())
    return "; ".join(
        html.escape(r.message) + (f' (<a class="code" href="#reason-{html.escape(r.code)}">{html.escape(r.code)}</a>)'
                                  if r.code in handbook.REGISTRY else f" ({html.escape(r.code)})")
        + f" [{html.escape(reason_action(r))}: {html.escape(scope_text(r, v.readings))}]"
        for r in bad) + f"; <b>action {html.escape(v.action_text())}</b>"


def _inline(text: str) -> str:
    """Escaped prose with the handbook's `code` spans as <code>."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(text))


def _entry(code: str, docs_url: str | None) -> str:
    doc = handbook.REGISTRY[code]
    esc = html.escape
    site = (f' <a href="{esc(docs_url.rstrip("/"))}/{handbook.HANDBOOK_PAGE}#{esc(code)}">handbook</a>'
            if docs_url else "")
    return (f'<div class="reason" id="reason-{esc(code)}"><h3>{esc(code)} ({esc(doc.level)}){site}</h3>'
            f"<p><b>Action:</b> {esc(doc.action)}; <b>scope:</b> {esc(doc.scope)}</p>"
            f"<p>{_inline(doc.meaning)}</p><p><b>Read:</b> {_inline(doc.reads)}</p><p><b>Likely causes:</b></p><ul>"
            + "".join(f"<li>{_inline(c)}</li>" for c in doc.causes)
            + "</ul><p><b>Confirm:</b></p><pre>" + esc("\n".join(doc.confirm)) + "</pre><p><b>Fix:</b></p><ul>"
            + "".join(f"<li><code>{esc(f)}</code></li>" if isinstance(f, handbook.Cmd) else f"<li>{_inline(f)}</li>"
                      for f in doc.fix)
            + "</ul></div>")


def _handbook(verdicts: dict[str, Verdict], docs_url: str | None) -> str:
    codes = sorted({r.code for v in verdicts.values() for r in v.reasons
                    if r.level != OK and r.code in handbook.REGISTRY})
    if not codes:
        return ""
    return (f'<section id="reasons"><h2>Reason codes in this report</h2><p>What each code means and what to do '
            f"about it; <code>ccrhost explain CODE</code> prints the same on a node.</p>"
            f"{''.join(_entry(c, docs_url) for c in codes)}</section>")


def _rows(items, addresses: dict, show_address: bool, certs: dict[str, str]) -> str:
    out = []
    for host, v in items:
        cert = f"<td>{html.escape(certs.get(host, '–'))}</td>" if certs else ""
        c = v.ccr
        share = f"{c.ccr / v.expected_ccr:.0%}" if c and v.expected_ccr and math.isfinite(c.ccr) else "–"
        address = f"<td>{html.escape(addresses.get(host, ''))}</td>" if show_address else ""
        out.append(
            f'<tr id="host-{html.escape(host)}" class="{v.status}"><td>{_badge(v.status)}</td>'
            f"<td>{html.escape(host)}</td>{address}<td class=num>{_num(c.ccr if c else None, '.3e')}</td>"
            f"<td class=num>{_num(v.measured_ccr.ccr if v.measured_ccr else None, '.3e')}</td>"
            f'<td class=num>{share}</td>{cert}<td class="reasons">{_reasons(v)}{_detail(v)}</td></tr>')
    return "".join(out)


def _table(items, addresses: dict, show_address: bool, certs: dict[str, str] | None = None) -> str:
    head = "<th>status</th><th>host</th>" + ("<th>address</th>" if show_address else "")
    cert = "<th>certificate</th>" if certs else ""
    return (f"<table><thead><tr>{head}<th>CCR</th><th>measured CCR</th><th>of expected</th>{cert}<th>reasons</th>"
            "</tr></thead>"
            f"<tbody>{_rows(items, addresses, show_address, certs or {})}</tbody></table>")


def fleet_page(verdicts: dict[str, Verdict], addresses: dict[str, str] | None = None,
               title: str = "ccrhost fleet report", docs_url: str | None = None) -> str:
    """``docs_url``: the docs site's base URL, for a link from each handbook
    entry (default: $CCRHOST_DOCS_URL; none keeps the page self-contained)."""
    addresses = addresses or {}
    docs_url = docs_url if docs_url is not None else os.environ.get("CCRHOST_DOCS_URL") or None
    show_address = any(addresses.get(h) not in (None, "", h) for h in verdicts)
    certs = cells(verdicts)

    def key(item):
        host, v = item
        return _ORDER.get(v.status, 1), v.ccr.ccr if v.ccr else -1.0, host

    ordered = sorted(verdicts.items(), key=key)
    attention = [(h, v) for h, v in ordered if v.status != OK]
    counts = {s: sum(v.status == s for v in verdicts.values()) for s in (FAIL, UNKNOWN, WARN, OK)}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no hosts"
    count_items = "".join(
        f'<li class="{s}{" zero" if not n else ""}" style="background:{COLOURS[s]}">{n} {s}</li>'
        for s, n in counts.items())
    values = [(v.ccr.ccr, v.status) for v in verdicts.values() if v.ccr and math.isfinite(v.ccr.ccr)]
    no_traffic = sum(1 for v in verdicts.values() if v.ccr and math.isinf(v.ccr.ccr))
    thresholds = sorted({v.fail_below for v in verdicts.values() if v.fail_below})
    below = sum(1 for v in verdicts.values() if v.ccr and v.fail_below and v.ccr.ccr < v.fail_below)
    first = (f'<section id="attention"><h2>Needs attention: {len(attention)} of {len(verdicts)} hosts, '
             f"worst first</h2>{_table(attention, addresses, show_address, certs)}</section>" if attention else
             '<section id="attention"><h2>Every host passed.</h2></section>')
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport "
        f'content="width=device-width,initial-scale=1"><title>{html.escape(title)}: {summary}</title>'
        f"<style>{STYLE}</style></head><body>"
        f"<header><h1>{html.escape(title)}</h1><p class=meta>{len(verdicts)} hosts, "
        f"generated {time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime())}. CCR = B / (beta x F).</p>"
        f'<ul class="counts">{count_items}</ul></header>'
        f"{first}"
        f'<section id="distribution"><h2>CCR distribution</h2>'
        f"{histogram(values, thresholds)}"
        f"<p>{len(values)} hosts with a CCR"
        f"{f'; {no_traffic} with no inter-node traffic (infinite CCR, not drawn)' if no_traffic else ''}; {below} below their fail threshold (dashed: verify_min_ccr, or "
        f"verify_min_ccr_fraction of the CCR the declared hardware should give).</p></section>"
        f'<section id="all"><h2>All {len(verdicts)} hosts</h2><details><summary>show every host, worst first'
        f"</summary>{_table(ordered, addresses, show_address, certs)}</details></section>"
        f"{_handbook(verdicts, docs_url)}"
        "</body></html>\n"
    )
