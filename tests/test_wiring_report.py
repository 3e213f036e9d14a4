"""The fleet's wiring from the nodes' verdicts (issue 48): the readings
taken back from Verdict.readings.wiring, the files written, the findings,
leaf_suspect on the failing nodes of a suspect leaf, and `ccrhost slurm
verify --topology-conf`."""

import json

import pytest
from slurm_fakes import run_verify as fake_verify
from test_checks import gpu, port

from ccrhost.fleet import wiring_report as wr
from ccrhost.model import wiring as wm
from ccrhost.model.drain_reason import drain_reason
from ccrhost.model.verdict import Expectation, Policy, Readings, evaluate
from ccrhost.node import wiring as node_wiring
from ccrhost.settings import validate_host

NOW = 50_000.0
RAILS = [{"leaf": f"leaf-r{k}-*"} for k in range(4)]
SETTINGS = validate_host("n", {"wiring_enable": True, "wiring_rails": RAILS})
POLICY = Policy(wiring=SETTINGS.wiring_policy())


def reading(group, index, swap=False, guid=None):
    """Four RoCE NICs mlx5_0..3, rail k on leaf-r<k>-<group>, port swp<index>; ``swap``: rails 1 and 2 crossed."""
    leaves = [f"leaf-r{k}-{group}" for k in range(4)]
    if swap:
        leaves[1], leaves[2] = leaves[2], leaves[1]
    nics = {f"mlx5_{k}/1": wm.NicWiring(f"mlx5_{k}", 1, "Ethernet", f"eth{k}",
                                        [wm.Neighbour("lldp", leaves[k], None, f"swp{index}")])
            for k in range(4)}
    if guid:
        nics["mlx5_0/1"].node_guid = guid
    return wm.WiringReading(nics)


def verdict(wiring, down=None):
    """The node's own verdict: four ports (``down``: that one DOWN: port_down), eight GPUs, its stored wiring."""
    ports = [port(i, state="DOWN", phys="Disabled") if i == down else port(i) for i in range(4)]
    stored = None if wiring is None else wm.StoredWiring(
        NOW, node_wiring.result(wiring, 86400, NOW - 60).to_dict())
    return evaluate(Readings(ports=ports, gpus=[gpu(i) for i in range(8)], wiring=stored), Expectation(), POLICY)


def fleet(down=(), swap=(), guids=None):
    """gpu01-gpu04 under the leaves of group a, gpu05-gpu06 under group b."""
    out = {}
    for i in range(1, 7):
        name = f"gpu{i:02d}"
        out[name] = verdict(reading("a" if i <= 4 else "b", i, name in swap, (guids or {}).get(name)),
                            down=3 if name in down else None)
    return out


def test_a_healthy_node_with_its_wiring_is_ok():
    v = fleet()["gpu01"]
    assert v.status == "OK", v.summary()


def test_the_files_for_a_swapped_pair_and_the_report(tmp_path):
    verdicts = fleet(swap=("gpu02",))
    assert [r.code for r in verdicts["gpu02"].reasons] == ["wiring_wrong_rail", "wiring_wrong_rail"]
    said = []
    got = wr.report(verdicts, dict.fromkeys(verdicts, SETTINGS), tmp_path, said.append, now=NOW)
    assert (tmp_path / "cabling.csv").read_text() == (
        "node,nic,rail,expected_leaf,found_leaf_port\n"
        "gpu02,mlx5_1/1,1,leaf leaf-r1-*,leaf-r2-a:swp2\n"
        "gpu02,mlx5_2/1,2,leaf leaf-r2-*,leaf-r1-a:swp2\n")
    assert (tmp_path / "topology.conf").read_text() == (
        "# topology.conf (topology/tree) from the nodes' discovered leaves (ccrhost fleet/wiring.py)\n"
        "SwitchName=leaf-r0-a Nodes=gpu[01-04]\n"
        "SwitchName=leaf-r0-b Nodes=gpu[05-06]\n"
        "SwitchName=fabric Switches=leaf-r0-a,leaf-r0-b\n")
    labels = json.loads((tmp_path / "node-labels.json").read_text())
    assert labels["gpu02"] == {"ccrhost/rail0-leaf": "leaf-r0-a", "ccrhost/rail3-leaf": "leaf-r3-a",
                               "network.topology.nvidia.com/leaf": "leaf-r0-a"}
    assert labels["gpu05"]["ccrhost/rail2-leaf"] == "leaf-r2-b"
    assert got.findings == [] and got.skipped == {} and said == []
    assert got.to_dict() == {"findings": [], "failed": {}, "skipped": {}, "plan_from": "gpu01",
                             "files": {n: str(tmp_path / n) for n in ("cabling.csv", "topology.conf",
                                                                      "node-labels.json", "wiring-plan.yaml")}}


