"""NCCL settings from facts: golden renders, the managed block, refusals."""

import os
from pathlib import Path

import pytest

from ccrhost.model import nccl
from ccrhost.probes.rdma import GidEntry, NodeNet, RdmaDevice, RdmaPort, RdmaReading
from ccrhost.settings import InventoryDataError, validate_host

GOLDEN = Path(__file__).parent / "golden"


def port(link="Ethernet", state="ACTIVE", rate=400.0, gid_index=3, ip="198.19.0.1", netdev="ens1np0"):
    gids = [GidEntry(0, "fe80::1", "IB/RoCE v1", netdev, None)]
    if link == "Ethernet":
        gids += [GidEntry(gid_index - 1, f"::ffff:{ip}", "IB/RoCE v1", netdev, ip),
                 GidEntry(gid_index, f"::ffff:{ip}", "RoCE v2", netdev, ip)]
    return RdmaPort(state=state, phys_state="LinkUp" if state == "ACTIVE" else "Disabled", rate_gbps=rate,
                    link_layer=link, netdev=netdev, gids=gids)


def facts(devices, route="eth0"):
    return RdmaReading({name: RdmaDevice(ports={1: p}) for name, p in devices.items()},
                       NodeNet(default_route_dev=route))


# Device names in discovery order, deliberately not sorted: mlx5_10 must come after mlx5_9.
ROCE_8 = facts({f"mlx5_{i}": port(ip=f"198.19.{i}.1", netdev=f"ens{i + 1}np0") for i in (7, 6, 5, 4, 3, 2, 1, 0)})
IB_8 = facts({f"mlx5_{i}": port("InfiniBand", netdev=f"ibp{i}s0") for i in range(8)}, route="bond0")
MIXED = facts({**{f"mlx5_{i}": port(ip=f"198.19.{i}.1") for i in (0, 1, 2, 3, 4, 5, 6, 7, 9, 10)},
               "mlx5_bond_0": port(rate=100.0, ip="10.1.0.5")})

PROFILES = {
    "roce-8x400": (ROCE_8, {}),
    "ib-8x400": (IB_8, {"nccl_ib_timeout": 22, "nccl_net_gdr_level": "PHB"}),
    "mixed-storage-excluded": (MIXED, {"rdma_exclude_devices": ["mlx5_bond_*"], "nccl_ib_addr_range": "198.19.0.0/16",
                                       "nccl_fifo_dscp": 48, "nccl_ib_qps_per_connection": 4,
                                       "nccl_extra": {"NCCL_DEBUG": "WARN"}}),
}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_golden_renders(profile):
    fact, data = PROFILES[profile]
    env = nccl.derive(fact, validate_host("n1", data))
    rendered = {"conf": nccl.render_block(env), "sh": nccl.render_profile(env)}
    for kind, text in rendered.items():
        path = GOLDEN / f"nccl-{profile}.{kind}"
        if os.environ.get("UPDATE_GOLDEN"):
            path.write_text(text)
        assert text == path.read_text(), path


def test_roce_derivation():
    env = nccl.derive(ROCE_8, validate_host("n1", {}))
    assert env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    assert env["NCCL_IB_TC"] == "106" and env["NCCL_IB_FIFO_TC"] == "106"
    assert env["NCCL_IB_ROCE_VERSION_NUM"] == "2" and env["NCCL_IB_ADDR_FAMILY"] == "AF_INET"
    assert "NCCL_IB_GID_INDEX" not in env  # NCCL selects per port unless pinned
    assert env["NCCL_SOCKET_IFNAME"] == "=eth0"


def test_natural_order_and_exclusion():
    env = nccl.derive(MIXED, validate_host("n1", {"rdma_exclude_devices": ["mlx5_bond_*"]}))
    assert env["NCCL_IB_HCA"].endswith("mlx5_7:1,mlx5_9:1,mlx5_10:1")
    assert "mlx5_bond_0" not in env["NCCL_IB_HCA"]


def test_infiniband_gets_no_roce_keys():
    env = nccl.derive(IB_8, validate_host("n1", {"nccl_ib_gid_index": 3, "nccl_extra": {"NCCL_DEBUG": "INFO"}}))
    assert not set(env) & set(nccl.ROCE_ONLY)
    assert env["NCCL_DEBUG"] == "INFO"


