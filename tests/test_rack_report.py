"""The fleet's NVLink racks from the trays' verdicts (issue 49,
fleet/rack_report.py): the rack reasons added to the trays' verdicts, the
block topology written without the failing trays, the report's "rack"
section, on `ccrhost slurm verify` (--topology-block) and the deploy's
fleet report."""

import json
from dataclasses import replace

import pytest
from slurm_fakes import run_verify as fake_verify
from test_checks import gpu, port

from ccrhost.fleet import rack_report as rr
from ccrhost.model import datapath as dp
from ccrhost.model import imex as m
from ccrhost.model.drain_reason import drain_reason
from ccrhost.model.gpu_health import GpuHealth, GpuHealthReading
from ccrhost.model.verdict import Expectation, Policy, Readings, evaluate
from ccrhost.settings import validate_host

A = ("9c6f5af3-53bf-49b5-a436-b66766c413c3", 4026)   # a cluster UUID and clique as gpud's GB200 reading shows them
B = ("dc6e40c4-d722-4357-9ba6-5291dd461278", 2)
HEAD = ("# Slurm topology/block (topology.conf(5)): one block per NVLink rack, written by ccrhost;\n"
        "# trays that FAIL their checks are left out.\n")


def settings(rack="nvl72-a", on=True):
    return validate_host("n", {"imex_enable": True, "imex_rack": rack} if on else {})


POLICY = Policy(imex=settings().imex_policy())


def address(host):
    return f"10.0.1.{int(host[2:])}"


def domain(hosts, versions=None):
    """nvidia-imex-ctl -N of an IMEX domain of ``hosts``, every node READY and connected."""
    n = len(hosts)
    return m.ImexDomain(nodes=[m.ImexNode(i, address(h), "READY", (versions or {}).get(h, "570.172"))
                               for i, h in enumerate(hosts)],
                        table={f"{i},{j}": "C" for i in range(n) for j in range(n)}, state="UP")


def tray(host, fabric=A, imex=None, policy=POLICY):
    """A tray's own verdict: four ports, four GPUs all in ``fabric``, its IMEX domain ``imex`` (None: not read)."""
    health = GpuHealthReading(gpus=[GpuHealth(i, pci=f"0000:0{i}:00.0", fabric_state="Completed",
                                              fabric_status="Success", cluster_uuid=fabric[0], clique_id=fabric[1])
                                    for i in range(4)])
    reading = None if imex is None else m.ImexReading(unit="active", channel=True, addresses=(address(host),),
                                                      domain=imex)
    return evaluate(Readings(ports=[port(i) for i in range(4)], gpus=[gpu(i) for i in range(4)], gpu_health=health,
                             imex=reading), Expectation(), policy)


HOSTS = ["gb01", "gb02", "gb03", "gb04"]


def rack(odd=None, fabric=B, versions=None):
    """gb01-gb04 in one rack and IMEX domain; ``odd`` reports ``fabric`` instead of A."""
    d = domain(HOSTS, versions)
    return {h: tray(h, fabric if h == odd else A, d) for h in HOSTS}


def codes(v):
    return [(r.level, r.code) for r in v.reasons]


def test_a_healthy_rack_adds_nothing_and_blocks_every_tray(tmp_path):
    verdicts = rack()
    assert all(v.status == "OK" for v in verdicts.values()), [v.summary() for v in verdicts.values()]
    said = []
    got = rr.report(verdicts, dict.fromkeys(verdicts, settings()), tmp_path, said.append)
    assert (tmp_path / "topology-block.conf").read_text() == HEAD + "BlockName=nvl72-a Nodes=gb[01-04]\n"
    assert said == [] and all(v.reasons == [] for v in verdicts.values())
    assert got.to_dict() == {"racks": {"nvl72-a": {h: [] for h in HOSTS}}, "no_rack": {}, "findings": [],
                             "files": {"topology-block.conf": str(tmp_path / "topology-block.conf")},
                             "failed": {}, "left_out": []}


