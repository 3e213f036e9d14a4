"""The HTML fleet report's links to the reason-code handbook, and its chart's
labels laid out by a real browser (headless Chromium) inside the chart."""

import html
import json
import re

from test_checks import H100, healthy
from test_report_page import chromium, fleet

from ccrhost.fleet.charts import histogram
from ccrhost.fleet.page import fleet_page
from ccrhost.model import reasons
from ccrhost.model.status import FAIL, Reason
from ccrhost.model.verdict import evaluate


def test_each_reason_links_to_its_handbook_entry_in_the_page():
    verdicts, addresses = fleet(300)
    page = fleet_page(verdicts, addresses)
    links = re.findall(r'<a class="code" href="#reason-([a-z0-9_]+)">\1</a>', page)
    assert set(links) == {"port_down", "port_rate", "port_count", "ccr_below_expected", "gpu_throttled",
                          "gpu_unreadable"}
    for code in set(links):
        doc = reasons.REGISTRY[code]
        entry = page[page.index(f'<div class="reason" id="reason-{code}">'):]
        entry = entry[:entry.index("</div>")]
        assert f"<h3>{code} ({doc.level})</h3>" in entry
        assert re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(doc.meaning)) in entry
        assert all(html.escape(c) in entry for c in doc.confirm)
    # the message stays first in the cell, its code after it
    assert ('port mlx5_2/1 is DOWN/Disabled (<a class="code" href="#reason-port_down">port_down</a>)' in page)
    # offline by default: nothing fetched, no link off the page
    assert not re.search(r'(src|href)=["\']?(https?:|//)', page)


def test_with_a_docs_url_each_entry_links_to_the_site(monkeypatch):
    verdicts, _ = fleet(100)
    page = fleet_page(verdicts, docs_url="https://docs.example.org/ccrhost/")
    assert ('<h3>port_down (FAIL) <a href="https://docs.example.org/ccrhost/reasons.html#port_down">handbook</a>'
            '</h3>') in page
    monkeypatch.setenv("CCRHOST_DOCS_URL", "/docs")
    assert '<a href="/docs/reasons.html#port_down">handbook</a>' in fleet_page(verdicts)


def test_a_code_missing_from_the_registry_is_shown_without_a_link():
    v = evaluate(healthy(), H100)
    v.reasons.append(Reason(FAIL, "made_up_code", "something new"))
    page = fleet_page({"n1": v})
    assert "something new (made_up_code)" in page and "#reason-made_up_code" not in page


# Every <text> of the chart with a box outside the SVG, after layout.
BBOX_PROBE = """<script>
const svg = document.querySelector('svg'), w = svg.width.baseVal.value, h = svg.height.baseVal.value;
const s = svg.getBoundingClientRect();
const texts = [...svg.querySelectorAll('text')].map(t => { const b = t.getBoundingClientRect();
  return {text: t.textContent, x: b.left - s.left, y: b.top - s.top, right: b.right - s.left, bottom: b.bottom - s.top}; });
document.body.dataset.probe = JSON.stringify({w, h, texts});
</script>"""


def test_chart_labels_are_never_clipped(tmp_path):
    # thresholds at both ends of the axis, the long labels of tiny CCRs
    values = [(1.14e-05, "FAIL")] + [(1.2e-05 + i * 1e-08, "OK") for i in range(50)] + [(1.31e-05, "WARN")]
    svg = histogram(values, [1.14e-05, 1.31e-05])
    page = tmp_path / "chart.html"
    page.write_text(f"<!doctype html><html><body style='margin:0'>{svg}{BBOX_PROBE}</body></html>")
    dom = chromium("--dump-dom", page.as_uri(), tmp_path=tmp_path)
    found = re.search(r'data-probe="([^"]*)"', dom.stdout)
    assert found, dom.stderr[-2000:]
    got = json.loads(html.unescape(found.group(1)))
    labels = {t["text"]: t for t in got["texts"]}
    assert {"fail below 1.14e-05", "fail below 1.31e-05", "CCR", "hosts"} <= set(labels)
    outside = [t for t in got["texts"] if t["x"] < 0 or t["y"] < 0 or t["right"] > got["w"] or t["bottom"] > got["h"]]
    assert not outside, f"labels cut off by the chart's edge ({got['w']}x{got['h']}): {outside}"
    # the left threshold's label is drawn to the right of its line, wholly visible
    assert labels["fail below 1.14e-05"]["x"] > 48
