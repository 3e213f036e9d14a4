"""The data-path faults on real lab nodes, seen over SSH with the real tools'
syntax and through the PCI probe."""

import re
import time
from pathlib import Path

import pytest
from conftest import lab_ssh

from ccrhost.model import datapath as dp
from ccrhost.probes import pci

pytestmark = pytest.mark.lab


def probe(lab, node) -> pci.PciSnapshot:
    out = lab_ssh(lab, node, pci.COMMAND)
    assert out.returncode == 0, out.stderr
    return pci.parse_pci_dump(out.stdout.splitlines())


def test_acs_redirect_shows_in_lspci_setpci_and_the_probe(make_lab):
    lab = make_lab(nodes=2, faults=["node2:acs_redirect"])
    bridge = "0000:16:01.0"  # the switch port above mlx5_0, the fault's default
    on = "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
    off = "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
    assert on in lab_ssh(lab, "node2", f"lspci -vvv -s {bridge}").stdout
    assert off in lab_ssh(lab, "node1", f"lspci -vvv -s {bridge}").stdout
    assert lab_ssh(lab, "node2", f"setpci -s {bridge} ECAP_ACS+0x6.w").stdout == "001d\n"

    snap = probe(lab, "node2")
    reasons = dp.check_acs(snap.pairs(), snap.acs_ctl())
    assert [(r.level, r.code) for r in reasons] == [("FAIL", "acs_redirect")]
    assert f"bridge {bridge} between GPU0-mlx5_0" in reasons[0].message
    assert dp.check_acs(probe(lab, "node1").pairs(), probe(lab, "node1").acs_ctl()) == []

    # the planned write clears it on the node, and only there
    plan = dp.plan_acs(snap.pairs(), snap.acs_ctl())
    assert plan == [["setpci", "-s", bridge, "ECAP_ACS+0x6.w=0000:003d"]]
    assert lab_ssh(lab, "node2", " ".join(plan[0])).returncode == 0
    assert off in lab_ssh(lab, "node2", f"lspci -vvv -s {bridge}").stdout
    again = probe(lab, "node2")
    assert dp.check_acs(again.pairs(), again.acs_ctl()) == [] and dp.plan_acs(again.pairs(), again.acs_ctl()) == []


def test_no_peermem_and_link_flap(make_lab, tmp_path):
    no_driver = tmp_path / "no-driver.yaml"
    text = (Path(__file__).parent.parent / "ccrhost/lab/profiles/hgx-h100-8x400.yaml").read_text()
    no_driver.write_text(re.sub(r"^nvidia_driver: .*$", "nvidia_driver: null", text, flags=re.M))
    lab = make_lab(nodes=3, faults=["node1:no_peermem", "node1:link_flap=mlx5_2"],
                   profiles={"node2": "hgx-h100-8x400-upstream", "node3": str(no_driver)})
    before = probe(lab, "node1")
    assert [r.code for r in dp.check_gpudirect(before.peer, len(before.gpus()))] == ["gpudirect_unavailable"]
    plan = dp.plan_peermem(before.peer)
    assert plan.module == "nvidia_peermem"
    time.sleep(2.5)  # the flapping link goes down about once a second
    assert lab_ssh(lab, "node1", f"modprobe {plan.module}").returncode == 0
    after = probe(lab, "node1")
    assert dp.check_gpudirect(after.peer, len(after.gpus())) == []
    assert after.peer.loaded == ("nv_mem", "nv_mem_nc", "nvidia_peermem")
    reasons = dp.check_link_health(before.counters(), after.counters())
    assert [(r.level, r.code) for r in reasons] == [("FAIL", "link_flap")]
    assert reasons[0].message.startswith("port mlx5_2/1 link_downed rose by ")
    # the other ports stayed quiet; state stays ACTIVE, as a snapshot sees it
    assert after.counters()["mlx5_1/1"]["link_downed"] == 0
    state = lab_ssh(lab, "node1", "cat /sys/class/infiniband/mlx5_2/ports/1/state").stdout
    assert state == "4: ACTIVE\n"

    # upstream driver: nvidia_peermem lacks MLNX_OFED's symbols, dma-buf serves
    refused = lab_ssh(lab, "node2", "modprobe nvidia_peermem")
    assert (refused.returncode, refused.stderr) == (1, "modprobe: ERROR: could not insert 'nvidia_peermem': "
                                                       "Invalid argument\n")
    upstream = probe(lab, "node2")
    assert upstream.peer.loaded == () and upstream.nvidia.open
    assert dp.check_gpudirect(upstream.peer, 8) == [] and dp.plan_peermem(upstream.peer).module is None
    # no NVIDIA driver: no peer-memory module to load at all
    missing = lab_ssh(lab, "node3", "modprobe nvidia_peermem")
    assert missing.returncode == 1 and "Module nvidia_peermem not found" in missing.stderr
    bare = probe(lab, "node3")
    assert bare.nvidia is None and not dp.plan_peermem(bare.peer).possible
