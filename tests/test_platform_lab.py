"""Platform files end to end on the lab: the deploy's verification with
``verify_profile`` naming a site file that extends a built-in and sets a
fleet figure one node misses: that node FAILs naming the fleet figure and
its source, the other passes; a bad site file stops the deploy before any
host is touched."""

import json

import pytest
from conftest import lab_inventory, node_address, run_pyinfra

from ccrhost.lab.inventory import LAB_PLATFORM

pytestmark = pytest.mark.lab

# the lab's H100 nodes deliver 476 GB/s over NVLink (its all_reduce_perf): above the published 460
SITE = f"""\
extends: {LAB_PLATFORM}
fleet:
  allreduce.nvlink: {{value: 480, unit: GB/s, source: "calibrated: median 490.0 - 3 x MAD 3.3 over 16 nodes",
                     date: "2026-12-06", nodes: 16}}
"""


def test_a_node_below_its_fleet_figure_fails_naming_it(make_lab, tmp_path):
    lab = make_lab(nodes=2)
    site = tmp_path / "site-h100.yaml"
    site.write_text(SITE)
    report_dir = tmp_path / "report"
    common = dict(verify_report_dir=str(report_dir), verify_allreduce=True, verify_allreduce_modes=("nvlink",),
                  verify_allreduce_timeout=20, verify_allreduce_retries=0, verify_allreduce_iters=5,
                  verify_allreduce_state="/run/ccrhost/active.json", verify_allreduce_launcher="mpirun")
    inventory = lab_inventory(tmp_path, per_node={"node2": {"verify_profile": str(site)}}, **common)
    run = run_pyinfra("deploys/verify.py", inventory=inventory, timeout=400)
    assert "Traceback" not in run.out
    hosts = json.loads((report_dir / "ccr-report.json").read_text())["hosts"]
    good, slow = hosts[node_address(1)], hosts[node_address(2)]
    assert good["status"] == "OK", good["reasons"]
    assert slow["status"] == "FAIL", slow["reasons"]
    [reason] = [r for r in slow["reasons"] if r["code"] == "allreduce_slow"]
    assert "below 480 GB/s (fleet figure of site-h100: calibrated: median 490.0 - 3 x MAD 3.3 over 16 nodes, " \
        "2026-12-06)" in reason["message"], reason["message"]
    assert "published figure" not in reason["message"]  # 476 passes the published 460
    stored = json.loads((lab.root("node2") / "run/ccrhost/active.json").read_text())["results"]
    assert stored["allreduce/nvlink"]["code"] == "allreduce_slow"

    # a bad site file: the deploy stops before any host is touched, naming host, key, value and file
    site.write_text(SITE.replace("value: 480", "value: fast"))
    for node in ("node1", "node2"):
        (lab.root(node) / "run/ccrhost/active.json").unlink()
    refused = run_pyinfra("deploys/verify.py", inventory=inventory, timeout=400)
    assert refused.rc != 0
    assert (f"{node_address(2)}: verify_profile[fleet.allreduce.nvlink.value] = 'fast': {site}: "
            "allowed: a number above 0") in refused.out, refused.out[-3000:]
    for node in ("node1", "node2"):
        assert not (lab.root(node) / "run/ccrhost/active.json").exists()