def test_three_nodes_of_one_leaf_failing_a_fabric_code_make_it_suspect(tmp_path):
    verdicts = fleet(down=("gpu01", "gpu02", "gpu04"))
    before = {n: (v.status, list(v.reasons)) for n, v in verdicts.items()}
    said = []
    got = wr.report(verdicts, dict.fromkeys(verdicts, SETTINGS), tmp_path, said.append, now=NOW)
    message = ("leaf leaf-r3-a: 3 of its 4 nodes failed port_down in the last 3600 s: gpu01, gpu02, gpu04: "
               "check the leaf switch leaf-r3-a")
    for name, v in verdicts.items():
        added = v.reasons[len(before[name][1]):]
        if name in ("gpu01", "gpu02", "gpu04"):
            # the port down is on rail 3: only that rail's leaf is suspect, and the node still FAILs
            assert [(r.level, r.code, r.message) for r in added] == [("WARN", "leaf_suspect", message)]
            assert v.status == "FAIL" and v.reasons[0].code == "port_down"
        else:
            assert added == [] and v.status == before[name][0]
    assert [(f.kind, f.nodes) for f in got.findings] == [("leaf_suspect", ("gpu01", "gpu02", "gpu04"))]
    assert said == ["wiring: leaf_suspect: " + message.rsplit(": check", 1)[0]]
    reason = drain_reason(verdicts["gpu01"])
    assert reason.startswith("ccrhost: port_down,leaf_suspect:") and "check the leaf switch leaf-r3-a" in reason


def test_one_failing_node_is_its_own_fault(tmp_path):
    verdicts = fleet(down=("gpu03",))
    got = wr.report(verdicts, dict.fromkeys(verdicts, SETTINGS), tmp_path, now=NOW)
    assert got.findings == [] and all(r.code != "leaf_suspect" for v in verdicts.values() for r in v.reasons)


def test_a_code_that_is_no_fabric_code_makes_no_leaf_suspect(tmp_path):
    verdicts = fleet(swap=("gpu01", "gpu02", "gpu03"))  # wiring_wrong_rail: the node's cables, not the leaf
    got = wr.report(verdicts, dict.fromkeys(verdicts, SETTINGS), tmp_path, now=NOW)
    assert [v.status for v in verdicts.values()][:3] == ["FAIL"] * 3 and got.findings == []


def test_a_duplicate_guid_and_the_nodes_without_a_reading(tmp_path):
    verdicts = fleet(guids={"gpu01": "0x0000000000000abc", "gpu05": "0x0000000000000abc"})
    verdicts["gpu06"] = verdict(None)
    broken = verdict(reading("b", 7))
    broken.readings.wiring.result["data"] = {"nics": {"mlx5_0/1": {"port": 1}}}
    verdicts["gpu07"] = broken
    said = []
    got = wr.report(verdicts, dict.fromkeys(verdicts, SETTINGS), tmp_path, said.append, now=NOW)
    assert [(f.kind, f.message, f.nodes) for f in got.findings] == [
        ("duplicate_guid", "node GUID 0x0000000000000abc on gpu01 mlx5_0, gpu05 mlx5_0", ("gpu01", "gpu05"))]
    assert got.skipped == {"gpu06": "no stored wiring reading was read back",
                           "gpu07": "the stored wiring reading: not a stored wiring reading: KeyError('device')"}
    assert said == ["wiring: no reading from 2 node(s): gpu06: no stored wiring reading was read back; gpu07: "
                    "the stored wiring reading: not a stored wiring reading: KeyError('device')",
                    "wiring: duplicate_guid: node GUID 0x0000000000000abc on gpu01 mlx5_0, gpu05 mlx5_0"]
    assert "gpu06" not in (tmp_path / "topology.conf").read_text()


