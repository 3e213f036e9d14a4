"""End to end: lossless RoCE on OFED and upstream lab nodes, persistence
across a reboot, the SSH-path guard and the per-host failures."""

import json
from pathlib import Path

import pytest
from conftest import lab_inventory, lab_ssh, node_address, run_pyinfra, tree_snapshot

from ccrhost.probes.qos import parse_dcb_app_dscp, parse_dcb_pfc, parse_mlnx_qos

pytestmark = pytest.mark.lab

FIXTURES = Path(__file__).parent / "fixtures"
OFED_IFS = [f"ens{i}np0" for i in range(1, 9)]
UP_IFS = [f"enp{0x1a + 0x10 * i}s0np0" for i in range(8)]




def qos_view(lab, node, ifaces, backend):
    """What the node's tools report, plus its ECN files and rdma_cm values."""
    if backend == "ofed":
        out = lab_ssh(lab, node, "; ".join(f"mlnx_qos -i {i}" for i in ifaces)).stdout
        chunks = out.split("DCBX mode:")[1:]
        view = {i: parse_mlnx_qos("DCBX mode:" + c) for i, c in zip(ifaces, chunks)}
    else:
        view = {}
        for i in ifaces:
            app = lab_ssh(lab, node, f"dcb -N app show dev {i} dscp-prio").stdout
            pfc = lab_ssh(lab, node, f"dcb pfc show dev {i}").stdout
            view[i] = {"app": parse_dcb_app_dscp(app), "pfc": parse_dcb_pfc(pfc)}
    root = lab.root(node)
    return view, tree_snapshot(root / "sys/class/net"), tree_snapshot(root / "sys/kernel/config")