def test_down_ports_are_left_out():
    fact = facts({"mlx5_0": port(), "mlx5_1": port(state="DOWN")})
    assert nccl.derive(fact, validate_host("n1", {}))["NCCL_IB_HCA"] == "=mlx5_0:1"


def test_gid_index_pinned_when_consistent():
    assert nccl.derive(ROCE_8, validate_host("n1", {"nccl_ib_gid_index": 3}))["NCCL_IB_GID_INDEX"] == "3"


def test_gid_index_conflict_names_ports_and_indexes():
    fact = facts({"mlx5_0": port(), "mlx5_1": port(gid_index=5), "mlx5_2": port(gid_index=7)})
    with pytest.raises(nccl.NcclError) as info:
        nccl.derive(fact, validate_host("n1", {"nccl_ib_gid_index": 3}))
    assert str(info.value) == (
        "nccl_ib_gid_index 3 does not hold the RoCE v2 IPv4 GID on every compute port "
        "(mlx5_1/1 at 5, mlx5_2/1 at 7); leave it unset so NCCL selects the GID per port")


def test_no_compute_port():
    with pytest.raises(nccl.NcclError, match="no active compute RDMA port"):
        nccl.derive(facts({"mlx5_0": port(state="DOWN")}), validate_host("n1", {}))


def test_extra_may_not_shadow_a_derived_key():
    # refused at validation, before any host is touched, pointing at the key that sets it
    with pytest.raises(InventoryDataError, match="NCCL_IB_HCA has its own key: set nccl_ib_hca instead"):
        validate_host("n1", {"nccl_extra": {"NCCL_IB_HCA": "mlx5_0"}})
    # and derive() still refuses a settings object that skipped validation
    settings = validate_host("n1", {}).model_copy(update={"nccl_extra": {"NCCL_IB_HCA": "mlx5_0"}})
    with pytest.raises(nccl.NcclError, match="nccl_extra sets NCCL_IB_HCA"):
        nccl.derive(ROCE_8, settings)


@pytest.mark.parametrize("value", ["INFO\nNCCL_X=1", "a=b", '"quoted"', "'q'", "$(reboot)", "`id`", "a;b", "a b", "a\\b", "x|y"])
def test_unsafe_extra_values_are_refused(value):
    with pytest.raises(InventoryDataError) as info:
        validate_host("n1", {"nccl_extra": {"NCCL_DEBUG": value}})
    assert info.value.errors[0].key == "nccl_extra[NCCL_DEBUG]"
    assert info.value.errors[0].value == value


def test_merge_block_keeps_site_lines_and_replaces_only_the_block():
    block = nccl.render_block({"NCCL_IB_TC": "106"})
    site = "# site settings\nNCCL_DEBUG=WARN\n"
    first = nccl.merge_block(site, block)
    assert first == site + block
    edited = first + "NCCL_TOPO_FILE=/opt/topo.xml\n"
    again = nccl.merge_block(edited, nccl.render_block({"NCCL_IB_TC": "98"}))
    assert again == site + nccl.render_block({"NCCL_IB_TC": "98"}) + "NCCL_TOPO_FILE=/opt/topo.xml\n"
    assert nccl.merge_block(again, nccl.render_block({"NCCL_IB_TC": "98"})) == again
    assert nccl.merge_block(None, block) == block
    assert nccl.merge_block("NCCL_DEBUG=WARN", block) == "NCCL_DEBUG=WARN\n" + block


def test_site_override_is_reported():
    existing = "NCCL_IB_TC=96\n" + nccl.render_block({"NCCL_IB_TC": "106"})
    assert nccl.site_overrides(existing, {"NCCL_IB_TC": "106"}) == ["NCCL_IB_TC"]


def test_conf_block_is_what_ncclparses():
    env = nccl.derive(ROCE_8, validate_host("n1", {}))
    for line in nccl.render_block(env).splitlines():
        assert line.startswith("#") or ("=" in line and not line.startswith("export") and '"' not in line)


