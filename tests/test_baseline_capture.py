"""`ccrhost baseline capture` and `diff` (issue 47, item 3): a known-good
node's readings as a platform file's hardware section, and exactly what
another node differs from it by (each key: expected and from which file,
read and from where, the parts that differ)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from ccrhost.model import contract
from ccrhost.model.gpus import GpuReading
from ccrhost.model.ports import Port
from ccrhost.model.status import FAIL, OK, UNKNOWN
from ccrhost.model.verdict import Readings
from ccrhost.node.baseline_capture import BaselineError, capture_text, read_platform


def port(i, rate=400.0, width=16, state="ACTIVE"):
    return Port(f"mlx5_{i}", 1, "Ethernet", state, "LinkUp" if state == "ACTIVE" else "Disabled", rate, 32.0,
                width, 32.0, 16)


def gpu(i, width=16):
    return GpuReading(i, "NVIDIA H100 80GB HBM3", pcie_gen=5, pcie_gen_max=5, pcie_width=width, pcie_width_max=16)


def good():
    return Readings(ports=[port(i) for i in range(8)], gpus=[gpu(i) for i in range(8)])


def test_a_good_nodes_capture_is_its_hardware_and_says_what_it_could_not_read():
    text, notes = capture_text(good(), "node1", "site-h100", "2026-12-06")
    doc = yaml.safe_load(text)
    assert doc == {"name": "site-h100", "title": "site-h100: captured from node1 on 2026-12-06", "extends": None,
                   "hardware": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nic_count": 8,
                                "nic_gbps": 400.0, "link_layer": "Ethernet", "gpu_pcie": {"gen": 5, "width": 16},
                                "nic_pcie": {"gen": 5, "width": 16},
                                "source": "captured from node1 by `ccrhost baseline capture`", "date": "2026-12-06"}}
    # the host baseline was not read here (tests/test_contract_settings.py reads one): each key says so
    assert notes[0] == "hardware.numa_nodes: not read (the data path was not read): left out"
    assert notes[1:] == [f"settings.{k}: not read (the host baseline was not read): left out"
                         for k in contract.settings(good()) if k != "baseline_memory_tolerance_pct"]
    assert "# note: hardware.numa_nodes: not read (the data path was not read): left out\n" in text


def test_a_part_that_reads_otherwise_is_named_and_the_common_value_kept():
    readings = replace(good(), gpus=[gpu(i, 8 if i == 3 else 16) for i in range(8)])
    doc, notes = contract.capture(readings, "p", "t")
    assert doc["hardware"]["gpu_pcie"] == {"gen": 5, "width": 16}
    assert "hardware.gpu_pcie.width: GPU 3 read otherwise than the rest (16)" in notes


def platform_file(tmp_path, readings=None):
    text, _ = capture_text(readings or good(), "node1", "site", "2026-12-06")
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return str(path)


def test_diff_names_exactly_the_keys_and_parts_that_differ(tmp_path):
    path = platform_file(tmp_path)
    expected, where = read_platform(path)
    assert contract.diff(expected, where, good()) == []
    faulted = replace(good(), gpus=[gpu(i) for i in range(7)],
                      ports=[port(0), port(1, width=8), port(2, rate=200.0), *[port(i) for i in range(3, 7)],
                             port(7, state="DOWN")])
    found = contract.diff(expected, where, faulted)
    assert [d.text() for d in found] == [
        f"hardware.gpu_count: expected 8 ({path}), read 7 (nvidia-smi (NVML))",
        f"hardware.nic_count: expected 8 ({path}), read 7 (/sys/class/infiniband/*/ports/*/state (ACTIVE compute "
        "ports))",
        f"hardware.nic_gbps: expected 400.0 ({path}), read {{'mlx5_2/1': 200.0}} (/sys/class/infiniband/*/ports/*/rate)",
        f"hardware.nic_pcie.width: expected 16 ({path}), read {{'mlx5_1/1': 8}} "
        "(/sys/bus/pci/devices/*/current_link_{speed,width})"]
    assert contract.status(found) == FAIL
    unread = contract.diff(expected, where, replace(good(), gpus=[], gpu_error="NVML: driver not loaded"))
    assert {d.key: d.level for d in unread} == {"hardware.gpu_count": UNKNOWN, "hardware.gpu_model": UNKNOWN,
                                               "hardware.gpu_pcie.gen": UNKNOWN, "hardware.gpu_pcie.width": UNKNOWN}
    assert contract.status(unread) == UNKNOWN and contract.status([]) == OK


def test_a_site_file_names_the_file_each_expected_key_came_from(tmp_path):
    base = platform_file(tmp_path)
    site = tmp_path / "ours.yaml"
    site.write_text("name: ours\nextends: site.yaml\nhardware:\n  nic_gbps: 200\n  nic_pcie: null\n")
    expected, where = read_platform(str(site))
    assert expected["hardware"]["nic_gbps"] == 200 and "nic_pcie" not in expected["hardware"]
    assert where["hardware.nic_gbps"] == str(site) and where["hardware.gpu_count"] == str(tmp_path / "site.yaml")
    [d] = contract.diff(expected, where, good())
    assert d.text().startswith(f"hardware.nic_gbps: expected 200 ({site}), read {{'mlx5_0/1': 400.0, ")
    assert base


def test_a_platform_file_that_cannot_be_read_is_refused_naming_it(tmp_path):
    with pytest.raises(BaselineError, match=r"^cannot read the platform file /nonexistent/x.yaml: No such file"):
        read_platform("/nonexistent/x.yaml")
    loop = tmp_path / "loop.yaml"
    loop.write_text("extends: loop.yaml\n")
    with pytest.raises(BaselineError, match="extends itself"):
        read_platform(str(loop))


def test_a_captured_file_loads_with_the_platform_loader(tmp_path):
    """The platform loader (model/platform.py, the platform helper's) takes every hardware key capture writes."""
    from ccrhost.model import platform
    loaded = platform.resolve(platform_file(tmp_path))
    assert loaded.hardware["gpu_count"] == 8 and loaded.hardware["nic_pcie"] == {"gen": 5, "width": 16}


def test_diff_exits_unknown_on_a_platform_file_that_cannot_be_read(capsys):
    from ccrhost.cli import entry

    with pytest.raises(SystemExit) as done:
        entry(["baseline", "diff", "--platform", "/nonexistent/site.yaml"])
    assert done.value.code == 3
    assert "Error: diff: cannot read the platform file /nonexistent/site.yaml: No such file or directory" in \
        capsys.readouterr().err