def test_a_stale_reading_is_not_taken():
    v = verdict(reading("a", 1))
    v.readings.wiring.read_at = NOW + 2 * 86400
    assert wr.node_reading(v.readings.wiring) == (None, "the stored wiring reading is 172860 s old, valid for "
                                                        "86400 s")


def test_nothing_without_wiring_on_and_the_check_settings_carry_the_thresholds(tmp_path):
    verdicts = fleet()
    off = validate_host("n", {})
    assert wr.report(verdicts, dict.fromkeys(verdicts, off), tmp_path, now=NOW) is None
    assert list(tmp_path.iterdir()) == []
    tuned = validate_host("n", {"wiring_enable": True, "wiring_rails": RAILS, "wiring_leaf_suspect_fraction": 0.9,
                                "wiring_leaf_suspect_min_nodes": 3, "wiring_leaf_suspect_window_hours": 2})
    check = tuned.check_settings()
    assert (check.wiring_leaf_suspect_fraction, check.wiring_leaf_suspect_min_nodes,
            check.wiring_leaf_suspect_window_hours) == (0.9, 3, 2)
    # 3 of 4 is under 0.9 with the node's check settings: no suspect
    verdicts = fleet(down=("gpu01", "gpu02", "gpu04"))
    assert wr.report(verdicts, dict.fromkeys(verdicts, check), tmp_path, now=NOW).findings == []
    assert wr.report(verdicts, dict.fromkeys(verdicts, SETTINGS.check_settings()), tmp_path, now=NOW).findings


def test_an_unwritable_file_is_named_and_the_others_written(tmp_path):
    (tmp_path / "topology.conf").mkdir()  # a directory where the file goes
    verdicts = fleet()
    said = []
    got = wr.report(verdicts, dict.fromkeys(verdicts, SETTINGS), tmp_path, said.append, now=NOW)
    assert set(got.files) == {"cabling.csv", "node-labels.json", "wiring-plan.yaml"}
    assert list(got.failed) == ["topology.conf"]
    assert said[0].startswith(f"wiring: {tmp_path / 'topology.conf'} was not written: ")


# -- ccrhost slurm verify ----------------------------------------------------------------

CONFIG = "wiring_enable: true\nwiring_rails:\n" + "".join(f"- leaf: leaf-r{k}-*\n" for k in range(4))


def run_verify(monkeypatch, tmp_path, verdicts, **options):
    """run_verify with Slurm faked: the nodes idle, the job submitted, each check step printing its verdict."""
    return fake_verify(monkeypatch, tmp_path, verdicts, lambda node: CONFIG, **options)


def test_slurm_verify_writes_the_files_and_drains_with_leaf_suspect(monkeypatch, tmp_path):
    conf = tmp_path / "slurm" / "topology.conf"
    code, got, drained, said = run_verify(monkeypatch, tmp_path, fleet(down=("gpu01", "gpu02", "gpu04")),
                                          topology_conf=str(conf))
    assert code == 2 and sorted(drained) == ["gpu01", "gpu02", "gpu04"]
    assert all(r.startswith("ccrhost: port_down,leaf_suspect:") for r in drained.values())
    report = tmp_path / "report"
    assert conf.read_text() == (report / "topology.conf").read_text()
    assert conf.read_text().splitlines()[1] == "SwitchName=leaf-r0-a Nodes=gpu[01-04]"
    doc = json.loads((report / "ccr-report.json").read_text())
    assert doc["wiring"]["findings"] == [{"kind": "leaf_suspect", "nodes": ["gpu01", "gpu02", "gpu04"], "message": (
        "leaf leaf-r3-a: 3 of its 4 nodes failed port_down in the last 3600 s: gpu01, gpu02, gpu04")}]
    assert doc["wiring"]["files"] == {"cabling.csv": str(report / "cabling.csv"),
                                      "topology.conf": str(report / "topology.conf"),
                                      "node-labels.json": str(report / "node-labels.json"),
                                      "wiring-plan.yaml": str(report / "wiring-plan.yaml"),
                                      "topology_conf": str(conf)}
    assert [r["code"] for r in doc["hosts"]["gpu04"]["reasons"]] == ["port_down", "leaf_suspect"]
    assert "wiring: leaf_suspect: leaf leaf-r3-a: 3 of its 4 nodes failed port_down" in said
    assert f"wiring: wrote {conf}: run `scontrol reconfigure` for slurmctld to load it" in said


