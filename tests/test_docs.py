"""The docs site: it builds strictly, its generated pages match the code,
README leads to every page, the examples on the pages are what the code
prints, and a real browser shows the front page and a handbook entry."""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from test_report_page import chromium, png_rgb

from ccrhost import docs
from ccrhost.cli import entry
from ccrhost.model import reasons
from ccrhost.settings import HostSettings, Workload

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def mkdocs_config() -> dict:
    # mkdocs.yml is plain YAML (no !!python tags), so safe_load reads it
    return yaml.safe_load((REPO / "mkdocs.yml").read_text())


def nav_pages(nav) -> list[str]:
    out = []
    for item in nav:
        for value in item.values():
            out += nav_pages(value) if isinstance(value, list) else [value]
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    return out


def test_site_builds_strictly_with_every_page_in_the_nav(site):
    pages = nav_pages(mkdocs_config()["nav"])
    on_disk = sorted(p.name for p in DOCS.glob("*.md"))
    assert sorted(set(pages)) == on_disk  # strict also fails on a page left out of the nav
    for page in on_disk:
        assert (site / page.replace(".md", ".html")).is_file(), page
    # one anchor per reason code and per settings key, where the report and README link
    handbook = (site / "reasons.html").read_text()
    for code in reasons.REGISTRY:
        assert f'id="{code}"' in handbook, code
    settings = (site / "settings.html").read_text()
    for key in [*HostSettings.model_fields, *Workload.model_fields]:
        assert f'id="{key}"' in settings, key


def test_the_site_fetches_nothing(site):
    assert mkdocs_config()["theme"]["font"] is False  # Material's Google Fonts off: offline CI, offline readers
    for page in site.glob("*.html"):
        text = page.read_text()
        assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', text), page.name


def test_strict_build_fails_on_a_broken_link(tmp_path):
    # the build is what catches broken links: a copy of the docs with one fails
    copy = tmp_path / "docs"
    copy.mkdir()
    for page in DOCS.glob("*.md"):
        (copy / page.name).write_text(page.read_text())
    (copy / "lab.md").write_text((copy / "lab.md").read_text() + "\nSee [nothing](no-such-page.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((REPO / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {copy}"))
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "--site-dir",
                           str(tmp_path / "site")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 1
    assert "no-such-page.md" in proc.stderr


@pytest.mark.parametrize("name", sorted(docs.PAGES))
def test_generated_page_matches_the_code(name):
    committed = (DOCS / name).read_text()
    assert committed == docs.PAGES[name](), f"docs/{name} is out of date: run python -m ccrhost.docs"


def test_regenerating_changes_nothing_and_check_says_so(tmp_path, capsys):
    for name in docs.PAGES:
        (tmp_path / name).write_text((DOCS / name).read_text())
    assert docs.main(["--docs", str(tmp_path), "--check"]) == 0
    (tmp_path / "settings.md").write_text("stale\n")
    assert docs.main(["--docs", str(tmp_path), "--check"]) == 1
    assert "out of date: settings.md; run python -m ccrhost.docs" in capsys.readouterr().err
    assert (tmp_path / "settings.md").read_text() == "stale\n"  # --check writes nothing
    assert docs.main(["--docs", str(tmp_path)]) == 0
    assert (tmp_path / "settings.md").read_text() == docs.settings_reference()


def test_every_host_setting_has_a_description():
    missing = [k for k, f in HostSettings.model_fields.items() if not (f.description or "").strip()]
    assert not missing, f"give these HostSettings fields a description= (it is their docs): {missing}"


