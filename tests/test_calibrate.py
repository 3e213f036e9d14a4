"""`ccrhost baseline calibrate` (issue 47, item 4): site figures from a good
fleet's stored results, median - k x MAD, refused for too few nodes or nodes
measured under different versions, written into a site platform file's
fleet: section (the rest of the file kept)."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from ccrhost.cli import main
from ccrhost.fleet.calibrate import node_results, site_file_text
from ccrhost.model.calibrate import CalibrateError, NodeResults, calibrate, mad, node_figures

V = {"driver": "550.90.07", "nccl": "2.21.5", "nic_firmware": "28.39.3560"}
NOW = 1_800_000_000.0


def fleet(values, key="allreduce.nvlink", versions=V):
    return [NodeResults(f"node{i + 1}", {key: v}, dict(versions)) for i, v in enumerate(values)]


def test_the_figure_is_the_median_less_k_scaled_mads():
    values = [470.0, 472.0, 474.0, 476.0, 478.0, 480.0, 482.0, 300.0]  # one slow node among them
    # median 475; absolute deviations 5 3 1 1 3 5 7 175 -> median 4; scaled 4 x 1.4826 = 5.9304
    assert mad(values) == pytest.approx(5.9304)
    [f] = calibrate(fleet(values), "2026-12-06")
    assert (f.key, f.value, f.unit, f.nodes, f.median, f.mad) == ("allreduce.nvlink", 457.21, "GB/s", 8, 475.0, 5.93)
    assert f.entry() == {"value": 457.21, "unit": "GB/s", "date": "2026-12-06", "nodes": 8, "measured_under": V,
                         "source": "calibrated: median 475.00 - 3 x MAD 5.93 (scaled: 1.4826 x median absolute "
                                   "deviation) over 8 nodes"}
    assert calibrate(fleet(values), "d", k=1, min_margin=0)[0].value == 469.07


def test_a_uniform_fleets_figure_stays_its_least_margin_below_the_median():
    """The lab's nodes agree to 0.02%: median - 3 MAD would fail a healthy node on the tool's own noise."""
    values = [475.72, 475.77, 475.8, 475.8, 475.81, 475.83, 475.85, 449.6]
    [f] = calibrate(fleet(values), "d")
    assert f.value == 466.28 and min(values[:7]) > f.value > values[7]
    assert f.source.endswith("over 8 nodes, at least 2% below the median")
    assert calibrate(fleet(values), "d", min_margin=0)[0].value == 475.67  # 0.03% below the median without it


def test_too_few_nodes_are_refused_naming_how_many_it_has_and_needs():
    with pytest.raises(CalibrateError) as exc:
        calibrate(fleet([470.0] * 5), "d")
    assert str(exc.value) == ("calibration needs the results of at least 8 nodes; it has 5 (node1, node2, node3, "
                              "node4, node5)")
    # enough nodes, but one figure measured by too few of them
    nodes = fleet([470.0] * 8)
    nodes[0] = NodeResults("node1", {"allreduce.nvlink": 470.0, "allreduce.pair": 45.0}, dict(V))
    with pytest.raises(CalibrateError) as exc:
        calibrate(nodes, "d")
    assert str(exc.value) == ("calibration needs the results of at least 8 nodes per figure: allreduce.pair has 1 "
                              "(choose figures with --figure)")
    assert [f.key for f in calibrate(nodes, "d", only=("allreduce.nvlink",))] == ["allreduce.nvlink"]


def test_nodes_measured_under_different_versions_are_refused_naming_each_group():
    nodes = fleet([470.0] * 9)
    nodes[8] = NodeResults("node9", {"allreduce.nvlink": 470.0}, {**V, "driver": "535.104.05"})
    nodes[7] = NodeResults("node8", {"allreduce.nvlink": 470.0}, {**V, "driver": None})
    with pytest.raises(CalibrateError) as exc:
        calibrate(nodes, "d")
    assert str(exc.value) == (
        "the nodes' results were measured under different versions: driver 550.90.07 on 7 node(s) (node1, node2, "
        "node3, node4, node5 and 2 more); driver unknown on 1 node(s) (node8); driver 535.104.05 on 1 node(s) "
        "(node9): calibrate each group apart (--node), or bring the nodes to one version first")


def result(check, mode, value=None, status="OK", age=60.0, data=None):
    return {"check": check, "mode": mode, "status": status, "code": None, "message": "m",
            "measured_at": NOW - age, "valid_for": 86400, "value": value, "data": data}


def test_a_nodes_stored_results_give_its_figures_and_the_rest_are_left_out_with_a_note():
    stored = {"allreduce/nvlink": result("allreduce", "nvlink", 471.5),
              "allreduce/pair": result("allreduce", "pair", None, "UNKNOWN"),
              "allreduce/loopback": result("allreduce", "loopback", 44.0, age=90_000),
              "nvbandwidth/copy engine": result("nvbandwidth", "copy engine",
                                                data={"min_gbs": {"host_to_device_memcpy_ce": 55.6}}),
              "dcgm_diag/level 1": result("dcgm_diag", "level 1"),
              "allreduce/odd": {"check": "allreduce"}}
    figures, notes = node_figures(stored, NOW)
    assert figures == {"allreduce.nvlink": 471.5, "nvbandwidth.host_to_device_memcpy_ce": 55.6}
    assert notes == ["allreduce/loopback: stale (90000 s old, valid for 86400 s): left out",
                     "allreduce/odd: not a stored active-check result: mode None",
                     "allreduce/pair: UNKNOWN, no figure: left out"]


def test_a_document_that_is_not_an_export_is_refused():
    with pytest.raises(CalibrateError, match=r"^x.json: not the output of `ccrhost baseline results`"):
        node_results({"node": "n1"}, "x.json")


def write_fleet(folder, values, versions=V):
    folder.mkdir(exist_ok=True)
    for i, v in enumerate(values):
        doc = {"version": 1, "node": f"node{i + 1}", "read_at": NOW, "versions": versions, "errors": [],
               "results": {"allreduce/nvlink": result("allreduce", "nvlink", v)}}
        (folder / f"node{i + 1}.json").write_text(json.dumps(doc))
    return str(folder)


def test_calibrate_writes_a_site_file_and_a_refused_run_leaves_it_as_it_was(tmp_path):
    folder = write_fleet(tmp_path / "results", [470.0, 472.0, 474.0, 476.0, 478.0, 480.0, 482.0, 300.0])
    out = tmp_path / "site-h100.yaml"
    run = CliRunner().invoke(main, ["baseline", "calibrate", "--from", folder, "--output", str(out),
                                    "--extends", "hgx-h100-8x400", "--date", "2026-12-06"])
    assert run.exit_code == 0, run.output
    doc = yaml.safe_load(out.read_text())
    assert doc["name"] == "site-h100" and doc["extends"] == "hgx-h100-8x400"
    assert doc["fleet"]["allreduce.nvlink"]["value"] == 457.21
    assert doc["fleet"]["allreduce.nvlink"]["source"].endswith(f"over 8 nodes, from {folder}")
    before = out.read_text()
    few = write_fleet(tmp_path / "few", [470.0] * 3)
    run = CliRunner().invoke(main, ["baseline", "calibrate", "--from", few, "--output", str(out)])
    assert run.exit_code == 1
    assert "Error: calibrate: calibration needs the results of at least 8 nodes; it has 3" in run.output
    assert out.read_text() == before


def test_an_existing_site_file_keeps_all_but_its_fleet_section():
    current = ("# our H100s\nname: site\nextends: hgx-h100-8x400\nfleet:\n  allreduce.nvlink: {value: 1}\n\n"
               "# no swap on any node\nsettings:  # ours\n  baseline_swap_max_kib: 0\n")
    [f] = calibrate(fleet([470.0] * 8), "2026-12-06")
    text = site_file_text(current, [f], "site", None)
    assert text.startswith("# our H100s\nname: site\nextends: hgx-h100-8x400\nfleet:")
    assert text.endswith("\n\n# no swap on any node\nsettings:  # ours\n  baseline_swap_max_kib: 0\n")
    assert yaml.safe_load(text)["fleet"] == {"allreduce.nvlink": f.entry()}
    with pytest.raises(CalibrateError, match="extends 'hgx-h100-8x400', not 'hgx-h200-8x400'"):
        site_file_text(current, [f], "site", "hgx-h200-8x400")


def test_a_written_site_file_loads_with_the_platform_loader(tmp_path):
    """The platform loader (model/platform.py, the platform helper's) reads the fleet: section as written."""
    from ccrhost.model import platform
    [f] = calibrate(fleet([470.0 + i for i in range(8)]), "2026-12-06")
    path = tmp_path / "site.yaml"
    path.write_text(site_file_text(None, [f], "site", "hgx-h100-8x400"))
    loaded = platform.resolve(str(path)).fleet_figure("allreduce.nvlink")
    assert (loaded.value, loaded.fleet, loaded.nodes, loaded.source) == (f.value, True, 8, f.source)


def test_nvbandwidth_stores_each_testcases_slowest_copy_for_calibration(tmp_path):
    """The v0.10 capture's 7 GPUs: its stored result keeps the least cell of each testcase (never judged again)."""
    from pathlib import Path

    from ccrhost.model.nvbandwidth import TESTCASES
    from ccrhost.node import nvbandwidth
    from ccrhost.node.active import ToolRun
    from ccrhost.probes.nvbandwidth import parse
    from ccrhost.settings import HostSettings

    capture = (Path(__file__).parent / "fixtures/nvbandwidth/v0.10_7gpu_ce.txt").read_text()

    def run(argv, deadline, env):
        out = capture if argv[0] == "nvbandwidth" else "NVIDIA H200\n" if "name" in argv[1] else ""
        return ToolRun(tuple(argv), 0, out, 0.1)

    s = HostSettings(verify_dcgm_state=str(tmp_path / "dcgm.json"))
    result = nvbandwidth.run_and_store(s, run_tool=run, clock=lambda: NOW)
    want = {tc: min(m.values.values()) for tc, m in parse(capture).items() if tc in TESTCASES}
    assert result.data == {"min_gbs": want} and len(want) == 3
    figures, _ = node_figures({"nvbandwidth/copy engine": result.to_dict()}, NOW)
    assert figures == {f"nvbandwidth.{tc}": v for tc, v in want.items()}


def test_a_nodes_export_holds_both_state_files_results_and_its_versions(tmp_path):
    from ccrhost.model.active import ActiveResult
    from ccrhost.node import active
    from ccrhost.node.baseline_results import export
    from ccrhost.settings import HostSettings

    s = HostSettings(verify_allreduce_state=str(tmp_path / "active.json"), verify_dcgm_state=str(tmp_path / "d.json"))
    active.store(s.verify_allreduce_state, [ActiveResult("allreduce", "nvlink", "OK", None, "ok", NOW, 86400, 471.0),
                                            ActiveResult("nicfw", "mlx5_0", "OK", None, "ok", NOW, 86400)])
    (tmp_path / "d.json").write_text("{not json")
    doc = export(s, "node1", now=lambda: NOW, versions=V)
    assert set(doc["results"]) == {"allreduce/nvlink"} and doc["versions"] == V and doc["node"] == "node1"
    assert len(doc["errors"]) == 1 and doc["errors"][0].startswith(f"{tmp_path / 'd.json'}: ")
    n = node_results(json.loads(json.dumps(doc)), "node1.json")
    assert n.figures == {"allreduce.nvlink": 471.0}
    assert n.notes[-1].startswith("the node could not read a state file: ")


def test_node_picks_one_version_group_and_an_unknown_node_is_refused(tmp_path):
    folder = tmp_path / "mixed"
    write_fleet(folder, [470.0] * 8)
    doc = json.loads((folder / "node8.json").read_text())
    (folder / "node9.json").write_text(json.dumps({**doc, "node": "node9", "versions": {**V, "nccl": "2.18.1"}}))
    out = tmp_path / "site.yaml"
    args = ["baseline", "calibrate", "--from", str(folder), "--output", str(out), "--extends", "hgx-h100-8x400"]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 1 and "nccl 2.21.5 on 8 node(s) (node1, node2, node3, node4, node5 and 3 more); " \
                                  "nccl 2.18.1 on 1 node(s) (node9)" in run.output and not out.exists()
    picked = [a for i in range(1, 9) for a in ("--node", f"node{i}")]
    assert CliRunner().invoke(main, args + picked).exit_code == 0
    assert yaml.safe_load(out.read_text())["fleet"]["allreduce.nvlink"]["nodes"] == 8
    run = CliRunner().invoke(main, args + ["--node", "node77"])
    assert run.exit_code == 1 and "calibrate: no results for --node node77" in run.output
