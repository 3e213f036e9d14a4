"""The fabric's wiring (issue 48): each parser from verbatim samples
(tests/fixtures/wiring/README.md), the plan's settings, and each judge."""

import json
import subprocess
from pathlib import Path

import pytest

from ccrhost.model import wiring as wm
from ccrhost.model.status import FAIL, UNKNOWN
from ccrhost.node import wiring as node_wiring
from ccrhost.probes import wiring as probe
from ccrhost.settings.validate import InventoryDataError, validate_host

FIX = Path(__file__).parent / "fixtures" / "wiring"


def lines(name):
    return (FIX / name).read_text().splitlines()


def codes(reasons):
    return [(r.level, r.code) for r in reasons]


# -- lldpctl -f json ---------------------------------------------------------------------------

def test_one_neighbour_is_an_object_keyed_by_the_interface():
    got = probe.parse_lldp_json((FIX / "lldpctl-json-one-neighbour.lldpd-test_lldpcli.json").read_text())
    assert got == {"eth0": [wm.Neighbour("lldp", "ns-2.example.com", "00:00:00:00:00:02", "eth1")]}


def test_several_neighbours_are_a_list_and_one_interface_may_repeat():
    got = probe.parse_lldp_json(
        (FIX / "lldpctl-json-two-neighbours-one-interface.sonic-utilities.json").read_text())
    # a mac port id is no port name: the description names it
    assert got == {"Ethernet0": [wm.Neighbour("lldp", "dummy", "00:00:00:00:00:01", "First MAC"),
                                 wm.Neighbour("lldp", "dummy", "00:00:00:00:00:02", "Second MAC")]}


def test_no_neighbour_at_all_and_a_chassis_without_a_name():
    assert probe.parse_lldp_json('{\n  "lldp": {\n    \n   }\n}\n') == {}
    doc = {"lldp": {"interface": {"eth3": {"via": "LLDP", "chassis": {"id": {"type": "mac", "value": "aa:bb:cc:00:00:01"}},
                                            "port": {"id": {"type": "ifname", "value": "Ethernet12"}}}}}}
    assert probe.parse_lldp_json(json.dumps(doc)) == {
        "eth3": [wm.Neighbour("lldp", None, "aa:bb:cc:00:00:01", "Ethernet12")]}


@pytest.mark.parametrize("text, says", [
    ("", "printed no JSON"),
    ('{"lldp": ', "not JSON"),
    ('{"local-chassis": {}}', "no lldp object"),
    ('{"lldp": {"interface": ["eth0"]}}', "an interface entry 'eth0'"),
])
def test_lldp_output_it_never_prints_is_refused(text, says):
    with pytest.raises(probe.WiringFormatError, match=says):
        probe.parse_lldp_json(text)


def test_lldpd_not_running_is_unknown_with_the_tools_words():
    out = ["@@lldp", *lines("lldpctl-not-running.lldpd-issue-457.txt"), "@@lldprc 1", "@@ib",
           "mlx5_0/ports/1/link_layer:Ethernet", "@@net", "mlx5_0/device/net/ens1np0"]
    reading = probe.parse_command_output(out)
    # the log line's time is dropped: the same fault reads the same each time (a drain reason, the deploy)
    assert reading.lldp_error.startswith("lldpctl -f json exit 1: [WARN/control] unable to connect to socket")
    assert reading.lldp_error.endswith("Unable to connect to lldpd daemon (is lldpd running?)")
    reasons = wm.check_wiring(reading, wm.WiringPolicy(enabled=True), [("mlx5_0", 1)])
    assert codes(reasons) == [(UNKNOWN, "wiring_unreadable")]
    assert "NIC mlx5_0 port 1 (ens1np0): its LLDP neighbour cannot be read: lldpctl -f json exit 1" in reasons[0].message


def test_lldpctl_missing_or_hung():
    assert probe.parse_command_output(["@@lldp", "@@lldprc none"]).lldp_error == \
        "lldpctl is not installed (Debian/Ubuntu package lldpd)"
    assert probe.parse_command_output(["@@lldp", "@@lldprc 124"]).lldp_error == \
        "lldpctl -f json did not answer within 5 s"


