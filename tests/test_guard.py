"""The SSH-path guard follows the real path: VLAN, bridge, bond and macvlan
stacks (the kernel's lower_/upper_ links), every default-route nexthop, and
the session's socket when sudo reset $SSH_CONNECTION."""

from ccrhost.model.ports import lower_paths, management_hits
from ccrhost.probes.rdma import NodeNet

ROCE = {"ens1np0": {}, "ens2np0": {}}


def net(**kw):
    base = dict(ssh_server_ip="198.18.0.11", ssh_source="$SSH_CONNECTION", ssh_dev="eth0",
                default_route_devs=["eth0"], addresses={"eth0": ["198.18.0.11"]})
    return NodeNet(**{**base, **kw})


def test_management_on_eth0_touches_no_roce_port():
    assert management_hits(net(), ROCE) == ([], None)


def test_ssh_on_a_vlan_over_a_roce_port():
    node = net(ssh_dev="ens1np0.100", lowers={"ens1np0.100": ["ens1np0"]})
    assert management_hits(node, ROCE) == (
        ["ens1np0 carries this SSH connection (198.18.0.11, from $SSH_CONNECTION) through ens1np0.100 -> ens1np0"], None)


def test_a_bridge_over_a_bond_over_two_roce_ports_and_a_macvlan():
    lowers = {"br0": ["bond0"], "bond0": ["ens1np0", "ens2np0"], "mv0": ["ens2np0"]}
    assert lower_paths(lowers, "br0") == {"br0": ["br0"], "bond0": ["br0", "bond0"],
                                          "ens1np0": ["br0", "bond0", "ens1np0"], "ens2np0": ["br0", "bond0", "ens2np0"]}
    hits, _ = management_hits(net(ssh_dev="br0", lowers=lowers), ROCE)
    assert [h.split(" carries")[0] for h in hits] == ["ens1np0", "ens2np0"]
    hits, _ = management_hits(net(ssh_dev="mv0", lowers=lowers), ROCE)
    assert hits == ["ens2np0 carries this SSH connection (198.18.0.11, from $SSH_CONNECTION) through mv0 -> ens2np0"]


def test_every_nexthop_of_a_multipath_default_route():
    hits, _ = management_hits(net(default_route_devs=["eth0", "ens2np0"]), ROCE)
    assert hits == ["ens2np0 carries a default route"]


def test_ssh_found_in_the_socket_table_counts_like_ssh_connection():
    node = net(ssh_source="socket table", ssh_dev="ens1np0", ssh_session=True)
    assert management_hits(node, ROCE)[0] == ["ens1np0 carries this SSH connection (198.18.0.11, from socket table)"]


def test_an_ssh_session_whose_connection_cannot_be_found_is_refused():
    hits, unknown = management_hits(net(ssh_server_ip=None, ssh_source=None, ssh_dev=None, ssh_session=True), ROCE)
    assert "$SSH_CONNECTION is empty" in unknown and "/proc/net/tcp" in unknown
    # not over SSH at all (pyinfra's @local): only the routes matter
    assert management_hits(net(ssh_server_ip=None, ssh_source=None, ssh_dev=None), ROCE) == ([], None)
    # an address no interface holds
    _, unknown = management_hits(net(ssh_dev=None), ROCE)
    assert unknown == "this SSH connection's address 198.18.0.11 is on no interface `ip addr` shows"


def test_a_loop_of_links_ends():
    assert set(lower_paths({"a": ["b"], "b": ["a", "ens1np0"]}, "a")) == {"a", "b", "ens1np0"}
