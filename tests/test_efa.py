"""AWS EFA ports (issue 29, point 6): recognised by their link layer, their
link read from their netdev, never tuned or counted as IB/RoCE ports, and
their unreliable rate an UNKNOWN bandwidth rather than a number."""

from __future__ import annotations

import pytest

from ccrhost.model import nccl
from ccrhost.model.gpus import GpuReading
from ccrhost.model.ports import compute_ports, efa_ports, ethernet_ports, roce_netdevs
from ccrhost.model.status import EXIT_CODES, FAIL, OK, UNKNOWN
from ccrhost.model.verdict import Readings, evaluate
from ccrhost.probes import sysfs
from ccrhost.probes.rdma import RdmaFormatError, parse_rdma_dump
from ccrhost.settings import validate_host


def efa_dump(devices=("rdmap16s27", "rdmap32s27"), operstate="up", carrier="1", netdev=True):
    """What the RDMA probe prints on an EFA node: the efa driver's constant
    port files (efa_verbs.c efa_query_port: ACTIVE, LinkUp, 4X EDR; core
    sysfs.c link_layer_show: "Unknown"), GID 0, and the ENA netdev beside it."""
    lines = ["@@ib"]
    for i, dev in enumerate(devices):
        nd = f"ens{32 + i}"
        lines += [f"{dev}/ports/1/state:4: ACTIVE", f"{dev}/ports/1/phys_state:5: LinkUp",
                  f"{dev}/ports/1/rate:100 Gb/sec (4X EDR)", f"{dev}/ports/1/link_layer:Unknown",
                  f"{dev}/ports/1/gid_attrs/types/0:IB/RoCE v1",
                  f"{dev}/device/current_link_speed:8.0 GT/s PCIe", f"{dev}/device/current_link_width:8",
                  f"{dev}/device/max_link_speed:8.0 GT/s PCIe", f"{dev}/device/max_link_width:8"]
        if netdev:
            lines.append(f"{dev}/device/net/{nd}/operstate:{operstate if i == 0 else 'up'}")
            if carrier is not None or i:
                lines.append(f"{dev}/device/net/{nd}/carrier:{carrier if i == 0 else '1'}")
        lines.append(f"{dev}/ports/1/gids/0:fe80:0000:0000:0000:0462:11ff:fe2a:{i:04x}")
    lines.append("@@net")
    if netdev:
        lines += [f"{dev}/device/net/ens{32 + i}" for i, dev in enumerate(devices)]
    lines += ["@@configfs", "@@route", "default via 10.0.0.1 dev ens5 proto dhcp src 10.0.0.11 metric 100"]
    return lines


def gpus(n=8):
    return [GpuReading(i, "NVIDIA H100 80GB HBM3", f"GPU-{i}", 1980, 1980, 5, 5, 16, 16, 0) for i in range(n)]


def verdict(rdma):
    return evaluate(Readings(ports=compute_ports(rdma), gpus=gpus()))


def test_the_probe_reads_an_efa_port_and_its_netdev_link():
    rdma = parse_rdma_dump(efa_dump())
    port = rdma.devices["rdmap16s27"].ports[1]
    assert port.efa and port.link_layer == "Unknown"
    assert (port.netdev, port.netdev_operstate, port.netdev_carrier) == ("ens32", "up", 1)
    (first, second) = compute_ports(rdma)
    assert first.efa and first.active and first.link_known and first.netdev == "ens32"
    assert [p.name for p in efa_ports(rdma)] == ["rdmap16s27/1", "rdmap32s27/1"]
    # not RoCE: nothing of the RoCE, QoS, MTU or boot stages takes them
    assert ethernet_ports(rdma) == [] and roce_netdevs(rdma) == {}


@pytest.mark.parametrize("operstate,carrier", [("down", None), ("up", "0"), ("lowerlayerdown", "0"),
                                               ("dormant", "1")])
def test_a_down_efa_netdev_is_a_down_port_though_its_rdma_state_reads_active(operstate, carrier):
    rdma = parse_rdma_dump(efa_dump(operstate=operstate, carrier=carrier))
    port = compute_ports(rdma)[0]
    assert port.state == "ACTIVE" and port.phys_state == "LinkUp"  # the driver's constants
    assert not port.active
    v = verdict(rdma)
    assert v.status == FAIL
    down = [r for r in v.reasons if r.code == "efa_link_down"]
    shown = "unreadable" if carrier is None else carrier
    assert [r.message for r in down] == [
        f"EFA port rdmap16s27/1 is down: netdev ens32 operstate {operstate}, carrier {shown} "
        "(its RDMA port state reads ACTIVE whatever the link does)"]
    assert not [r for r in v.reasons if r.code == "port_down"]


def test_an_operstate_unknown_netdev_is_up_as_nvsentinel_counts_it():
    port = compute_ports(parse_rdma_dump(efa_dump(operstate="unknown", carrier="1")))[0]
    assert port.active


