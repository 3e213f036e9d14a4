"""ccrhost lab capture: profile format versions, anonymizing, and the round
trip (capture a lab node, boot a new one from the capture, read both)."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import LAB_DIR, LAB_NAME, LAB_SUBNET, REPO, lab_ssh

from ccrhost.lab.capture import Anonymizer, short_gid
from ccrhost.lab.profile import FORMAT_VERSION, ProfileError, load_profile, render_sysfs
from ccrhost.model.managed import FILES, UNIT_WANTS
from ccrhost.probes import node as node_probe
from ccrhost.probes import pci

PROFILES = REPO / "ccrhost/lab/profiles"


# --- format versions ----------------------------------------------------------

def _write(tmp_path, text: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return str(path)


def _base() -> str:
    return (PROFILES / "hgx-h100-8x400.yaml").read_text()


def test_a_profile_without_format_version_is_format_1_and_boots(tmp_path):
    old = re.sub(r"^format_version: 2\n", "", _base(), flags=re.M)
    assert "format_version" not in old
    profile = load_profile(_write(tmp_path, old))
    assert profile.format_version == 1
    built = render_sysfs(profile, [], tmp_path / "sys", 1)
    assert [n["name"] for n in built["nics"]][:2] == ["mlx5_0", "mlx5_1"]


@pytest.mark.parametrize("version, message", [
    ("3", "\bhas format_version 3; this ccrhost reads format versions 1 to 2: upgrade ccrhost, "
          "or capture the node again with this version"),
    ("0", "format_version 0: expected a whole number, 1 to 2"),
    ("two", "format_version 'two': expected a whole number, 1 to 2"),
])
def test_an_unknown_format_is_refused_naming_version_and_support(tmp_path, version, message):
    path = _write(tmp_path, _base().replace("format_version: 2", f"format_version: {version}"))
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    sep = " " if message.startswith("\b") else ": "
    assert str(err.value) == f"profile {path!r}{sep}{message.removeprefix(chr(8))}"
    assert FORMAT_VERSION == 2


def test_format_2_keys_in_a_format_1_profile_are_refused(tmp_path):
    text = re.sub(r"^format_version: 2\n", "", _base(), flags=re.M)
    text = text.replace('pci: "0000:1a:00.0"}', 'pci: "0000:1a:00.0", mtu: 9000}')
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(err.value) == (f"profile {path!r}: nics.0.mtu needs format_version: 2 "
                              "(the profile says 1, by leaving it out)")
    load_profile(_write(tmp_path, "format_version: 2\n" + text))  # the same with the version: accepted


def test_lab_up_refuses_a_newer_format_before_touching_anything(tmp_path):
    path = _write(tmp_path, _base().replace("format_version: 2", "format_version: 9"))
    out = subprocess.run([sys.executable, "-m", "ccrhost", "lab", "up", "--profile", path, "--dir",
                          str(tmp_path / "lab")], capture_output=True, text=True)
    assert out.returncode == 1
    assert f"Error: profile {path!r} has format_version 9; this ccrhost reads format versions 1 to 2" in out.stderr
    assert not (tmp_path / "lab").exists()


# --- anonymizing ---------------------------------------------------------------

def test_anonymizer_is_consistent_and_keeps_the_addressing_shape():
    a = Anonymizer("gpu-017.prod.example")
    assert a.ipv4("10.20.30.5") == a.ipv4("10.20.30.5") == "198.19.0.5"
    assert a.ipv4("10.20.30.6") == "198.19.0.6"       # same /24, same stand-in subnet
    assert a.ipv4("10.20.31.5") == "198.19.1.5"       # another /24, another subnet
    mapped = ipaddress.IPv6Address("::ffff:10.20.30.5").exploded
    assert a.gid(mapped) == ipaddress.IPv6Address("::ffff:198.19.0.5").exploded
    ll = "fe80:0000:0000:0000:0c42:a1ff:fe12:3456"
    assert a.gid(ll) == a.gid(ll) == "fe80:0000:0000:0000:0200:00ff:fe00:0001"
    assert a.gid("fe80::0c42:a1ff:fe12:3457").endswith(":0002")
    # the same interface ID under a site prefix keeps its stand-in; the prefix gets one
    assert a.gid("2001:db8:1:2:0c42:a1ff:fe12:3456") == "fd00:0000:0000:0001:0200:00ff:fe00:0001"
    u = a.gpu_uuid("GPU-4a9f1c2e-0000-1111-2222-333344445555")
    assert u == a.gpu_uuid("GPU-4a9f1c2e-0000-1111-2222-333344445555") != a.gpu_uuid("GPU-other")
    line = ("BOOT_IMAGE=/vmlinuz root=UUID=0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0 ip=10.20.31.5::10.20.31.1 "
            "hostname=gpu-017.prod.example bootif=0c:42:a1:12:34:56 intel_iommu=on")
    assert a.text(line) == ("BOOT_IMAGE=/vmlinuz root=UUID=" + a.text("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
                            + " ip=198.19.1.5::198.19.1.1 hostname=node-1 bootif=02:00:00:00:00:01 intel_iommu=on")
    assert "0f1e2d3c" not in a.text(line)
    assert short_gid(mapped) == "::ffff:10.20.30.5"
    # never a fixed point, even where the node already uses the stand-in ranges
    b = Anonymizer("h", gids=["::ffff:198.19.1.1", "fe80::200:ff:fe00:1"], ipv4s=["198.19.2.7"])
    assert b.ipv4("198.19.0.1") == "198.19.3.1" and b.ipv4("198.19.1.1") == "198.19.4.1"
    assert b.gid("fe80::200:ff:fe00:1") == "fe80:0000:0000:0000:0200:00ff:fe00:0002"


def test_capture_refuses_a_node_it_could_not_replay():
    from ccrhost.lab.capture import CaptureError, Readings, build_profile
    from ccrhost.probes.gpu import GpuProbe
    from ccrhost.probes.node import NodeSnapshot

    with pytest.raises(CaptureError, match=r"^no RDMA device under /sys/class/infiniband: a lab profile needs "
                                           r"at least one \(is the NIC driver loaded\?\)$"):
        build_profile(Readings(NodeSnapshot(), None, GpuProbe()))


def test_capture_maps_verbatim_readings_onto_what_the_lab_renders(tmp_path):
    """The reference's sysfs samples (a 25 GbE ConnectX pair, one port DOWN,
    PCIe 8 GT/s x8, netdevs eth01/eth02) on the lab's PCI tree: the capture
    keeps the sysfs text, anonymizes, and the lab renders it back."""
    from ccrhost.lab.capture import Readings, build_profile, render
    from ccrhost.lab.profile import Profile
    from ccrhost.model.gpus import GpuReading
    from ccrhost.probes.gpu import GpuProbe
    from ccrhost.probes.node import NodeSnapshot
    from ccrhost.probes.rdma import parse_rdma_dump

    fixtures = Path(__file__).parent / "fixtures"
    rdma = parse_rdma_dump((fixtures / "rdma_dump_roce.txt").read_text().splitlines())
    tree = pci.parse_pci_dump((fixtures / "gdr/pci_dump_lab_hgx.txt").read_text().splitlines())
    gpus = GpuProbe([GpuReading(i, "NVIDIA H100 80GB HBM3", f"GPU-4a9f1c2e-0000-1111-2222-33334444555{i}", 1980, 1980,
                                5, 5, 16, 16, 0) for i in range(8)])
    data = build_profile(Readings(NodeSnapshot(rdma=rdma), tree, gpus, {}, "gpu-017"), anonymize=True)
    text = render(data)
    assert "10.108" not in text and "0e42:a1ff" not in text and "4a9f1c2e" not in text and "gpu-017" not in text
    assert data["nic_defaults"]["rate"] == "25 Gb/sec (1X EDR)"
    assert data["nic_defaults"]["pcie"] == {"speed_gts": 8.0, "width": 8}
    assert [n["netdev"] for n in data["nics"]] == ["eth01", "eth02"]
    notes = data["capture"]["not_replayed"]
    assert any(n.startswith("mlx5_1 port 1 was DOWN (Disabled) at capture") for n in notes)
    profile = Profile(**yaml.safe_load(text))
    render_sysfs(profile, [], tmp_path / "sys", 1)
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    assert (port / "rate").read_text() == "25 Gb/sec (1X EDR)\n"
    assert (port / "gids/2").read_text() == ipaddress.IPv6Address("::ffff:198.19.0.36").exploded + "\n"
    assert (port / "gid_attrs/ndevs/3").read_text() == "eth01\n"
    assert (tmp_path / "sys/class/infiniband/mlx5_1/device/max_link_width").read_text() == "8\n"


# --- the round trip on lab nodes ------------------------------------------------

def read_node(lab, node: str) -> dict:
    """Every reading ccrhost's probes take on the node, as plain data (the
    fabric counters aside: a time and a boot id, not the node's make-up;
    so is the GPU reading's uptime, the node's clock since its boot)."""
    probes = tuple(p for p in node_probe.PROBES if p != "fabric")
    snap = lab_ssh(lab, node, node_probe.command(list(FILES), UNIT_WANTS, probes))
    dump = lab_ssh(lab, node, pci.COMMAND)
    assert snap.returncode == 0 and dump.returncode == 0, snap.stderr + dump.stderr
    parsed = node_probe.parse_snapshot(snap.stdout.splitlines(), probes)
    assert parsed.errors == {}
    node = dataclasses.asdict(parsed)
    if node.get("gpu_health"):
        assert node["gpu_health"].pop("uptime_s") > 0  # read, and read as a clock: never replayed
    # the mount table is the machine's of the moment too (every lab's network namespaces under /run/netns)
    assert any(m["path"] == "/mnt/scratch" for m in node["baseline"].pop("mounts"))
    return {"node": node, "pci": dataclasses.asdict(pci.parse_pci_dump(dump.stdout.splitlines()))}


def capture_on(lab, node: str, *flags: str) -> dict:
    """`ccrhost lab capture` run inside the node over SSH."""
    out = lab_ssh(lab, node, f"cd {REPO} && {sys.executable} -m ccrhost lab capture {' '.join(flags)}")
    assert out.returncode == 0, out.stderr
    return {"text": out.stdout, "data": yaml.safe_load(out.stdout), "stderr": out.stderr}


# a NIC's node GUID is not in a capture: a replayed NIC gets its lab slot's (lab/profile.py _guid)
IDENTITIES = ("gid", "ipv4", "uuid", "serial", "node_guid")


def _identities(tree, found: list[str]) -> list[str]:
    """GIDs, IPv4 addresses, GPU UUIDs and serials and NIC node GUIDs in ``tree``, in reading order."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key in IDENTITIES and isinstance(value, str):
                found.append(value)
            _identities(value, found)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            _identities(value, found)
    return found