def test_slurm_verify_dry_run_leaves_the_controllers_topology_conf_alone(monkeypatch, tmp_path):
    conf = tmp_path / "topology.conf.controller"
    conf.write_text("SwitchName=old Nodes=x\n")
    code, got, drained, said = run_verify(monkeypatch, tmp_path, fleet(), topology_conf=str(conf), dry_run=True)
    assert code == 0 and conf.read_text() == "SwitchName=old Nodes=x\n"
    assert (tmp_path / "report" / "topology.conf").exists()
    assert f"wiring: dry run: {conf} not written (the report directory's topology.conf is)" in said


def test_the_topology_conf_option_reaches_the_options(monkeypatch, tmp_path, capsys):
    from ccrhost.cli import entry

    seen = []
    monkeypatch.setattr("ccrhost.fleet.slurm.run_verify", lambda opts, stream=None: seen.append(opts) or (0, {}, {}))
    with pytest.raises(SystemExit) as done:
        entry(["slurm", "verify", "-p", "gpu", "--topology-conf", str(tmp_path / "topology.conf")])
    assert done.value.code == 0 and seen[0].topology_conf == str(tmp_path / "topology.conf")
    with pytest.raises(SystemExit) as done:
        entry(["slurm", "verify", "-p", "gpu", "--topology-conf", str(tmp_path)])  # a directory
    assert done.value.code == 3 and len(seen) == 1  # a usage error: nothing checked
    assert f"Invalid value for '--topology-conf': File '{tmp_path}' is a directory." in capsys.readouterr().err


# -- the deploy's fleet report ---------------------------------------------------------------

def test_the_deploys_fleet_report_writes_the_same_files(tmp_path):
    import io

    from ccrhost.fleet.report import FleetReport

    verdicts = fleet(swap=("gpu02",), down=("gpu01", "gpu02", "gpu04"))
    report = FleetReport(str(tmp_path))
    for name, v in verdicts.items():
        report.record(name, v, executed=True, settings=None if name == "gpu06" else SETTINGS)
    out = io.StringIO()
    paths = report.finish(out)
    assert set(paths) == {"json", "xml", "txt", "html"}
    assert (tmp_path / "cabling.csv").read_text().splitlines()[1:] == [
        "gpu02,mlx5_1/1,1,leaf leaf-r1-*,leaf-r2-a:swp2", "gpu02,mlx5_2/1,2,leaf leaf-r2-*,leaf-r1-a:swp2"]
    # gpu06's settings were not given: its wiring is not the fleet's
    assert "SwitchName=leaf-r0-b Nodes=gpu05\n" in (tmp_path / "topology.conf").read_text()
    doc = json.loads((tmp_path / "ccr-report.json").read_text())
    assert doc["wiring"]["files"]["node-labels.json"] == str(tmp_path / "node-labels.json")
    assert [f["nodes"] for f in doc["wiring"]["findings"]] == [["gpu01", "gpu02", "gpu04"]]
    assert "wiring: leaf_suspect: leaf leaf-r3-a: 3 of its 4 nodes failed port_down" in out.getvalue()
    assert [r["code"] for r in doc["hosts"]["gpu01"]["reasons"]] == ["port_down", "leaf_suspect"]


