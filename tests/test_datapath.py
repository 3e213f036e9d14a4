"""Data-path verdicts and tuning plans, from readings alone."""

import pytest

from ccrhost.model import datapath as dp
from ccrhost.model.datapath import (
    HostVersions,
    Iommu,
    LinkThresholds,
    PeerMemory,
    RequiredVersions,
)
from ccrhost.model.status import FAIL, UNKNOWN, WARN
from ccrhost.model.topology import Endpoint, pair


def levels(reasons):
    return [(r.level, r.code) for r in reasons]


# --- GPUDirect availability and the peer-memory plan ------------------------

PROPRIETARY = PeerMemory(loaded=(), shipped=("nvidia_peermem",), kernel_release="6.8.0-45-generic",
                         nvidia_version="535.183.01", nvidia_open=False)


def test_gpudirect_ok_with_a_peer_memory_client():
    pm = PeerMemory(("nvidia_peermem",), ("nvidia_peermem",), "6.8.0", "535.183.01", False)
    assert dp.check_gpudirect(pm, 8) == []
    legacy = PeerMemory(("nv_mem", "nv_peer_mem"), ("nv_peer_mem",), "5.4.0", "470.82.01", False)
    assert dp.check_gpudirect(legacy, 8) == []


def test_gpudirect_fails_without_peer_memory_or_dmabuf():
    reasons = dp.check_gpudirect(PROPRIETARY, 8)
    assert levels(reasons) == [(FAIL, "gpudirect_unavailable")]
    assert reasons[0].message.startswith("GPUDirect RDMA unavailable: NCCL will stage through host memory (")
    assert "535.183.01 is the proprietary one" in reasons[0].message
    assert dp.check_gpudirect(PROPRIETARY, 0) == []  # no GPU: nothing to carry


@pytest.mark.parametrize("kernel, version, is_open, ready, why", [
    ("6.8.0-45-generic", "565.57.01", True, True, "dma-buf available"),
    ("5.11.0", "565.57.01", True, False, "Linux 5.12 or later, this is 5.11.0"),
    ("5.12.0", "510.47.03", True, False, "driver 515 or later, this is 510.47.03"),
    ("6.8.0", None, None, False, "NVIDIA driver is not loaded"),
    (None, "565.57.01", True, False, "this is unknown"),
])
def test_dmabuf_prerequisites(kernel, version, is_open, ready, why):
    ok, text = dp.dmabuf_ready(PeerMemory((), (), kernel, version, is_open))
    assert ok is ready and why in text
    assert (dp.check_gpudirect(PeerMemory((), (), kernel, version, is_open), 8) == []) is ready


def test_peermem_plan_loads_one_module_or_none():
    assert dp.plan_peermem(PROPRIETARY) == dp.PeerMemPlan("nvidia_peermem", dp.plan_peermem(PROPRIETARY).note, True)
    both = PeerMemory((), ("nv_peer_mem", "nvidia_peermem"), "6.8.0", "535.183.01", False)
    assert dp.plan_peermem(both).module == "nvidia_peermem"
    legacy = PeerMemory((), ("nv_peer_mem",), "5.4.0", "450.80.02", False)
    assert dp.plan_peermem(legacy).module == "nv_peer_mem"
    dmabuf = PeerMemory((), ("nvidia_peermem",), "6.8.0", "565.57.01", True)
    plan = dp.plan_peermem(dmabuf)
    assert plan.module is None and plan.possible and plan.note.startswith("dma-buf available")
    loaded = PeerMemory(("nvidia_peermem",), ("nvidia_peermem",), "6.8.0", "565.57.01", True)
    assert dp.plan_peermem(loaded).module is None
    nothing = PeerMemory((), (), "6.8.0", "535.183.01", False)
    plan = dp.plan_peermem(nothing)
    assert (plan.module, plan.possible) == (None, False)
    assert "no peer-memory module ships" in plan.note


# --- ACS on GPU-NIC paths ------------------------------------------------------

def ep(name, *chain, numa=0):
    return Endpoint(name, chain[-1], f"/sys/devices/pci0000:{chain[0][5:7]}/" + "/".join(chain), numa)