def test_a_crlf_file_keeps_one_block_and_every_site_line():
    block = nccl.render_block({"NCCL_IB_TC": "106"})
    site = "# site\r\nNCCL_DEBUG=WARN\r\n"
    first = nccl.merge_block(site, block)
    assert first == site + block
    crlf_block = block.replace("\n", "\r\n")  # someone's editor rewrote the whole file with CRLF
    again = nccl.merge_block(site + crlf_block + "NCCL_X=1\r\n", block)
    assert again == site + block + "NCCL_X=1\r\n" and again.count(nccl.BEGIN) == 1
    assert nccl.merge_block(again, block) == again


def test_a_begin_without_end_is_refused_not_truncated():
    text = f"NCCL_DEBUG=WARN\n{nccl.BEGIN}\nNCCL_IB_TC=106\nNCCL_SITE_ONLY=1\n"
    with pytest.raises(nccl.BlockError) as info:
        nccl.merge_block(text, nccl.render_block({"NCCL_IB_TC": "106"}))
    assert str(info.value).startswith(f"line 2 opens ccrhost's block ({nccl.BEGIN!r}) but no {nccl.END!r} line")


def test_site_text_is_everything_but_the_block():
    block = nccl.render_block({"NCCL_IB_TC": "106"})
    assert nccl.site_text("A=1\n" + block + "B=2") == "A=1\nB=2"
    assert nccl.site_text(block) == ""


def test_a_shared_file_with_site_lines_is_backed_up_before_its_content_is_replaced():
    from ccrhost.operations.base import WriteFileCommand, describe
    from ccrhost.operations.files import converge
    from ccrhost.probes.files import FileState

    block = nccl.render_block({"NCCL_IB_TC": "106"})
    site = "NCCL_DEBUG=WARN\n"
    state = FileState("644", 0, 0, site)
    cmds = list(converge("/etc/nccl.conf", nccl.merge_block(site, block), state, owned=False, site=site))
    assert describe(cmds[0]).startswith("cp -p /etc/nccl.conf /etc/nccl.conf.ccrhost-bak.")
    assert isinstance(cmds[1], WriteFileCommand)
    ours = FileState("644", 0, 0, block)  # only ccrhost's own block: nothing of the site's to keep
    cmds = list(converge("/etc/nccl.conf", nccl.render_block({"NCCL_IB_TC": "98"}), ours, owned=False, site=""))
    assert len(cmds) == 1 and isinstance(cmds[0], WriteFileCommand)
    assert list(converge("/etc/nccl.conf", block, FileState("644", 0, 0, block), owned=False)) == []


@pytest.mark.parametrize("why", ["/etc/nccl.conf is a symbolic link", "/etc/nccl.conf cannot be read: Input/output error",
                                 "/etc/nccl.conf is not UTF-8: byte 0xe9 in line 1: caf\\xe9"])
def test_a_file_that_cannot_be_read_back_fails_the_host_and_is_not_written(why):
    from ccrhost.operations.base import _report_failure, describe
    from ccrhost.operations.files import converge
    from ccrhost.probes.files import FileState

    (only,) = converge("/etc/nccl.conf", "NCCL_X=1\n", FileState("", 0, 0, None, why), owned=False, site="")
    assert only.function is _report_failure and describe(only) == f"fail: /etc/nccl.conf left untouched: {why}"


def test_an_efa_device_is_no_nccl_ib_hca_entry():
    """AWS EFA reports link_layer "Unknown": NCCL uses it through aws-ofi-nccl,
    never as an IB HCA; beside RoCE ports it is left out, alone there is no
    NCCL_IB_HCA at all."""
    efa = port("Unknown", netdev=None)
    mixed = nccl.derive(facts({"mlx5_0": port(), "rdmap16s27": efa}), validate_host("n1", {}))
    assert mixed["NCCL_IB_HCA"] == "=mlx5_0:1"
    alone = nccl.derive(facts({"rdmap16s27": efa, "rdmap32s27": efa}), validate_host("n1", {}))
    assert "NCCL_IB_HCA" not in alone and "NCCL_IB_TC" not in alone
    assert "rdmap" not in nccl.render_block(alone)
