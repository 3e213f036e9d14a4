"""Parsers for the sysfs file families, on the kernel's real formats."""

import pytest

from ccrhost.model import ports
from ccrhost.probes import sysfs


@pytest.mark.parametrize(
    "text, gbps, lanes, speed",
    [
        ("400 Gb/sec (4X NDR)\n", 400.0, 4, "NDR"),
        ("200 Gb/sec (4X HDR)", 200.0, 4, "HDR"),
        ("100 Gb/sec (4X EDR)", 100.0, 4, "EDR"),
        ("25 Gb/sec (1X EDR)", 25.0, 1, "EDR"),
        ("2.5 Gb/sec (1X SDR)", 2.5, 1, "SDR"),
        ("300 Gb/sec (12X EDR)", 300.0, 12, "EDR"),
        ("50 Gb/sec (2X HDR)", 50.0, 2, "HDR"),
    ],
)
def test_rate_any_lane_count(text, gbps, lanes, speed):
    assert sysfs.parse_rate(text) == sysfs.LinkRate(gbps, lanes, speed)


@pytest.mark.parametrize("text", ["400", "400 Gb/sec", "fast", "Gb/sec (4X NDR)"])
def test_rate_rejects_other_formats(text):
    with pytest.raises(sysfs.SysfsFormatError, match="Gb/sec"):
        sysfs.parse_rate(text)


@pytest.mark.parametrize(
    "text, expected",
    [("4: ACTIVE\n", (4, "ACTIVE")), ("1: DOWN", (1, "DOWN")), ("5: LinkUp", (5, "LinkUp")),
     ("4: PortConfigurationTraining", (4, "PortConfigurationTraining")), ("7: Phy Test", (7, "Phy Test"))],
)
def test_numbered_state(text, expected):
    assert sysfs.parse_numbered_state(text) == expected


def test_numbered_state_rejects_bare_name():
    with pytest.raises(sysfs.SysfsFormatError):
        sysfs.parse_numbered_state("ACTIVE")


@pytest.mark.parametrize(
    "text, gts", [("32.0 GT/s PCIe\n", 32.0), ("2.5 GT/s PCIe", 2.5), ("8 GT/s", 8.0), ("16 GT/s", 16.0), ("Unknown", None)]
)
def test_pcie_speed_old_and_new_kernels(text, gts):
    assert sysfs.parse_pcie_speed(text) == gts


def test_pcie_bandwidth_uses_line_encoding():
    # Gen5 x16 carries 32 GT/s * 128/130 per lane; x8 halves it.
    assert ports.pcie_gbps(32.0, 16) == pytest.approx(504.12, rel=1e-3)
    assert ports.pcie_gbps(32.0, 8) == pytest.approx(252.06, rel=1e-3)
    assert ports.pcie_gbps(2.5, 1) == pytest.approx(2.0)
    assert ports.pcie_gbps(None, 16) is None


def test_gid_ipv4_mapped_from_show_gids_sample():
    assert sysfs.gid_ipv4(sysfs.parse_gid("0000:0000:0000:0000:0000:ffff:0a6c:a424")) == "10.108.164.36"
    assert sysfs.gid_ipv4(sysfs.parse_gid("fe80:0000:0000:0000:0e42:a1ff:fe40:29a0")) is None


def test_gid_type_is_one_of_the_kernel_strings():
    assert sysfs.parse_gid_type("RoCE v2\n") == "RoCE v2"
    with pytest.raises(sysfs.SysfsFormatError):
        sysfs.parse_gid_type("RoCEv2")


@pytest.mark.parametrize("parse, text", [
    (sysfs.parse_numbered_state, "Unknown"), (sysfs.parse_numbered_state, "\u0664: ACTIVE"),
    (sysfs.parse_rate, "fast"), (sysfs.parse_rate, "\u0664\u0660\u0660 Gb/sec (4X NDR)"),
    (sysfs.parse_rate, "9" * 400 + " Gb/sec (4X NDR)"), (sysfs.parse_int, "\u0661\u0666"), (sysfs.parse_int, "1_6"),
    (sysfs.parse_pcie_speed, "\u0663\u0662 GT/s PCIe"), (sysfs.parse_pcie_speed, "1e400 GT/s PCIe"),
])
def test_values_the_kernel_never_prints_are_refused_with_the_text(parse, text):
    with pytest.raises(sysfs.SysfsFormatError) as info:
        parse(text)
    assert repr(text) in str(info.value)
