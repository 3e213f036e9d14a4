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
        ("100 Gb/sec (2X HDR)", 100.0, 2, "HDR"),
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
    "text, gts", [("32.0 GT/s PCIe\n", 32.0), ("2.5 GT/s PCIe", 2.5), ("8 GT/s", 8.0), ("16 GT/s", 16.0), ("Unknown", None),
                  ("Unknown speed", None)]
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


# --- every form the kernel prints, verbatim, and nothing else ---------------------
# Sources: torvalds/linux drivers/infiniband/core/sysfs.c (rate_show,
# state_show, phys_state_show) and drivers/pci/pci-sysfs.c
# (current_link_speed_show, max_link_speed_show, *_link_width_show) with
# drivers/pci/probe.c pci_speed_string(), read across 4.18/4.19, 5.4, 5.10+
# and 6.x.

@pytest.mark.parametrize("text, gts", [
    # 4.18-5.6 current_link_speed_show: its own switch, "%s\n"
    ("2.5 GT/s\n", 2.5), ("5 GT/s\n", 5.0), ("8 GT/s\n", 8.0), ("16 GT/s\n", 16.0),
    ("32 GT/s\n", 32.0),  # 5.3-5.6 (PCI_EXP_LNKSTA_CLS_32_0GB)
    ("Unknown speed\n", None),  # 4.18-5.6 switch default, and PCIE_SPEED2STR() for max_link_speed
    # 5.7 on: pci_speed_string(), drivers/pci/probe.c
    ("2.5 GT/s PCIe\n", 2.5), ("5.0 GT/s PCIe\n", 5.0), ("8.0 GT/s PCIe\n", 8.0), ("16.0 GT/s PCIe\n", 16.0),
    ("32.0 GT/s PCIe\n", 32.0), ("64.0 GT/s PCIe\n", 64.0),
    ("Unknown\n", None),  # pci_speed_string() past its table (PCI_SPEED_UNKNOWN)
])
def test_pcie_speed_every_kernel_form(text, gts):
    assert sysfs.parse_pcie_speed(text) == gts


@pytest.mark.parametrize("text", ["0.0 GT/s PCIe", "0 GT/s", "0.0 GT/s", "00 GT/s", "-8.0 GT/s PCIe", "20.0 GT/s PCIe",
                                  "8.0 GT/s PCIe x16", "8.0GT/s", "", "unknown", "8.0 gt/s pcie", "nan GT/s PCIe"])
def test_pcie_speed_no_kernel_prints_is_refused(text):
    with pytest.raises(sysfs.SysfsFormatError) as info:
        sysfs.parse_pcie_speed(text)
    assert str(info.value) == ("expected one of 2.5, 5.0, 8.0, 16.0, 32.0, 64.0 GT/s (PCIe), or Unknown, "
                               f"got {text!r}")


@pytest.mark.parametrize("text, width", [
    ("16\n", 16), ("8\n", 8), ("1\n", 1), ("32\n", 32),
    ("0\n", 0),  # current_link_width while the link is down: the 6-bit field reads 0
    ("255\n", None),  # max_link_width: pcie_get_width_cap() gives PCIE_LNK_WIDTH_UNKNOWN (0xff)
])
def test_pcie_width_every_kernel_form(text, width):
    assert sysfs.parse_pcie_width(text) == width


@pytest.mark.parametrize("text", ["-1", "-16", "x16", "16x", "0x10", "33", "64", "", "+8", "\u0661\u0666", "1_6"])
def test_pcie_width_is_a_non_negative_lane_count(text):
    with pytest.raises(sysfs.SysfsFormatError) as info:
        sysfs.parse_pcie_width(text)
    assert str(info.value) == f"expected a lane count 0 to 32 (or 255: unknown), got {text!r}"