def test_settings_reference_states_type_default_and_allowed_values():
    page = docs.settings_reference()

    def entry_of(key):
        start = page.index(f"### `{key}`\n")
        end = page.find("\n### ", start + 1)
        return page[start:end if end > 0 else None]

    assert "- **type**: integer\n- **default**: `26`\n- **allowed**: 0 to 63" in entry_of("roce_dscp")
    assert "- **allowed**: one of `4200`, `9000`" in entry_of("roce_mtu")
    assert "- **type**: integer or null" in entry_of("roce_mtu")
    assert "tc/&lt;port&gt;/traffic_class" in entry_of("roce_force_traffic_class")  # prose, not an HTML tag
    assert "[Workload keys](#workload-keys)" in entry_of("verify_workload")
    assert "- **default**: `null`" in entry_of("dp_size") and "Required unless a preset gives it" in entry_of("dp_size")
    assert "- **allowed**: > 0 and ≤ 16" in entry_of("grad_bytes_per_param")
    # the example of refused data is what the validator says
    assert "  198.18.0.12: roce_dscp = 99: allowed: integers 0 to 63\n" in page


def test_a_field_without_a_description_is_documented_all_the_same():
    from pydantic import BaseModel, Field

    class Job(BaseModel):
        size: int = Field(1, ge=1, le=9)

    text = docs._key("size", Job.model_json_schema()["properties"]["size"], {}, False)
    assert text == "### `size`\n\n*No description yet.*\n\n- **type**: integer\n- **default**: `1`\n- **allowed**: 1 to 9\n"


# --- README ---------------------------------------------------------------------

def test_readme_is_a_quickstart_an_overview_and_links():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    quickstart = readme[readme.index("## Quickstart"):]
    assert ("```sh\nscripts/demo    # installs everything, starts the lab's default fleet, runs deploys/rdma.py "
            "against it\nscripts/test    # runs the test suite\n```") in quickstart
    # CI runs the test command README gives
    assert (REPO / ".ci/run").read_text().rstrip().endswith("\nscripts/test")
    linked = set(re.findall(r"\]\(docs/([a-z0-9-]+\.md)(?:#[^)]*)?\)", readme))
    for page in linked:
        assert (DOCS / page).is_file(), page
    # every page is one click from README or from the site's front page: any section two clicks
    front = set(re.findall(r"\]\(([a-z0-9-]+\.md)", (DOCS / "index.md").read_text()))
    assert {p.name for p in DOCS.glob("*.md")} - {"index.md"} <= linked | front


# --- the examples on the pages are what the code prints ----------------------------

def examples(page: str):
    """(command, shown output) of each ```sh block that starts with ``$ ccrhost``."""
    for block in re.findall(r"```(?:sh)?\n(.*?)```", (DOCS / page).read_text(), re.S):
        lines = block.rstrip("\n").split("\n")
        if lines[0].startswith("$ ccrhost "):
            command, rest = lines[0][2:], lines[1:]
            while command.endswith("\\"):  # a command continued on the next line
                command = command[:-1] + rest.pop(0).strip()
            yield command, rest


def run_ccrhost(command: str, capsys) -> str:
    args = shlex.split(command)[1:]
    with pytest.raises(SystemExit) as done:
        entry(args)
    assert done.value.code == 0, command
    return capsys.readouterr().out