def test_efa_ports_count_but_their_bandwidth_is_unknown_not_a_number():
    v = verdict(parse_rdma_dump(efa_dump()))
    assert v.status == UNKNOWN and v.ccr is None
    codes = {r.code: r for r in v.reasons if r.level != OK}
    assert set(codes) == {"efa_rate_unknown"}
    assert codes["efa_rate_unknown"].message.startswith("EFA ports rdmap16s27/1, rdmap32s27/1 carry the compute")
    # the node is not one without a network, and no port is judged on its fixed rate
    assert "no_rdma" not in codes and "port_rate" not in codes


def test_the_prometheus_textfile_gives_no_rate_for_an_efa_port():
    from ccrhost.node.formats import format_prometheus

    text = format_prometheus(verdict(parse_rdma_dump(efa_dump())))
    assert "ccrhost_port_effective_gbps{" not in text  # a driver constant is no reading
    assert 'ccrhost_check_reason{level="UNKNOWN",code="efa_rate_unknown",action="investigate",scope="node"} 1' in text


def test_an_efa_port_without_a_netdev_has_an_unknown_link():
    rdma = parse_rdma_dump(efa_dump(netdev=False))
    port = compute_ports(rdma)[0]
    assert port.netdev is None and not port.link_known
    v = verdict(rdma)
    assert v.status == UNKNOWN
    assert [r.code for r in v.reasons if r.code.startswith("efa_")] == [
        "efa_link_unreadable", "efa_link_unreadable", "efa_rate_unknown"]


def test_an_rdma_port_beside_efa_is_still_judged_on_its_own_rate():
    """An EFA port's fixed 100 Gb/s is not the top rate others are held to,
    nor does it make a 400G RoCE port beside it look slow."""
    from ccrhost.model.ports import Port

    roce = Port("mlx5_0", 1, "Ethernet", "ACTIVE", "LinkUp", 200.0, 32.0, 16, 32.0, 16)
    roce2 = Port("mlx5_1", 1, "Ethernet", "ACTIVE", "LinkUp", 400.0, 32.0, 16, 32.0, 16)
    efa = compute_ports(parse_rdma_dump(efa_dump(devices=("rdmap16s27",))))
    v = evaluate(Readings(ports=[roce, roce2, *efa], gpus=gpus()))
    rate = [r.message for r in v.reasons if r.code == "port_rate"]
    assert rate == ["port mlx5_0/1 runs at 200 Gb/s, expected 400"]


def test_a_measured_efa_port_is_not_held_to_its_drivers_constant_rate():
    from dataclasses import replace

    ports = [replace(p, measured_gbps=50.0) for p in compute_ports(parse_rdma_dump(efa_dump()))]
    v = evaluate(Readings(ports=ports, gpus=gpus()))
    assert "measured_slow" not in {r.code for r in v.reasons} and v.status == UNKNOWN


@pytest.mark.parametrize("text", ["UP", "up down", "", "1"])
def test_an_operstate_the_kernel_does_not_print_is_refused_naming_the_file(text):
    dump = [line if not line.endswith("/operstate:up") else line.replace(":up", f":{text}") for line in efa_dump()]
    with pytest.raises(RdmaFormatError) as err:
        parse_rdma_dump(dump)
    assert str(err.value).startswith("/sys/class/infiniband/rdmap16s27/device/net/ens32/operstate: expected one of")


@pytest.mark.parametrize("text", ["2", "-1", "yes", ""])
def test_a_carrier_that_is_not_0_or_1_is_refused(text):
    with pytest.raises(sysfs.SysfsFormatError):
        sysfs.parse_carrier(text)


def test_the_nccl_block_names_no_efa_device_and_no_roce_key():
    env = nccl.derive(parse_rdma_dump(efa_dump()), validate_host("n1", {}))
    assert not any("rdmap" in v for v in env.values())
    assert "NCCL_IB_HCA" not in env and not set(env) & set(nccl.ROCE_ONLY)


# --- the lab: an AWS p5.48xlarge-like node (ccrhost/lab/profiles/aws-p5-efa.yaml) ---------------

def _efa_state(lab, node):
    """What the deploy must leave as it is on an EFA node: the EFA devices'
    and their netdevs' sysfs, the rdma_cm configfs, and the emulated
    driver's DCB and pause state (written only by a QoS or ethtool -A write)."""
    import json as _json

    from conftest import tree_snapshot

    root = lab.root(node)
    info = _json.loads((root / "run/ccrhost-lab/node.json").read_text()) if (
        root / "run/ccrhost-lab/node.json").exists() else None
    sysfs = {}
    for dev in (root / "sys/class/infiniband").iterdir():  # os.walk follows the class link itself
        sysfs.update({f"{dev.name}/{k}": v for k, v in tree_snapshot(dev).items()})
        sysfs.update({f"{dev.name}/device/net/{k}": v for k, v in tree_snapshot(dev / "device/net").items()})
    assert len(sysfs) > 32 * 10
    kernel = lab.node_dir(lab.node(node)) / "kernel"
    return {"sysfs": sysfs,
            # loading rdma_cm makes rdma_cm/ itself; a RoCE write would make a group per device in it
            "configfs": sorted(p.name for p in (root / "sys/kernel/config").glob("rdma_cm/*")),
            "dcb": sorted(p.name for p in (kernel / "dcb").glob("*")),
            "ethtool": sorted(p.name for p in (kernel / "ethtool").glob("*")),
            "nics": info and [n["driver"] for n in info["nics"]]}