# -- infiniband-diags -------------------------------------------------------------------------------

def test_smpquery_nodeinfo_of_a_switch_gives_its_guid_and_the_port_the_cable_is_in():
    assert probe.parse_nodeinfo(lines("smpquery-nodeinfo-switch.ncar-cable-tool.txt")) == \
        wm.Neighbour("ib", None, "0xe41d2d03004bef70", "17", "Switch")


def test_smpquery_nodeinfo_of_an_hca():
    assert probe.parse_nodeinfo(lines("smpquery-nodeinfo-ca.ompi-users-2009-05.txt")) == \
        wm.Neighbour("ib", None, "0x0002c90300336fe0", "1", "Channel Adapter")


def test_smpquery_nodedesc_and_sminfo():
    assert probe.parse_nodedesc(lines("smpquery-nodedesc.ops-notes.txt")) == "b1nstcx02 HCA-1"
    assert probe.parse_sminfo(lines("sminfo-master.ops-notes.txt")) == \
        wm.SmInfo(37, "0x7cfe90030016aef1", 14, "SMINFO_MASTER")


def test_infiniband_diags_output_it_never_prints_is_refused():
    with pytest.raises(probe.WiringFormatError, match="smpquery nodeinfo printed"):
        probe.parse_nodeinfo(lines("perfquery-no-umad.infiniband_exporter-issue-26.txt"))
    with pytest.raises(probe.WiringFormatError, match="Guid 'zz'"):
        probe.parse_nodeinfo(["# Node info: Lid 4", "Guid:............................zz",
                              "LocalPort:.......................1"])
    with pytest.raises(probe.WiringFormatError, match="smpquery nodedesc printed"):
        probe.parse_nodedesc(["Node info"])
    with pytest.raises(probe.WiringFormatError, match="sminfo printed"):
        probe.parse_sminfo(["sminfo: sm lid x"])


def test_guids_are_written_one_way():
    assert probe.guid("0x2c90200259201") == "0x0002c90200259201"
    assert probe.guid("0c42:a103:0040:29A0") == "0x0c42a103004029a0"
    assert probe.guid("0x1234567890abcdef1") is None


# -- the whole snippet -----------------------------------------------------------------------------

def test_a_roce_node_reads_each_nics_netdev_neighbour_gids_and_pkeys():
    r = probe.parse_command_output(lines("node-roce.constructed.txt"))
    assert r.lldp_error is None and r.error is None
    assert sorted(r.nics) == ["mlx5_0/1", "mlx5_1/1", "mlx5_2/1", "mlx5_3/1"]
    n0 = r.nics["mlx5_0/1"]
    assert (n0.link_layer, n0.netdev, n0.node_guid, n0.pkeys, n0.lid) == \
        ("Ethernet", "ens1np0", "0x0c42a103004029a0", [0xFFFF], 0)
    assert n0.neighbours == [wm.Neighbour("lldp", "leaf-r1-a", "1c:34:da:00:00:01", "swp7")]
    assert n0.gids[3] == ("0000:0000:0000:0000:0000:ffff:0a6c:a424", "RoCE v2")
    assert sorted(r.nics["mlx5_1/1"].gids) == [0, 1]
    assert r.nics["mlx5_3/1"].neighbours == []


def test_an_infiniband_node_reads_the_switch_its_port_and_the_sm_and_a_failed_query_is_the_nics_error():
    r = probe.parse_command_output(lines("node-ib.constructed.txt"))
    assert r.lldp_error == "lldpctl is not installed (Debian/Ubuntu package lldpd)"
    n0, n1 = r.nics["mlx5_0/1"], r.nics["mlx5_1/1"]
    assert n0.neighbours == [wm.Neighbour("ib", "b1nstcx02 HCA-1", "0xe41d2d03004bef70", "17", "Switch")]
    assert (n0.lid, n0.sm_lid, n0.pkeys, n0.sm) == (0x30, 0x25, [0x8001, 0xFFFF],
                                                     wm.SmInfo(37, "0x7cfe90030016aef1", 14, "SMINFO_MASTER"))
    assert n1.neighbours == [] and n1.sm is None
    assert n1.error == ("smpquery nodeinfo exit 255: ibwarn: [299010] mad_rpc_open_port: client_register for mgmt 1 "
                        "failed smpquery: iberror: failed: Failed to open 'mlx5_1' port '1'")
    # lldpd missing says nothing of InfiniBand ports
    reasons = wm.check_wiring(r, wm.WiringPolicy(enabled=True), [("mlx5_0", 1), ("mlx5_1", 1)])
    assert codes(reasons) == [(UNKNOWN, "wiring_unreadable")]
    assert reasons[0].nic == "mlx5_1"