@pytest.mark.parametrize("page", ["reasons.md", "ccr-model.md"])
def test_page_examples_print_what_the_page_shows(page, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --chart writes its PNG here
    found = list(examples(page))
    assert found, page
    for command, shown in found:
        out = run_ccrhost(command, capsys).splitlines()
        if "..." not in shown:
            assert out == shown, command
            continue
        # "..." stands for lines left out: the others appear, in order
        at = 0
        for line in (x for x in shown if x != "..."):
            assert line in out[at:], f"{command}: {line!r} not printed"
            at = out.index(line, at) + 1


def test_handbook_shows_explain_for_its_example_code(capsys):
    command, shown = next(examples("reasons.md"))
    assert command == f"ccrhost explain {docs.EXAMPLE_CODE}"
    assert "\n".join(shown) + "\n" == run_ccrhost(command, capsys)


# --- in a browser ---------------------------------------------------------------

def nonblank(png: bytes) -> tuple[int, int, int]:
    """Width, height and the number of distinct colours of a screenshot."""
    width, height, rows = png_rgb(png)
    colours = {px for row in rows[::4] for px in row[::4]}
    return width, height, len(colours)


def test_front_page_and_a_handbook_entry_in_chromium(site, tmp_path):
    shots = Path(os.environ.get("CCRHOST_DOCS_SHOTS", tmp_path))
    front = site / "index.html"
    dom = chromium("--dump-dom", front.as_uri(), tmp_path=tmp_path).stdout
    assert "<title>ccrhost</title>" in dom
    assert "connection-to-compute ratio" in dom and 'href="reasons.html"' in dom
    shot = shots / "front.png"
    chromium(f"--screenshot={shot}", front.as_uri(), tmp_path=tmp_path)
    width, height, colours = nonblank(shot.read_bytes())
    assert (width, height) == (1280, 800) and colours > 20, colours  # drawn: the theme's header, text, nav

    # the entry, scrolled to by its anchor, in the page's own layout: where is its heading?
    probe = site / "reasons-probe.html"
    probe.write_text((site / "reasons.html").read_text().replace("</body>", """<script>
addEventListener('load', () => setTimeout(() => {
  const h = document.getElementById('link_flap'), r = h.getBoundingClientRect();
  let text = h.innerText;  // the entry: its heading up to the next code's
  for (let e = h.nextElementSibling; e && e.tagName !== 'H2'; e = e.nextElementSibling) text += '\\n' + e.innerText;
  document.body.dataset.probe = JSON.stringify({top: r.top, bottom: r.bottom, vh: innerHeight, text,
    title: document.title});
}, 300));</script></body>"""))
    dom = chromium("--virtual-time-budget=3000", "--dump-dom", probe.as_uri() + "#link_flap",
                   tmp_path=tmp_path).stdout
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, dom[-2000:]
    got = json.loads(html.unescape(found.group(1)))
    assert got["title"].startswith("Reason-code handbook")
    assert 0 <= got["top"] < got["bottom"] <= got["vh"]  # the anchor brings the entry on screen
    doc = reasons.REGISTRY["link_flap"]
    assert got["text"].startswith("link_flap")
    assert "A port's link_downed counter rose within the link-health window" in got["text"]
    assert all(c in got["text"] for c in doc.confirm)
    assert "link_counter_saturated" not in got["text"]  # the next entry is not part of it
    # Headless Chromium draws a scrolled page blank, so for the screenshot a
    # copy of the page drops what comes between the title and the entry: the
    # entry then lies on the first screen in the site's own layout.
    trimmed = site / "reasons-link_flap.html"
    trimmed.write_text((site / "reasons.html").read_text().replace("</body>", """<script>
const h = document.getElementById('link_flap'), title = document.querySelector('article h1');
while (title.nextElementSibling !== h) title.nextElementSibling.remove();
const r = h.getBoundingClientRect();
document.body.dataset.probe = JSON.stringify([r.left, r.top, r.right, r.bottom]);
</script></body>"""))
    dom = chromium("--dump-dom", trimmed.as_uri(), tmp_path=tmp_path).stdout
    left, top, right, bottom = (round(v) for v in json.loads(html.unescape(
        re.search(r'data-probe="([^"]*)"', dom).group(1))))
    assert 0 <= top < bottom <= 800
    shot = shots / "handbook-link_flap.png"
    chromium(f"--screenshot={shot}", trimmed.as_uri(), tmp_path=tmp_path)
    width, height, colours = nonblank(shot.read_bytes())
    assert (width, height) == (1280, 800) and colours > 20, colours
    # the entry's heading is drawn where the DOM puts it: dark text on the light page
    _, _, rows = png_rgb(shot.read_bytes())
    heading = [rows[y][x] for y in range(top, bottom) for x in range(left, min(right, 1280))]
    assert sum(1 for px in heading if max(px) < 100) > 50


def test_the_settings_pages_example_is_what_a_deploy_prints(capsys):
    # the refused data of the page, through the function every deploy calls first
    from types import SimpleNamespace

    from ccrhost.inventory import host_settings

    class Inventory(list):
        pass

    hosts = Inventory(SimpleNamespace(name=n, data=SimpleNamespace(dict=lambda d=d: d))
                      for n, d in docs.BAD_DATA.items())
    with pytest.raises(SystemExit) as done:
        host_settings(hosts[0], hosts)
    assert done.value.code == 2
    shown = re.search(r"```\n(ccrhost: inventory data rejected.*?)```", docs.settings_reference(), re.S).group(1)
    assert capsys.readouterr().err == shown


# --- lists render as lists ---------------------------------------------------------

class _ListText(HTMLParser):
    """The text of each paragraph and list item outside code, and the item
    count of each ordered list."""

    BLOCKS = ("p", "li", "td", "th", "dd", "dt", "h1", "h2", "h3", "h4", "h5", "h6")

    def __init__(self):
        super().__init__()
        self.blocks, self.skip, self.lists = [], 0, []
        self.open: list[list[str]] = []  # the text of each open block, innermost last
        self.stack: list[list] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("pre", "code", "script", "style"):
            self.skip += 1
        elif tag in ("ol", "ul"):
            self.stack.append([0, tag])
        if tag == "li" and self.stack:
            self.stack[-1][0] += 1  # an item of the innermost list only
        if tag in self.BLOCKS:
            self.open.append([])

    def handle_endtag(self, tag):
        if tag in ("pre", "code", "script", "style"):
            self.skip -= 1
        elif tag in ("ol", "ul"):
            count, kind = self.stack.pop()
            if kind == "ol":
                self.lists.append(count)
        if tag in self.BLOCKS and self.open:
            self.blocks.append("".join(self.open.pop()))

    def handle_data(self, data):
        if not self.skip and self.open:
            self.open[-1].append(data)


# a line inside a block's text that starts like a list item: Python-Markdown
# read it as the paragraph's next line, not as an item
LIST_MARKER = re.compile(r"\n[ \t]*(?:\d+\.|[-*+])[ \t]+\S[^\n]*")


def source_ordered_lists(markdown: str) -> list[int]:
    """The item count of each ordered list the page's source writes, nested
    ones too (a list is items numbered 1, 2, ... at one indentation)."""
    lists, open_at = [], {}
    for line in re.sub(r"^( *)```.*?^\1```", "", markdown, flags=re.S | re.M).splitlines():
        item = re.match(r"^( *)(\d+)\. ", line)
        if item:
            indent, number = len(item.group(1)), int(item.group(2))
            if number == 1:
                open_at[indent] = len(lists)
                lists.append(1)
            else:
                assert indent in open_at and lists[open_at[indent]] == number - 1, line
                lists[open_at[indent]] += 1
    return sorted(lists)


def list_problems(page_html: str, markdown: str) -> list[str]:
    """The page's list items that Python-Markdown did not render as items."""
    # the page's own content: the theme's navigation and search have lists of their own
    article = re.search(r"<article\b.*?</article>", page_html, re.S)
    parsed = _ListText()
    parsed.feed(article.group(0) if article else page_html)
    problems = [m.group(0).strip() for block in parsed.blocks for m in LIST_MARKER.finditer(block)]
    if sorted(parsed.lists) != source_ordered_lists(markdown):
        problems.append(f"ordered lists of {sorted(parsed.lists)} items, the source has {source_ordered_lists(markdown)}")
    return problems


def test_the_list_check_catches_a_paragraph_and_a_split_list():
    broken = ("<ol>\n<li>Build:</li>\n</ol>\n<div><pre><code>make\n- not a list\n</code></pre></div>\n<ol>\n"
              "<li>Apply</li>\n</ol>\n<p>What a container cannot do:\n  - no modules\n5. <strong>NCCL</strong></p>")
    source = "1. Build:\n\n   ```sh\n   make\n   ```\n\n2. Apply\n"
    assert list_problems(broken, source) == ["- no modules", "5. NCCL",
                                             "ordered lists of [1, 1] items, the source has [2]"]
    assert list_problems("<ol><li>a</li><li>b<ul><li>c</li></ul></li></ol>", "1. a\n2. b\n    - c\n") == []


def test_every_list_renders_as_a_list(site):
    problems = {}
    for page in sorted(DOCS.glob("*.md")):
        found = list_problems((site / page.name.replace(".md", ".html")).read_text(), page.read_text())
        if found:
            problems[page.name] = found
    assert problems == {}


def test_the_real_cluster_warning_is_a_box_before_the_checklist(site):
    # the admonition renders as Material's warning box, with its table inside it
    page = (site / "getting-started.html").read_text()
    section = page[page.index('id="running-it-on-a-real-cluster"'):]
    box = re.search(r'<div class="admonition warning">\s*<p class="admonition-title">(.*?)</p>(.*?)</div>',
                    section, re.S)
    assert box and box.group(1) == "The lossless-RoCE defaults must match your switches"
    assert "<table>" in box.group(2) and "qos_enable = False" in box.group(2)
    assert section.index('class="admonition warning"') < section.index("<ol>")


# --- what Python-Markdown reads otherwise than the source reads (issue 46) -----------

def _cells(row: str) -> int:
    """A table row's cells: its pipes outside code spans, less an escaped one."""
    text = re.sub(r"`[^`]*`", "", row.strip()).replace("\\|", "")
    return len(text.strip("|").split("|"))


def layout_problems(markdown: str) -> list[str]:
    """A line starting with ``#`` in a paragraph (Python-Markdown needs no
    space after the hashes and lets a heading break a paragraph: `#290:`
    becomes a heading), a table row with more or fewer cells than its header
    (extra cells are dropped with their text) and text straight under a
    table (read as one more row)."""
    # fenced blocks blanked, not removed: the line numbers stay the source's
    text = re.sub(r"^( *)```.*?^\1```", lambda m: "\n" * m.group(0).count("\n"), markdown, flags=re.S | re.M)
    problems, header = [], None
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        before = lines[number - 2] if number > 1 else ""
        if line.startswith("#") and (not re.match(r"#+ ", line) or (before.strip() and not before.startswith("#"))):
            problems.append(f"line {number}: a heading inside a paragraph: {line[:60]}")
        if line.startswith("|"):
            if header is None:
                header = _cells(line)
            elif _cells(line) != header:
                problems.append(f"line {number}: a row of {_cells(line)} cells under a header of {header}: "
                                f"{line[:60]}")
        else:
            if header is not None and line.strip() and not line.startswith("<!--"):  # a comment ends a table
                problems.append(f"line {number}: text straight under a table, read as a row: {line[:60]}")
            header = None
    return problems


def test_the_layout_check_catches_a_heading_in_a_paragraph_and_a_row_that_swallows_text():
    assert layout_problems("The ring busbw (nccl-tests\n#290: 46-48 GB/s) is what\n") == \
        ["line 2: a heading inside a paragraph: #290: 46-48 GB/s) is what"]
    assert layout_problems("| a | b |\n| --- | --- |\n| `none` | nothing | A bad `--config` or an internal\n"
                           "error exits 3.\n") == [
        "line 3: a row of 3 cells under a header of 2: | `none` | nothing | A bad `--config` or an internal",
        "line 4: text straight under a table, read as a row: error exits 3."]
    fine = "# Title\n\nText.\n\n## Part\n\n| a | b |\n| --- | --- |\n| `x|y` | \\| |\n\n```\n#!/bin/sh\n```\n"
    assert layout_problems(fine) == []


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_no_page_has_a_heading_in_a_paragraph_or_a_row_that_swallows_text(page):
    assert layout_problems((DOCS / page).read_text()) == []
