"""Every inventory host is in every report, with its verdict: the judged
ones as judged, FAIL "failed before verification: <reason>" for a host an
earlier stage failed, UNKNOWN for one that could not be reached."""

import json
from types import SimpleNamespace
from xml.etree import ElementTree as ET

from test_checks import H100, healthy

from ccrhost import failures
from ccrhost.fleet import monitor, report
from ccrhost.model.verdict import evaluate


class Host(SimpleNamespace):
    def __hash__(self):
        return hash(self.name)


class Meta:
    def __init__(self, ok, stderr=()):
        self.ok, self.stderr_lines = ok, list(stderr)

    def is_complete(self):
        return True

    def did_error(self):
        return not self.ok


class State:
    """What the reports read of pyinfra's State after a run."""

    def __init__(self, hosts, activated, failed, ops):
        self.activated_hosts, self.failed_hosts, self.ops = set(activated), set(failed), ops
        self.order = ["modules", "qos", "verify"]
        self.names = {"modules": "Load RDMA kernel modules", "qos": "Configure lossless RoCE", "verify": "Verify CCR"}

    def is_host_in_limit(self, host):
        return True

    def get_op_order(self):
        return self.order

    def get_op_meta(self, op_hash):
        return SimpleNamespace(names={self.names[op_hash]})


def run_of_five(monkeypatch):
    monkeypatch.setattr(failures, "_REASONS", {})
    hosts = [Host(name=n) for n in ("gpu1", "gpu2", "gpu3", "gpu4", "gpu5")]
    ok, guard, down, lost, stderr = hosts
    failures.record("gpu2", "refusing to change QoS: ens1np0 carries this SSH connection")
    failures.record("gpu4", "SSH connection lost", failures.UNREACHABLE)
    ops = {guard: {"modules": SimpleNamespace(operation_meta=Meta(True)),
                   "qos": SimpleNamespace(operation_meta=Meta(False))},
           stderr: {"modules": SimpleNamespace(operation_meta=Meta(False, [
               "modprobe: ERROR: could not insert 'rdma_ucm': Operation not permitted"]))}}
    state = State(hosts, activated=[ok, guard, lost, stderr], failed=[guard, down, lost, stderr], ops=ops)
    fleet = report.FleetReport("unused", state=state, inventory=hosts)
    healthy_verdict = evaluate(healthy(), H100)
    fleet.record("gpu1", healthy_verdict, executed=True)
    fleet.record("gpu2", healthy_verdict)  # planned, never executed: the host failed before
    return fleet, state, hosts


def test_every_host_has_a_verdict_with_its_reason(monkeypatch):
    fleet, state, hosts = run_of_five(monkeypatch)
    verdicts = report.fleet_verdicts(fleet.verdicts, fleet.judged, state, hosts)
    got = {h: (v.status, v.summary()) for h, v in verdicts.items()}
    assert got == {
        "gpu1": ("OK", "all checks passed"),
        "gpu2": ("FAIL", "failed before verification: Configure lossless RoCE: refusing to change QoS: ens1np0 "
                         "carries this SSH connection"),
        "gpu3": ("UNKNOWN", "unreachable: no SSH connection at the start of the run"),
        "gpu4": ("UNKNOWN", "unreachable: SSH connection lost"),
        "gpu5": ("FAIL", "failed before verification: Load RDMA kernel modules: modprobe: ERROR: could not insert "
                         "'rdma_ucm': Operation not permitted"),
    }


def test_each_report_format_lists_every_host(monkeypatch, tmp_path):
    fleet, state, hosts = run_of_five(monkeypatch)
    fleet.directory = str(tmp_path)
    paths = fleet.finish()
    doc = json.loads(paths["json"].read_text())
    assert sorted(doc["hosts"]) == ["gpu1", "gpu2", "gpu3", "gpu4", "gpu5"]
    suite = ET.parse(paths["xml"]).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("5", "2", "2")
    failed = {c.get("name"): c.find("failure").get("message") for c in suite if c.find("failure") is not None}
    assert failed["gpu2"].startswith("failed before verification: Configure lossless RoCE: refusing")
    text = paths["txt"].read_text()
    assert all(h in text for h in ("gpu1", "gpu2", "gpu3", "gpu4", "gpu5"))
    assert "OK: 1  WARN: 0  FAIL: 2  UNKNOWN: 2" in text
    html = paths["html"].read_text()
    assert "unreachable: SSH connection lost" in html and "gpu5" in html


def test_the_monitor_lists_hosts_it_could_not_sample(monkeypatch):
    _, state, hosts = run_of_five(monkeypatch)
    failures.record("gpu5", "cannot read the samples: sample time 'x' (date +%s.%N) is not a time")
    missing = monitor.unsampled(state, hosts, {"gpu1": object()})
    assert missing == {
        "gpu2": "failed: refusing to change QoS: ens1np0 carries this SSH connection",
        "gpu3": "unreachable: no SSH connection at the start of the run",
        "gpu4": "unreachable: SSH connection lost",
        "gpu5": "failed: cannot read the samples: sample time 'x' (date +%s.%N) is not a time",
    }
    table = monitor.fleet_table({}, {}, missing)
    assert all(f"{h:24} UNKNOWN" in table for h in missing)


def test_a_stage_that_raises_fails_only_its_host(monkeypatch):
    from ccrhost.operations import base

    monkeypatch.setattr(base, "host", SimpleNamespace(log=lambda *_: None))

    def stage():
        yield from ()
        raise ZeroDivisionError("float division by zero")

    (only,) = list(base.planned(stage()))
    assert only.function is base._report_failure
    assert only.args == ("internal error while planning: ZeroDivisionError: float division by zero",)
