"""Unreadable values are never numbers: non-ASCII digits never reach int(),
and versions compare only like with like (issue 24)."""

from __future__ import annotations

import pytest

from ccrhost.model import datapath as dp
from ccrhost.model.datapath import HostVersions, RequiredVersions
from ccrhost.model.ports import natural_key
from ccrhost.model.status import FAIL, UNKNOWN
from ccrhost.probes import pci, perftest

# --- non-ASCII digits ----------------------------------------------------------

def test_a_netdev_name_with_other_digits_sorts_without_raising():
    """The reproduction: natural_key("eth0²") called int("²") ("²".isdigit() is True)."""
    names = ["eth0²", "eth10", "eth2", "eth0١"]
    assert sorted(names, key=natural_key) == ["eth0²", "eth0١", "eth2", "eth10"]
    assert natural_key("eth0²") == ["eth", 0, "²"]
    plan = dp.plan_mtu({"eth0²": 1500, "eth1": 4200}, 4200, None)
    assert plan.commands == [["ip", "link", "set", "dev", "eth0²", "mtu", "4200"]]


@pytest.mark.parametrize("rc", ["²", "-²", "١٢٤", "1_24", "+", ""])
def test_a_gpudirect_exit_code_that_is_no_number_is_a_failure_not_a_crash(rc):
    """The reproduction: perftest's rc check took "²" as digits and int() raised."""
    why, gbps, errors = perftest.parse_gdr_runs(["@@pair GPU0-mlx5_0", "Couldn't allocate MR", f"@@rc {rc}"])
    assert (why, gbps) == (None, {})
    assert errors == ["GPUDirect ib_write_bw on GPU0-mlx5_0 failed: Couldn't allocate MR"]


def test_a_gpudirect_timeout_is_still_read():
    assert perftest.parse_gdr_runs(["@@pair GPU0-mlx5_0", "@@rc 124"])[2] == [
        "GPUDirect ib_write_bw on GPU0-mlx5_0 timed out"]


