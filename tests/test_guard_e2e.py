"""End to end: the SSH-path guard follows the real path on lab nodes whose
management link is a VLAN or a bridge over a RoCE port, whose default route
has a nexthop through one, or whose SSH connection sudo's env_reset hid;
and every host is in the fleet report with its verdict."""

import json
from xml.etree import ElementTree as ET

import pytest
from conftest import lab_inventory, lab_ssh, node_address, run_pyinfra, tree_snapshot

from ccrhost.probes.qos import parse_mlnx_qos

pytestmark = pytest.mark.lab

TAIL = ("Changing PFC toggles the port link and would cut this node off. Set qos_allow_ssh_interface: true for this "
        "host to allow it.")


def qos_of(lab, node):
    state = parse_mlnx_qos(lab_ssh(lab, node, "mlnx_qos -i ens1np0").stdout)
    return state["trust"], state["pfc"], tree_snapshot(lab.root(node) / "sys/class/net")


def test_the_guard_follows_vlan_bridge_multipath_and_env_reset(make_lab, tmp_path):
    lab = make_lab(nodes=5, faults=["node1:ssh_over=vlan", "node2:ssh_over=bridge", "node3:route_multipath",
                                    "node4:ssh_on_fabric"])
    # pyinfra's sudo runs `sudo -H -n sh -c ...`: env_reset drops $SSH_CONNECTION
    inventory = lab_inventory(tmp_path, per_node={"node4": {"_sudo": True}, "node5": {"_sudo": True}})
    before = {n: qos_of(lab, n) for n in ("node1", "node2", "node3", "node4")}
    run = run_pyinfra("deploys/rdma.py", inventory=inventory)
    assert run.rc == 1
    assert "Traceback" not in run.out and "internal exception" not in run.out
    a = {i: node_address(i) for i in range(1, 6)}
    expected = {
        1: f"ens1np0 carries this SSH connection ({a[1]}, from $SSH_CONNECTION) through ens1np0.100 -> ens1np0; "
           "ens1np0 carries a default route through ens1np0.100 -> ens1np0",
        2: f"ens1np0 carries this SSH connection ({a[2]}, from $SSH_CONNECTION) through br0 -> ens1np0; "
           "ens1np0 carries a default route through br0 -> ens1np0",
        3: "ens2np0 carries a default route",
        4: f"ens1np0 carries this SSH connection ({a[4]}, from socket table); ens1np0 carries a default route",
    }
    for i, hits in expected.items():
        assert f"[{a[i]}] refusing to change QoS: {hits}. {TAIL}" in run.out, i
        assert qos_of(lab, f"node{i}") == before[f"node{i}"], i  # nothing changed on a refused node
    # under sudo on a node managed through eth0 the socket table finds eth0: QoS goes on
    assert parse_mlnx_qos(lab_ssh(lab, "node5", "mlnx_qos -i ens1np0").stdout)["trust"] == "dscp"

    report = tmp_path / "report"
    hosts = json.loads((report / "ccr-report.json").read_text())["hosts"]
    assert sorted(hosts) == sorted(a.values())
    assert hosts[a[5]]["status"] == "OK"
    for i in expected:
        (reason,) = hosts[a[i]]["reasons"]
        assert hosts[a[i]]["status"] == "FAIL" and reason["message"].startswith(
            "failed before verification: Tune RDMA (modules, RoCE, boot unit, QoS, data path, NCCL): refusing to change QoS")
    suite = ET.parse(report / "ccr-report.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("5", "4")
    text = (report / "ccr-report.txt").read_text()
    assert all(address in text for address in a.values()) and "OK: 1  WARN: 0  FAIL: 4  UNKNOWN: 0" in text