def test_the_deploys_fleet_report_without_wiring_writes_no_wiring_file(tmp_path):
    from ccrhost.fleet.report import FleetReport

    report = FleetReport(str(tmp_path))
    for name, v in fleet().items():
        report.record(name, v, settings=validate_host("n", {}))
    report.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ccr-report.html", "ccr-report.json", "ccr-report.txt",
                                                          "ccr-report.xml"]
    assert "wiring" not in json.loads((tmp_path / "ccr-report.json").read_text())


def test_a_fault_in_a_file_or_the_findings_is_said_and_nothing_else_stops(monkeypatch, tmp_path):
    def boom(*a, **k):
        raise RuntimeError("boom")

    verdicts = fleet(down=("gpu01", "gpu02", "gpu04"))
    monkeypatch.setattr(wr.fw, "topology_conf", boom)
    said = []
    got = wr.report(verdicts, dict.fromkeys(verdicts, SETTINGS), tmp_path, said.append, now=NOW)
    assert got.failed == {"topology.conf": "RuntimeError: boom"}
    assert set(got.files) == {"cabling.csv", "node-labels.json", "wiring-plan.yaml"}
    assert said[-1] == f"wiring: {tmp_path / 'topology.conf'} was not written: RuntimeError: boom"
    verdicts = fleet(down=("gpu01", "gpu02", "gpu04"))
    monkeypatch.setattr(wr.fw, "duplicate_guids", boom)
    said = []
    assert wr.report(verdicts, dict.fromkeys(verdicts, SETTINGS), tmp_path / "b", said.append, now=NOW) is None
    assert said == ["wiring: not reported: RuntimeError: boom"] and not (tmp_path / "b").exists()
    assert all(r.code != "leaf_suspect" for v in verdicts.values() for r in v.reasons)  # nothing half added


# -- review fixes ---------------------------------------------------------------------------------

def test_topology_conf_goes_to_slurm_only_when_every_node_of_the_cluster_is_placed(tmp_path):
    verdicts = fleet()
    to_slurm = tmp_path / "slurm-topology.conf"
    said = []
    got = wr.build(verdicts, dict.fromkeys(verdicts, SETTINGS), tmp_path, said.append, now=NOW,
                   topology_conf=str(to_slurm), cluster=[*verdicts, "gpu07"])  # gpu07: busy, not checked
    assert not to_slurm.exists() and (tmp_path / "topology.conf").exists()
    assert got.failed["topology_conf"].startswith("not written: 1 node(s) of the cluster have no leaf in these "
                                                  "readings (gpu07)")
    assert said[-1] == f"wiring: {to_slurm} {got.failed['topology_conf']}"
    wr.build(verdicts, dict.fromkeys(verdicts, SETTINGS), tmp_path, said.append, now=NOW,
             topology_conf=str(to_slurm), cluster=list(verdicts))
    assert to_slurm.read_text() == (tmp_path / "topology.conf").read_text()


def test_each_node_is_judged_by_its_own_plan():
    other = validate_host("n", {"wiring_enable": True, "wiring_rails": [{"leaf": f"leaf-r{k}-b"} for k in range(4)]})
    verdicts = fleet()
    plans = {n: SETTINGS if n <= "gpu04" else other for n in verdicts}
    got = wr.build(verdicts, plans, None, now=NOW)
    # group b's nodes follow their own plan: nothing to recable, both groups under their leaves
    readings = {n: wr.node_reading(v.readings.wiring)[0] for n, v in verdicts.items()}
    from ccrhost.fleet import wiring as fw

    policies = {n: s.wiring_policy() for n, s in plans.items()}
    assert fw.cabling_csv(readings, policies) == "node,nic,rail,expected_leaf,found_leaf_port\n"
    assert got.findings == []
    strict = {n: validate_host("n", {"wiring_enable": True, "wiring_rails": [{"leaf": f"leaf-r{k}-a"}
                                                                             for k in range(4)]}).wiring_policy()
              for n in verdicts}
    assert fw.cabling_csv(readings, strict).count("\n") == 1 + 2 * 4  # one plan for all: group b all wrong