GPU0 = ep("GPU0", "0000:14:01.0", "0000:15:00.0", "0000:16:00.0", "0000:18:00.0")
NIC0 = ep("mlx5_0", "0000:14:01.0", "0000:15:00.0", "0000:16:01.0", "0000:1a:00.0")
GPU1 = ep("GPU1", "0000:24:01.0", "0000:25:00.0", "0000:26:00.0", "0000:28:00.0")
NIC1 = ep("mlx5_1", "0000:24:01.0", "0000:25:00.0", "0000:26:01.0", "0000:2a:00.0")
PAIRS = pair([GPU0, GPU1], [NIC0, NIC1])
OFF = {"0000:14:01.0": 0x001d, "0000:16:00.0": 0, "0000:16:01.0": 0, "0000:24:01.0": 0,
       "0000:26:00.0": 0, "0000:26:01.0": 0}  # upstream ports have no ACS


def test_acs_clean_paths_pass_even_with_redirect_elsewhere():
    # the root ports are not on the PIX paths, so their ACS does not matter
    assert dp.check_acs(PAIRS, OFF) == []
    assert dp.plan_acs(PAIRS, OFF) == []


def test_acs_redirect_on_a_path_bridge_fails_naming_it():
    acs = {**OFF, "0000:26:01.0": 0x001d}  # SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+
    reasons = dp.check_acs(PAIRS, acs)
    assert levels(reasons) == [(FAIL, "acs_redirect")]
    assert "bridge 0000:26:01.0 between GPU1-mlx5_1" in reasons[0].message
    assert "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-" in reasons[0].message
    assert dp.plan_acs(PAIRS, acs) == [["setpci", "-s", "0000:26:01.0", "ECAP_ACS+0x6.w=0000:003d"]]


def test_acs_bits_that_do_not_redirect():
    # source validation alone does not redirect: no FAIL, but the plan clears it
    acs = {**OFF, "0000:16:00.0": dp.ACS_SV}
    assert dp.check_acs(PAIRS, acs) == []
    assert dp.plan_acs(PAIRS, acs) == [["setpci", "-s", "0000:16:00.0", "ECAP_ACS+0x6.w=0000:003d"]]
    # translation blocking / direct translated P2P are left alone
    acs = {**OFF, "0000:16:00.0": dp.ACS_TB | dp.ACS_DT}
    assert dp.check_acs(PAIRS, acs) == [] and dp.plan_acs(PAIRS, acs) == []
    # egress control redirects too
    assert levels(dp.check_acs(PAIRS, {**OFF, "0000:16:01.0": dp.ACS_EC})) == [(FAIL, "acs_redirect")]


def test_acs_unreadable_is_unknown_and_forced_plans_cover_every_acs_bridge():
    acs = {**OFF, "0000:16:00.0": None}
    reasons = dp.check_acs(PAIRS, acs)
    assert levels(reasons) == [(UNKNOWN, "acs_unreadable")]
    assert dp.plan_acs(PAIRS, acs) == []  # nothing known to clear
    forced = dp.plan_acs(PAIRS, OFF, force=True)
    assert [c[2] for c in forced] == ["0000:16:00.0", "0000:16:01.0", "0000:26:00.0", "0000:26:01.0"]


# --- Device Control -------------------------------------------------------------

def test_devctl_plan_writes_only_the_asked_fields_where_they_differ():
    current = {"0000:1a:00.0": 0x2930, "0000:2a:00.0": 0x5930}  # MaxReadReq 512 / 4096, RlxdOrd+
    assert dp.devctl_max_read_req(0x2930) == 512 and dp.devctl_max_payload(0x2930) == 256
    assert dp.plan_devctl(current, max_read_req=4096) == [["setpci", "-s", "0000:1a:00.0", "CAP_EXP+0x8.w=5000:7000"]]
    assert dp.plan_devctl(current, relaxed_ordering=True) == []
    assert dp.plan_devctl(current, max_read_req=4096, relaxed_ordering=False) == [
        ["setpci", "-s", "0000:1a:00.0", "CAP_EXP+0x8.w=5000:7010"],
        ["setpci", "-s", "0000:2a:00.0", "CAP_EXP+0x8.w=5000:7010"]]
    assert dp.plan_devctl(current) == []
    assert len(dp.plan_devctl(current, max_read_req=4096, force=True)) == 2
    with pytest.raises(dp.DatapathError, match="max_read_req 3000: allowed 128, 256, 512, 1024, 2048, 4096"):
        dp.plan_devctl(current, max_read_req=3000)


# --- MTU ---------------------------------------------------------------------------

