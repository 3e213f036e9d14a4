"""NIC serials from PCI Vital Product Data (issue 40: the history names the
NICs a failure involved by serial, beside the GPU serials)."""

from __future__ import annotations

import json
import re
import struct
from dataclasses import replace
from pathlib import Path

from test_checks import H100, healthy, port
from test_history import POLICY

from ccrhost.lab import pcie
from ccrhost.model.status import FAIL, OK
from ccrhost.model.verdict import Policy, evaluate
from ccrhost.node import history_file
from ccrhost.probes.vpd import nic_serials, parse_vpd, read_vpd

FIXTURE = Path(__file__).parent / "fixtures" / "vpd" / "lspci_vv_cx7.txt"


def lspci_fields() -> tuple[str, list[tuple[str, str]]]:
    """The product name and the read-only fields lspci printed (fixture)."""
    text = "".join(line for line in FIXTURE.read_text().splitlines(keepends=True) if not line.startswith("#"))
    name = re.search(r"Product Name: (.*?)\n    Read-only", text, re.S).group(1).replace("PCIe\n", "PCIe ")
    return name, re.findall(r"^ +\[(\w\w)\] [^:\n]+: (.*)$", text.split("Read-only fields:")[1], re.M)


def spec_bytes(name: str, fields: list[tuple[str, str]], reserved: int = 1) -> bytes:
    """The fields as the PCI spec lays them out and ls-vpd.c walks them:
    tag 0x82 + LE16 length + string; tag 0x90 + LE16 length + (keyword,
    length byte, data)...; RV whose first byte makes the sum 0; 0x78."""
    body = b"".join(k.encode() + bytes([len(v)]) + v.encode() for k, v in fields if k != "RV")
    body += b"RV" + bytes([1 + reserved])
    head = b"\x82" + struct.pack("<H", len(name)) + name.encode() + b"\x90" + struct.pack("<H", len(body) + 1 + reserved)
    data = head + body
    return data + bytes([-sum(data) & 0xFF]) + bytes(reserved) + b"\x78"


def test_the_connectx7_vpd_gives_what_lspci_printed_and_its_serial():
    name, fields = lspci_fields()
    assert [k for k, _ in fields] == ["PN", "EC", "V2", "SN", "V3", "VA", "V0", "VU", "RV"]
    assert ("SN", "MT2314XZ0JUZ") in fields and fields[-1] == ("RV", "checksum good, 1 byte(s) reserved")
    vpd = parse_vpd(spec_bytes(name, fields))
    assert vpd.product == name and vpd.product.endswith("Crypto, Secure Boot Capable")
    assert vpd.read_only == {k: v for k, v in fields if k != "RV"}
    assert vpd.checksum_ok is True and vpd.serial == "MT2314XZ0JUZ"


def test_padding_a_bad_checksum_a_cut_read_and_bytes_that_are_no_vpd():
    # ConnectX-4 Lx pads with spaces (lspci: "[SN] Serial number: MT2025K30970            ")
    padded = spec_bytes("CX4421A- ConnectX-4 LX SFP28", [("PN", "MCX4421A-ACQN        "),
                                                         ("SN", "MT2025K30970            ")], reserved=0)
    assert parse_vpd(padded).serial == "MT2025K30970" and parse_vpd(padded).checksum_ok is True
    name, fields = lspci_fields()
    data = bytearray(spec_bytes(name, fields))
    data[5] ^= 1  # one bit of the name flipped: lspci says "checksum bad"
    assert parse_vpd(bytes(data)).checksum_ok is False
    sn_end = bytes(data).index(b"MT2314XZ0JUZ") + 12
    cut = parse_vpd(bytes(data[:sn_end]))  # a read cut after the serial keeps what came whole
    assert cut.serial == "MT2314XZ0JUZ" and "V3" not in cut.read_only and cut.checksum_ok is None
    assert parse_vpd(bytes(data[:sn_end - 1])).serial is None
    for junk in (b"", b"\xff" * 64, b"\x00" * 64):  # a function without VPD reads as ff or 00
        assert read_vpd_bytes(junk) is None


def read_vpd_bytes(data: bytes, tmp=Path("/tmp")):
    import tempfile

    with tempfile.NamedTemporaryFile(dir=tmp) as f:
        f.write(data)
        f.flush()
        return read_vpd(f.name)


