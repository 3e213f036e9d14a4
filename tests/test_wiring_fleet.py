"""The fabric across nodes (issue 48): duplicate GUIDs and LIDs, subnet
managers, the cabling CSV, topology.conf, node labels and leaf_suspect,
from node readings built on tests/fixtures/wiring/."""

import copy
from pathlib import Path

from ccrhost.fleet import wiring as fw
from ccrhost.model import wiring as wm
from ccrhost.probes import wiring as probe

FIX = Path(__file__).parent / "fixtures" / "wiring"


def read(name):
    return probe.parse_command_output((FIX / name).read_text().splitlines())


def ib_fleet():
    """Three InfiniBand nodes as the fixture's node: distinct GUIDs and LIDs, one SM."""
    nodes = {}
    for i, name in enumerate(("gpu001", "gpu002", "gpu003")):
        r = read("node-ib.constructed.txt")
        for j, nic in enumerate(r.nics.values()):
            nic.node_guid = f"0x{i:04x}{j:012x}"
            nic.lid = 0x40 + 2 * i + j
            nic.error = None
            nic.neighbours = [wm.Neighbour("ib", f"leaf{j}", f"0x{j + 1:016x}", str(10 + i), "Switch")]
        nodes[name] = r
    return nodes


def roce_node(leaves, ports=None):
    """The RoCE fixture node with its four NICs on ``leaves`` (None: no neighbour)."""
    r = read("node-roce.constructed.txt")
    for k, (nic, leaf) in enumerate(zip(sorted(r.nics.values(), key=lambda n: n.device), leaves)):
        nic.neighbours = [] if leaf is None else [wm.Neighbour("lldp", leaf, None, (ports or {}).get(k, f"swp{k}"))]
    return r


PLAN = wm.WiringPolicy(True, tuple(wm.RailPlan(f"leaf-r{k}-*") for k in range(4)))


def test_a_healthy_fleet_has_no_findings():
    nodes = ib_fleet()
    assert fw.duplicate_guids(nodes) == [] and fw.lid_problems(nodes) == [] and fw.subnet_managers(nodes) == []


def test_a_guid_on_two_nodes():
    nodes = ib_fleet()
    nodes["gpu003"].nics["mlx5_1/1"].node_guid = nodes["gpu001"].nics["mlx5_0/1"].node_guid
    assert fw.duplicate_guids(nodes) == [fw.Finding(
        "duplicate_guid", "node GUID 0x0000000000000000 on gpu001 mlx5_0, gpu003 mlx5_1", ("gpu001", "gpu003"))]


def test_zero_and_duplicate_lids():
    nodes = ib_fleet()
    nodes["gpu002"].nics["mlx5_0/1"].lid = 0
    nodes["gpu003"].nics["mlx5_0/1"].lid = nodes["gpu001"].nics["mlx5_1/1"].lid
    assert fw.lid_problems(nodes) == [
        fw.Finding("zero_lid", "gpu002 mlx5_0 port 1: LID 0 (no subnet manager has assigned it one)", ("gpu002",)),
        fw.Finding("duplicate_lid", "LID 65 on gpu001 mlx5_1 port 1, gpu003 mlx5_0 port 1", ("gpu001", "gpu003"))]


def test_two_master_subnet_managers_on_one_subnet():
    nodes = ib_fleet()
    gpu3 = nodes["gpu003"].nics["mlx5_0/1"]
    gpu3.sm, gpu3.sm_lid = wm.SmInfo(9, "0x0000000000000abc", 15, "SMINFO_MASTER"), 9
    nodes["gpu003"].nics["mlx5_1/1"].sm_lid = 9
    found = fw.subnet_managers(nodes)
    assert [f.kind for f in found] == ["several_sms"]
    assert found[0].message == (
        "subnet fe80:0000:0000:0000: 2 master subnet managers: the SM at LID 9 (0x0000000000000abc) seen by "
        "gpu003; the SM at LID 37 (0x7cfe90030016aef1) seen by gpu001, gpu002")
    assert found[0].nodes == ("gpu001", "gpu002", "gpu003")
    # a standby's answer is not a master: the port's sm_lid says which is
    gpu3.sm, gpu3.sm_lid = wm.SmInfo(9, "0x0000000000000abc", 15, "SMINFO_STANDBY"), 37
    nodes["gpu003"].nics["mlx5_1/1"].sm_lid = 37
    assert fw.subnet_managers(nodes) == []
    # two fabrics, two subnet prefixes: one master each is right
    for nic in nodes["gpu003"].nics.values():
        nic.sm, nic.sm_lid = None, 9
        nic.gids[0] = ("fe80:0000:0000:0001:c470:bd03:00cf:4960", None)
    assert fw.subnet_managers(nodes) == []