def test_the_tray_in_another_clique_fails_naming_the_rack_and_leaves_the_block(tmp_path):
    verdicts = rack(odd="gb03")
    assert verdicts["gb03"].status == "OK"  # its own GPUs agree with each other: only the rack sees it
    said = []
    got = rr.report(verdicts, dict.fromkeys(verdicts, settings()), tmp_path, said.append)
    message = (f"gb03 is the odd tray out of rack nvl72-a: it reports ClusterUUID {B[0]} clique 2, the others "
               f"ClusterUUID {A[0]} clique 4026")
    assert verdicts["gb03"].status == "FAIL" and codes(verdicts["gb03"]) == [("FAIL", "rack_fabric_split")]
    assert verdicts["gb03"].reasons[0].message == message
    assert drain_reason(verdicts["gb03"]).startswith(f"ccrhost: rack_fabric_split: {message}")
    assert [verdicts[h].status for h in ("gb01", "gb02", "gb04")] == ["OK", "OK", "OK"]
    assert all(verdicts[h].reasons == [] for h in ("gb01", "gb02", "gb04"))
    assert (tmp_path / "topology-block.conf").read_text() == HEAD + (
        "BlockName=nvl72-a Nodes=gb[01-02,04]\n"
        "# left out: gb03: FAILs its checks (rack nvl72-a)\n")
    assert said == [f"rack: rack_fabric_split: {message}"]
    doc = got.to_dict()
    assert doc["racks"] == {"nvl72-a": {"gb01": [], "gb02": [], "gb03": ["rack_fabric_split"], "gb04": []}}
    assert doc["findings"] == [{"host": "gb03", "level": "FAIL", "code": "rack_fabric_split", "message": message}]
    assert doc["left_out"] == ["gb03: FAILs its checks (rack nvl72-a)"]


def test_a_tray_its_own_check_failed_is_left_out_with_no_rack_reason(tmp_path):
    verdicts = rack()
    verdicts["gb02"] = evaluate(replace(verdicts["gb02"].readings, ports=[port(0, state="DOWN", phys="Disabled")]),
                                Expectation(), POLICY)
    assert verdicts["gb02"].status == "FAIL"
    got = rr.report(verdicts, dict.fromkeys(verdicts, settings()), tmp_path)
    assert got.reasons == {} and [r.code for r in verdicts["gb02"].reasons] == ["port_down"]
    assert (tmp_path / "topology-block.conf").read_text() == HEAD + (
        "BlockName=nvl72-a Nodes=gb[01,03-04]\n"
        "# left out: gb02: FAILs its checks (rack nvl72-a)\n")


def test_a_tray_the_inventory_puts_in_the_wrong_rack(tmp_path):
    a, b = ["gb01", "gb02", "gb03"], ["gb04", "gb05", "gb06", "gb07"]
    verdicts = {**{h: tray(h, A, domain(a)) for h in a}, **{h: tray(h, B, domain(b)) for h in b[:3]},
                "gb07": tray("gb07", A, domain(a + ["gb07"]))}  # cabled into rack a, listed in rack b
    racks = {h: settings("nvl72-a" if h in a else "nvl72-b") for h in verdicts}
    got = rr.report(verdicts, racks, tmp_path)
    assert codes(verdicts["gb07"]) == [("FAIL", "rack_membership_mismatch")]
    assert verdicts["gb07"].reasons[0].message == (
        f"gb07: the inventory puts it in rack nvl72-b, but it reports rack nvl72-a's NVLink domain "
        f"(ClusterUUID {A[0]} clique 4026)")
    assert all(verdicts[h].status == "OK" for h in a + b[:3])
    assert got.to_dict()["racks"]["nvl72-b"] == {"gb04": [], "gb05": [], "gb06": [],
                                                 "gb07": ["rack_membership_mismatch"]}
    assert (tmp_path / "topology-block.conf").read_text() == HEAD + (
        "BlockName=nvl72-a Nodes=gb[01-03]\n"
        "BlockName=nvl72-b Nodes=gb[04-06]\n"
        "# left out: gb07: FAILs its checks (rack nvl72-b)\n")