@pytest.mark.parametrize("cell", ["٩٢.٤٠", "9_2.40", "nan", "inf", "-1.0"])
def test_a_perftest_bandwidth_that_is_no_ascii_number_is_no_measurement(cell):
    text = ("#bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            f" 65536      2000             92.41              {cell}              0.176246\n")
    with pytest.raises(perftest.NotAMeasurement, match="bandwidth is not a finite number >= 0"):
        perftest.parse_ib_write_bw(text)


@pytest.mark.parametrize("version", ["٥٣٥.١٨٣.٠١", "535.١٨٣.01"])
def test_an_nvidia_version_in_other_digits_is_a_format_error(version):
    line = f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Mon Sep 12 19:21:56 UTC 2022"
    with pytest.raises(pci.PciFormatError, match="no driver version after 'Kernel Module'"):
        pci.parse_nvidia_version(line)
    with pytest.raises(pci.PciFormatError, match="modinfo nvidia without a dotted version"):
        pci.parse_modinfo([f"version:        {version}"])


@pytest.mark.parametrize("version", ["٥٣٥.١٨٣.٠١", "535.104.05²", "inbox 6.1.0-18-amd64", "28.39.", "", "v28.39",
                                     "28.39.3560 (MT_0000000838)", "28..39"])
def test_a_version_that_is_no_version_number_has_no_key(version):
    assert dp.version_key(version) is None


def test_version_numbers_compare_number_by_number():
    assert dp.version_key("23.10-1.1.9") == (23, 10, 1, 1, 9)
    assert dp.compare_versions("23.10-1.1.9", "5.8-4.1.5") == 1
    assert dp.compare_versions("535.104.05", "535.183.01") == -1
    assert dp.compare_versions("28.39.3560", "28.39.3560") == 0
    assert dp.compare_versions("28.39.3560", "28.39") == 1  # a shorter requirement is a prefix
    assert dp.compare_versions("inbox 6.1.0-18-amd64", "23.10") is None
    assert dp.compare_versions("23.10", "inbox 6.1.0") is None


def test_pci_ids_in_other_digits_are_a_format_error():
    with pytest.raises(pci.PciFormatError, match=r"^0000:01:00.0: vendor '0x١٥b3' is not a hex number$"):
        pci._hex("0000:01:00.0", "vendor", "0x١٥b3")
    with pytest.raises(pci.PciFormatError, match=r"^0000:01:00.0: device '0x10_1b' is not a hex number$"):
        pci._hex("0000:01:00.0", "device", "0x10_1b")
    assert pci._hex("0000:01:00.0", "vendor", "0x15b3") == 0x15B3


# --- versions against a requirement -----------------------------------------------

def _one(**versions) -> HostVersions:
    return HostVersions(nic_fw={"mlx5_0": "28.39.3560"}, nic_model={"mlx5_0": "MT_0000000838"}, **versions)


def _reasons(host: HostVersions, **need) -> list[tuple[str, str, str]]:
    out = dp.check_fleet_versions({"n": host}, RequiredVersions(**need))["n"]
    return [(r.level, r.code, r.message) for r in out]


def test_the_inbox_mlx5_driver_against_a_required_release_is_a_named_fail():
    """The reproduction: "inbox 6.1.0-18-amd64" sorted above every number, so
    any verify_required_mlx5 passed on it."""
    assert _reasons(_one(mlx5="inbox 6.1.0-18-amd64", nvidia="535.183.01"), mlx5="23.10-1.1.9") == [
        (FAIL, "mlx5_inbox", "mlx5 driver is the kernel's inbox driver (6.1.0-18-amd64), not an MLNX_OFED release; "
                             "required 23.10-1.1.9")]


def test_a_version_that_is_no_number_against_a_requirement_is_unknown_naming_it():
    assert _reasons(_one(nvidia="535.104.05²"), nvidia="535.104.05") == [
        (UNKNOWN, "nvidia_version_unknown", "NVIDIA driver version '535.104.05²' is not a version number; cannot "
                                            "compare it with the required 535.104.05")]
    assert _reasons(_one(mlx5="OFED-internal"), mlx5="23.10") == [
        (UNKNOWN, "mlx5_version_unknown", "mlx5 driver version 'OFED-internal' is not a version number; cannot "
                                          "compare it with the required 23.10")]
    host = HostVersions(nic_fw={"mlx5_0": "28.39.3560", "mlx5_1": "N/A"})
    assert _reasons(host, nic_fw="28.39.3560") == [
        (UNKNOWN, "fw_version_unknown", "NIC mlx5_1 firmware 'N/A' is not a version number; cannot compare it with "
                                        "the required 28.39.3560")]


def test_met_and_unmet_numeric_requirements_are_unchanged():
    assert _reasons(_one(mlx5="23.10-1.1.9", nvidia="550.54.15"), mlx5="23.10", nvidia="550") == []
    assert _reasons(_one(mlx5="5.8-4.1.5"), mlx5="23.10") == [
        (FAIL, "mlx5_required", "mlx5 driver 5.8-4.1.5 does not meet the required 23.10")]


def test_no_requirement_no_verdict_on_an_inbox_driver():
    assert _reasons(_one(mlx5="inbox 6.1.0-18-amd64")) == []


@pytest.mark.parametrize("key", ["verify_required_nic_fw", "verify_required_mlx5", "verify_required_nvidia"])
@pytest.mark.parametrize("value", ["23.10a", "inbox", "535.104.05-rc1", "23..10", "٥٣٥"])
def test_a_required_version_is_a_version_number(key, value):
    from ccrhost.settings import InventoryDataError, validate_host

    with pytest.raises(InventoryDataError) as info:
        validate_host("gpu01", {key: value})
    assert str(info.value) == (f"gpu01: {key} = {value!r}: must match ^[0-9]{{1,9}}([._-][0-9]{{1,9}}){{0,15}}$")


@pytest.mark.parametrize("text, hi, value", [("16", None, 16), (" 255\n", 255, 255), ("256", 255, None), ("-1", None, None),
                                             ("+1", None, None), ("١", None, None), ("²", None, None), ("1_0", None, None),
                                             ("0x10", None, None), ("", None, None)])
def test_unsigned_is_the_kernels_percent_u(text, hi, value):
    from ccrhost import numbers

    assert numbers.unsigned(text, hi) == value


@pytest.mark.parametrize("stamp", ["nan", "inf", "-3.0", "\u0663.0", "1e3", "3_0", ""])
def test_a_fabric_reading_time_that_is_no_number_is_refused(stamp):
    """float() and str.isdigit() took some of these; the reading's time divides the counters' rise."""
    from ccrhost.probes.fabric import FabricFormatError, parse_reading

    with pytest.raises(FabricFormatError, match="is not a time"):
        parse_reading([f"@@t {stamp}", "@@boot b1"])
    assert parse_reading(["@@t 1733300000.123456789", "@@boot b1"]).time == 1733300000.123456789