def sysfs_nic(root: Path, cls: str, name: str, data: bytes | None) -> None:
    dev = root / "devices" / f"pci-{name}"
    dev.mkdir(parents=True)
    if data is not None:
        (dev / "vpd").write_bytes(data)
    (root / "class" / cls).mkdir(parents=True, exist_ok=True)
    (root / "class" / cls / name).mkdir()
    (root / "class" / cls / name / "device").symlink_to(dev)


def test_nic_serials_read_each_named_nic_and_an_unreadable_one_is_no_serial(tmp_path):
    sysfs_nic(tmp_path, "infiniband", "mlx5_0", pcie.vpd("MT2314X00100"))
    sysfs_nic(tmp_path, "net", "eth1", pcie.vpd("MT2314X00101"))   # a netdev-scoped reason
    sysfs_nic(tmp_path, "infiniband", "mlx5_2", None)                # no vpd file (no VPD capability)
    sysfs_nic(tmp_path, "infiniband", "mlx5_3", b"\xff" * 32)        # VPD that is not VPD
    got = nic_serials(["mlx5_0", "eth1", "mlx5_2", "mlx5_3", "mlx5_9"], sys=str(tmp_path))
    assert got == {"mlx5_0": "MT2314X00100", "eth1": "MT2314X00101"}


def test_the_lab_vpd_is_the_connectx7_fixture_with_the_nics_own_serial():
    name, fields = lspci_fields()
    vpd = parse_vpd(pcie.vpd("MT2314X00203"))
    want = {k: v.replace("MT2314XZ0JUZ", "MT2314X00203") for k, v in fields if k != "RV"}
    assert (vpd.product, vpd.read_only, vpd.checksum_ok) == (name, want, True)


def nic_check(path, now, down: int | None, read):
    ports = [port(i) for i in range(8)]
    if down is not None:
        ports[down] = port(down, state="DOWN", phys="Disabled")
    r = healthy(ports=ports)
    r.history = history_file.read_history(str(path), now=now)
    verdict = evaluate(r, H100, replace(Policy(), history=POLICY))
    history_file.keep_history(str(path), verdict, POLICY, read)
    return verdict


def test_a_nic_failure_names_the_nic_serial_in_the_history_and_reads_it_once(tmp_path):
    path, asked = tmp_path / "history.json", []

    def read(names):
        asked.append(list(names))
        return {"mlx5_2": "MT2314XZ0JUZ"}

    assert nic_check(path, 1000, None, read).status == OK
    assert nic_check(path, 1060, 2, read).status == FAIL
    assert nic_check(path, 1120, 2, read).status == FAIL  # the same failure: no new episode, no VPD read
    assert asked == [["mlx5_2"]]
    [episode] = json.loads(path.read_text())["episodes"]
    assert episode["codes"] == ["ccr_below_expected", "port_count", "port_down"]
    assert (episode["gpus"], episode["nics"]) == ([], ["MT2314XZ0JUZ"])
    nic_check(path, 1180, None, read)

    def unreadable(names):
        asked.append(list(names))
        return {}

    assert nic_check(path, 1240, 2, unreadable).status == FAIL  # no serial: the episode still counts
    assert json.loads(path.read_text())["episodes"][-1]["nics"] == []
    assert asked[-1] == ["mlx5_2"]


def test_a_gpu_failure_reads_no_nic_vpd(tmp_path):
    from test_history import readings

    def read(names):
        raise AssertionError(f"read VPD of {names}")

    r = readings(2, {2: "1650924060142"})
    r.history = history_file.read_history(str(tmp_path / "h.json"), now=1000)
    v = evaluate(r, H100, replace(Policy(), history=POLICY))
    assert v.status == FAIL and not r.history.failing  # a failure starts, but no reason names a NIC
    history_file.keep_history(str(tmp_path / "h.json"), v, POLICY, read)
    [episode] = json.loads((tmp_path / "h.json").read_text())["episodes"]
    assert (episode["gpus"], episode["nics"]) == (["1650924060142"], [])


def test_a_lab_node_sysfs_gives_each_nic_its_own_serial(tmp_path):
    from ccrhost.lab.profile import load_profile, render_sysfs

    profile = load_profile("hgx-h100-8x400")
    render_sysfs(profile, [], tmp_path, 3)
    names = [n.name for n in profile.nics]
    got = nic_serials(names, sys=str(tmp_path))
    assert got == {n: f"MT2314X003{i:02d}" for i, n in enumerate(names)}
    assert len(set(got.values())) == len(names) == 8
