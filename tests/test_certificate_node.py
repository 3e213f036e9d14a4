"""The acceptance certificate on the node (issue 50 item 3): read back by the
check (missing, garbled, good), stored by a job step's /bin/sh command, the
versions it is issued under, shown in the check's JSON, `slurm verify`'s text
table and page, and exported to Prometheus: information, never a reason."""

import json
import os
import stat
import subprocess
from dataclasses import replace

import pytest

from test_checks import H100, healthy

from ccrhost.fleet.page import fleet_page
from ccrhost.fleet.report import text_table
from ccrhost.model.baseline import BaselineReading
from ccrhost.model.certificate import Certificate, StageResult, record
from ccrhost.model.certificate_view import StoredCertificate, cell, summary
from ccrhost.model.datapath import HostVersions, unreadable
from ccrhost.model.gpus import GpuProbe
from ccrhost.model.rdma import RdmaReading
from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN
from ccrhost.model.verdict import Verdict, evaluate
from ccrhost.node import certificate as node_cert
from ccrhost.node.formats import format_prometheus
from ccrhost.settings import validate_host

T0 = 1_700_000_000.0
DAY = 86400.0
WANTED = ("check", "node", "mesh")
V = {"driver": "550.54.15", "ccrhost": "0.1.0"}


def cert(*results, versions=V):
    c = None
    for stage, status, at, *reasons in results:
        r = StageResult(stage, status, at, 60.0, tuple(reasons), {"gemm_tflops": 700.0} if stage == "node" else {},
                        dict(versions), "run-1")
        c = record(c, "gpu-01", r, 30 * DAY, versions, WANTED)
    return c


CERTIFIED = cert(("check", OK, T0), ("node", WARN, T0 + 100), ("mesh", OK, T0 + 200))
FAILED = cert(("check", OK, T0), ("node", OK, T0 + 100),
              ("mesh", FAIL, T0 + 200, {"level": FAIL, "code": "rdma_mesh_pruned", "message": "pruned: 20 of 31"},
               {"level": WARN, "code": "rdma_latency_high", "message": "p99 5 us"}))
INCOMPLETE = cert(("check", OK, T0), ("node", OK, T0 + 100))
UNKNOWN_MESH = cert(("check", OK, T0), ("node", OK, T0 + 100),
                    ("mesh", UNKNOWN, T0 + 200, {"level": UNKNOWN, "code": "accept_budget_exceeded", "message": "x"}))


def stored(tmp_path, c, at, present=V, wanted=WANTED):
    path = str(tmp_path / "certificate.json")
    if c is not None:
        with open(path, "w") as f:
            f.write(node_cert.document(c))
    return node_cert.stored_reading(path, wanted, present, clock=lambda: at)


# --- reading the file -------------------------------------------------------------

def test_a_missing_certificate_is_none_and_a_good_one_reads_back_whole(tmp_path):
    path = tmp_path / "certificate.json"
    assert node_cert.read(str(path)) is None
    path.write_text(node_cert.document(CERTIFIED))
    assert node_cert.read(str(path)) == CERTIFIED
    assert CERTIFIED.issued_at == T0 + 200


@pytest.mark.parametrize("text, why", [
    ("{\"node\": ", "not JSON: Expecting value: line 1 column 10 (char 9)"),
    ("[1, 2]", "not a certificate (a JSON list)"),
    ("{\"stages\": {}}", "not a certificate: no 'node'"),
    ('{"node": "n", "stages": {"mesh": {"stage": "mesh", "status": "OK"}}}', "not a certificate: no 'at'"),
    ('{"node": "n", "stages": {"mesh": {"stage": "mesh", "status": "OK", "at": "soon"}}}',
     "not a certificate: could not convert string to float: 'soon'"),
    ('{"node": "n", "stages": {"mesh": {"stage": "mesh", "status": "GOOD", "at": 1}}}',
     "not a certificate: stage mesh: status 'GOOD' is not one of OK, WARN, FAIL, UNKNOWN, SKIPPED"),
    ('{"node": "n", "stages": {"burn": {"stage": "burn", "status": "OK", "at": 1}}}',
     "not a certificate: stage 'burn' is not one of check, node, mesh, pairs, scale, soak (or names another)"),
    ('{"node": "n", "stages": {"mesh": {"stage": "mesh", "status": "OK", "at": NaN}}}',
     "not a certificate: stage mesh: its time nan is not a number"),
    ("\udcff", "not JSON"),
])
def test_a_garbled_certificate_is_an_error_string_never_a_crash(tmp_path, text, why):
    path = tmp_path / "certificate.json"
    path.write_bytes(b"\xff" if text == "\udcff" else text.encode())
    got = node_cert.read(str(path))
    assert isinstance(got, str) and got.startswith(f"{path}: {why}")