def test_the_imex_version_odd_one_out(tmp_path):
    verdicts = rack(versions={"gb04": "580.65"})
    assert ("FAIL", "imex_version_mismatch") in codes(verdicts["gb04"])  # its own check's, of the domain it sees
    said = []
    rr.report(verdicts, dict.fromkeys(verdicts, settings()), tmp_path, said.append)
    assert said == ["rack: rack_version_mismatch: gb04 is the odd tray out of rack nvl72-a: IMEX 580.65, "
                    "the others 570.172"]
    assert codes(verdicts["gb04"])[-1] == ("FAIL", "rack_version_mismatch")
    assert all(verdicts[h].status == "OK" and verdicts[h].reasons == [] for h in ("gb01", "gb02", "gb03"))


def test_the_driver_version_where_the_data_path_was_read(tmp_path):
    def with_driver(v, nvidia, error=None):
        datapath = dp.DatapathReading(dp.PeerMemory((), (), None, None, None), [], [], [], {}, dp.Iommu((), {}, {}),
                                      dp.HostVersions(nvidia=nvidia), error=error)
        return replace(v, readings=replace(v.readings, datapath=datapath))

    verdicts = rack()
    verdicts = {h: with_driver(v, "580.65" if h == "gb02" else "570.172") for h, v in verdicts.items()}
    verdicts["gb04"] = with_driver(verdicts["gb04"], None, error="lspci: not found")
    said = []
    rr.report(verdicts, dict.fromkeys(verdicts, settings()), tmp_path, said.append)
    assert said == ["rack: rack_version_mismatch: gb02 is the odd tray out of rack nvl72-a: driver 580.65, "
                    "the others 570.172",
                    "rack: rack_unreadable: gb04: its driver version was not read (rack nvl72-a)"]
    assert verdicts["gb04"].status == "UNKNOWN" and verdicts["gb02"].status == "FAIL"


def test_what_is_not_read_is_unknown_naming_the_rack_and_stays_in_the_block(tmp_path):
    verdicts = rack()
    verdicts["gb02"] = tray("gb02", A, None)  # no IMEX reading on this path
    verdicts["gb04"] = replace(verdicts["gb04"], readings=replace(verdicts["gb04"].readings, gpu_health=None))
    said = []
    got = rr.report(verdicts, {**dict.fromkeys(verdicts, settings()), "gb03": settings(None)}, tmp_path, said.append)
    assert said == ["rack: rack_unreadable: gb02: its IMEX version was not read (rack nvl72-a)",
                    "rack: rack_unreadable: gb03: in no rack: imex_rack is not set",
                    "rack: rack_unreadable: gb04: no GPU of it reported an NVLink domain (rack nvl72-a)"]
    assert [verdicts[h].status for h in HOSTS] == ["OK", "UNKNOWN", "UNKNOWN", "UNKNOWN"]
    assert got.to_dict()["no_rack"] == {"gb03": ["rack_unreadable"]}
    assert (tmp_path / "topology-block.conf").read_text() == HEAD + (
        "BlockName=nvl72-a Nodes=gb[01-02,04]\n"
        "# left out: gb03: in no rack (imex_rack is not set)\n")


def test_nodes_without_imex_enable_are_ignored(tmp_path):
    verdicts = {**rack(), "gb05": tray("gb05", B, policy=Policy())}  # another clique, but no tray of a rack
    said = []
    got = rr.report(verdicts, {**dict.fromkeys(HOSTS, settings()), "gb05": settings(on=False)}, tmp_path, said.append)
    assert said == [] and verdicts["gb05"].reasons == [] and "gb05" not in json.dumps(got.to_dict())
    assert "gb05" not in (tmp_path / "topology-block.conf").read_text()
    # no node of it turns imex_enable on, or no settings came: no rack view, no file
    assert rr.report(verdicts, dict.fromkeys(verdicts, settings(on=False)), tmp_path / "off") is None
    assert rr.report(verdicts, {}, tmp_path / "off") is None
    assert not (tmp_path / "off").exists()


def test_the_check_settings_carry_the_rack():
    check = settings("nvl72-b").check_settings()
    assert check.imex_rack == "nvl72-b" and rr.imex_on(check)
    assert not rr.imex_on(settings(on=False).check_settings())
    verdicts = rack(odd="gb03")
    got = rr.report(verdicts, dict.fromkeys(verdicts, check), None)
    assert list(got.racks) == ["nvl72-b"] and codes(verdicts["gb03"]) == [("FAIL", "rack_fabric_split")]
    assert got.files == {}  # no directory: nothing written