def test_a_sysfs_value_out_of_format_is_refused_naming_the_file():
    with pytest.raises(probe.WiringFormatError, match="pkeys/0: expected 0x and four hex digits, got 'ffff'"):
        probe.parse_command_output(["@@ib", "mlx5_0/ports/1/pkeys/0:ffff"])
    with pytest.raises(probe.WiringFormatError, match="gid_attrs/types/3"):
        probe.parse_command_output(["@@ib", "mlx5_0/ports/1/gid_attrs/types/3:RoCE v3"])


def test_the_snippet_is_valid_shell_and_asks_only_the_devices_given():
    for devices in ((), ("mlx5_0", "mlx5_1")):
        script = probe.command(devices)
        assert subprocess.run(["sh", "-n", "-c", script]).returncode == 0
    assert 'case " mlx5_0 mlx5_1 " in' in probe.command(("mlx5_0", "mlx5_1"))
    assert 'smpquery -C "$d" -P "$n" -D nodeinfo "0,$n"' in probe.command()


def test_the_snippet_run_by_sh_over_a_sysfs_tree_and_fake_tools(tmp_path, monkeypatch):
    """The snippet itself, end to end: a /sys/class/infiniband tree in
    tmp_path and lldpctl, smpquery and sminfo that print the samples."""
    root = tmp_path / "ib"
    files = {
        "mlx5_0/node_guid": "c470:bd03:00cf:4960", "mlx5_0/ports/1/link_layer": "InfiniBand",
        "mlx5_0/ports/1/state": "4: ACTIVE", "mlx5_0/ports/1/lid": "0x30", "mlx5_0/ports/1/sm_lid": "0x25",
        "mlx5_0/ports/1/pkeys/0": "0xffff", "mlx5_0/ports/1/pkeys/1": "0x8001", "mlx5_0/ports/1/pkeys/2": "0x0000",
        "mlx5_0/ports/1/gids/0": "fe80:0000:0000:0000:c470:bd03:00cf:4960",
        "mlx5_1/node_guid": "0c42:a103:0040:29a0", "mlx5_1/ports/1/link_layer": "Ethernet",
        "mlx5_1/ports/1/gids/1": "fe80:0000:0000:0000:0e42:a1ff:fe40:29a0",
        "mlx5_1/ports/1/gids/2": "0000:0000:0000:0000:0000:0000:0000:0000",
        "mlx5_1/ports/1/gid_attrs/types/1": "RoCE v2",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    (root / "mlx5_0/device/net/ibp12s0").mkdir(parents=True)
    (root / "mlx5_1/device/net/ens2np0").mkdir(parents=True)
    one = (FIX / "lldpctl-json-one-neighbour.lldpd-test_lldpcli.json").read_text().replace('"eth0"', '"ens2np0"')
    (tmp_path / "lldp.json").write_text(one)
    info = tmp_path / "nodeinfo.txt"
    info.write_text("\n".join(["# Node info: DR path slid 0; dlid 0; 0,1",
                               *lines("smpquery-nodeinfo-switch.ncar-cable-tool.txt")[1:]]) + "\n")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    tools = {
        "lldpctl": f'[ "$*" = "-f json" ] || exit 3; cat {tmp_path / "lldp.json"}',
        "smpquery": f'[ "$1 $2 $3 $4 $5" = "-C mlx5_0 -P 1 -D" ] && [ "$7" = "0,1" ] || exit 3\n'
                    f'case $6 in nodeinfo) cat {info};; nodedesc) cat {FIX / "smpquery-nodedesc.ops-notes.txt"};; '
                    "*) exit 3;; esac",
        "sminfo": f'cat {FIX / "sminfo-master.ops-notes.txt"}',
    }
    for name, body in tools.items():
        (bin_ / name).write_text("#!/bin/sh\n" + body + "\n")
        (bin_ / name).chmod(0o755)
    monkeypatch.setattr(probe, "IB_ROOT", str(root))
    out = subprocess.run(["sh", "-c", probe.command()], capture_output=True, text=True, timeout=60,
                         env={"PATH": f"{bin_}:/usr/bin:/bin"}).stdout
    r = probe.parse_command_output(out.splitlines())
    assert r.lldp_error is None
    ib, eth = r.nics["mlx5_0/1"], r.nics["mlx5_1/1"]
    assert (ib.link_layer, ib.netdev, ib.pkeys, ib.lid, ib.node_guid) == \
        ("InfiniBand", "ibp12s0", [0x8001, 0xFFFF], 0x30, "0xc470bd0300cf4960")
    assert ib.neighbours == [wm.Neighbour("ib", "b1nstcx02 HCA-1", "0xe41d2d03004bef70", "17", "Switch")]
    assert ib.sm == wm.SmInfo(37, "0x7cfe90030016aef1", 14, "SMINFO_MASTER")
    assert (eth.netdev, eth.gids, eth.pkeys) == ("ens2np0", {1: ("fe80:0000:0000:0000:0e42:a1ff:fe40:29a0",
                                                                 "RoCE v2")}, None)
    assert eth.neighbours == [wm.Neighbour("lldp", "ns-2.example.com", "00:00:00:00:00:02", "eth1")]
    # asked for mlx5_1 only: no subnet management query at all
    out = subprocess.run(["sh", "-c", probe.command(("mlx5_1",))], capture_output=True, text=True, timeout=60,
                         env={"PATH": f"{bin_}:/usr/bin:/bin"}).stdout
    assert "@@nodeinfo" not in out


# -- the judges ----------------------------------------------------------------------------------------

ROCE_NICS = [("mlx5_0", 1), ("mlx5_1", 1), ("mlx5_2", 1), ("mlx5_3", 1)]


def roce():
    return probe.parse_command_output(lines("node-roce.constructed.txt"))


def policy(**kw):
    return wm.WiringPolicy(enabled=True, **kw)


def test_the_rail_plan_names_the_nic_the_leaf_it_must_reach_and_what_it_found():
    rails = (wm.RailPlan("leaf-r1-a"), wm.RailPlan("leaf-r1-b"), wm.RailPlan("leaf-r1-c"), wm.RailPlan("leaf-r1-d"))
    reasons = wm.check_wiring(roce(), policy(rails=rails, distinct_leaves=False), ROCE_NICS)
    assert codes(reasons) == [(FAIL, "wiring_wrong_rail"), (FAIL, "wiring_no_neighbour")]
    assert reasons[0].message == ("NIC mlx5_2 port 1 (ens3np0) (rail 2) must reach leaf leaf-r1-c; it reaches "
                                  "leaf-r1-b port swp8")
    assert (reasons[0].nic, reasons[0].port) == ("mlx5_2", 1)
    assert reasons[1].message == "NIC mlx5_3 port 1 (ens4np0) (rail 3): lldpd has no LLDP neighbour on it"


def test_a_port_range_and_guids_in_the_plan():
    rails = (wm.RailPlan(guids=("1c:34:da:00:00:01",), ports=(1, 6)),)
    reasons = wm.check_wiring(roce(), policy(rails=rails, distinct_leaves=False), ROCE_NICS[:1])
    assert reasons[0].message == ("NIC mlx5_0 port 1 (ens1np0) (rail 0) must reach leaf GUID 1c:34:da:00:00:01 "
                                  "port 1-6; it reaches leaf-r1-a port swp7")
    rails = (wm.RailPlan(guids=("1c:34:da:00:00:01",), ports=(7, 7)),)
    assert wm.check_wiring(roce(), policy(rails=rails, distinct_leaves=False), ROCE_NICS[:1]) == []


def test_two_nics_on_one_leaf():
    reasons = wm.check_wiring(roce(), policy(), ROCE_NICS)
    assert codes(reasons) == [(FAIL, "wiring_no_neighbour"), (FAIL, "wiring_shared_leaf")]
    assert reasons[1].message == ("NICs mlx5_1 (rail 1), mlx5_2 (rail 2) all reach leaf leaf-r1-b: each rail must "
                                  "reach a leaf of its own")
    # the same plan entry for both rails: the site put them there
    same = wm.RailPlan("leaf-r1-b")
    rails = (wm.RailPlan("leaf-r1-a"), same, same)
    assert codes(wm.check_wiring(roce(), policy(rails=rails), ROCE_NICS[:3])) == []


def test_the_roce_v2_gid_at_the_configured_index():
    reasons = wm.check_wiring(roce(), policy(gid_index=3, distinct_leaves=False), ROCE_NICS[:3])
    assert codes(reasons) == [(FAIL, "wiring_gid_missing")]
    assert reasons[0].message == ("NIC mlx5_1 port 1 (ens2np0): GID index 3 holds no GID, not a RoCE v2 GID "
                                  "(RoCE v2 GIDs at: 1: RoCE v2)")
    reasons = wm.check_wiring(roce(), policy(gid_index=2, distinct_leaves=False), ROCE_NICS[:1])
    assert reasons[0].message == ("NIC mlx5_0 port 1 (ens1np0): GID index 2 holds 0000:0000:0000:0000:0000:ffff:"
                                  "0a6c:a424 of type IB/RoCE v1, not a RoCE v2 GID (RoCE v2 GIDs at: 1: RoCE v2, "
                                  "3: RoCE v2)")


def test_the_sites_pkey_as_a_full_member():
    r = probe.parse_command_output(lines("node-ib.constructed.txt"))
    r.nics["mlx5_1/1"].error = None
    r.nics["mlx5_1/1"].neighbours = list(r.nics["mlx5_0/1"].neighbours)
    nics = [("mlx5_0", 1), ("mlx5_1", 1)]
    reasons = wm.check_wiring(r, policy(pkey=0x8001, distinct_leaves=False), nics)
    assert codes(reasons) == [(FAIL, "wiring_pkey_missing")]
    assert reasons[0].message == ("NIC mlx5_1 port 1 (ibp13s0): the site's P_Key 0x8001 is not in its P_Key table "
                                  "(only as a limited member): 0x0001, 0xffff")
    assert wm.check_wiring(r, policy(pkey=0x0001, distinct_leaves=False), nics) == []  # limited asked: both carry it
    assert codes(wm.check_wiring(r, policy(pkey=0x8002, distinct_leaves=False), nics)) == \
        [(FAIL, "wiring_pkey_missing")] * 2
    assert wm.pkey_wanted([0xFFFF], 0xFFFF) and not wm.pkey_wanted([0x7FFF], 0xFFFF)


def test_off_unreadable_and_a_nic_the_probe_did_not_print():
    assert wm.check_wiring(wm.WiringReading(error="x"), wm.WiringPolicy(), ROCE_NICS) == []
    assert codes(wm.check_wiring(wm.WiringReading(error="timed out"), policy(), ROCE_NICS)) == \
        [(UNKNOWN, "wiring_unreadable")]
    reasons = wm.check_wiring(roce(), policy(distinct_leaves=False), [("mlx5_9", 1)])
    assert reasons[0].message == "NIC mlx5_9 port 1: the wiring probe printed nothing for it"


def test_rails_follow_device_names_as_people_sort_them():
    assert wm.compute_nics([("mlx5_10", 1), ("mlx5_2", 1), ("mlx5_1", 2), ("mlx5_1", 1)]) == \
        [("mlx5_1", 1), ("mlx5_1", 2), ("mlx5_2", 1), ("mlx5_10", 1)]


# -- stored and read back by age -----------------------------------------------------------------------

def test_the_reading_is_stored_and_judged_by_its_age(tmp_path):
    path = str(tmp_path / "active.json")
    node_wiring.run_and_store(path, 600, read=lambda devices: roce(), clock=lambda: 1000.0)
    rails = (wm.RailPlan("leaf-r1-a"), wm.RailPlan("leaf-r1-b"), wm.RailPlan("leaf-r1-c"))
    fresh = node_wiring.stored_reading(path, clock=lambda: 1500.0)
    direct = wm.check_wiring(roce(), policy(rails=rails), ROCE_NICS)
    assert wm.check_stored_wiring(fresh, policy(rails=rails), ROCE_NICS) == direct
    old = node_wiring.stored_reading(path, clock=lambda: 1601.0)
    reasons = wm.check_stored_wiring(old, policy(rails=rails), ROCE_NICS)
    assert codes(reasons) == [(UNKNOWN, "wiring_stale")]
    assert reasons[0].message == ("the fabric's wiring: the stored wiring reading is 601 s old, valid for 600 s: "
                                  "read it again")


def test_nothing_stored_and_a_damaged_store(tmp_path):
    path = tmp_path / "active.json"
    assert codes(wm.check_stored_wiring(node_wiring.stored_reading(str(path)), policy(), ROCE_NICS)) == \
        [(UNKNOWN, "wiring_never_read")]
    path.write_text("{not json")
    assert codes(wm.check_stored_wiring(node_wiring.stored_reading(str(path)), policy(), ROCE_NICS)) == \
        [(UNKNOWN, "wiring_unreadable")]
    path.write_text(json.dumps({"version": 1, "results": {"wiring/node": {
        "check": "wiring", "mode": "node", "status": "OK", "code": None, "message": "read", "measured_at": 1.0,
        "valid_for": 1e12, "data": {"nics": {"mlx5_0/1": {"port": 1}}}}}}))
    reasons = wm.check_stored_wiring(node_wiring.stored_reading(str(path)), policy(), ROCE_NICS)
    assert codes(reasons) == [(UNKNOWN, "wiring_unreadable")]
    assert "not a stored wiring reading" in reasons[0].message


def test_a_probe_that_failed_is_stored_as_unknown(tmp_path):
    stored = node_wiring.run_and_store(str(tmp_path / "a.json"), 60, read=lambda d: wm.WiringReading(error="hung"),
                                       clock=lambda: 5.0)
    assert (stored.status, stored.code, stored.message) == (UNKNOWN, "wiring_unreadable", "hung")


# -- the plan in the settings --------------------------------------------------------------------------

def test_the_plan_from_the_settings():
    s = validate_host("n1", {"wiring_enable": True, "wiring_pkey": "0x8001", "wiring_gid_index": 3,
                             "wiring_rails": [{"leaf": "leaf-r1-*", "ports": "1-32"},
                                              {"leaf_guids": ["0xE41d2d03004bef70", "0x2c90200259201"]}]})
    assert s.wiring_policy() == wm.WiringPolicy(
        True, (wm.RailPlan("leaf-r1-*", (), (1, 32)), wm.RailPlan(None, ("0xe41d2d03004bef70", "0x0002c90200259201"))),
        True, 0x8001, 3)


@pytest.mark.parametrize("data, error", [
    ({"wiring_rails": [{"leaf": "a", "leaf_guids": ["0x1"]}]},
     "n1: wiring_rails = ({'leaf': 'a', 'leaf_guids': ['0x1']},): rail 0: give leaf (a name pattern) or "
     "leaf_guids (a list of GUIDs), one of them"),
    ({"wiring_rails": [{"leaf": "a", "port": "3"}]},
     "n1: wiring_rails = ({'leaf': 'a', 'port': '3'},): rail 0: unknown key 'port'; allowed: leaf, leaf_guids, ports"),
    ({"wiring_rails": [{"leaf": "a", "ports": "9-3"}]},
     "n1: wiring_rails = ({'leaf': 'a', 'ports': '9-3'},): rail 0: ports '9-3': the range's end is below its start"),
    ({"wiring_rails": [{"leaf_guids": ["zz"]}]},
     "n1: wiring_rails = ({'leaf_guids': ['zz']},): rail 0 leaf_guids = 'zz': allowed: a list of GUIDs (0x and 1 "
     "to 16 hex digits) or chassis MACs (aa:bb:cc:dd:ee:ff)"),
    ({"wiring_rails": "leaf"},
     "n1: wiring_rails = 'leaf': allowed: a list of rails, each {leaf: PATTERN} or {leaf_guids: [GUID, ...]}, "
     "with optional ports: N-M"),
    ({"wiring_pkey": "0x8000"},
     "n1: wiring_pkey = '0x8000': 0x8000 is no partition key: its low 15 bits are 0 (allowed: 0x0001 to 0x7fff, "
     "with 0x8000 added for full membership)"),
    ({"wiring_pkey": "8001"}, "n1: wiring_pkey = '8001': must match ^0x[0-9A-Fa-f]{4}$"),
    ({"wiring_gid_index": 300}, "n1: wiring_gid_index = 300: allowed: integers 0 to 255"),
    ({"wiring_leaf_suspect_fraction": 0}, "n1: wiring_leaf_suspect_fraction = 0: allowed: 0.01 to 1"),
])
def test_a_bad_plan_names_the_key_the_value_and_what_is_allowed(data, error):
    with pytest.raises(InventoryDataError) as exc:
        validate_host("n1", data)
    assert str(exc.value) == error


def test_lldp_json_with_a_warning_after_it_and_nesting_too_deep():
    text = (FIX / "lldpctl-json-one-neighbour.lldpd-test_lldpcli.json").read_text()
    assert list(probe.parse_lldp_json(text + "2024-01-01T00:00:00 [WARN/lldpctl] something\n")) == ["eth0"]
    with pytest.raises(probe.WiringFormatError, match="not JSON"):
        probe.parse_lldp_json("{" + '"a":[' * 100000)


def test_an_infiniband_port_without_a_pkey_read_is_unknown_not_a_missing_key():
    r = probe.parse_command_output(["@@ib", "mlx5_0/ports/1/link_layer:InfiniBand", "@@nodeinfo mlx5_0 1",
                                    *["# Node info: DR path slid 0; dlid 0; 0,1",
                                      *lines("smpquery-nodeinfo-switch.ncar-cable-tool.txt")[1:]],
                                    "@@nodeinforc 0"])
    assert r.nics["mlx5_0/1"].pkeys is None
    reasons = wm.check_wiring(r, policy(pkey=0x8001), [("mlx5_0", 1)])
    assert [(x.code, x.message) for x in reasons] == [
        ("wiring_unreadable", "NIC mlx5_0 port 1: its P_Key table was not read")]


# -- review fixes: what is read again, what is UNKNOWN, what a port number is -------------------

def whole_roce():
    return wm.WiringReading({f"mlx5_{i}/1": wm.NicWiring(f"mlx5_{i}", 1, "Ethernet", f"ens{i + 1}np0",
                                                          [wm.Neighbour("lldp", f"leaf-r{i}", None, "swp1")])
                             for i in range(2)})


def test_a_reading_with_any_port_unread_or_alone_is_read_again_at_the_next_health_check(tmp_path):
    path = str(tmp_path / "active.json")
    node_wiring.run_and_store(path, 86400, read=lambda devices: whole_roce(), clock=lambda: 1000.0)
    assert not node_wiring.due(path, 86400, clock=lambda: 2000.0)  # whole and young: as its age asks
    assert node_wiring.due(path, 86400, clock=lambda: 1000.0 + 43200)  # half its validity
    quiet = whole_roce()
    quiet.nics["mlx5_1/1"].neighbours = []  # lldpd up before the switch's first frame, or a cable being fixed
    node_wiring.run_and_store(path, 86400, read=lambda devices: quiet, clock=lambda: 1000.0)
    assert node_wiring.due(path, 86400, clock=lambda: 1001.0)
    down = whole_roce()
    down.lldp_error = "lldpctl -f json exit 1: ... (is lldpd running?)"
    node_wiring.run_and_store(path, 86400, read=lambda devices: down, clock=lambda: 1000.0)
    assert node_wiring.due(path, 86400, clock=lambda: 1001.0)


def test_an_unreadable_wiring_says_nothing_against_the_node():
    from ccrhost.model.reasons import is_proof

    assert is_proof("wiring_unreadable") and is_proof("wiring_never_read") and is_proof("wiring_stale")
    assert not is_proof("wiring_no_neighbour") and not is_proof("wiring_wrong_rail")


def test_an_infiniband_port_that_is_down_has_no_neighbour_and_one_that_is_up_but_unasked_is_unknown():
    nic = wm.NicWiring("mlx5_0", 1, "InfiniBand", "ibp1s0", [], "smpquery nodeinfo exit 255: ...", state="DOWN")
    reading = wm.WiringReading({"mlx5_0/1": nic})
    reasons = wm.check_wiring(reading, policy(), [("mlx5_0", 1)])
    assert codes(reasons) == [(FAIL, "wiring_no_neighbour")]
    assert reasons[0].message == ("NIC mlx5_0 port 1 (ibp1s0) (rail 0): the port is DOWN: no switch at the end of "
                                  "its cable")
    nic.state = "ACTIVE"
    assert codes(wm.check_wiring(reading, policy(), [("mlx5_0", 1)])) == [(UNKNOWN, "wiring_unreadable")]


def test_no_lldp_frame_on_any_port_is_unknown_not_a_failure_per_port():
    reading = whole_roce()
    for nic in reading.nics.values():
        nic.neighbours = []
    reasons = wm.check_wiring(reading, policy(), [("mlx5_0", 1), ("mlx5_1", 1)])
    assert codes(reasons) == [(UNKNOWN, "wiring_unreadable")]
    assert reasons[0].message.startswith("lldpd runs but has no LLDP neighbour on any compute port (ens1np0, "
                                         "ens2np0)")
    reading.nics["mlx5_0/1"].neighbours = [wm.Neighbour("lldp", "leaf-r0", None, "swp1")]  # one port hears: a cable
    assert codes(wm.check_wiring(reading, policy(), [("mlx5_0", 1), ("mlx5_1", 1)])) == [(FAIL, "wiring_no_neighbour")]


def test_a_gid_whose_type_was_not_read_is_unknown():
    nic = wm.NicWiring("mlx5_0", 1, "Ethernet", "ens1np0", [wm.Neighbour("lldp", "leaf-r0", None, "swp1")],
                       gids={3: ("0000:0000:0000:0000:0000:ffff:c613:0001", None)})
    reasons = wm.check_wiring(wm.WiringReading({"mlx5_0/1": nic}), policy(gid_index=3), [("mlx5_0", 1)])
    assert codes(reasons) == [(UNKNOWN, "wiring_unreadable")]


@pytest.mark.parametrize("name, number", [("swp12", 12), ("swp12s2", 12), ("Ethernet48", 48), ("eth3", 3),
                                          ("1/1/17", 17), ("Eth1/5/2", 2), (None, None)])
def test_a_leaf_port_number_from_its_name(name, number):
    assert wm.Neighbour("lldp", "leaf", None, name).port_number() == number


def test_a_switch_known_by_its_guid_alone_is_judged_by_a_guid_plan_and_unknown_to_a_name_plan():
    out = lines("node-ib.constructed.txt")
    i = out.index("@@nodedescrc 0")
    out[i] = "@@nodedescrc 255"  # the node description query failed after nodeinfo answered
    reading = probe.parse_command_output(out)
    nic = reading.nics["mlx5_0/1"]
    assert nic.error is None and nic.neighbours[0].guid == "0xe41d2d03004bef70" and nic.neighbours[0].name is None
    by_guid = wm.RailPlan(guids=("0xe41d2d03004bef70",))
    assert wm.check_wiring(reading, policy(rails=(by_guid,)), [("mlx5_0", 1)]) == []
    reasons = wm.check_wiring(reading, policy(rails=(wm.RailPlan("leaf-*"),)), [("mlx5_0", 1)])
    assert codes(reasons) == [(UNKNOWN, "wiring_unreadable")]
    assert "the name of its switch (0xe41d2d03004bef70) was not read" in reasons[0].message