def test_mtu_plan_never_touches_the_ssh_or_route_netdev():
    current = {"ens1np0": 1500, "ens2np0": 4200, "ens10np0": 9000, "ens3np0": 1500}
    plan = dp.plan_mtu(current, 4200, ssh_netdev="ens3np0")
    assert plan.commands == [["ip", "link", "set", "dev", "ens1np0", "mtu", "4200"],
                             ["ip", "link", "set", "dev", "ens10np0", "mtu", "4200"]]
    assert plan.skipped == ["ens3np0 carries this SSH connection: MTU left at 1500"]
    plan = dp.plan_mtu(current, 9000, ssh_netdev=None, route_netdev="ens10np0")
    assert [c[4] for c in plan.commands] == ["ens1np0", "ens2np0", "ens3np0"]
    assert plan.skipped == ["ens10np0 carries the default route: MTU left at 9000"]
    with pytest.raises(dp.DatapathError, match="RoCE MTU 4096: allowed 4200, 9000"):
        dp.plan_mtu(current, 4096, None)


def test_roce_active_mtu_follows_iboe_get_mtu():
    assert dp.roce_active_mtu(4200) == 4096
    assert dp.roce_active_mtu(4192) == 4096 and dp.roce_active_mtu(4191) == 2048
    assert dp.roce_active_mtu(1500) == 1024  # IBM: 1500 -> 1024
    assert dp.roce_active_mtu(9000) == 4096
    assert dp.roce_active_mtu(300) is None


# --- IOMMU ------------------------------------------------------------------------

DEVICES = {"GPU0": "0000:18:00.0", "mlx5_0": "0000:1a:00.0"}


def test_iommu_modes():
    off = Iommu((), {}, {}, "ro quiet")
    assert dp.iommu_mode(off, "0000:18:00.0") == "off" and dp.check_iommu(off, DEVICES) == []
    pt = Iommu(("dmar0",), {"12": "identity"}, {"0000:18:00.0": "12", "0000:1a:00.0": "12"})
    assert dp.iommu_mode(pt, "0000:1a:00.0") == "passthrough" and dp.check_iommu(pt, DEVICES) == []
    old_kernel = Iommu(("dmar0",), {"12": None}, {"0000:18:00.0": "12"}, "intel_iommu=on iommu=pt")
    assert dp.iommu_mode(old_kernel, "0000:18:00.0") == "passthrough"
    assert dp.iommu_mode(Iommu(("dmar0",), {"12": None}, {"0000:18:00.0": "12"}, "quiet"),
                         "0000:18:00.0") == "unknown"


def test_iommu_translating_warns_with_the_kernel_parameter():
    tr = Iommu(("dmar0", "dmar1"), {"12": "DMA-FQ", "13": "identity"},
               {"0000:18:00.0": "12", "0000:1a:00.0": "13"}, "intel_iommu=on", "x86_64")
    reasons = dp.check_iommu(tr, DEVICES)
    assert levels(reasons) == [(WARN, "iommu_translated")]
    assert "GPU0 (0000:18:00.0, group 12 DMA-FQ)" in reasons[0].message and "mlx5_0" not in reasons[0].message
    assert reasons[0].message.endswith("add the kernel parameter iommu=pt (or intel_iommu=off)")
    amd = Iommu(("ivhd0",), {"3": "DMA"}, {"0000:18:00.0": "3"}, "", "x86_64")
    assert dp.check_iommu(amd, DEVICES)[0].message.endswith("iommu=pt (or amd_iommu=off)")
    # Grace: the IOMMU is meant to translate
    grace = Iommu(("smmu3.0x0000000016000000",), {"3": "DMA"}, {"0000:18:00.0": "3"}, "", "aarch64")
    assert dp.check_iommu(grace, DEVICES) == []


# --- topology verdict --------------------------------------------------------------

def test_topology_fails_sys_and_warns_through_the_cpu_when_rail_local():
    far = ep("mlx5_1", "0000:94:01.0", "0000:9a:00.0", numa=1)
    pairs = pair([GPU0, GPU1], [NIC0, far])
    # GPU1 (numa 0) keeps mlx5_1, now on the other socket
    reasons = dp.check_topology(pairs, rail_local=True)
    assert levels(reasons) == [(FAIL, "nic_numa_far")]
    assert reasons[0].message.startswith("GPU1 (0000:28:00.0, NUMA 0) is SYS to its nearest NIC mlx5_1 (0000:9a:00.0")
    assert dp.check_topology(pairs, rail_local=False) == []
    node = ep("mlx5_1", "0000:34:01.0", "0000:3a:00.0", numa=0)
    assert levels(dp.check_topology(pair([GPU0, GPU1], [NIC0, node]), True)) == [(WARN, "nic_not_rail_local")]
    assert dp.check_topology(PAIRS, True) == []


# --- link health ---------------------------------------------------------------------