def test_an_unwritable_file_is_named_and_a_fault_adds_nothing(monkeypatch, tmp_path):
    (tmp_path / "topology-block.conf").mkdir()  # a directory where the file goes
    verdicts = rack(odd="gb03")
    said = []
    got = rr.report(verdicts, dict.fromkeys(verdicts, settings()), tmp_path, said.append)
    assert list(got.failed) == ["topology-block.conf"] and got.files == {}
    assert said[-1].startswith(f"rack: {tmp_path / 'topology-block.conf'} was not written: ")
    assert verdicts["gb03"].status == "FAIL"  # the verdicts are judged whatever the file

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(rr.fr, "check_racks", boom)
    verdicts = rack(odd="gb03")
    said = []
    assert rr.report(verdicts, dict.fromkeys(verdicts, settings()), tmp_path / "b", said.append) is None
    assert said == ["rack: not reported: RuntimeError: boom"] and not (tmp_path / "b").exists()
    assert all(v.reasons == [] for v in verdicts.values())


# -- ccrhost slurm verify ----------------------------------------------------------------

def run_verify(monkeypatch, tmp_path, verdicts, racks, **options):
    """run_verify with Slurm faked (tests/slurm_fakes.py); ``racks``: node -> imex_rack (None: imex off)."""
    def config(node):
        return "{}\n" if racks[node] is None else f"imex_enable: true\nimex_rack: {racks[node]}\n"

    return fake_verify(monkeypatch, tmp_path, verdicts, config, **options)


def test_slurm_verify_drains_the_odd_tray_and_writes_the_block_file(monkeypatch, tmp_path):
    conf = tmp_path / "slurm" / "topology.conf"
    verdicts = {**rack(odd="gb03"), "gb05": tray("gb05", B, policy=Policy())}
    code, got, drained, said = run_verify(monkeypatch, tmp_path, verdicts,
                                          {**dict.fromkeys(HOSTS, "nvl72-a"), "gb05": None}, topology_block=str(conf))
    assert code == 2 and list(drained) == ["gb03"]
    assert drained["gb03"].startswith("ccrhost: rack_fabric_split: gb03 is the odd tray out of rack nvl72-a: ")
    assert [got[h].status for h in (*HOSTS, "gb05")] == ["OK", "OK", "FAIL", "OK", "OK"]
    report = tmp_path / "report"
    block = HEAD + "BlockName=nvl72-a Nodes=gb[01-02,04]\n# left out: gb03: FAILs its checks (rack nvl72-a)\n"
    assert (report / "topology-block.conf").read_text() == block and conf.read_text() == block
    doc = json.loads((report / "ccr-report.json").read_text())
    assert doc["rack"]["racks"] == {"nvl72-a": {"gb01": [], "gb02": [], "gb03": ["rack_fabric_split"], "gb04": []}}
    assert doc["rack"]["files"] == {"topology-block.conf": str(report / "topology-block.conf"),
                                    "topology_block": str(conf)}
    assert doc["rack"]["left_out"] == ["gb03: FAILs its checks (rack nvl72-a)"]
    assert [r["code"] for r in doc["hosts"]["gb03"]["reasons"]] == ["rack_fabric_split"]
    assert "rack: rack_fabric_split: gb03 is the odd tray out of rack nvl72-a" in said
    assert (f"rack: wrote {conf} (Slurm 24.05+ topology/block): run `scontrol reconfigure` for slurmctld to "
            "load it") in said


def test_slurm_verify_dry_run_leaves_the_controllers_block_file_alone(monkeypatch, tmp_path):
    conf = tmp_path / "topology.conf.controller"
    conf.write_text("BlockName=old Nodes=x\n")
    code, got, drained, said = run_verify(monkeypatch, tmp_path, rack(odd="gb03"), dict.fromkeys(HOSTS, "nvl72-a"),
                                          topology_block=str(conf), dry_run=True)
    assert code == 2 and conf.read_text() == "BlockName=old Nodes=x\n"
    assert (tmp_path / "report" / "topology-block.conf").exists()
    assert f"rack: dry run: {conf} not written (the report directory's topology-block.conf is)" in said