def test_a_fault_naming_no_nic_makes_one_suspect_for_the_leaves_its_nodes_share(tmp_path):
    verdicts = fleet()
    for name in ("gpu01", "gpu02", "gpu03"):  # an all-reduce fault names no NIC
        v = verdicts[name]
        v.reasons.append(wr.Reason("FAIL", "allreduce_slow", "busbw below the gate"))
        v.status = "FAIL"
    got = wr.build(verdicts, dict.fromkeys(verdicts, SETTINGS), None, now=NOW)
    assert [f.kind for f in got.findings] == ["leaf_suspect"]
    assert got.findings[0].message.startswith("leaves leaf-r0-a, leaf-r1-a, leaf-r2-a, leaf-r3-a: 3 of its 4 nodes "
                                              "failed allreduce_slow")
    reason = next(r for r in verdicts["gpu01"].reasons if r.code == "leaf_suspect")
    assert reason.message.endswith("check the leaf switches leaf-r0-a, leaf-r1-a, leaf-r2-a, leaf-r3-a")


def test_failures_the_nodes_histories_keep_count_within_the_window(tmp_path):
    from ccrhost.model.history import Episode, History

    verdicts = fleet(down=("gpu01",))
    for name, at in (("gpu02", NOW - 1800), ("gpu03", NOW - 3000), ("gpu04", NOW - 7200)):
        verdicts[name].readings.history = History([Episode(at, ["port_down"], "investigate")])
    got = wr.build(verdicts, dict.fromkeys(verdicts, SETTINGS), None, now=NOW)  # window: 1 h
    # gpu01's port down names its NIC (mlx5_3: leaf-r3-a); the histories name none; gpu04's is two hours old
    by_nodes = {f.nodes: f.message for f in got.findings}
    assert set(by_nodes) == {("gpu01", "gpu02", "gpu03"), ("gpu02", "gpu03")}
    assert by_nodes[("gpu01", "gpu02", "gpu03")].startswith("leaf leaf-r3-a: 3 of its 4 nodes failed port_down in "
                                                             "the last 3600 s")
    assert by_nodes[("gpu02", "gpu03")].startswith("leaves leaf-r0-a, leaf-r1-a, leaf-r2-a: 2 of its 4 nodes")


def test_lids_are_per_subnet_and_excluded_ports_are_not_the_fabrics():
    from ccrhost.fleet import wiring as fw

    def ib(prefix, lid, guid):
        return wm.NicWiring("mlx5_0", 1, "InfiniBand", "ib0", lid=lid, node_guid=guid,
                            gids={0: (f"{prefix}:0000:0000:0000:0001", None)})

    two = {"a": wm.WiringReading({"mlx5_0/1": ib("fe80:0000:0000:0000", 5, "0x1")}),
           "b": wm.WiringReading({"mlx5_0/1": ib("fec0:0000:0000:0000", 5, "0x2")})}
    assert fw.lid_problems(two) == []  # LID 5 in each of two subnets
    same = {"a": two["a"], "b": wm.WiringReading({"mlx5_0/1": ib("fe80:0000:0000:0000", 5, "0x1")})}
    assert [f.kind for f in fw.lid_problems(same)] == ["duplicate_lid"]
    assert [f.kind for f in fw.duplicate_guids(same)] == ["duplicate_guid"]
    # where the compute ports are known, another fabric's ports (rdma_exclude_devices) are left out
    assert fw.lid_problems(same, {"a": [("mlx5_0", 1)], "b": []}) == []
    assert fw.duplicate_guids(same, {"a": [("mlx5_0", 1)], "b": []}) == []


def test_two_leaves_whose_names_make_one_slurm_name_stay_two_switches():
    from ccrhost.fleet import wiring as fw

    def one(leaf):
        return wm.WiringReading({"mlx5_0/1": wm.NicWiring("mlx5_0", 1, "Ethernet", "e0",
                                                          [wm.Neighbour("lldp", leaf, None, "swp1")])})

    text = fw.topology_conf({"a1": one("sw:a"), "a2": one("sw:a"), "b1": one("sw/a")}, wm.WiringPolicy(True))
    assert "SwitchName=sw_a Nodes=a[1-2]" in text
    assert "SwitchName=sw_a_1 Nodes=b1" in text and "# sw_a_1: sw/a" in text