@pytest.mark.lab
def test_an_efa_node_deploys_untouched_names_no_efa_in_nccl_and_fails_when_a_netdev_goes_down(make_lab, tmp_path):
    import json
    import sys

    from conftest import REPO, lab_inventory, lab_ssh, node_address, run_pyinfra

    lab = make_lab(nodes=1, profile="aws-p5-efa")
    node = "node1"
    devices = sorted(p.name for p in (lab.root(node) / "sys/class/infiniband").iterdir())
    assert len(devices) == 32 and all(d.startswith("rdmap") for d in devices)
    before = _efa_state(lab, node)
    # the lab's tools refuse what an ENA netdev does not have, as the real ones do
    assert lab_ssh(lab, node, "dcb pfc show dev enp6s0").stderr == "Attribute read: Operation not supported\n"
    assert lab_ssh(lab, node, "ethtool -a enp6s0").stderr == "netlink error: Operation not supported\n"
    assert lab_ssh(lab, node, "ethtool -A enp6s0 rx off tx off").returncode != 0
    assert lab_ssh(lab, node, "mlnx_qos -i enp6s0 --trust dscp").returncode != 0
    stats = lab_ssh(lab, node, "ethtool -S enp6s0").stdout  # ena's counters, none of mlx5's
    from ccrhost.model.fabric import kept

    names = [line.split(":")[0].strip() for line in stats.splitlines()[1:]]
    assert stats.startswith("NIC statistics:\n     tx_timeout: 0\n") and not [n for n in names if kept(n)]

    run = run_pyinfra("deploys/rdma.py", inventory=lab_inventory(tmp_path))
    address = node_address(1)
    assert run.rc == 0, run.out  # UNKNOWN is logged, not failed
    efa_ports = ", ".join(f"{d}/1" for d in sorted(devices, key=lambda n: int(n[5:-2])))
    assert f"[{address}] {efa_ports}: EFA: QoS, RoCE and global pause not applicable; NCCL via aws-ofi-nccl" \
        in run.out, run.out
    assert f"[{address}] no RoCE compute netdev: QoS skipped" in run.out
    # nothing EFA lacks was touched: no DCB or pause state, no rdma_cm group, the devices' sysfs as it was
    assert _efa_state(lab, node) == before
    conf = (lab.root(node) / "etc/nccl.conf").read_text()
    assert "rdmap" not in conf and "NCCL_IB_HCA" not in conf and "NCCL_IB_TC" not in conf, conf

    doc = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"][address]
    assert doc["status"] == "UNKNOWN" and doc["ccr"] is None, doc
    assert [r["code"] for r in doc["reasons"] if r["level"] != "OK"] == ["efa_rate_unknown"], doc["reasons"]

    def check():
        out = lab_ssh(lab, node, f"cd {REPO} && {sys.executable} -m ccrhost check --format json")
        return out.returncode, json.loads(out.stdout)

    rc, up = check()
    assert (rc, up["status"]) == (EXIT_CODES["UNKNOWN"], "UNKNOWN"), up
    assert [(p["active"], p["efa"], p["netdev_operstate"]) for p in up["ports"]] == [(True, True, "up")] * 32

    # the netdev set down in the node: the EFA's own port file still says ACTIVE, the check FAILs it
    assert lab_ssh(lab, node, "ip link set dev enp14s0 down").returncode == 0
    assert (lab.root(node) / "sys/class/infiniband/rdmap14s0/ports/1/state").read_text() == "4: ACTIVE\n"
    rc, down = check()
    assert (rc, down["status"]) == (EXIT_CODES["FAIL"], "FAIL"), down
    assert [r["message"] for r in down["reasons"] if r["code"] == "efa_link_down"] == [
        "EFA port rdmap14s0/1 is down: netdev enp14s0 operstate down, carrier unreadable "
        "(its RDMA port state reads ACTIVE whatever the link does)"]
    assert lab_ssh(lab, node, "ip link set dev enp14s0 up").returncode == 0
    assert check()[1]["status"] == "UNKNOWN"

    # a lost link (the lab's port_down fault): admin up, carrier 0
    lab.fault(node, "port_down=rdmap6s0")
    rc, lost = check()
    assert rc == EXIT_CODES["FAIL"] and [r["message"] for r in lost["reasons"] if r["code"] == "efa_link_down"] == [
        "EFA port rdmap6s0/1 is down: netdev enp6s0 operstate down, carrier 0 "
        "(its RDMA port state reads ACTIVE whatever the link does)"]