def test_slurm_verify_without_imex_has_no_rack_section(monkeypatch, tmp_path):
    code, got, drained, said = run_verify(monkeypatch, tmp_path, rack(odd="gb03"), dict.fromkeys(HOSTS))
    assert code == 0 and drained == {} and "rack:" not in said
    report = tmp_path / "report"
    assert not (report / "topology-block.conf").exists()
    assert "rack" not in json.loads((report / "ccr-report.json").read_text())


def test_the_topology_block_option_reaches_the_options(monkeypatch, tmp_path, capsys):
    from ccrhost.cli import entry

    seen = []
    monkeypatch.setattr("ccrhost.fleet.slurm.run_verify", lambda opts, stream=None: seen.append(opts) or (0, {}, {}))
    with pytest.raises(SystemExit) as done:
        entry(["slurm", "verify", "-p", "gpu", "--topology-block", str(tmp_path / "topology.conf")])
    assert done.value.code == 0 and seen[0].topology_block == str(tmp_path / "topology.conf")
    assert seen[0].topology_conf is None
    with pytest.raises(SystemExit) as done:
        entry(["slurm", "verify", "-p", "gpu", "--topology-block", str(tmp_path)])  # a directory
    assert done.value.code == 3 and len(seen) == 1  # a usage error: nothing checked
    assert f"Invalid value for '--topology-block': File '{tmp_path}' is a directory." in capsys.readouterr().err


# -- the deploy's fleet report ---------------------------------------------------------------

def test_the_deploys_fleet_report_judges_the_racks_and_writes_the_block_file(tmp_path):
    import io

    from ccrhost.fleet.report import FleetReport

    verdicts = rack(odd="gb03")
    report = FleetReport(str(tmp_path))
    for name, v in verdicts.items():
        report.record(name, v, executed=True, settings=settings())
    out = io.StringIO()
    assert set(report.finish(out)) == {"json", "xml", "txt", "html"}
    assert (tmp_path / "topology-block.conf").read_text() == HEAD + (
        "BlockName=nvl72-a Nodes=gb[01-02,04]\n# left out: gb03: FAILs its checks (rack nvl72-a)\n")
    doc = json.loads((tmp_path / "ccr-report.json").read_text())
    assert doc["rack"]["racks"]["nvl72-a"]["gb03"] == ["rack_fabric_split"]
    assert doc["hosts"]["gb03"]["status"] == "FAIL" and doc["hosts"]["gb01"]["status"] == "OK"
    assert "rack: rack_fabric_split: gb03 is the odd tray out of rack nvl72-a" in out.getvalue()


def test_the_deploys_fleet_report_without_imex_writes_no_block_file(tmp_path):
    from ccrhost.fleet.report import FleetReport

    report = FleetReport(str(tmp_path))
    for name, v in rack(odd="gb03").items():
        report.record(name, v, settings=settings(on=False))
    report.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ccr-report.html", "ccr-report.json", "ccr-report.txt",
                                                          "ccr-report.xml"]
    assert "rack" not in json.loads((tmp_path / "ccr-report.json").read_text())


def test_the_block_file_goes_to_slurm_only_when_every_node_was_judged(monkeypatch, tmp_path):
    """A busy or drained tray is not checked by slurm verify: a block file without it would keep it from every
    job, so the controller's file is left as it was and the run says which nodes were missing."""
    from ccrhost.fleet import rack_report as rr

    conf = tmp_path / "controller-topology.conf"
    conf.write_text("BlockName=old Nodes=x\n")
    verdicts = rack(odd="gb03")
    settings = {h: validate_host(h, {"imex_enable": True, "imex_rack": "nvl72-a"}) for h in verdicts}
    said = []
    got = rr.build(verdicts, settings, tmp_path, said.append, topology_block=str(conf), cluster=[*verdicts, "gb09"])
    assert conf.read_text() == "BlockName=old Nodes=x\n" and (tmp_path / "topology-block.conf").exists()
    assert got.failed["topology_block"].startswith("not written: 1 node(s) of the cluster were not judged here (gb09)")
    assert said[-1] == f"rack: {conf} {got.failed['topology_block']}"
