"""End to end: the monitor sees real lab traffic move the port counters."""

import json
import sys

import pytest
from conftest import REPO, lab_ssh, node_address, run_pyinfra

pytestmark = pytest.mark.lab


def set_gpu_load(lab, node, percent):
    (lab.root(node) / "run/ccrhost-lab/gpu_util").write_text(str(percent))


def test_monitor_measures_traffic_and_gpu_load(make_lab):
    lab = make_lab(nodes=2)
    set_gpu_load(lab, "node2", 95)
    server = node_address(1)
    assert lab_ssh(lab, "node1", "setsid timeout 30 ib_write_bw -d mlx5_0 -p 18515 -D 5 </dev/null >/dev/null 2>&1 &"
                                 " sleep 0.3").returncode == 0
    out = lab_ssh(lab, "node2",
                  f"setsid timeout 30 ib_write_bw -d mlx5_0 -p 18515 -D 5 {server} </dev/null >/dev/null 2>&1 & "
                  f"cd {REPO} && {sys.executable} -m ccrhost monitor --duration 3 --interval 1 --format json "
                  "--output /tmp/monitor.json --quiet; echo rc=$?")
    assert out.stdout.strip().endswith("rc=2"), out  # one busy port of eight misses the 80% target
    summary = json.loads((lab.root("node2") / "tmp/monitor.json").read_text())
    assert summary["gpu_util_mean"] == 95 and summary["gpu_ok"] is True
    assert 0.85 < summary["port_fraction"]["mlx5_0/1"] <= 1.0, summary
    assert summary["port_fraction"]["mlx5_1/1"] == 0
    assert summary["net_ok"] is False and summary["verdict"] == "FAIL"
    assert summary["bytes_per_gpu_second"] > 1e9
    words = int((lab.root("node2") / "sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_data_64").read_text())
    assert words * 4 > 50e9  # the counter moved with the bytes carried (scaled to the port's rate)


def test_prometheus_textfile_is_written_whole(make_lab):
    lab = make_lab(nodes=1)
    out = lab_ssh(lab, "node1", f"cd {REPO} && {sys.executable} -m ccrhost monitor --duration 1 --interval 0.5 "
                                "--format prometheus --output /tmp/ccrhost.prom --quiet")
    assert out.returncode == 2  # idle: no traffic, no GPU load
    text = (lab.root("node1") / "tmp/ccrhost.prom").read_text()
    assert "ccrhost_monitor_ok 0\n" in text and 'ccrhost_monitor_network_fraction{port="mlx5_0/1"} 0' in text
    assert [p.name for p in (lab.root("node1") / "tmp").iterdir() if p.name.startswith(".ccrhost")] == []


def test_fleet_monitor_flags_the_outlier(make_lab, tmp_path):
    lab = make_lab(nodes=3)
    for node, load in (("node1", 95), ("node2", 96), ("node3", 30)):
        set_gpu_load(lab, node, load)
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        "from ccrhost.lab.inventory import lab_hosts\n"
        f"nodes = [(n, {{**d, 'monitor_seconds': 2, 'verify_report_dir': {str(tmp_path / 'r')!r}}}) "
        "for n, d in lab_hosts()]\n")
    run = run_pyinfra("deploys/monitor.py", inventory=str(inventory))
    assert run.rc == 0, run.out
    report = json.loads((tmp_path / "r/monitor-report.json").read_text())["hosts"]
    assert report[node_address(3)]["flags"] == ["GPU utilization 30 is 68% below the fleet median"]
    assert report[node_address(1)]["flags"] == [] and report[node_address(1)]["gpu_util_mean"] == 95
    assert "GPU utilization 30 is 68% below the fleet median" in run.out  # the fleet table
    assert "<svg" in (tmp_path / "r/monitor-report.html").read_text()


def test_a_host_that_cannot_be_reached_is_in_every_report(make_lab, tmp_path):
    lab = make_lab(nodes=3)
    lab.kill_sshd("node3")
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        "from ccrhost.lab.inventory import lab_hosts\n"
        f"nodes = [(n, {{**d, 'monitor_seconds': 1, 'verify_report_dir': {str(tmp_path / 'r')!r}}}) "
        "for n, d in lab_hosts()]\n")
    lost = node_address(3)
    run = run_pyinfra("deploys/monitor.py", inventory=str(inventory))
    assert "Traceback" not in run.out
    hosts = json.loads((tmp_path / "r/monitor-report.json").read_text())["hosts"]
    assert sorted(hosts) == [node_address(1), node_address(2), lost]
    assert hosts[lost] == {"verdict": "UNKNOWN", "reason": "unreachable: no SSH connection at the start of the run",
                           "flags": []}
    assert f"{lost:24} UNKNOWN" in (tmp_path / "r/monitor-report.txt").read_text()
    verify = run_pyinfra("deploys/verify.py", inventory=str(inventory))
    assert "Traceback" not in verify.out
    report = json.loads((tmp_path / "r/ccr-report.json").read_text())["hosts"]
    assert report[lost]["status"] == "UNKNOWN" and report[lost]["reasons"][0]["code"] == "unreachable"
    assert report[node_address(1)]["status"] == "OK"
