"""Every report writer handles an infinite CCR (a single-node
verify_workload: no inter-node traffic) and a missing one, and a report
that fails is named without stopping the others or the closing table."""

from __future__ import annotations

import io
import json
import math
import xml.etree.ElementTree as ET

import pytest
from test_checks import H100, healthy

from ccrhost.fleet import report
from ccrhost.fleet.charts import Bar, bar_chart, histogram
from ccrhost.model import workload as wl
from ccrhost.model.verdict import Policy, evaluate


def _fleet() -> dict:
    """One node whose whole data-parallel job fits inside it (dp 8 on 8 GPUs,
    which validation accepts), one ordinary node, one whose GPUs cannot be read."""
    single = evaluate(healthy(), H100, Policy(workload=wl.WorkloadSpec(tokens_per_gpu_step=4096, dp_size=8)))
    assert math.isinf(single.ccr.ccr)
    import dataclasses

    unread = evaluate(dataclasses.replace(healthy(), gpu_error="NVML: Driver Not Loaded"), H100)
    assert unread.ccr is None
    return {"gpu01": single, "gpu02": evaluate(healthy(), H100), "gpu03": unread}


def _strict_json(text: str):
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_an_infinite_ccr_writes_all_four_reports(tmp_path):
    """The reproduction: the HTML report raised on the infinite CCR."""
    err = io.StringIO()
    paths = report.write_reports(_fleet(), tmp_path, stream=err)
    assert sorted(paths) == ["html", "json", "txt", "xml"] and paths.failed == {} and err.getvalue() == ""
    page = paths["html"].read_text()
    assert "2 hosts with a CCR; 1 with no inter-node traffic (infinite CCR, not drawn)" not in page
    assert "1 hosts with a CCR; 1 with no inter-node traffic (infinite CCR, not drawn)" in page
    assert '<tr id="host-gpu01"' in page
    doc = _strict_json(paths["json"].read_text())
    assert doc["hosts"]["gpu01"]["ccr"]["ccr"] is None  # JSON has no infinity
    table = paths["txt"].read_text().splitlines()
    row = next(line for line in table if line.startswith("gpu01"))
    # no inter-node traffic: the end-to-end MFU is the kernel share (peak here: a ceiling, marked), no expected CCR
    assert row.split()[1:6] == ["OK", "inf", "not-network-bound", "<=100.0%", "-"]
    unread = next(line for line in table if line.startswith("gpu03"))
    assert unread.split()[1:9] == ["UNKNOWN", "-", "-", "-", "1.263e-05", "-", "-", "-"]  # no MFU; expected: declared
    assert ET.parse(paths["xml"]).getroot().get("tests") == "3"


def test_a_report_that_fails_is_named_and_the_others_and_the_table_still_come(tmp_path, monkeypatch):
    (tmp_path / "ccr-report.html").write_text("the previous run's page")

    def broken(*_args, **_kwargs):
        raise ValueError("cannot convert float NaN to integer")

    monkeypatch.setattr(report, "html_chart", broken)
    fleet = report.FleetReport(str(tmp_path))
    for host, verdict in _fleet().items():
        fleet.record(host, verdict)
    out = io.StringIO()
    paths = fleet.finish(out)
    assert sorted(paths) == ["json", "txt", "xml"]
    assert paths.failed == {"html": "ValueError: cannot convert float NaN to integer"}
    assert not (tmp_path / "ccr-report.html").exists()  # never mistaken for this run's
    text = out.getvalue()
    assert (f"ccrhost: the html report {tmp_path / 'ccr-report.html'} was not written: ValueError: cannot convert "
            "float NaN to integer\n") in text
    assert "CCR per host" in text and "OK: 2  WARN: 0  FAIL: 0  UNKNOWN: 1" in text
    assert text.rstrip().splitlines()[-1] == "Reports: " + ", ".join(
        str(tmp_path / f"ccr-report.{k}") for k in ("json", "xml", "txt"))


def test_an_unwritable_folder_fails_each_report_by_name_and_raises_nothing(tmp_path):
    (tmp_path / "file").write_text("")
    err = io.StringIO()
    paths = report.write_reports(_fleet(), tmp_path / "file" / "reports", stream=err)
    assert dict(paths) == {} and sorted(paths.failed) == ["html", "json", "txt", "xml"]
    assert err.getvalue().count("was not written") == 4


@pytest.mark.parametrize("values", [[(math.inf, "OK")], [(math.inf, "OK"), (1.2e-5, "OK")],
                                    [(math.nan, "UNKNOWN"), (1.2e-5, "FAIL")], []])
def test_the_histogram_draws_only_finite_values(values):
    svg = histogram(values, [math.inf, 1.1e-5])
    finite = [v for v, _ in values if math.isfinite(v)]
    if finite:
        assert svg.startswith("<svg") and "nan" not in svg and "inf" not in svg
    else:
        assert svg == '<p class="empty">No host has a finite CCR to show.</p>'


def test_a_bar_chart_with_an_infinite_or_missing_value_draws_it_empty():
    page = bar_chart("t", "n", [Bar("a", math.inf, "OK", "no traffic"), Bar("b", None, "UNKNOWN", "unread"),
                                Bar("c", 2.0, "OK", "2", threshold=math.inf)])
    assert 'width="0.0"' in page and "nan" not in page and "inf" not in page