def test_the_cabling_diff_as_csv():
    nodes = {"gpu001": roce_node(["leaf-r0-a", "leaf-r1-a", "leaf-r2-a", "leaf-r3-a"]),
             "gpu002": roce_node(["leaf-r0-a", "leaf-r2-a", "leaf-r1-a", None])}
    nodes["gpu002"].nics["mlx5_0/1"].error = "smpquery nodeinfo exit 255: x"
    assert fw.cabling_csv(nodes, PLAN) == (
        "node,nic,rail,expected_leaf,found_leaf_port\n"
        "gpu002,mlx5_0/1,0,leaf leaf-r0-*,unreadable: smpquery nodeinfo exit 255: x\n"
        "gpu002,mlx5_1/1,1,leaf leaf-r1-*,leaf-r2-a:swp1\n"
        "gpu002,mlx5_2/1,2,leaf leaf-r2-*,leaf-r1-a:swp2\n"
        "gpu002,mlx5_3/1,3,leaf leaf-r3-*,no neighbour\n")
    every = fw.cabling_csv(nodes, PLAN, every=True).splitlines()
    assert len(every) == 9 and every[1] == "gpu001,mlx5_0/1,0,leaf leaf-r0-*,leaf-r0-a:swp0"


def test_hostlist_compression():
    assert fw.hostlist(["gpu003", "gpu001", "gpu002", "gpu007", "gpu010", "login", "gpu1"]) == \
        "gpu1,gpu[001-003,007,010],login"
    assert fw.hostlist(["n9", "n10", "n11"]) == "n9,n[10-11]"
    assert fw.hostlist(["a1"]) == "a1"


def test_topology_conf_places_each_node_under_its_first_good_leaf_and_leaves_out_failing_links():
    nodes = {"gpu001": roce_node(["leaf-r0-a", "leaf-r1-a", "leaf-r2-a", "leaf-r3-a"]),
             "gpu002": roce_node(["leaf-r0-a", "leaf-r1-a", "leaf-r2-a", "leaf-r3-a"]),
             "gpu003": roce_node(["leaf-r9-x", "leaf-r1-b", "leaf-r2-b", "leaf-r3-b"]),  # rail 0 miscabled
             "gpu004": roce_node([None, None, None, None]),
             "gpu005": roce_node(["MF0;leaf r0:MQM9700/U1", "leaf-r1-c", "leaf-r2-c", "leaf-r3-c"])}
    plan = wm.WiringPolicy(True, (wm.RailPlan("*leaf*r0*"), *PLAN.rails[1:]))
    assert fw.topology_conf(nodes, plan) == (
        "# topology.conf (topology/tree) from the nodes' discovered leaves (ccrhost fleet/wiring.py)\n"
        "# MF0_leaf_r0_MQM9700_U1: MF0;leaf r0:MQM9700/U1\n"
        "SwitchName=MF0_leaf_r0_MQM9700_U1 Nodes=gpu005\n"
        "SwitchName=leaf-r0-a Nodes=gpu[001-002]\n"
        "SwitchName=leaf-r1-b Nodes=gpu003\n"
        "SwitchName=fabric Switches=MF0_leaf_r0_MQM9700_U1,leaf-r0-a,leaf-r1-b\n"
        "# left out, no good link: gpu004\n")
    spines = {"spine-a": ("leaf-r0-*",)}
    conf = fw.topology_conf(nodes, plan, spines=spines).splitlines()
    assert conf[-3:] == ["SwitchName=spine-a Switches=leaf-r0-a",
                         "SwitchName=fabric Switches=MF0_leaf_r0_MQM9700_U1,leaf-r1-b,spine-a",
                         "# left out, no good link: gpu004"]


def test_topology_conf_of_one_leaf_needs_no_root_and_a_long_name_is_cut():
    nodes = {"n1": roce_node(["x" * 80, None, None, None])}
    conf = fw.topology_conf(nodes, wm.WiringPolicy(True)).splitlines()
    assert conf[1:] == [f"# {'x' * 64}: {'x' * 80}", f"SwitchName={'x' * 64} Nodes=n1"]


def test_kubernetes_labels_from_the_same_links():
    nodes = {"gpu003": roce_node(["leaf-r9-x", "leaf-r1-b", None, "MF0;leaf:r3"])}
    assert fw.node_labels(nodes, PLAN) == {"gpu003": {
        "ccrhost/rail1-leaf": "leaf-r1-b", "network.topology.nvidia.com/leaf": "leaf-r1-b"}}
    assert fw.node_labels(nodes, wm.WiringPolicy(True))["gpu003"]["ccrhost/rail3-leaf"] == "MF0_leaf_r3"
    assert fw.label_value("-_" + "a" * 70 + "_") == "a" * 61


