"""Issue 35 end to end: a freshly started lab, verified once, with no stored
reading anywhere. The link that has flapped every 2 s since boot
(``link_flap``) and the GPU whose PCIe replays keep rising (``pcie_replay``)
are found on the first reading by `ccrhost check` on the node and by
deploys/verify.py, both through the one verdict function (verdict.evaluate)."""

import json
import sys
import time

import pytest
from conftest import REPO, lab_inventory, lab_ssh, node_address, run_pyinfra

pytestmark = pytest.mark.lab

CHECK = f"cd {REPO} && {sys.executable} -m ccrhost check --profile hgx-h100-8x400 --format json"
# node -> (fault, status, codes)
FAULTS = {"node2": ("link_flap", "FAIL", {"link_flap"}), "node3": ("pcie_replay=0", "WARN", {"gpu_pcie_replay"})}


def test_a_first_reading_finds_the_flapping_link_and_the_rising_replays(make_lab, tmp_path):
    lab = make_lab(nodes=3, faults=[f"{n}:{spec}" for n, (spec, *_) in FAULTS.items()])
    # a freshly booted node: its own clock started at lab up; wait until the link has gone down 5 times
    for _ in range(100):
        up = float(lab_ssh(lab, "node2", "cat /proc/uptime").stdout.split()[0])
        if up >= 11:
            break
        time.sleep(min(11 - up, 1.0))
    assert 11 <= up < 120, up
    for node in ("node1", "node2", "node3"):
        assert not (lab.root(node) / "run/ccrhost/counters").exists()  # nothing stored: a first reading
    # the node's own check first, on a node ccrhost never read
    checked = {}
    for node in ("node1", "node2", "node3"):
        run = lab_ssh(lab, node, CHECK)
        assert run.stdout.startswith("{"), run.stdout + run.stderr
        checked[node] = json.loads(run.stdout)
    # then the deploy's verification, again with no stored reading
    for node in ("node1", "node2", "node3"):
        (lab.root(node) / "run/ccrhost/counters").unlink()
    report_dir = tmp_path / "report"
    run = run_pyinfra("deploys/verify.py", inventory=lab_inventory(tmp_path, verify_report_dir=str(report_dir)),
                      timeout=400)
    assert run.rc == 1 and "Traceback" not in run.out, run.out  # node2 FAILS
    deployed = json.loads((report_dir / "ccr-report.json").read_text())["hosts"]
    for i, node in enumerate(("node1", "node2", "node3"), start=1):
        _, status, wanted = FAULTS.get(node, (None, "OK", set()))
        host, doc = deployed[node_address(i)], checked[node]
        for got in (host, doc):
            assert (got["status"], {r["code"] for r in got["reasons"]}) == (status, wanted), (node, got["reasons"])
            assert got["readings"]["fabric"]["window"]["since_boot"], node  # judged since boot, not "from now"
            assert got["readings"]["fabric"]["window"]["note"] is None
    for got in (deployed[node_address(2)], checked["node2"]):
        flaps = [r["message"] for r in got["reasons"] if r["code"] == "link_flap"]
        assert any(" logged 'Link down' " in m and "(kernel log; limit 4)" in m for m in flaps), flaps
        assert all("logged 'Link down'" in m or " since boot " in m for m in flaps), flaps
    for got in (deployed[node_address(3)], checked["node3"]):
        [replay] = [r["message"] for r in got["reasons"] if r["code"] == "gpu_pcie_replay"]
        assert replay.startswith("GPU 0 (0000:") and " since boot (" in replay and "threshold 8/min" in replay
    # the kernel log as the lab prints it: mlx5e's lines for the flapping port
    dmesg = lab_ssh(lab, "node2", "dmesg").stdout
    assert ": Link down" in dmesg and ": Link up" in dmesg and "mlx5_core 0000:" in dmesg
    assert ": Link down" not in lab_ssh(lab, "node1", "dmesg").stdout
