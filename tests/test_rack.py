"""Rack checks of NVL72 racks and Slurm's topology/block file (fleet/rack.py)."""

from __future__ import annotations

import shutil

import pytest

from ccrhost.fleet import rack
from ccrhost.fleet.slurm_client import expand_hostlist, hostlist
from ccrhost.model.gpu_health import GpuHealth
from ccrhost.model.status import FAIL, Reason

A = ("9c6f5af3-53bf-49b5-a436-b66766c413c3", 4026)   # a cluster UUID and clique as gpud's GB200 reading shows them
B = ("dc6e40c4-d722-4357-9ba6-5291dd461278", 2)


def gpus(domain, n=4):
    return [GpuHealth(i, cluster_uuid=domain[0], clique_id=domain[1]) for i in range(n)]


def trays(name, hosts, domain=A, **versions):
    return [rack.tray(h, name, gpus(domain), **versions) for h in hosts]


def codes(out):
    return {h: [(r.level, r.code) for r in rs] for h, rs in out.items() if rs}


def test_a_healthy_rack_has_no_reasons():
    out = rack.check_racks(trays("r1", [f"gb{i:02d}" for i in range(1, 19)], driver="570.172", imex="570.172"))
    assert codes(out) == {} and len(out) == 18


def test_the_odd_tray_out_of_a_rack_is_named():
    ts = trays("r1", ["gb01", "gb02", "gb03"]) + [rack.tray("gb04", "r1", gpus(B))]
    out = rack.check_racks(ts)
    assert codes(out) == {"gb04": [("FAIL", "rack_fabric_split")]}
    assert out["gb04"][0].message == (f"gb04 is the odd tray out of rack r1: it reports ClusterUUID {B[0]} clique 2, "
                                      f"the others ClusterUUID {A[0]} clique 4026")


def test_a_tray_listed_in_the_wrong_rack_is_a_membership_mismatch():
    ts = trays("r1", ["gb01", "gb02", "gb03"]) + trays("r2", ["gb19", "gb20", "gb21"], B) \
        + [rack.tray("gb22", "r2", gpus(A))]
    out = rack.check_racks(ts)
    assert codes(out) == {"gb22": [("FAIL", "rack_membership_mismatch")]}
    assert out["gb22"][0].message == (f"gb22: the inventory puts it in rack r2, but it reports rack r1's NVLink "
                                      f"domain (ClusterUUID {A[0]} clique 4026)")


def test_two_inventory_racks_that_are_one_domain():
    out = rack.check_racks(trays("r1", ["gb01", "gb02"]) + trays("r2", ["gb03"]))
    # the inventory's fault, not the trays': said on each, none of them drained for it
    assert codes(out) == {h: [("UNKNOWN", "rack_unreadable")] for h in ("gb01", "gb02", "gb03")}
    assert out["gb03"][0].message.endswith("): fix imex_rack")


def test_a_tray_whose_gpus_disagree_and_a_rack_without_majority():
    split = rack.tray("gb02", "r1", gpus(A, 2) + gpus(B, 2))
    out = rack.check_racks([*trays("r1", ["gb01"]), split])
    assert codes(out)["gb02"] == [("FAIL", "rack_fabric_split")]
    tie = rack.check_racks(trays("r1", ["gb01"]) + trays("r1", ["gb02"], B))
    # no odd tray can be named: UNKNOWN on both, never a FAIL that would drain a healthy one
    assert codes(tie) == {"gb01": [("UNKNOWN", "rack_unreadable")], "gb02": [("UNKNOWN", "rack_unreadable")]}
    assert tie["gb01"][0].message.startswith("rack r1: no NVLink domain is held by most of its trays")


def test_versions_name_the_odd_tray_or_every_tray_without_majority():
    ts = trays("r1", ["gb01", "gb02"], driver="570.172", fabric_manager="570.172", imex="570.172") \
        + trays("r1", ["gb03"], driver="580.65", fabric_manager="570.172", imex="570.172")
    out = rack.check_racks(ts)
    assert codes(out) == {"gb03": [("FAIL", "rack_version_mismatch")]}
    assert out["gb03"][0].message == "gb03 is the odd tray out of rack r1: driver 580.65, the others 570.172"
    tie = rack.check_racks(trays("r1", ["gb01"], imex="1") + trays("r1", ["gb02"], imex="2"))
    assert tie["gb02"][0].message == "rack r1: no IMEX version is held by most of its trays: gb01 1, gb02 2"
    assert tie["gb02"][0].level == "UNKNOWN"