def test_leaf_suspect_names_the_leaf_and_its_failing_nodes():
    leaves = {f"gpu{i:03d}": [(0, "leaf-a" if i <= 4 else "leaf-b"), (1, "leaf-c")] for i in range(1, 9)}
    now = 10_000.0
    failures = [fw.Failure("gpu001", "link_flap", now - 100), fw.Failure("gpu002", "link_flap", now - 50),
                fw.Failure("gpu003", "link_flap", now - 10), fw.Failure("gpu005", "link_flap", now - 10),
                fw.Failure("gpu004", "link_flap", now - 7200),      # outside the window
                fw.Failure("gpu006", "pause_storm", now - 10)]
    found = fw.leaf_suspect(failures, leaves, now, 3600, 0.6)
    assert found == [fw.Finding("leaf_suspect", "leaf leaf-a: 3 of its 4 nodes failed link_flap in the last 3600 s: "
                                "gpu001, gpu002, gpu003", ("gpu001", "gpu002", "gpu003"), "link_flap")]
    # leaf-c holds all eight: 4 of 8 is under 0.6, 5 of 8 is not; 4 of 8 is at 0.5
    assert [f.message.split(":")[0] for f in fw.leaf_suspect(failures + [fw.Failure("gpu007", "link_flap", now)],
                                                              leaves, now, 3600, 0.6)] == ["leaf leaf-a", "leaf leaf-c"]
    assert len(fw.leaf_suspect(failures, leaves, now, 3600, 0.5)) == 2
    assert fw.leaf_suspect(failures, leaves, now, 3600, 0.8) == []
    one = {"gpu001": [(0, "leaf-z")]}
    assert fw.leaf_suspect([fw.Failure("gpu001", "link_flap", now)], one, now, 60, 0.5) == []  # one node is its own
    assert len(fw.leaf_suspect([fw.Failure("gpu001", "link_flap", now)], one, now, 60, 0.5, min_nodes=1)) == 1


def test_node_leaves_leaves_out_an_unreadable_node():
    bad = copy.deepcopy(roce_node(["leaf-r0-a"] * 4))
    bad.error = "timed out"
    assert fw.node_leaves({"n1": bad}, PLAN) == {"n1": []}


def test_the_captured_plan_takes_each_leaf_to_the_rail_most_nics_reach_it_on():
    from ccrhost.fleet.wiring import captured_plan
    from ccrhost.model.wiring import Neighbour, NicWiring, WiringReading

    def node(*leaves):
        return WiringReading({f"mlx5_{i}/1": NicWiring(f"mlx5_{i}", 1, "Ethernet", f"ens{i}",
                                                        [Neighbour("lldp", f"leaf{leaf}", f"02:1f:00:0{leaf}:00:00",
                                                                   "swp1")] if leaf is not None else [])
                              for i, leaf in enumerate(leaves)})

    readings = {"node1": node(1, 0, 2), "node2": node(0, 1, 2), "node3": node(0, 1, None)}  # node1's 0 and 1 crossed
    rails, notes = captured_plan(readings)
    assert rails == [{"leaf_guids": ["02:1f:00:00:00:00"]}, {"leaf_guids": ["02:1f:00:01:00:00"]},
                     {"leaf_guids": ["02:1f:00:02:00:00"]}]
    assert notes == [
        "leaf 02:1f:00:00:00:00 is rail 0's (by 2 NIC(s)) but rail 1 reaches it at node1:mlx5_1/1: left out of rail 1",
        "leaf 02:1f:00:01:00:00 is rail 1's (by 2 NIC(s)) but rail 0 reaches it at node1:mlx5_0/1: left out of rail 0",
    ]
    # no neighbour at all on a rail: said, and its entry left empty for a person to fill
    rails, notes = captured_plan({"node3": node(0, 1, None)})
    assert rails[2] == {"leaf_guids": []} and notes == ["rail 2: no node has a neighbour on it: give its leaf by hand"]


def test_leaves_without_a_mac_or_guid_chassis_id_are_planned_by_name():
    from ccrhost.fleet.wiring import captured_plan
    from ccrhost.model.wiring import Neighbour, NicWiring, WiringReading

    def node(*chassis):  # LLDP chassis ids of subtype local: no MAC a plan's leaf_guids can take
        return WiringReading({f"mlx5_{i}/1": NicWiring(f"mlx5_{i}", 1, "Ethernet", f"ens{i}",
                                                        [Neighbour("lldp", name, f"id-{name}", "swp1")])
                              for i, name in enumerate(chassis)})

    rails, notes = captured_plan({"a": node("leaf-r0-a", "leaf-r1-a"), "b": node("leaf-r0-b", "leaf-r1-a")})
    assert rails == [{"leaf": "leaf-r0-*"}, {"leaf": "leaf-r1-a"}]
    assert notes == ["rail 0: leaves leaf-r0-a, leaf-r0-b have no MAC or GUID chassis id: the pattern 'leaf-r0-*' "
                     "stands for them; check that it matches no other rail's leaf"]
    from ccrhost.settings import validate_host

    assert validate_host("n", {"wiring_rails": rails}).wiring_policy().rails[0].leaf == "leaf-r0-*"
