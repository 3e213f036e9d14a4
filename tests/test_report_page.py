"""The HTML fleet report: what it holds, and how a real browser shows it
at 1,000 hosts (headless Chromium: DOM layout and a screenshot)."""

import dataclasses
import html
import json
import re
import shutil
import struct
import subprocess
import zlib

import pytest
from test_checks import H100, healthy, port

from ccrhost.fleet.report import write_reports
from ccrhost.model.verdict import evaluate

FAIL_RED = (0xC6, 0x28, 0x28)


def fleet(n=1000):
    """n hosts: every 97th has a port down, every 131st a port at 200 Gb/s,
    every 211th a throttled GPU (WARN); one cannot read its GPUs (UNKNOWN)."""
    verdicts, addresses = {}, {}
    for i in range(1, n + 1):
        ports = [port(j) for j in range(8)]
        if i % 97 == 0:
            ports[2] = port(2, state="DOWN", phys="Disabled")
        elif i % 131 == 0:
            ports[5] = port(5, rate=200.0)
        readings = healthy(ports=ports)
        if i % 211 == 0:
            g = readings.gpus
            readings = dataclasses.replace(readings, gpus=[dataclasses.replace(g[0], clock_reasons=8, sm_clock_mhz=1188),
                                                           *g[1:]])
        if i == n // 2:
            readings = dataclasses.replace(readings, gpu_error="NVML: Driver Not Loaded")
        verdicts[f"gpu{i:04d}"] = evaluate(readings, H100)
        addresses[f"gpu{i:04d}"] = f"10.1.{i // 256}.{i % 256}"
    return verdicts, addresses


def test_page_puts_counts_and_the_hosts_needing_attention_first(tmp_path):
    verdicts, addresses = fleet(300)
    page = write_reports(verdicts, tmp_path, addresses=addresses)["html"].read_text()
    for status, n in (("FAIL", 5), ("UNKNOWN", 1), ("WARN", 1), ("OK", 293)):
        assert f">{n} {status}</li>" in page
    attention = page[page.index('<section id="attention">'):page.index('<section id="distribution">')]
    statuses = re.findall(r'<tr id="host-[^"]+" class="(\w+)">', attention)
    assert statuses == ["FAIL"] * 5 + ["UNKNOWN", "WARN"]  # worst first, no OK host
    # the lowest CCR first among the FAILs (the 200 Gb/s port halves it)
    assert re.findall(r'<tr id="host-([^"]+)"', attention)[:2] == ["gpu0131", "gpu0262"]
    assert "<td>gpu0097</td><td>10.1.0.97</td>" in attention
    assert "port mlx5_2/1 is DOWN/Disabled" in attention
    everyone = page[page.index('<section id="all">'):]
    assert len(re.findall(r'<tr id="host-', everyone)) == 300
    assert page.count('<details class="detail">') == 300 + 7  # every host's ports, PCIe and GPUs, on demand
    assert "fail below 1.14e-05" in page  # the threshold in the histogram
    # one self-contained file: no script, nothing fetched
    assert "<script" not in page and not re.search(r'(src|href)=["\']?(https?:|//)', page)


def test_names_equal_to_addresses_are_not_shown_twice(tmp_path):
    verdicts, _ = fleet(3)
    page = write_reports(verdicts, tmp_path, addresses={h: h for h in verdicts})["html"].read_text()
    assert "<th>address</th>" not in page


def png_rgb(data: bytes):
    """Width, height and rows of (r, g, b) from an 8-bit RGB or RGBA PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    assert depth == 8 and colour in (2, 6) and interlace == 0
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev, i = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp), 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return width, height, rows


# Measures, after layout, where the first FAIL host's badge and reason text
# are; written to the body so that --dump-dom returns it.
PROBE = """<script>
const row = document.querySelector('#attention > table > tbody > tr.FAIL');
const text = row.querySelector('td.reasons').firstChild;
const range = document.createRange(); range.selectNodeContents(text);
const r = range.getBoundingClientRect(), b = row.querySelector('.badge').getBoundingClientRect();
document.body.dataset.probe = JSON.stringify({
  reason: text.textContent, top: r.top, bottom: r.bottom, left: r.left, right: r.right,
  badge: [b.left, b.top, b.right, b.bottom], vw: innerWidth, vh: innerHeight,
  all: document.querySelectorAll('#all > details > table > tbody > tr').length,
  attention: document.querySelectorAll('#attention > table > tbody > tr').length});
</script>"""


def chromium(*args, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1280,800", *args],
        capture_output=True, text=True, timeout=180)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed (scripts/bootstrap)")
def test_1000_host_report_in_chromium_shows_a_failure_without_scrolling(tmp_path):
    verdicts, addresses = fleet(1000)
    report = write_reports(verdicts, tmp_path / "report", addresses=addresses)["html"]
    page = report.read_text()
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", PROBE + "</body>"))

    dom = chromium("--dump-dom", probe.as_uri(), tmp_path=tmp_path)
    found = re.search(r'data-probe="([^"]*)"', dom.stdout)
    assert found, dom.stderr[-2000:]
    got = json.loads(html.unescape(found.group(1)))
    assert got["vw"] == 1280 and 600 <= got["vh"] <= 800  # headless keeps some of the window for itself
    assert got["all"] == 1000 and got["attention"] == 7 + 10 + 1 + 4
    assert got["reason"].startswith("port mlx5_5/1 runs at 200 Gb/s, expected 400")
    # the first failure's reason lies wholly inside the first screen
    assert 0 <= got["top"] < got["bottom"] <= got["vh"] and got["right"] <= got["vw"]

    shot = tmp_path / "top.png"
    chromium(f"--screenshot={shot}", report.as_uri(), tmp_path=tmp_path)
    width, height, rows = png_rgb(shot.read_bytes())
    assert (width, height) == (1280, 800)
    left, top, right, bottom = (round(v) for v in got["badge"])
    badge = [rows[y][x] for y in range(top + 2, bottom - 2) for x in range(left + 2, right - 2)]
    red = sum(1 for px in badge if all(abs(a - b) <= 8 for a, b in zip(px, FAIL_RED)))
    assert red > len(badge) / 2, "the first row's FAIL badge is not drawn where the DOM puts it"