@pytest.mark.parametrize("text, gbps, lanes, speed", [
    # 4.18/4.19 rate_show: SDR (and any speed it does not know) leaves the name empty
    ("2.5 Gb/sec (1X)\n", 2.5, 1, ""), ("10 Gb/sec (4X)\n", 10.0, 4, ""), ("30 Gb/sec (12X)\n", 30.0, 12, ""),
    # later kernels name SDR
    ("2.5 Gb/sec (1X SDR)\n", 2.5, 1, "SDR"), ("10 Gb/sec (4X SDR)\n", 10.0, 4, "SDR"),
    ("5 Gb/sec (1X DDR)\n", 5.0, 1, "DDR"), ("20 Gb/sec (4X DDR)\n", 20.0, 4, "DDR"),
    ("40 Gb/sec (4X QDR)\n", 40.0, 4, "QDR"), ("10 Gb/sec (1X FDR10)\n", 10.0, 1, "FDR10"),
    ("14 Gb/sec (1X FDR)\n", 14.0, 1, "FDR"), ("56 Gb/sec (4X FDR)\n", 56.0, 4, "FDR"),
    ("168 Gb/sec (12X FDR)\n", 168.0, 12, "FDR"),
    ("25 Gb/sec (1X EDR)\n", 25.0, 1, "EDR"), ("100 Gb/sec (4X EDR)\n", 100.0, 4, "EDR"),
    ("50 Gb/sec (1X HDR)\n", 50.0, 1, "HDR"), ("100 Gb/sec (2X HDR)\n", 100.0, 2, "HDR"),
    ("200 Gb/sec (4X HDR)\n", 200.0, 4, "HDR"), ("400 Gb/sec (4X NDR)\n", 400.0, 4, "NDR"),
    ("800 Gb/sec (8X NDR)\n", 800.0, 8, "NDR"), ("800 Gb/sec (4X XDR)\n", 800.0, 4, "XDR"),
])
def test_rate_every_kernel_form(text, gbps, lanes, speed):
    assert sysfs.parse_rate(text) == sysfs.LinkRate(gbps, lanes, speed)


@pytest.mark.parametrize("text, message", [
    ("0 Gb/sec (4X NDR)", "expected 400 Gb/sec for 4X NDR, got '0 Gb/sec (4X NDR)'"),
    ("0 Gb/sec (4X)", "expected 10 Gb/sec for 4X SDR, got '0 Gb/sec (4X)'"),
    ("50 Gb/sec (2X HDR)", "expected 100 Gb/sec for 2X HDR, got '50 Gb/sec (2X HDR)'"),
    ("400.5 Gb/sec (4X NDR)", "expected 400 Gb/sec for 4X NDR, got '400.5 Gb/sec (4X NDR)'"),
    ("400 Gb/sec (3X NDR)", "expected a speed of SDR/DDR/QDR/FDR10/FDR/EDR/HDR/NDR/XDR and 1X, 2X, 4X, 8X or 12X "
                            "lanes, got '400 Gb/sec (3X NDR)'"),
    ("400 Gb/sec (4X GDR)", "expected a speed of SDR/DDR/QDR/FDR10/FDR/EDR/HDR/NDR/XDR and 1X, 2X, 4X, 8X or 12X "
                            "lanes, got '400 Gb/sec (4X GDR)'"),
    ("400 Gb/sec (4X NDR", "expected '<n> Gb/sec (<w>X <SPEED>)', got '400 Gb/sec (4X NDR'"),
    ("400.0 Gb/sec (4X NDR)", "expected '<n> Gb/sec (<w>X <SPEED>)', got '400.0 Gb/sec (4X NDR)'"),
    ("-400 Gb/sec (4X NDR)", "expected '<n> Gb/sec (<w>X <SPEED>)', got '-400 Gb/sec (4X NDR)'"),
])
def test_rate_no_kernel_prints_is_refused(text, message):
    with pytest.raises(sysfs.SysfsFormatError) as info:
        sysfs.parse_rate(text)
    assert str(info.value) == message


@pytest.mark.parametrize("text, expected", [
    # state_show: state_name[] of enum ib_port_state, else "UNKNOWN"
    ("0: NOP\n", (0, "NOP")), ("1: DOWN\n", (1, "DOWN")), ("2: INIT\n", (2, "INIT")), ("3: ARMED\n", (3, "ARMED")),
    ("4: ACTIVE\n", (4, "ACTIVE")), ("5: ACTIVE_DEFER\n", (5, "ACTIVE_DEFER")), ("9: UNKNOWN\n", (9, "UNKNOWN")),
])
def test_port_state_every_kernel_form(text, expected):
    assert sysfs.parse_port_state(text) == expected


@pytest.mark.parametrize("text, expected", [
    # 4.18 phys_state_show's switch; 5.x/6.x phys_state_to_str(), the same names
    ("1: Sleep\n", (1, "Sleep")), ("2: Polling\n", (2, "Polling")), ("3: Disabled\n", (3, "Disabled")),
    ("4: PortConfigurationTraining\n", (4, "PortConfigurationTraining")), ("5: LinkUp\n", (5, "LinkUp")),
    ("6: LinkErrorRecovery\n", (6, "LinkErrorRecovery")), ("7: Phy Test\n", (7, "Phy Test")),
    ("0: <unknown>\n", (0, "<unknown>")), ("9: <unknown>\n", (9, "<unknown>")),
])
def test_phys_state_every_kernel_form(text, expected):
    assert sysfs.parse_phys_state(text) == expected