def test_the_suspect_leafs_nodes_ask_for_a_person_at_the_switch_not_a_reboot_each():
    verdicts = fleet(down=("gpu01", "gpu02", "gpu04"))
    for name in ("gpu01", "gpu02", "gpu04"):  # port_down's own action, as if it were one a machine may carry out
        v = verdicts[name]
        v.reasons = [wr.replace(r, action="reboot") if r.code == "port_down" else r for r in v.reasons]
        assert v.action == "reboot"
    wr.build(verdicts, dict.fromkeys(verdicts, SETTINGS), None, now=NOW)
    for name in ("gpu01", "gpu02", "gpu04"):
        assert verdicts[name].action == "investigate"  # slurm remediate reboots none of them
        assert verdicts[name].reasons[-1].message.endswith("check the leaf switch leaf-r3-a")
    assert verdicts["gpu03"].action == "none"


def test_a_dead_leaf_still_has_its_nodes_where_the_plan_names_it():
    """A leaf that dies sends no LLDP: the deploy's fresh readings show no neighbour on its rail.
    Where the plan names that rail's leaf exactly, its nodes are still its own."""
    exact = validate_host("n", {"wiring_enable": True, "wiring_rails": [{"leaf": f"leaf-r{k}-a"} for k in range(4)]})
    out = {}
    for i in range(1, 5):
        r = reading("a", i)
        if i < 4:  # leaf-r2-a is dead for three of its four nodes (the fourth's reading is older)
            r.nics["mlx5_2/1"].neighbours = []
        stored = wm.StoredWiring(NOW, node_wiring.result(r, 86400, NOW - 60).to_dict())
        pol = Policy(wiring=exact.wiring_policy())
        out[f"gpu{i:02d}"] = evaluate(Readings(ports=[port(k) for k in range(4)], gpus=[gpu(k) for k in range(8)],
                                               wiring=stored), Expectation(), pol)
    assert [out[f"gpu0{i}"].status for i in range(1, 5)] == ["FAIL", "FAIL", "FAIL", "OK"]
    got = wr.build(out, dict.fromkeys(out, exact), None, now=NOW)
    assert [f.message.split(":")[0] for f in got.findings] == ["leaf leaf-r2-a"]
    assert got.findings[0].nodes == ("gpu01", "gpu02", "gpu03")
    # with a pattern for that rail the plan names no one leaf: nothing to count them under
    patterned = validate_host("n", {"wiring_enable": True, "wiring_rails": RAILS})
    assert wr.build(out, dict.fromkeys(out, patterned), None, now=NOW).findings == []


def test_the_sites_spines_go_above_their_leaves_in_topology_conf(tmp_path):
    spined = validate_host("n", {"wiring_enable": True, "wiring_rails": RAILS,
                                 "wiring_spines": {"spine-1": ["leaf-r0-a"], "spine-2": ["leaf-r0-b"]}})
    verdicts = fleet()
    for settings in (spined, spined.check_settings()):  # the deploy's settings, and what slurm verify keeps
        wr.build(verdicts, dict.fromkeys(verdicts, settings), tmp_path, now=NOW)
        assert (tmp_path / "topology.conf").read_text().splitlines()[1:] == [
            "SwitchName=leaf-r0-a Nodes=gpu[01-04]",
            "SwitchName=leaf-r0-b Nodes=gpu[05-06]",
            "SwitchName=spine-1 Switches=leaf-r0-a",
            "SwitchName=spine-2 Switches=leaf-r0-b",
            "SwitchName=fabric Switches=spine-[1-2]",
        ]
    with pytest.raises(Exception, match="wiring_spines"):
        validate_host("n", {"wiring_spines": {"spine 1": ["leaf-*"]}})
