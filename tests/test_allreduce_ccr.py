"""CCR_measured = B_measured / (beta x F) beside the nominal CCR, in the
verdict and in every report (text, JSON, JUnit, HTML, Prometheus)."""

import json
from xml.etree import ElementTree as ET

from test_checks import H100, healthy

from ccrhost.fleet import report
from ccrhost.model.allreduce import AllReduceReading
from ccrhost.model.verdict import Verdict, evaluate
from ccrhost.node.formats import format_prometheus, format_text


def pair(busbw, status="OK", code=None, measured_at=100.0, valid_for=3600.0):
    return {"check": "allreduce", "mode": "pair", "status": status, "code": code, "message": "two-node ring all-reduce",
            "measured_at": measured_at, "valid_for": valid_for, "value": busbw}


def with_pair(busbw, read_at=200.0, **kw):
    r = healthy()
    r.allreduce = AllReduceReading(read_at, {"pair": pair(busbw, **kw)})
    return r


def test_measured_ccr_uses_the_ring_busbw_as_b():
    v = evaluate(with_pair(368.0), H100)
    nominal, measured = v.ccr, v.measured_ccr
    assert nominal.bandwidth_gbps == 3200.0 and measured.bandwidth_gbps == 368.0 * 8
    assert measured.tflops == nominal.tflops and measured.beta == nominal.beta
    assert abs(measured.ccr / nominal.ccr - 2944 / 3200) < 1e-9
    assert v.status == "OK"


def test_the_ccr_floor_applies_to_the_measured_ccr():
    v = evaluate(with_pair(150.0, status="FAIL", code="allreduce_slow"), H100)
    codes = {r.code for r in v.reasons}
    assert "ccr_measured_low" in codes and "allreduce_slow" in codes and v.status == "FAIL"
    assert v.measured_ccr.bandwidth_gbps == 1200.0


def test_no_measured_ccr_from_a_stale_wrong_or_unknown_pair_result():
    assert evaluate(with_pair(368.0, read_at=100.0 + 3601), H100).measured_ccr is None
    assert evaluate(with_pair(368.0, status="FAIL", code="allreduce_wrong"), H100).measured_ccr is None
    assert evaluate(with_pair(None, status="UNKNOWN", code="allreduce_hang"), H100).measured_ccr is None
    assert evaluate(healthy(), H100).measured_ccr is None


def test_every_report_shows_measured_beside_nominal(tmp_path):
    verdicts = {"gpu01": evaluate(with_pair(368.0), H100), "gpu02": evaluate(healthy(), H100)}
    measured = verdicts["gpu01"].measured_ccr.ccr
    paths = report.write_reports(verdicts, tmp_path)
    doc = json.loads(paths["json"].read_text())
    assert doc["hosts"]["gpu01"]["measured_ccr"]["bandwidth_gbps"] == 2944.0
    assert doc["hosts"]["gpu02"]["measured_ccr"] is None
    props = {c.get("name"): {p.get("name"): p.get("value") for p in c.find("properties")}
             for c in ET.parse(paths["xml"]).getroot()}
    assert float(props["gpu01"]["ccr_measured"]) == float(f"{measured:.6e}") and props["gpu02"]["ccr_measured"] == "-"
    row = next(line for line in paths["txt"].read_text().splitlines() if line.startswith("gpu01"))
    assert row.split()[9] == f"{measured:.3e}"  # after beta
    page = paths["html"].read_text()
    assert "<th>measured CCR</th>" in page and f"measured CCR {measured:.3e} = B 2944 Gb/s" in page
    node = verdicts["gpu01"]
    assert f"ccrhost_ccr_measured {measured:.6e}" in format_prometheus(node)
    assert "ccrhost_bandwidth_measured_gbps 2944" in format_prometheus(node)
    assert f"measured CCR {measured:.3e} (B 2944 Gb/s" in format_text(node)


def test_the_measured_ccr_survives_the_nodes_json():
    v = evaluate(with_pair(368.0), H100)
    back = Verdict.from_dict(json.loads(json.dumps(v.to_dict())))
    assert back.measured_ccr == v.measured_ccr


def test_a_workload_policy_gives_the_measured_ccr_from_its_model_too():
    from ccrhost.settings import validate_host

    s = validate_host("n", {"verify_profile": "hgx-h100-8x400", "verify_workload": {"preset": "llama3-70b"}})
    v = evaluate(with_pair(368.0), s.expectation(), s.policy())
    assert v.measured_ccr is not None and v.measured_ccr.workload is not None
