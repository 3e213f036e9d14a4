"""Facts: the remote command's output parsed into node state."""

from dataclasses import asdict
from pathlib import Path

import pytest
from pyinfra.api.exceptions import FactProcessError

from ccrhost.facts.files import FileStates
from ccrhost.facts.kernel import KernelModules, module_name
from ccrhost.facts.rdma import RdmaDevices
from ccrhost.probes.kernel import Modules
from ccrhost.probes.rdma import parse_rdma_dump

FIXTURES = Path(__file__).parent / "fixtures"


def dump(name):
    return (FIXTURES / name).read_text().splitlines()


def test_roce_host_from_verbatim_samples():
    facts = asdict(parse_rdma_dump(dump("rdma_dump_roce.txt")))
    devices = facts["devices"]
    assert list(devices) == ["mlx5_0", "mlx5_1"]
    port = devices["mlx5_0"]["ports"][1]
    assert (port["state"], port["state_id"], port["phys_state"]) == ("ACTIVE", 4, "LinkUp")
    assert (port["rate_gbps"], port["lanes"], port["speed"]) == (25.0, 1, "EDR")
    assert port["link_layer"] == "Ethernet"
    assert port["netdev"] == "eth01"
    # the zero GID at index 4 is dropped, as show_gids drops it
    assert [(g["index"], g["type"], g["ipv4"]) for g in port["gids"]] == [
        (0, "IB/RoCE v1", None), (1, "RoCE v2", None), (2, "IB/RoCE v1", "10.108.164.36"), (3, "RoCE v2", "10.108.164.36"),
    ]
    assert port["cm"] == {"default_roce_mode": "IB/RoCE v1", "default_roce_tos": 0}
    down = devices["mlx5_1"]["ports"][1]
    assert (down["state"], down["phys_state"], down["cm"]) == ("DOWN", "Disabled", None)
    assert devices["mlx5_0"]["pci"] == {"current_speed_gts": 8.0, "current_width": 8, "max_speed_gts": 8.0, "max_width": 8}
    assert devices["mlx5_0"]["ofed_tc"] is False
    assert facts["node"] | {"mounted": True, "fstype": "configfs", "rdma_cm": True, "ecn": [], "qos": []} == facts["node"]


def test_ib_and_ofed_trees():
    facts = asdict(parse_rdma_dump(dump("rdma_dump_ib_ofed.txt")))
    ib = facts["devices"]["mlx5_0"]["ports"][1]
    assert (ib["link_layer"], ib["rate_gbps"], ib["speed"], ib["netdev"]) == ("InfiniBand", 200.0, "HDR", "ib0")
    assert ib["gids"] == [{"index": 0, "gid": "fe80:0000:0000:0000:c470:bd03:00cf:4964",
                           "type": "IB/RoCE v1", "ndev": None, "ipv4": None}]
    roce = facts["devices"]["mlx5_2"]
    assert roce["ofed_tc"] is True
    assert roce["ports"][1]["traffic_class"] == ["Global tclass=106"]
    assert roce["pci"]["current_width"] == 8 and roce["pci"]["max_width"] == 16
    assert facts["node"] | {"mounted": False, "fstype": None, "rdma_cm": False, "ecn": ["eth4"], "qos": ["eth4"]} == facts["node"]


def test_no_rdma_devices():
    assert parse_rdma_dump(["@@ib", "@@configfs", "@@cm"]).devices == {}


def test_garbled_sysfs_fails_only_this_host():
    lines = ["@@ib", "mlx5_0/ports/1/rate:fast"]
    with pytest.raises(FactProcessError, match="unexpected sysfs content"):
        RdmaDevices().process(lines)


def test_rdma_command_is_one_shell_snippet_that_never_fails():
    command = RdmaDevices().command()
    assert command.rstrip().endswith("true")
    assert command.count("grep -Hs") == 3  # files, GIDs (zeros left out), rdma_cm


@pytest.mark.parametrize(
    "entry, name",
    [("kernel/drivers/infiniband/core/ib_core.ko", "ib_core"), ("kernel/fs/configfs/configfs.ko.zst", "configfs"),
     ("kernel/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko.xz", "mlx5_core"), ("kernel/foo/snd-hda.ko", "snd_hda")],
)
def test_module_names(entry, name):
    assert module_name(entry) == name


def test_kernel_modules_loaded_and_builtin():
    out = ["@@loaded", "ib_core", "mlx5_core", "@@builtin", "kernel/fs/configfs/configfs.ko", ""]
    assert KernelModules().process(out) == Modules(["ib_core", "mlx5_core"], ["configfs"])


def test_file_states_reads_several_files_in_one_command(tmp_path):
    import subprocess

    present = tmp_path / "a.conf"
    present.write_text("x=1\n")
    present.chmod(0o640)
    absent = tmp_path / "b.conf"
    fact = FileStates()
    out = subprocess.run(["sh", "-c", fact.command([str(present), str(absent)])], capture_output=True, text=True, check=True)
    states = fact.process(out.stdout.splitlines())
    assert states[str(absent)] is None
    assert states[str(present)].content == "x=1\n"
    assert states[str(present)].mode == "640"


def test_management_path_sections():
    lines = ["@@ib", "@@route", "default via 198.18.0.1 dev eth0 proto static",
             "@@ssh", "198.18.0.1 51234 198.18.0.11 22",
             "@@addr",
             "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever",
             "2: eth0@if7    inet 198.18.0.11/24 scope global eth0\\       valid_lft forever preferred_lft forever",
             "3: ens1np0    inet 198.19.0.1/24 scope global ens1np0"]
    node = asdict(parse_rdma_dump(lines).node)
    assert node["default_route_dev"] == "eth0"
    assert node["ssh_server_ip"] == "198.18.0.11"
    assert node["ssh_dev"] == "eth0"
    assert node["addresses"]["ens1np0"] == ["198.19.0.1"]


