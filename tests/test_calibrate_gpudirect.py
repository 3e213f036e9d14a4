"""`ccrhost baseline calibrate --report` (issue 47, item 4): the deploy's
GPUDirect ib_write_bw measurement is in its ccr-report.json, not on the
nodes; calibrate takes it and writes the `ib_write_bw.gpudirect` fleet
figure (Gb/s) over each node's slowest GPU-NIC pair, with the same
refusals as every other figure."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner
from test_calibrate import NOW, V, result

from ccrhost.cli import main
from ccrhost.fleet.calibrate import merge, read_reports
from ccrhost.model.calibrate import NodeResults, gpudirect_figure

PAIRS = [f"GPU{i}-mlx5_{i}" for i in range(8)]


def host(slowest, driver="550.90.07", fw="28.39.3560", **bw):
    gbps = {p: 390.0 for p in PAIRS}
    gbps[PAIRS[3]] = slowest
    measured = {"measurable": True, "why": None, "gbps": gbps, "expected_gbps": {p: 400.0 for p in PAIRS},
                "errors": [], **bw}
    return {"status": "OK", "reasons": [], "datapath": {
        "versions": {"nic_fw": {f"mlx5_{i}": fw for i in range(8)}, "mlx5": "24.10", "nvidia": driver},
        "gpudirect_bandwidth": measured}}


def write_report(folder, hosts):
    folder.mkdir(exist_ok=True)
    (folder / "ccr-report.json").write_text(json.dumps({"generated": "2026-12-06T10:00:00Z", "hosts": hosts}))
    return str(folder)


SLOWEST = [380.0, 381.0, 382.0, 383.0, 384.0, 385.0, 386.0, 387.0]


def test_a_nodes_figure_is_its_slowest_pair_and_what_is_no_figure_says_why():
    assert gpudirect_figure(host(371.5)["datapath"]["gpudirect_bandwidth"]) == (371.5, None)
    assert gpudirect_figure({"measurable": False, "why": "ib_write_bw has no CUDA support"}) == \
        (None, "GPUDirect not measurable (ib_write_bw has no CUDA support)")
    failed = host(371.5, errors=["GPU2-mlx5_2: ib_write_bw exited 1"])["datapath"]["gpudirect_bandwidth"]
    assert gpudirect_figure(failed) == (None, "a GPUDirect run failed (GPU2-mlx5_2: ib_write_bw exited 1): its "
                                              "slowest pair is unknown")
    assert gpudirect_figure({"measurable": True, "gbps": {}, "errors": []}) == (None, "GPUDirect measured no pair")


def test_calibrate_writes_the_gpudirect_figure_from_the_deploys_report(tmp_path):
    hosts = {f"node{i + 1}": host(v) for i, v in enumerate(SLOWEST)}
    hosts["node9"] = {"status": "OK", "reasons": [], "datapath": {"versions": {}, "gpudirect_bandwidth": None}}
    hosts["node10"] = host(100.0, errors=["GPU0-mlx5_0: timed out"])
    report = write_report(tmp_path / "report", hosts)
    out = tmp_path / "site-h100.yaml"
    run = CliRunner().invoke(main, ["baseline", "calibrate", "--report", report, "--output", str(out),
                                    "--extends", "hgx-h100-8x400", "--date", "2026-12-06", "--min-margin", "0"])
    assert run.exit_code == 0, run.output
    entry = yaml.safe_load(out.read_text())["fleet"]["ib_write_bw.gpudirect"]
    # median 383.5, MAD 1.4826 x 2 = 2.97: 383.5 - 3 x 2.97
    assert (entry["value"], entry["unit"], entry["nodes"]) == (374.6, "Gb/s", 8)
    assert entry["measured_under"] == {"driver": "550.90.07", "nccl": None, "nic_firmware": "28.39.3560"}
    assert entry["source"].startswith("calibrated: median 383.50 - 3 x MAD 2.97 ")
    assert "note: node10: ib_write_bw.gpudirect from " in run.output and "its slowest pair is unknown" in run.output


def test_too_few_measured_nodes_or_drivers_disagreeing_are_refused_and_nothing_written(tmp_path):
    out = tmp_path / "site.yaml"
    few = write_report(tmp_path / "few", {f"node{i}": host(380.0) for i in range(5)})
    run = CliRunner().invoke(main, ["baseline", "calibrate", "--report", few, "--output", str(out),
                                    "--extends", "hgx-h100-8x400"])
    assert run.exit_code == 1 and not out.exists()
    assert "Error: calibrate: calibration needs the results of at least 8 nodes; it has 5" in run.output
    mixed = {f"node{i + 1}": host(v, driver="550.90.07" if i < 5 else "560.35.03") for i, v in enumerate(SLOWEST)}
    run = CliRunner().invoke(main, ["baseline", "calibrate", "--report", write_report(tmp_path / "mixed", mixed),
                                    "--output", str(out), "--extends", "hgx-h100-8x400"])
    assert run.exit_code == 1 and not out.exists()
    assert ("Error: calibrate: the nodes' results were measured under different versions: driver 550.90.07 on 5 "
            "node(s) (node1, node2, node3, node4, node5); driver 560.35.03 on 3 node(s) (node6, node7, node8)"
            in run.output)
    run = CliRunner().invoke(main, ["baseline", "calibrate", "--output", str(out)])
    assert run.exit_code == 2 and "give the results: --from FOLDER and/or --report ccr-report.json" in run.output


def test_a_report_joins_each_nodes_stored_results_under_its_versions(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for i, v in enumerate(SLOWEST):
        doc = {"version": 1, "node": f"node{i + 1}", "read_at": NOW, "versions": V, "errors": [],
               "results": {"allreduce/nvlink": result("allreduce", "nvlink", 470.0 + i)}}
        (results / f"node{i + 1}.json").write_text(json.dumps(doc))
    report = write_report(tmp_path / "report", {f"node{i + 1}": host(v) for i, v in enumerate(SLOWEST)})
    out = tmp_path / "site.yaml"
    run = CliRunner().invoke(main, ["baseline", "calibrate", "--from", str(results), "--report", report,
                                    "--output", str(out), "--extends", "hgx-h100-8x400"])
    assert run.exit_code == 0, run.output
    fleet = yaml.safe_load(out.read_text())["fleet"]
    assert set(fleet) == {"allreduce.nvlink", "ib_write_bw.gpudirect"}
    assert fleet["ib_write_bw.gpudirect"]["measured_under"] == V  # NCCL from the stored results' read


def test_a_node_whose_report_and_results_read_another_driver_is_refused():
    stored = [NodeResults("node1", {"allreduce.nvlink": 470.0}, dict(V))]
    measured = [NodeResults("node1", {"ib_write_bw.gpudirect": 380.0}, {**V, "driver": "560.35.03", "nccl": None})]
    try:
        merge(stored, measured)
    except ValueError as exc:
        assert str(exc) == ("node node1: its report measured under driver 560.35.03, its stored results under "
                            "550.90.07: calibrate them apart")
    else:
        raise AssertionError("merged")


def test_a_file_that_is_not_the_deploys_report_is_refused(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"version": 1}))
    try:
        read_reports([str(bad)])
    except ValueError as exc:
        assert str(exc) == f"{bad}: not the deploy's ccr-report.json (no hosts)"
    else:
        raise AssertionError("read")