def test_what_is_not_known_is_unknown():
    out = rack.check_racks([rack.tray("gb01", None, gpus(A)), rack.tray("gb02", "r1", None),
                            rack.tray("gb03", "r1", gpus(A), driver=None)])
    assert codes(out) == {"gb01": [("UNKNOWN", "rack_unreadable")], "gb02": [("UNKNOWN", "rack_unreadable")],
                          "gb03": [("UNKNOWN", "rack_unreadable")]}
    assert out["gb03"][0].message == "gb03: its driver version was not read (rack r1)"
    with pytest.raises(ValueError, match="unknown version kind 'cuda'"):
        rack.tray("gb01", "r1", gpus(A), cuda="12.8")


# --- topology.conf -------------------------------------------------------------------

def test_hostlist_round_trips_through_slurms_expansion(tmp_path, monkeypatch):
    hosts = ["gb001", "gb002", "gb003", "gb007", "gb010", "login", "gb1x"]
    text = hostlist(hosts)
    assert text == "gb1x,gb[001-003,007,010],login"  # natural order, as the wiring topology writes it
    if shutil.which("scontrol") is None:
        pytest.skip("no scontrol to expand it")
    conf = tmp_path / "slurm.conf"  # scontrol show hostnames needs a configuration, not a controller
    conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p Nodes=n1\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    assert sorted(expand_hostlist(text)) == sorted(hosts)


def test_block_topology_leaves_out_failing_trays_and_short_racks():
    ts = trays("nvl72-a", [f"gb{i:03d}" for i in range(1, 19)]) + trays("nvl72-b", [f"gb{i:03d}" for i in range(19, 37)], B)
    ts[4].failing = True
    reasons = {"gb020": [Reason(FAIL, "rack_fabric_split", "x")], "gb021": [Reason("WARN", "x", "y")]}
    text, left = rack.block_topology(ts, reasons, sizes=(16,))
    assert text.splitlines()[2:] == ["BlockName=nvl72-a Nodes=gb[001-004,006-018]",
                                     "BlockName=nvl72-b Nodes=gb[019,021-036]",
                                     "BlockSizes=16"]
    assert left == ["gb005: FAILs its checks (rack nvl72-a)", "gb020: FAILs its checks (rack nvl72-b)"]
    text, left = rack.block_topology(ts, reasons, sizes=(18,))
    assert "BlockName" not in text and left[-1] == ("rack nvl72-b: 17 trays pass, below the base block size 18: "
                                                   "the whole block is left out")


def test_without_sizes_the_planning_base_is_the_smallest_block_so_slurm_takes_a_shorter_later_rack():
    # Slurm 24.11 without BlockSizes takes the first block's node count as the base and refuses a smaller
    # later block (tests/test_rack_lab.py shows its slurmctld doing so): nvl72-b, short of a tray, sets the base
    ts = trays("nvl72-a", [f"gb{i:03d}" for i in range(1, 19)]) + trays("nvl72-b", [f"gb{i:03d}" for i in range(19, 37)], B)
    ts[20].failing = True
    text, left = rack.block_topology(ts)
    assert text.splitlines()[2:] == ["BlockName=nvl72-a Nodes=gb[001-018]",
                                     "BlockName=nvl72-b Nodes=gb[019-020,022-036]",
                                     "BlockSizes=17,34,68,136,272"]
    assert left == ["gb021: FAILs its checks (rack nvl72-b)"]
    # every tray failing: no block, and no BlockSizes without one
    for t in ts:
        t.failing = True
    text, _ = rack.block_topology(ts)
    assert "BlockName" not in text and "BlockSizes" not in text


def test_block_sizes_follow_the_man_page():
    rack.block_topology([], sizes=(18, 36, 144))
    with pytest.raises(ValueError, match=r"BlockSizes \[18, 54\]: 54 is not a power of two times 18"):
        rack.block_topology([], sizes=(18, 54))
    with pytest.raises(ValueError, match="no whole number of nodes from 1"):
        rack.block_topology([], sizes=(0,))