def _canonical(tree, names: dict[str, str]):
    """``tree`` with every identity value replaced by its first-seen number:
    two trees are equal after this when they differ only by a consistent
    one-to-one renaming."""
    if isinstance(tree, dict):
        return {k: (names.setdefault(v, f"id{len(names)}") if k in IDENTITIES and isinstance(v, str)
                    else _canonical(v, names)) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_canonical(v, names) for v in tree]
    return tree


def _without_management(reading: dict) -> dict:
    """The reading less the lab's management link (its address is the lab
    node's, not the profile's)."""
    node = reading["node"]["rdma"]["node"]
    return {**reading, "node": {**reading["node"], "rdma": {**reading["node"]["rdma"], "node": {
        **node, "addresses": {}, "ssh_server_ip": None}}}}


@pytest.mark.lab
def test_capture_round_trip(tmp_path):
    from ccrhost.lab.fleet import Lab, parse_faults

    lab = Lab(LAB_DIR)
    lab.down()
    try:
        # node1: MLNX_OFED RoCE with a DCB state of its own (as DCBX would set);
        # node2: the inbox driver with transient faults; node3: InfiniBand.
        lab.up(3, "hgx-h100-8x400", parse_faults(["node2:port_down=rocep42s0", "node2:pcie_width=rocep58s0:8",
                                                  "node2:gpu_throttled=1"]), name=LAB_NAME, subnet=LAB_SUBNET,
               profiles={"node2": "hgx-h100-8x400-upstream", "node3": "hgx-h100-8x400-ib"})
        set_qos = lab_ssh(lab, "node1", "mlnx_qos -i ens1np0 --trust dscp --pfc 0,0,0,1,0,0,0,0 --cable_len 30")
        assert set_qos.returncode == 0, set_qos.stderr
        original = read_node(lab, "node1")
        plain = capture_on(lab, "node1")
        anon = capture_on(lab, "node1", "--anonymize", "--output", "/tmp/anon.yaml", "&& cat /tmp/anon.yaml")
        faulty = capture_on(lab, "node2")
        ib_original = read_node(lab, "node3")
        ib = capture_on(lab, "node3")
        lab.down()

        # read-only: nothing but the capture's own output written on the node
        assert plain["data"]["format_version"] == 2 and plain["data"]["capture"]["anonymized"] is False
        assert plain["text"].startswith("# ccrhost lab profile, format 2")
        nic0 = plain["data"]["nics"][0]
        assert nic0["qos"]["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0] and nic0["qos"]["cable_len"] == 30
        assert "qos" not in plain["data"]["nics"][1]

        # the transient faults are named with the flag that brings them back, not baked in
        notes = faulty["data"]["capture"]["not_replayed"]
        assert any("rocep42s0 port 1 was DOWN (Disabled)" in n and "--fault NODE:port_down=rocep42s0" in n
                   for n in notes)
        assert any("x8 of x16" in n and "--fault NODE:pcie_width=rocep58s0:8" in n for n in notes)
        assert any("GPU 1 was throttled" in n and "--fault NODE:gpu_throttled=1" in n for n in notes)
        assert "not replayed: rocep42s0 port 1 was DOWN" in faulty["stderr"]
        assert "rate" not in faulty["data"]["nics"][1] and "pcie" not in faulty["data"]["nics"][2]
        assert faulty["data"]["ofed"] is False and faulty["data"]["nvidia_driver"]["open"] is True
        assert ib["data"]["nic_defaults"]["link_layer"] == "InfiniBand"

        files = {}
        for key, cap in (("plain", plain), ("anon", anon), ("ib", ib)):
            files[key] = tmp_path / f"{key}.yaml"
            files[key].write_text(cap["text"])
        # node1: the capture, at node1's own address; node2: the anonymized
        # capture; node3: the capture again, the second node booted from it;
        # node4: the InfiniBand node's capture.
        lab.up(4, str(files["plain"]), {}, name=LAB_NAME, subnet=LAB_SUBNET,
               profiles={"node2": str(files["anon"]), "node4": str(files["ib"])})
        replay, replay_anon, second, ib_replay = (read_node(lab, n) for n in ("node1", "node2", "node3", "node4"))
    finally:
        lab.down()

    # Every reading equal, including the management link (same address, same MAC).
    assert replay == original

    # the InfiniBand capture replayed on another lab slot: equal but for that slot's NIC GUIDs
    assert _canonical(_without_management(ib_replay), {}) == _canonical(_without_management(ib_original), {})

    # Anonymized: equal but for a consistent renaming of the identities ...
    found, hidden = _identities(original, []), _identities(replay_anon, [])
    assert found and len(found) == len(hidden)
    assert set(found).isdisjoint(hidden)
    assert _canonical(_without_management(replay_anon), {}) == _canonical(_without_management(original), {})
    assert plain["data"]["capture"]["host"] == "node1"  # the lab node's own host name (its UTS namespace)
    assert anon["data"]["capture"]["host"] == "node-1" and anon["data"]["capture"]["anonymized"] is True

    # ... and a second node from the same capture: every GID and GPU UUID moved by one
    def gids(reading):
        return [g["gid"] for d in reading["node"]["rdma"]["devices"].values() for g in d["ports"][1]["gids"]]

    assert [int(ipaddress.IPv6Address(b)) - int(ipaddress.IPv6Address(a))
            for a, b in zip(gids(replay), gids(second))] == [1] * len(gids(replay))
    assert {g["uuid"] for g in second["node"]["gpus"]["gpus"]}.isdisjoint(
        g["uuid"] for g in replay["node"]["gpus"]["gpus"])
    assert _canonical(_without_management(second), {}) == _canonical(_without_management(replay), {})