def test_an_unreadable_certificate_is_an_error_string(tmp_path):
    assert node_cert.read(str(tmp_path)) == f"{tmp_path}: cannot be read: Is a directory"
    reading = node_cert.stored_reading(str(tmp_path), WANTED, V, clock=lambda: T0)
    assert reading.error == f"{tmp_path}: cannot be read: Is a directory" and reading.data is None
    assert summary(reading)["state"] is None and cell(summary(reading)) == "unreadable"


# --- storing it on the node -------------------------------------------------------

def test_the_store_script_writes_the_certificate_whole_and_replaces_it(tmp_path):
    path = tmp_path / "var lib" / "ccrhost" / "certificate.json"  # folders made, a space quoted
    for c in (INCOMPLETE, CERTIFIED):
        done = subprocess.run(["/bin/sh", "-c", node_cert.store_script(str(path), c)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert node_cert.read(str(path)) == c
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(path.parent) == ["certificate.json"]  # no temporary name left


def test_the_store_script_fails_and_leaves_nothing_where_it_cannot_write(tmp_path):
    target = tmp_path / "certificate.json"
    target.mkdir()  # mv -T never moves into a folder the path names
    script = node_cert.store_script(str(target), CERTIFIED) + " && echo stored"
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True)
    assert done.returncode != 0 and "stored" not in done.stdout
    assert sorted(os.listdir(tmp_path)) == ["certificate.json"] and os.listdir(target) == []
    with pytest.raises(ValueError, match="must be absolute"):
        node_cert.store_script("certificate.json", CERTIFIED)


# --- the versions a certificate is issued under ------------------------------------

def test_versions_come_from_the_readings_and_one_not_read_is_absent():
    r = healthy()
    gpus = "GPU-0,GPU-1,GPU-2,GPU-3,GPU-4,GPU-5,GPU-6,GPU-7"  # each GPU's UUID, sorted
    assert node_cert.versions(r, "0.1.0") == {"gpus": gpus, "ccrhost": "0.1.0"}
    r.gpus = [replace(g, uuid=None) for g in r.gpus]  # not read: absent, never a guess
    r.datapath = replace(unreadable("x"), error=None, versions=HostVersions(
        nic_fw={"mlx5_0": "28.39.3560", "mlx5_1": "28.39.3560", "mlx5_9": "16.35.1012"}, nvidia="550.54.15",
        nic_guid={"mlx5_1": "b859:9f03:00a1:2b3d", "mlx5_0": "b859:9f03:00a1:2b3c", "mlx5_9": "0c42:a103:0001:0002"}))
    r.baseline = BaselineReading(nccl="2.21.5")
    assert node_cert.versions(r, "0.1.0") == {"driver": "550.54.15", "nic_firmware": "28.39.3560",
                                              "nics": "b859:9f03:00a1:2b3c,b859:9f03:00a1:2b3d",
                                              "nccl": "2.21.5", "ccrhost": "0.1.0"}  # mlx5_9: not a compute port
    r.datapath = replace(r.datapath, versions=HostVersions(nic_fw={"mlx5_0": "28.39.3560", "mlx5_1": "28.39.1002"}))
    assert node_cert.versions(r, "0.1.0") == {"nic_firmware": "28.39.1002 (mlx5_1), 28.39.3560 (mlx5_0)",
                                              "nccl": "2.21.5", "ccrhost": "0.1.0"}
    r.datapath, r.baseline = unreadable("lspci hung"), BaselineReading(error="no", nccl="2.21.5")
    assert node_cert.versions(r, "0.1.0") == {"ccrhost": "0.1.0"}
    from ccrhost import __version__
    assert node_cert.versions(r)["ccrhost"] == __version__


# --- what the check's JSON, the text table and the page show -------------------------

def verdict_with(reading):
    readings = healthy()
    readings.certificate = reading
    return evaluate(readings, H100)


def through_json(v):
    """What `slurm verify` gets: the node's JSON, read back."""
    return Verdict.from_dict(json.loads(json.dumps(v.to_dict())))


CASES = [  # certificate, read at, present versions -> JSON fields, cell
    (CERTIFIED, T0 + 200 + 7200, V,
     {"state": "certified", "issued_at": T0 + 200, "age_s": 7200.0, "valid_until": T0 + 30 * DAY,
      "valid_for_s": 30 * DAY - 7400, "failed_stage": None, "expired_stage": None, "pending": [],
      "stages": {"check": OK, "node": WARN, "mesh": OK}},
     "certified 2 h ago, valid 29 d"),
    (FAILED, T0 + 300, V,
     {"state": "failed", "issued_at": None, "age_s": 100.0, "valid_until": None,
      "failed_stage": {"stage": "mesh", "title": "S2 connectivity mesh", "status": FAIL, "at": T0 + 200,
                       "codes": ["rdma_mesh_pruned"]},
      "stages": {"check": OK, "node": OK, "mesh": FAIL}},
     "failed S2 connectivity mesh: rdma_mesh_pruned"),
    (INCOMPLETE, T0 + 160, V,
     {"state": "incomplete", "issued_at": None, "age_s": 60.0, "failed_stage": None, "pending": ["mesh"],
      "stages": {"check": OK, "node": OK, "mesh": None}},
     "incomplete S2 connectivity mesh: not run"),
    (UNKNOWN_MESH, T0 + 260, V,
     {"state": "incomplete", "failed_stage": {"stage": "mesh", "title": "S2 connectivity mesh", "status": UNKNOWN,
                                              "at": T0 + 200, "codes": ["accept_budget_exceeded"]}},
     "incomplete S2 connectivity mesh: accept_budget_exceeded"),
    (CERTIFIED, T0 + 31 * DAY, V,
     {"state": "expired", "issued_at": T0 + 200, "age_s": 31 * DAY - 200, "valid_until": None,
      "expired_stage": {"stage": "check", "title": "S0 passive check", "at": T0, "age_s": 31 * DAY,
                        "versions_changed": {}}},
     "expired S0 passive check: 31 d old"),
    (CERTIFIED, T0 + 1000, {**V, "driver": "560.35.03", "nccl": "2.21.5"},
     {"state": "expired", "expired_stage": {"stage": "check", "title": "S0 passive check", "at": T0,
                                            "age_s": 1000.0,
                                            "versions_changed": {"driver": ["550.54.15", "560.35.03"]}}},
     "expired S0 passive check: driver 550.54.15 -> 560.35.03"),
    # a repair swapped GPU 3: another GPU, so what the stages proved no longer holds; only it is named
    (cert(("check", OK, T0), ("node", OK, T0 + 100), ("mesh", OK, T0 + 200), versions={**V, "gpus": "GPU-a,GPU-b,GPU-c"}),
     T0 + 1000, {**V, "gpus": "GPU-a,GPU-c,GPU-d"},
     {"state": "expired", "expired_stage": {"stage": "check", "title": "S0 passive check", "at": T0, "age_s": 1000.0,
                                            "versions_changed": {"gpus": ["GPU-a,GPU-b,GPU-c", "GPU-a,GPU-c,GPU-d"]}}},
     "expired S0 passive check: gpus GPU-b -> GPU-d"),
    (None, T0, V,
     {"state": "incomplete", "stored": False, "issued_at": None, "age_s": None, "stages": {}}, "none"),
]


@pytest.mark.parametrize("c, at, present, fields, text", CASES)
def test_the_report_shows_each_state_and_the_verdict_does_not_move(tmp_path, c, at, present, fields, text):
    plain = evaluate(healthy(), H100)
    v = verdict_with(stored(tmp_path, c, at, present))
    assert (v.status, v.reasons) == (plain.status, plain.reasons) == (OK, [])  # information, not a reason
    doc = v.to_dict()["certificate"]
    assert {k: doc[k] for k in fields} == fields
    assert doc["path"] == str(tmp_path / "certificate.json") and doc["error"] is None
    back = through_json(v)
    assert back.to_dict()["certificate"] == doc
    row = next(line for line in text_table({"gpu-01": back}).splitlines() if line.startswith("gpu-01"))
    assert f"  {text}  all checks passed" in row
    assert f"<td>{text.replace('>', '&gt;')}</td>" in fleet_page({"gpu-01": back})


def test_the_table_and_page_have_no_certificate_column_when_no_check_read_one(tmp_path):
    plain = evaluate(healthy(), H100)
    assert plain.to_dict()["certificate"] is None
    table = text_table({"gpu-01": plain})
    assert "certificate" not in table and "certificate" not in fleet_page({"gpu-01": plain})
    both = text_table({"gpu-01": plain, "gpu-02": verdict_with(stored(tmp_path, FAILED, T0 + 300))}).splitlines()
    assert both[1].split()[-2:] == ["certificate", "reasons"]
    width = len("failed S2 connectivity mesh: rdma_mesh_pruned")
    assert next(line for line in both if line.startswith("gpu-01")).endswith(f"  {'-':{width}}  all checks passed")
    fw = {"nic_firmware": "28.39.1002 (mlx5_1), 28.39.3560 (mlx5_0, mlx5_2, mlx5_3)"}
    moved = verdict_with(stored(tmp_path, cert(("check", OK, T0), versions={**V, **fw}), T0 + 10,
                                {**V, "nic_firmware": "28.41.1000"}, wanted=("check",)))
    row = next(line for line in text_table({"gpu-03": moved}).splitlines() if line.startswith("gpu-03"))
    shown = "expired S0 passive check: nic_firmware 28.39.1002 (mlx5_1..."  # 60 characters at most
    assert len(shown) == 60 and f"  {shown}  all checks passed" in row
    assert moved.to_dict()["certificate"]["expired_stage"]["versions_changed"] == {
        "nic_firmware": [fw["nic_firmware"], "28.41.1000"]}


def test_the_check_reads_the_certificate_its_settings_name(tmp_path):
    from ccrhost.node.check import run_check

    import time

    path = tmp_path / "certificate.json"
    s = validate_host("n", {"verify_profile": "hgx-h100-8x400", "accept_certificate": str(path),
                            "accept_stages": ["check", "node"]}).check_settings()
    assert (s.accept_certificate, s.accept_stages) == (str(path), ("check", "node"))
    gather = lambda: (RdmaReading(), GpuProbe([], None))  # noqa: E731
    none = run_check(s, gather=gather)
    assert none.to_dict()["certificate"]["stored"] is False
    now = time.time()
    c = record(None, "n", StageResult("check", OK, now - 7200, versions={"ccrhost": "0.1.0"}), 30 * DAY, {}, ("check",))
    c = record(c, "n", StageResult("node", OK, now - 3600, versions={}), 30 * DAY, {}, ("check", "node"))
    path.write_text(node_cert.document(c))
    got = run_check(s, gather=gather)
    doc = got.to_dict()["certificate"]
    assert doc["state"] == "certified" and doc["stages"] == {"check": OK, "node": OK}
    assert got.readings.certificate.wanted == ("check", "node") and "ccrhost" in got.readings.certificate.versions
    assert (got.status, [r.code for r in got.reasons]) == (none.status, [r.code for r in none.reasons])


# --- Prometheus ---------------------------------------------------------------------

def cert_lines(v):
    return [line for line in format_prometheus(v).splitlines() if "ccrhost_certificate" in line]


def test_the_metrics_give_the_state_the_age_and_each_stage(tmp_path):
    assert cert_lines(evaluate(healthy(), H100)) == []
    assert cert_lines(verdict_with(stored(tmp_path, FAILED, T0 + 300))) == [
        "# HELP ccrhost_certificate_state The node's acceptance certificate (1: its state; every state 0 when the "
        "file cannot be read).",
        "# TYPE ccrhost_certificate_state gauge",
        'ccrhost_certificate_state{state="certified"} 0',
        'ccrhost_certificate_state{state="failed"} 1',
        'ccrhost_certificate_state{state="incomplete"} 0',
        'ccrhost_certificate_state{state="expired"} 0',
        "# HELP ccrhost_certificate_age_seconds Seconds since the certificate was issued (not issued: since its "
        "last stage).",
        "# TYPE ccrhost_certificate_age_seconds gauge",
        "ccrhost_certificate_age_seconds 100",
        "# HELP ccrhost_certificate_stage_passed 1 when the stage's last result passed (OK, WARN or skipped), 0 "
        "when it failed, was unknown or never ran.",
        "# TYPE ccrhost_certificate_stage_passed gauge",
        'ccrhost_certificate_stage_passed{stage="check"} 1',
        'ccrhost_certificate_stage_passed{stage="node"} 1',
        'ccrhost_certificate_stage_passed{stage="mesh"} 0',
    ]


def test_without_a_certificate_the_state_is_incomplete_and_age_and_stages_absent(tmp_path):
    lines = cert_lines(verdict_with(stored(tmp_path, None, T0)))
    assert [x for x in lines if not x.startswith("#")] == [
        'ccrhost_certificate_state{state="certified"} 0', 'ccrhost_certificate_state{state="failed"} 0',
        'ccrhost_certificate_state{state="incomplete"} 1', 'ccrhost_certificate_state{state="expired"} 0']
    (tmp_path / "certificate.json").write_text("{garbled")
    garbled = node_cert.stored_reading(str(tmp_path / "certificate.json"), WANTED, V, clock=lambda: T0)
    assert [x for x in cert_lines(verdict_with(garbled)) if not x.startswith("#")] == [
        f'ccrhost_certificate_state{{state="{s}"}} 0' for s in ("certified", "failed", "incomplete", "expired")]


def test_a_record_the_fleet_cannot_read_is_said_so_not_a_crash():
    odd = StoredCertificate(T0, "/var/lib/ccrhost/certificate.json", WANTED, V, data={"stages": {}})
    doc = summary(odd)
    assert doc["state"] is None and doc["error"].startswith("/var/lib/ccrhost/certificate.json: not a certificate")
    assert cell(doc) == "unreadable"