def test_ofed_and_upstream_converge_and_survive_a_reboot(make_lab, tmp_path):
    lab = make_lab(nodes=2, profiles={"node2": "hgx-h100-8x400-upstream"})
    inventory = lab_inventory(tmp_path)
    first = run_pyinfra("deploys/rdma.py", inventory=inventory)
    assert first.rc == 0, first.out

    ofed, _, _ = qos_view(lab, "node1", OFED_IFS, "ofed")
    for state in ofed.values():
        assert state["trust"] == "dscp" and state["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]
        assert state["dscp2prio"][26] == 3 and state["dscp2prio"][48] == 6
    ecn = lab.root("node1") / "sys/class/net/ens1np0/ecn"
    assert [(ecn / f"roce_rp/enable/{p}").read_text() for p in range(8)] == ["0\n"] * 3 + ["1\n"] + ["0\n"] * 4
    assert (ecn / "roce_np/enable/3").read_text() == "1\n"
    assert (ecn / "roce_np/cnp_dscp").read_text() == "48\n"
    assert (ecn / "roce_np/cnp_802p_prio").read_text() == "6\n"

    upstream, _, _ = qos_view(lab, "node2", UP_IFS, "upstream")
    for state in upstream.values():
        assert state["app"] == {26: 3, 48: 6}
        assert state["pfc"]["prio_pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert (f"[{node_address(2)}] {', '.join(UP_IFS)}: per-priority ECN enable (priorities [3]) is firmware "
            "configuration on this driver (mlxconfig ROCE_CC_PRIO_MASK_P1); left alone") in first.out

    second = run_pyinfra("deploys/rdma.py", inventory=inventory)
    assert second.rc == 0 and not second.changed(), second.out

    before = {n: qos_view(lab, n, ifs, b) for n, ifs, b in (("node1", OFED_IFS, "ofed"), ("node2", UP_IFS, "upstream"))}
    script = lab.root("node1") / "etc/ccrhost/boot-apply.sh"
    assert oct(script.stat().st_mode & 0o777) == "0o755" and script.stat().st_uid == 0
    unit = (lab.root("node1") / "etc/systemd/system/ccrhost-boot.service").read_text()
    assert "ExecStart=/etc/ccrhost/boot-apply.sh" in unit and "Type=oneshot" in unit
    for node, ifs, backend in (("node1", OFED_IFS, "ofed"), ("node2", UP_IFS, "upstream")):
        lab.reboot(node)
        lost = qos_view(lab, node, ifs, backend)
        assert lost != before[node]  # a reboot really loses the settings
        boot = lab_ssh(lab, node, "/etc/ccrhost/boot-apply.sh")
        assert boot.returncode == 0, boot.stderr
        assert qos_view(lab, node, ifs, backend) == before[node], node
    third = run_pyinfra("deploys/rdma.py", inventory=inventory)
    assert third.rc == 0 and not third.changed(), third.out


def test_buffers_are_checked_before_writing_and_read_back(make_lab, tmp_path):
    lab = make_lab(nodes=2)
    lossless = {"qos_cable_len": 30, "qos_prio2buffer": [0, 0, 0, 1, 0, 0, 0, 0]}
    inventory = lab_inventory(tmp_path, per_node={
        "node1": {"qos_buffer_size": [130944, 131072, 0, 0, 0, 0, 0, 0], "qos_min_headroom": 10000},
        "node2": {"qos_buffer_size": [130944, 8000, 0, 0, 0, 0, 0, 0]},
    }, **lossless)
    before = qos_view(lab, "node2", OFED_IFS, "ofed")[:2]  # rdma_cm is an earlier stage
    run = run_pyinfra("deploys/rdma.py", inventory=inventory)
    assert run.rc == 1
    assert (f"[{node_address(2)}] QoS not changed: ens1np0: buffer 1 is 8000 bytes but carries PFC priorities "
            "and needs at least xoff + MTU = 11570 + 4200 = 15770 (cable 30 m, 400 Gb/s)") in run.out
    assert qos_view(lab, "node2", OFED_IFS, "ofed")[:2] == before

    state = parse_mlnx_qos(lab_ssh(lab, "node1", "mlnx_qos -i ens1np0").stdout)
    assert state["buffer_size"] == [130944, 131072, 0, 0, 0, 0, 0, 0] and state["cable_len"] == 30
    assert state["prio2buffer"] == [0, 0, 0, 1, 0, 0, 0, 0]
    buffers = (lab.root("node1") / "sys/class/net/ens1np0/qos/buffer_size").read_text()
    assert "1\t131072\t119502\t\t115302" in buffers  # xoff_threshold = size - xoff, xon = xoff_threshold - MTU

    strict = lab_inventory(tmp_path, per_node={"node1": {"qos_buffer_size": [130944, 131072, 0, 0, 0, 0, 0, 0],
                                                          "qos_min_headroom": 20000}}, **lossless)
    check = run_pyinfra("deploys/rdma.py", "--limit", node_address(1), inventory=strict)
    assert check.rc == 1
    assert ("PFC headroom: ens1np0: buffer 1: headroom 11570 bytes (size 131072, xoff 119502) is below "
            "qos_min_headroom 20000") in check.out


def test_ssh_path_guard_refuses_then_allows(make_lab, tmp_path):
    lab = make_lab(nodes=2, faults=["node1:ssh_on_fabric"])
    before = qos_view(lab, "node1", OFED_IFS, "ofed")[:2]
    run = run_pyinfra("deploys/rdma.py", inventory=lab_inventory(tmp_path))
    assert run.rc == 1
    assert (f"[{node_address(1)}] refusing to change QoS: ens1np0 carries this SSH connection ({node_address(1)}, "
            "from $SSH_CONNECTION); ens1np0 carries a default route. Changing PFC toggles the port link and would "
            "cut this node off. Set qos_allow_ssh_interface: true for this host to allow it.") in run.out
    assert qos_view(lab, "node1", OFED_IFS, "ofed")[:2] == before
    assert run.results()["Tune RDMA (modules, RoCE, boot unit, QoS, data path, NCCL)"]["success"] == "1"  # node2 went on

    allowed = run_pyinfra("deploys/rdma.py", inventory=lab_inventory(
        tmp_path, per_node={"node1": {"qos_allow_ssh_interface": True}}))
    assert allowed.rc == 0, allowed.out
    assert parse_mlnx_qos(lab_ssh(lab, "node1", "mlnx_qos -i ens1np0").stdout)["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]


def test_read_only_ecn_fails_that_host_and_credit_threshold_is_never_created(make_lab, tmp_path):
    lab = make_lab(nodes=3, faults=["node2:ecn_readonly"],
                   profiles={"node3": str(FIXTURES / "profile-credit-threshold.yaml")})
    run = run_pyinfra("deploys/rdma.py", inventory=lab_inventory(tmp_path, qos_credit_threshold=2048))
    assert run.rc == 1
    assert "/sys/class/net/ens1np0/ecn/roce_rp/enable/3: Read-only file system" in run.out
    assert run.results()["Tune RDMA (modules, RoCE, boot unit, QoS, data path, NCCL)"]["error"] == "1"
    assert (f"[{node_address(1)}] mlx5_0 port 1: credit_threshold is unsupported on this driver "
            "(no /sys/class/infiniband/mlx5_0/ports/1/credit_threshold); not created") in run.out
    assert not (lab.root("node1") / "sys/class/infiniband/mlx5_0/ports/1/credit_threshold").exists()
    assert (lab.root("node3") / "sys/class/infiniband/mlx5_0/ports/1/credit_threshold").read_text() == "2048\n"


def test_a_failed_setting_restores_its_interface_and_the_finished_ones_survive_a_reboot(make_lab, tmp_path):
    lab = make_lab(nodes=2, faults=["node1:ecn_readonly=mlx5_3"])  # ens4np0's ecn/ is read-only
    before = qos_view(lab, "node1", OFED_IFS, "ofed")
    run = run_pyinfra("deploys/rdma.py", inventory=lab_inventory(tmp_path))
    assert run.rc == 1 and "Traceback" not in run.out
    line = ("ccrhost: ens4np0: setting failed: write 1 to /sys/class/net/ens4np0/ecn/roce_rp/enable/3; its previous "
            "QoS restored; ens1np0, ens2np0, ens3np0 done and re-applied at boot")
    assert f"[{node_address(1)}] {line}" in run.out, run.out
    tuned, _, _ = qos_view(lab, "node1", OFED_IFS, "ofed")
    for iface in OFED_IFS[:3]:
        assert tuned[iface]["trust"] == "dscp" and tuned[iface]["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0], iface
    for iface in OFED_IFS[3:]:  # the failed one as it was, the ones after it never touched
        assert tuned[iface] == before[0][iface], iface
    net = lab.root("node1") / "sys/class/net"
    for iface in OFED_IFS[3:]:
        assert (net / iface / "ecn/roce_rp/enable/3").read_text() == "0\n", iface
    listed = (lab.root("node1") / "etc/ccrhost/qos-interfaces").read_text().splitlines()
    assert [x for x in listed if not x.startswith("#")] == OFED_IFS[:3]
    report = json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]
    assert report[node_address(1)]["reasons"][0]["message"] == (
        f"failed before verification: Tune RDMA (modules, RoCE, boot unit, QoS, data path, NCCL): {line}")
    assert report[node_address(2)]["status"] == "OK"  # the healthy node finished every stage

    lab.reboot("node1")  # QoS is volatile: the boot unit re-applies what the deploy finished
    boot = lab_ssh(lab, "node1", "/etc/ccrhost/boot-apply.sh")
    assert boot.returncode == 0, boot.stderr
    again, _, _ = qos_view(lab, "node1", OFED_IFS, "ofed")
    assert [again[i] == tuned[i] for i in OFED_IFS[:3]] == [True] * 3
    assert [again[i] == before[0][i] for i in OFED_IFS[3:]] == [True] * 5


def test_dry_run_lists_writes_and_makes_none(make_lab, tmp_path):
    lab = make_lab(nodes=1)
    root = lab.root("node1")
    before = (tree_snapshot(root / "sys"), tree_snapshot(root / "etc"))
    dry = run_pyinfra("--dry", "deploys/rdma.py", inventory=lab_inventory(tmp_path))
    assert dry.rc == 0, dry.out
    for planned in ("mlnx_qos -i ens1np0 --trust dscp", "mlnx_qos -i ens8np0 --pfc 0,0,0,1,0,0,0,0",
                    "printf '%s\\n' 1 > /sys/class/net/ens1np0/ecn/roce_rp/enable/3", "modprobe rdma_ucm",
                    "write /etc/nccl.conf (", "write /etc/ccrhost/boot-apply.sh ("):
        assert f"[{node_address(1)}] would run: {planned}" in dry.out
    assert (tree_snapshot(root / "sys"), tree_snapshot(root / "etc")) == before


def test_shims_refuse_what_the_real_tools_refuse(make_lab):
    lab = make_lab(nodes=2, profiles={"node2": "hgx-h100-8x400-upstream"})
    before = lab_ssh(lab, "node1", "mlnx_qos -i ens1np0").stdout
    for bad in ("--tc_bw 50,50,0,0,0,0,0,0", "--up2tc 0,0,0,1,0,0,0,0"):
        out = lab_ssh(lab, "node1", f"mlnx_qos -i ens1np0 {bad}")
        assert out.returncode == 2 and f"no such option: {bad.split()[0]}" in out.stderr
    short = lab_ssh(lab, "node1", "mlnx_qos -i ens1np0 --pfc 0,0,0,1,0,0,0")
    assert short.returncode == 2 and "8 comma-separated values" in short.stderr
    tiny = lab_ssh(lab, "node1", "mlnx_qos -i ens1np0 --buffer_size 8000,0,0,0,0,0,0,0 && "
                                 "mlnx_qos -i ens1np0 --pfc 0,0,0,1,0,0,0,0")
    assert tiny.returncode == 1 and "buffer_size[0]=8000 is not enough for lossless buffer" in tiny.stderr
    assert lab_ssh(lab, "node1", "mlnx_qos -i nope0").returncode == 1
    after = parse_mlnx_qos(lab_ssh(lab, "node1", "mlnx_qos -i ens1np0").stdout)
    assert after["pfc"] == parse_mlnx_qos(before)["pfc"] == [0] * 8
    # one run applies cable length, PFC, the DSCP map (every --dscp2prio), trust, buffers, in
    # that order; trust with --dscp2prio is refused after what comes before them is applied
    both = lab_ssh(lab, "node1", "mlnx_qos -i ens2np0 --cable_len 30 --trust dscp --dscp2prio set,26,3")
    assert both.returncode == 1 and both.stdout.strip() == "trust and dscp2prio commands cannot be used at the same time."
    half = parse_mlnx_qos(lab_ssh(lab, "node1", "mlnx_qos -i ens2np0").stdout)
    assert (half["cable_len"], half["trust"]) == (30, "pcp")
    run = lab_ssh(lab, "node1", "mlnx_qos -i ens2np0 --dscp2prio set,26,3 --pfc 0,0,0,1,0,0,0,0 --dscp2prio set,48,6")
    assert run.returncode == 0, run.stderr
    state = parse_mlnx_qos(run.stdout)
    assert (state["dscp2prio"], state["pfc"]) == ({26: 3, 48: 6}, [0, 0, 0, 1, 0, 0, 0, 0])
    # a bad entry refuses them all before any is applied
    bad = lab_ssh(lab, "node1", "mlnx_qos -i ens2np0 --dscp2prio set,10,1 --dscp2prio set,99,1")
    assert bad.returncode == 1 and bad.stdout.strip() == "Invalid dscp2prio command. Refer to the help."
    assert parse_mlnx_qos(lab_ssh(lab, "node1", "mlnx_qos -i ens2np0").stdout)["dscp2prio"] == {26: 3, 48: 6}
    sizes = lab_ssh(lab, "node1", "mlnx_qos -i ens2np0 --buffer_size 130944,131072,0,0,0,0,0,0 "
                                  "--prio2buffer 0,0,0,1,0,0,0,0")
    state = parse_mlnx_qos(sizes.stdout)  # OFED's sysfs backend: the sizes only
    assert (state["buffer_size"][:2], state["prio2buffer"]) == ([130944, 131072], [0] * 8)
    dcb = lab_ssh(lab, "node2", "dcb pfc set dev enp26s0np0 prio-pfc 3:maybe")
    assert dcb.returncode == 1 and dcb.stderr.strip() == 'What is "3:maybe"?'
    assert lab_ssh(lab, "node2", "dcb app show dev nope0").stderr.strip() == 'Cannot find device "nope0"'
    names = lab_ssh(lab, "node2", "dcb app add dev enp26s0np0 dscp-prio 26:3 48:6 && dcb app show dev enp26s0np0")
    assert names.stdout.strip() == "dscp-prio AF31:3 CS6:6"
