"""Actions and scope: every report says what to do about a node and which
part of it (issue 40, layer 1). The catalogue side (every code has both, in
the handbook) is tests/test_reasons.py."""

from __future__ import annotations

import json
from xml.etree import ElementTree as ET

from test_checks import H100, gpu, healthy, port
from test_gpu_health import gpu as health

from ccrhost.fleet import page, report
from ccrhost.model import drain_reason as drain_text
from ccrhost.model.gpu_health import GpuHealthReading
from ccrhost.model.status import FAIL, OK
from ccrhost.model.verdict import Verdict, evaluate
from ccrhost.node import formats

PCI2 = "0000:38:00.0"  # test_gpu_health.gpu(2)


def remap_pending_on_gpu2() -> Verdict:
    readings = healthy()
    readings.gpu_health = GpuHealthReading(gpus=[health(i, remap_pending=i == 2) for i in range(8)],
                                           fabric_manager="active")
    return evaluate(readings, H100)


def port_down_and_remap() -> Verdict:
    ports = [port(i) for i in range(8)]
    ports[3] = port(3, state="DOWN", phys="Disabled")
    readings = healthy(ports=ports)
    readings.gpu_health = GpuHealthReading(gpus=[health(i, remap_pending=i == 2) for i in range(8)],
                                           fabric_manager="active")
    return evaluate(readings, H100)


def test_a_gpu_reason_names_its_gpu_by_index_pci_address_and_uuid():
    v = remap_pending_on_gpu2()
    assert v.status == FAIL and v.action == "reset_gpu"
    assert v.action_text() == f"reset_gpu (gpu 2 {PCI2} GPU-2)"
    doc = v.to_dict()
    assert doc["action"] == "reset_gpu"
    assert [r for r in doc["reasons"] if r["code"] == "gpu_row_remap_pending"] == [{
        "level": "FAIL", "code": "gpu_row_remap_pending",
        "message": f"GPU 2 ({PCI2}) has a row remapping pending: the GPU needs a reset",
        "gpu": 2, "action": "reset_gpu", "scope": "gpu", "pci": PCI2, "uuid": "GPU-2"}]
    # the JSON gives the same verdict back: the part survives the round trip
    again = Verdict.from_dict(json.loads(json.dumps(doc)))
    assert again.reasons == v.reasons and again.action_text() == v.action_text()


def test_a_node_action_is_the_most_disruptive_of_its_worst_reasons():
    v = port_down_and_remap()
    # a port down needs a person at the cable: a GPU reset alone will not bring the node back
    assert [(r.code, r.nic, r.port) for r in v.reasons if r.code == "port_down"] == [("port_down", "mlx5_3", 1)]
    assert v.action == "investigate"  # port_count and ccr_below_expected, with the port down
    ok = evaluate(healthy(), H100)
    assert ok.status == OK and ok.action == "none"
    # a warning's advice does not outrank a failure's
    gpus = [gpu(i) for i in range(8)]
    gpus[0] = gpu(0, clock=990, reasons=0x8)  # gpu_throttled: WARN, investigate
    readings = healthy(gpus=gpus)
    readings.gpu_health = GpuHealthReading(gpus=[health(i, remap_pending=i == 2) for i in range(8)],
                                           fabric_manager="active")
    mixed = evaluate(readings, H100)
    assert {r.code for r in mixed.reasons} >= {"gpu_throttled", "gpu_row_remap_pending"}
    assert mixed.action == "reset_gpu"