def test_a_corrupt_sysfs_value_names_its_file_and_the_value():
    from ccrhost.probes.rdma import RdmaFormatError

    lines = dump("rdma_dump_roce.txt")
    lines[lines.index("mlx5_0/ports/1/rate:25 Gb/sec (1X EDR)")] = "mlx5_0/ports/1/rate:fast"
    with pytest.raises(RdmaFormatError) as info:
        parse_rdma_dump(lines)
    assert str(info.value) == ("/sys/class/infiniband/mlx5_0/ports/1/rate: expected '<n> Gb/sec (<w>X <SPEED>)', "
                               "got 'fast'")
    with pytest.raises(FactProcessError, match="mlx5_0/ports/1/rate"):
        RdmaDevices().process(lines)


def test_unicode_digits_in_a_sysfs_path_are_not_a_port():
    reading = parse_rdma_dump(["@@ib", "mlx5_0/ports/\u00b2/state:4: ACTIVE", "mlx5_0/ports/1/state:4: ACTIVE"])
    assert list(reading.devices["mlx5_0"].ports) == [1]


# iproute2 6.1 in a netns after `ip route add default nexthop via 198.18.250.1 dev ens1np0
# nexthop via 198.18.251.1 dev ens2np0`: `ip -o -4 route show default`, verbatim
MULTIPATH = ("default \\\tnexthop via 198.18.250.1 dev ens1np0 weight 1 \\\tnexthop via 198.18.251.1 dev ens2np0 "
             "weight 1 ")


def test_every_default_route_nexthop_is_read():
    node = parse_rdma_dump(["@@route", MULTIPATH, "default via fd00::1 dev eth0 metric 1024 pref medium"]).node
    assert node.default_route_devs == ["ens1np0", "ens2np0", "eth0"]
    assert node.default_route_dev == "ens1np0"
    # without -o, the nexthops are continuation lines
    node = parse_rdma_dump(["@@route", "default ", "\tnexthop via 198.18.250.1 dev eth0 weight 1 ",
                            "\tnexthop via 198.18.251.1 dev ens2np0 weight 1 "]).node
    assert node.default_route_devs == ["eth0", "ens2np0"]


def test_lower_and_upper_links_give_what_each_netdev_sits_on():
    # /sys/class/net entries as this machine's kernel made them for a bridge over two veths
    node = parse_rdma_dump(["@@links", "ccrldbr/lower_ccrld1h", "ccrldbr/lower_ccrld2h", "ccrld1h/upper_ccrldbr",
                            "ccrld2h/upper_ccrldbr", "bond0/lower_ens1np0", "ens1np0.100/lower_bond0"]).node
    assert node.lowers == {"ccrldbr": ["ccrld1h", "ccrld2h"], "bond0": ["ens1np0"], "ens1np0.100": ["bond0"]}


def test_ssh_connection_from_the_socket_table_when_the_environment_was_reset():
    # sudo's env_reset leaves $SSH_CONNECTION empty; the session's sshd holds the socket
    lines = ["@@ssh", "", "@@session", "pid 2811 sh", "pid 2790 sudo", "pid 2789 sh", "pid 2702 sshd",
             # /proc/net/tcp local_address of 198.18.0.11:22 (host-order words)
             "tcp 0B0012C6:0016 010012C6:D431",
             "@@addr", "2: eth0@if7    inet 198.18.0.11/24 scope global eth0"]
    node = parse_rdma_dump(lines).node
    assert (node.ssh_server_ip, node.ssh_source, node.ssh_session, node.ssh_dev) == \
        ("198.18.0.11", "socket table", True, "eth0")
    six = parse_rdma_dump(["@@ssh", "", "@@session", "pid 9 sshd-session",
                           "tcp 0000000000000000FFFF00000B0012C6:0016 0000000000000000FFFF0000010012C6:D431"]).node
    assert six.ssh_server_ip == "198.18.0.11"
    lost = parse_rdma_dump(["@@ssh", "", "@@session", "pid 9 sh", "pid 8 sshd"]).node
    assert (lost.ssh_server_ip, lost.ssh_session) == (None, True)
    mapped = parse_rdma_dump(["@@ssh", "::ffff:198.18.0.1 51234 ::ffff:198.18.0.11 22"]).node
    assert (mapped.ssh_server_ip, mapped.ssh_source) == ("198.18.0.11", "$SSH_CONNECTION")


def test_files_ccrhost_must_not_replace_are_named_with_the_reason(tmp_path):
    import os
    import subprocess

    (tmp_path / "latin1.conf").write_bytes(b"# site\nNCCL_DEBUG=WARN\n# caf\xe9\n")
    os.symlink(tmp_path / "latin1.conf", tmp_path / "link.conf")
    (tmp_path / "dir.conf").mkdir()
    paths = [str(tmp_path / n) for n in ("latin1.conf", "link.conf", "dir.conf")]
    fact = FileStates()
    out = subprocess.run(["sh", "-c", fact.command(paths)], capture_output=True, text=True, check=True)
    states = fact.process(out.stdout.splitlines())
    assert [states[p].error for p in paths] == [
        f"{paths[0]} is not UTF-8: byte 0xe9 in line 3: # caf\\xe9",
        f"{paths[1]} is a symbolic link",
        f"{paths[2]} is not a regular file",
    ]
    assert all(states[p].content is None for p in paths)