@pytest.mark.parametrize("parse, text, message", [
    (sysfs.parse_port_state, "4: DOWN", "expected '4: ACTIVE', got '4: DOWN'"),
    (sysfs.parse_port_state, "1: ACTIVE", "expected '1: DOWN', got '1: ACTIVE'"),
    (sysfs.parse_port_state, "7: ACTIVE", "expected '7: UNKNOWN', got '7: ACTIVE'"),
    (sysfs.parse_port_state, "ACTIVE", "expected '<n>: <NAME>', got 'ACTIVE'"),
    (sysfs.parse_phys_state, "5: Disabled", "expected '5: LinkUp', got '5: Disabled'"),
    (sysfs.parse_phys_state, "8: LinkUp", "expected '8: <unknown>', got '8: LinkUp'"),
])
def test_a_state_whose_number_and_name_disagree_is_refused(parse, text, message):
    with pytest.raises(sysfs.SysfsFormatError) as info:
        parse(text)
    assert str(info.value) == message


@pytest.mark.parametrize("line, old, message", [
    ("mlx5_0/device/current_link_speed:", "8.0 GT/s PCIe", "/sys/class/infiniband/mlx5_0/device/current_link_speed: "
     "expected one of 2.5, 5.0, 8.0, 16.0, 32.0, 64.0 GT/s (PCIe), or Unknown, got '0.0 GT/s PCIe'"),
    ("mlx5_0/device/current_link_width:", "8", "/sys/class/infiniband/mlx5_0/device/current_link_width: "
     "expected a lane count 0 to 32 (or 255: unknown), got '-1'"),
    ("mlx5_0/ports/1/rate:", "25 Gb/sec (1X EDR)", "/sys/class/infiniband/mlx5_0/ports/1/rate: "
     "expected 25 Gb/sec for 1X EDR, got '0 Gb/sec (1X EDR)'"),
])
def test_an_unreadable_value_in_the_rdma_dump_names_its_file(line, old, message):
    """The reproductions: "0.0 GT/s PCIe" and a width of -1 were read as
    numbers; now the dump's parser refuses them naming the file."""
    from pathlib import Path

    from ccrhost.probes import rdma

    new = {"8.0 GT/s PCIe": "0.0 GT/s PCIe", "8": "-1", "25 Gb/sec (1X EDR)": "0 Gb/sec (1X EDR)"}[old]
    lines = (Path(__file__).parent / "fixtures/rdma_dump_roce.txt").read_text().splitlines()
    assert f"{line}{old}" in lines
    lines = [f"{line}{new}" if x == f"{line}{old}" else x for x in lines]
    with pytest.raises(rdma.RdmaFormatError) as info:
        rdma.parse_rdma_dump(lines)
    assert str(info.value) == message


@pytest.mark.parametrize("text, tos", [("0\n", 0), ("106\n", 106), ("255\n", 255)])
def test_default_roce_tos_every_kernel_form(text, tos):
    # cma_configfs.c default_roce_tos_show: sprintf/sysfs_emit "%u\n" of a u8
    assert sysfs.parse_tos(text) == tos


@pytest.mark.parametrize("text", ["-1", "256", "0x6a", "+106", "\u0661\u0660\u0666", ""])
def test_default_roce_tos_refuses_what_the_kernel_never_prints(text):
    with pytest.raises(sysfs.SysfsFormatError) as info:
        sysfs.parse_tos(text)
    assert str(info.value) == f"expected a ToS byte 0 to 255, got {text!r}"


@pytest.mark.parametrize("text", ["InfiniBand\n", "Ethernet\n", "Unknown\n"])
def test_link_layer_every_kernel_form(text):
    # infiniband/core/sysfs.c link_layer_show: IB_LINK_LAYER_INFINIBAND/ETHERNET, default "Unknown"
    assert sysfs.parse_link_layer(text) == text.strip()


@pytest.mark.parametrize("text", ["ethernet", "IB", "", "Ether"])
def test_link_layer_refuses_other_text(text):
    with pytest.raises(sysfs.SysfsFormatError) as info:
        sysfs.parse_link_layer(text)
    assert str(info.value) == f"expected one of InfiniBand, Ethernet, Unknown, got {text!r}"