def test_text_nhc_npd_and_drain_reason_carry_the_action():
    v = remap_pending_on_gpu2()
    text = formats.format_text(v)
    assert f"  action: reset_gpu (gpu 2 {PCI2} GPU-2)\n" in text
    assert (f"  FAIL: gpu_row_remap_pending: GPU 2 ({PCI2}) has a row remapping pending: the GPU needs a reset "
            f"[reset_gpu: gpu 2 {PCI2} GPU-2]\n") in text
    assert formats.format_nhc(v).endswith(" [action reset_gpu]\n")
    assert formats.format_npd(v) == ("FAIL: gpu_row_remap_pending; action reset_gpu\n", 1)
    reason = drain_text.drain_reason(v)
    assert reason == f"ccrhost: gpu_row_remap_pending: GPU 2 ({PCI2}) has a row remapping pending: the GPU needs a reset [action reset_gpu gpu 2]"
    assert drain_text.parse_drain_action(reason + " later words") is None  # only at the end
    assert drain_text.parse_drain_action(reason) == ("reset_gpu", [2])
    assert drain_text.parse_drain_action("ccrhost: port mlx5_0/1 is DOWN/Disabled [action reseat_cable]") == \
        ("reseat_cable", [])
    assert drain_text.parse_drain_action("hw ticket 42") is None


def test_a_long_drain_reason_keeps_its_action_whole():
    v = remap_pending_on_gpu2()
    v.reasons[0:0] = [type(v.reasons[0])(FAIL, "gpu_row_remap_pending", "x" * 300, gpu=2)]
    reason = drain_text.drain_reason(v)
    assert len(reason) == 255 and reason.endswith(" [action reset_gpu gpu 2]")


def test_prometheus_junit_and_html_carry_action_and_scope():
    v = remap_pending_on_gpu2()
    prom = formats.format_prometheus(v)
    assert ('ccrhost_check_reason{level="FAIL",code="gpu_row_remap_pending",action="reset_gpu",scope="gpu"} 1'
            in prom)
    assert 'ccrhost_check_action{action="reset_gpu"} 1' in prom
    suite = ET.fromstring(report.junit_xml({"gpu01": v, "gpu02": evaluate(healthy(), H100)}))
    bad, good = suite.findall("testcase")
    props = {p.get("name"): p.get("value") for p in bad.find("properties") if not p.get("name").startswith("ccr")}
    assert props == {"action": f"reset_gpu (gpu 2 {PCI2} GPU-2)",
                     "reason.gpu_row_remap_pending": f"FAIL reset_gpu gpu 2 {PCI2} GPU-2"}
    assert [p.get("name") for p in good.find("properties")] == ["ccr", "ccr_measured"]  # no action for an OK node
    html = page.fleet_page({"gpu01": v})
    assert f"[reset_gpu: gpu 2 {PCI2} GPU-2]" in html and f"<b>action reset_gpu (gpu 2 {PCI2} GPU-2)</b>" in html
    assert "<p><b>Action:</b> reset_gpu; <b>scope:</b> gpu</p>" in html


def test_every_gpu_health_reason_names_its_gpu():
    from ccrhost.model.gpu_health import NvLink, Xid

    bad = health(3, remap_pending=True, remap_failure=True, ecc_uncorrectable=2, retired_pending=True,
                 ecc_correctable=10**6, fabric_state="In Progress", nvlinks=[NvLink(n, n != 5, 0, 0, 0) for n in range(18)])
    readings = healthy()
    readings.gpu_health = GpuHealthReading(gpus=[health(i) if i != 3 else bad for i in range(8)],
                                           xids=[Xid(48, "0000:48:00", 5.0, "DBE"), Xid(13, "0000:48:00", 5.0, "SM")],
                                           fabric_manager="active")
    v = evaluate(readings, H100)
    gpu_codes = {r.code: r.gpu for r in v.reasons if r.code.startswith("gpu_")}
    assert gpu_codes == {c: 3 for c in ("gpu_row_remap_pending", "gpu_row_remap_failure", "gpu_ecc_uncorrectable",
                                        "gpu_retired_pages_pending", "gpu_ecc_correctable", "gpu_nvlink_down",
                                        "gpu_fabric_not_ready", "gpu_xid_critical", "gpu_xid")}
    assert v.action == "replace"  # a failed row remap is the board's end


def test_explain_shows_action_and_scope(capsys):
    import pytest

    from ccrhost.cli import entry

    with pytest.raises(SystemExit):
        entry(["explain", "gpu_row_remap_pending"])
    assert capsys.readouterr().out.startswith("gpu_row_remap_pending (FAIL)\nAction: reset_gpu; scope: gpu\n")