def sample(**values):
    base = dict.fromkeys(dp.COUNTERS, 0)
    return {"mlx5_0/1": {**base, **values}, "mlx5_1/1": dict(base)}


def test_link_health_clean_window():
    assert dp.check_link_health(sample(), sample(symbol_error=10, link_error_recovery=10)) == []


def test_link_downed_moving_fails():
    reasons = dp.check_link_health(sample(link_downed=3), sample(link_downed=4), window_s=30)
    assert levels(reasons) == [(FAIL, "link_flap")]
    assert reasons[0].message == "port mlx5_0/1 link_downed rose by 1 in 30 s (3 -> 4): the link is flapping"


def test_error_counters_above_thresholds_warn():
    reasons = dp.check_link_health(sample(), sample(symbol_error=11, port_rcv_errors=1, port_xmit_discards=2))
    assert levels(reasons) == [(WARN, "link_symbol_error"), (WARN, "link_port_rcv_errors"),
                               (WARN, "link_port_xmit_discards")]
    assert "rose by 11 during the window (0 -> 11), above 10" in reasons[0].message
    lenient = LinkThresholds(symbol_error=100, port_rcv_errors=5, port_xmit_discards=5)
    assert dp.check_link_health(sample(), sample(symbol_error=11, port_rcv_errors=1), lenient) == []


def test_saturated_and_cleared_counters():
    # gpud#943: link_downed 255, port_xmit_discards 65535 are all-ones
    reasons = dp.check_link_health(sample(link_downed=255, port_xmit_discards=65535),
                                   sample(link_downed=255, port_xmit_discards=65535))
    assert levels(reasons) == [(WARN, "link_counter_saturated")]
    assert "link_downed, port_xmit_discards saturated" in reasons[0].message
    assert dp.counter_delta("link_downed", 7, 2) == 2  # cleared in between: 2 since
    assert dp.counter_delta("link_downed", None, 2) is None
    # a port seen only once has no delta
    assert dp.check_link_health({}, sample(link_downed=9)) == []


# --- fleet versions -----------------------------------------------------------------------

def host(fw="28.39.3560", mlx5="23.10-1.1.9", nvidia="535.183.01", odd=None):
    nic_fw = {f"mlx5_{i}": fw for i in range(8)}
    if odd:
        nic_fw["mlx5_7"] = odd
    return HostVersions(nic_fw=nic_fw, nic_model={d: "MT_0000000838" for d in nic_fw}, mlx5=mlx5, nvidia=nvidia)


def test_fleet_flags_the_host_that_differs_from_the_majority():
    hosts = {f"node{i}": host() for i in range(1, 5)}
    hosts["node3"] = host(odd="28.38.1002")
    hosts["node4"] = host(nvidia="550.54.14")
    out = dp.check_fleet_versions(hosts)
    assert out["node1"] == [] and out["node2"] == []
    assert levels(out["node3"]) == [(WARN, "fw_mismatch")]
    assert out["node3"][0].message == "NIC mlx5_7 firmware 28.38.1002 differs from the fleet's MT_0000000838 28.39.3560"
    assert levels(out["node4"]) == [(WARN, "nvidia_mismatch")]


def test_fleet_needs_hosts_and_a_majority():
    two = {"a": host(), "b": host(odd="28.38.1002")}
    assert dp.check_fleet_versions(two) == {"a": [], "b": []}
    split = {"a": host(mlx5="5.8-4.1.5"), "b": host(mlx5="23.10-1.1.9"), "c": host(mlx5="24.01-0.3.3"),
             "d": host(mlx5="24.04-0.6.6")}
    assert all(r == [] for r in dp.check_fleet_versions(split).values())


def test_required_versions_fail_when_not_met():
    hosts = {"a": host(), "b": host(fw="28.41.1000"), "c": host(nvidia=None)}
    need = RequiredVersions(nic_fw="28.40.1000", nvidia="535.104.05")
    out = dp.check_fleet_versions(hosts, need)
    assert [r.message for r in out["a"]] == [
        "NIC mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7 firmware 28.39.3560 is older than "
        "the required 28.40.1000"]
    assert [r.code for r in out["b"]] == ["fw_mismatch"]  # newer than required, but alone in the fleet
    assert "NVIDIA driver not found does not meet the required 535.104.05" in [r.message for r in out["c"]][-1]
    assert dp.version_key("23.10-1.1.9") > dp.version_key("5.8-4.1.5")
    assert dp.version_key("535.183.01") > dp.version_key("535.104.05")
