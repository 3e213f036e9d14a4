"""The lab's PCI hardware without a lab: the profile's rendered /sys, and the
setpci/lspci shims run directly on it (CCRHOST_LAB_SYSFS points them at a
temp tree). They must read, write and refuse as the real tools do."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccrhost.lab.profile import (
    Fault,
    ProfileError,
    load_profile,
    module_table,
    parse_fault,
    pci_tree,
    render_sysfs,
)
from ccrhost.model import datapath as dp
from ccrhost.probes import pci

SHIMS = Path(__file__).resolve().parent.parent / "ccrhost" / "lab" / "shims"
HGX = load_profile("hgx-h100-8x400")


def faults(*specs):
    return [parse_fault(f"node1:{s}")[1] for s in specs]


@pytest.fixture
def sysroot(tmp_path):
    def make(*specs, profile=HGX):
        root = tmp_path / "sys"
        render_sysfs(profile, faults(*specs), root, 1)
        return root
    return make


def run(root, tool, *args, shell=None):
    env = {**os.environ, "CCRHOST_LAB_SYSFS": str(root), "PATH": f"{SHIMS}:{os.environ['PATH']}"}
    cmd = ["sh", "-c", shell] if shell else [sys.executable, str(SHIMS / tool), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)


def config(root, bdf):
    return (root / "bus" / "pci" / "devices" / bdf / "config").read_bytes()


def all_configs(root):
    return {p.name: (p / "config").read_bytes() for p in (root / "bus" / "pci" / "devices").iterdir()}


# --- the rendered tree -----------------------------------------------------------

def test_healthy_hgx_tree(sysroot):
    root = sysroot()
    nic = os.path.realpath(root / "class" / "infiniband" / "mlx5_3" / "device")
    assert nic.endswith("/devices/pci0000:44/0000:44:01.0/0000:45:00.0/0000:46:01.0/0000:4a:00.0")
    gpu = root / "bus" / "pci" / "devices" / "0000:48:00.0"
    assert (gpu / "class").read_text() == "0x030200\n" and (gpu / "vendor").read_text() == "0x10de\n"
    assert (gpu / "numa_node").read_text() == "0\n"
    assert (root / "bus/pci/devices/0000:88:00.0/numa_node").read_text() == "1\n"
    assert os.path.basename(os.readlink(gpu / "iommu_group")) == "3"
    assert (root / "kernel/iommu_groups/3/type").read_text() == "identity\n"
    assert sorted(os.listdir(root / "class" / "iommu")) == [f"dmar{i}" for i in range(8)]
    port = root / "class/infiniband/mlx5_3/ports/1/counters"
    assert all((port / c).read_text() == "0\n" for c in dp.COUNTERS)
    assert (root / "class/infiniband/mlx5_3/fw_ver").read_text() == "28.39.3560\n"
    assert (root / "module/nvidia_peermem/version").read_text() == "535.183.01\n"
    assert (root / "kernel/mm/memory_peers/nv_mem_nc/version").exists()
    assert (root / "module/mlx5_core/version").read_text() == "23.10-1.1.9\n"


def test_faults_change_the_tree(sysroot):
    root = sysroot("nic_numa_far=mlx5_3", "fw_mismatch=mlx5_6", "no_peermem", "acs_redirect=0000:86:00.0")
    nic = os.path.realpath(root / "class/infiniband/mlx5_3/device")
    assert nic.endswith("/devices/pci0000:49/0000:49:01.0/0000:4a:00.0")
    assert (Path(nic) / "numa_node").read_text() == "1\n"
    assert (root / "class/infiniband/mlx5_6/fw_ver").read_text() == "28.38.1002\n"
    assert not (root / "module/nvidia_peermem").exists() and not (root / "kernel/mm/memory_peers").exists()
    assert config(root, "0000:86:00.0")[0x106] == 0x1d


def test_fault_defaults_and_refusals(tmp_path):
    tree = {f.bdf: f for f in pci_tree(HGX, faults("acs_redirect"))}
    # default: the switch port above the first NIC
    assert [b for b, f in tree.items() if f.acs_ctl] == ["0000:16:01.0"]
    for spec, why in [("acs_redirect=0000:15:00.0", "need a bridge with ACS on a GPU-NIC path"),
                      ("acs_redirect=0000:14:01.0", "need a bridge with ACS on a GPU-NIC path"),
                      ("nic_numa_far=mlx5_9", "no NIC named 'mlx5_9'")]:
        with pytest.raises(ProfileError, match=why):
            pci_tree(HGX, faults(spec))
    with pytest.raises(ProfileError, match="fw_mismatch=mlx5_1:28.x"):
        render_sysfs(HGX, faults("fw_mismatch=mlx5_1:28.x"), tmp_path / "sys", 1)
    for spec in ("link_flap=mlx5_42", "link_flap=mlx5_1:0", "link_flap=mlx5_1:x"):
        with pytest.raises(ProfileError, match=f"{spec}: need a NIC of hgx-h100-8x400 and seconds 1..3600"):
            render_sysfs(HGX, faults(spec), tmp_path / "sys", 1)
    assert not (tmp_path / "sys").exists()  # refused before anything is written


def test_link_flap_schedule(tmp_path):
    built = render_sysfs(HGX, faults("link_flap=mlx5_2", "link_flap=:5"), tmp_path, 1)
    # the node's labsysfsd bumps link_downed of each on its own period
    assert built["flap"] == [["mlx5_2", 2], ["mlx5_0", 5]]


def test_peer_memory_modules_ship_with_the_driver():
    deps, boot, versions = module_table(HGX, [])
    assert deps["nvidia_peermem"] == ["ib_core", "nvidia"] and "nvidia_peermem" in boot
    no_driver = HGX.model_copy(update={"nvidia_driver": None})
    deps, boot, _ = module_table(no_driver, [])
    assert "nvidia_peermem" not in deps and "nvidia" not in deps
    deps, boot, _ = module_table(HGX, [Fault(kind="no_peermem")])
    assert "nvidia_peermem" in deps and "nvidia_peermem" not in boot
    # upstream profile: dma-buf, nothing loaded at boot
    up = load_profile("hgx-h100-8x400-upstream")
    assert "nvidia_peermem" not in module_table(up, [])[1] and up.nvidia_driver.open


# --- setpci ------------------------------------------------------------------------

def test_setpci_reads_acs_and_devctl(sysroot):
    root = sysroot()
    out = run(root, "setpci", "-s", "0000:16:01.0", "ECAP_ACS+0x4.w", "ECAP_ACS+0x6.w")
    assert (out.returncode, out.stdout) == (0, "005f\n0000\n")
    assert pci.parse_setpci_acs(out.stdout) == pci.AcsControl(True, 0x5f, 0)
    out = run(root, "setpci", "-s", "1a:00.0", "CAP_EXP+0x8.w")
    assert out.stdout == "2930\n"
    assert run(root, "setpci", "-s", "1a:00.0", "VENDOR_ID").stdout == "15b3\n"
    assert run(root, "setpci", "-v", "-s", "16:01.0", "ECAP_ACS+0x6.w").stdout == \
        "0000:16:01.0 (ecap 000d @100) @106 = 0000\n"


def test_setpci_writes_as_hardware_takes_them(sysroot):
    root = sysroot()
    assert run(root, "setpci", "-s", "16:01.0", "ECAP_ACS+0x6.w=003d").returncode == 0
    # EgressCtrl (0x20) is not in the capability: that control bit stays 0
    assert run(root, "setpci", "-s", "16:01.0", "ECAP_ACS+0x6.w").stdout == "001d\n"
    out = run(root, "setpci", "-v", "-s", "16:01.0", "ECAP_ACS+0x6.w=0000:003d")
    assert out.stdout == "0000:16:01.0 (ecap 000d @100) @106 001d->(0000:003d)->0000\n"
    assert config(root, "0000:16:01.0")[0x106:0x108] == b"\x00\x00"
    # a read-only register keeps its value
    before = config(root, "0000:16:01.0")
    assert run(root, "setpci", "-s", "16:01.0", "ECAP_ACS+0x4.w=0000").returncode == 0
    assert config(root, "0000:16:01.0") == before
    # -D lists the change without committing it
    assert run(root, "setpci", "-D", "-s", "1a:00.0", "CAP_EXP+0x8.w=5000:7000").returncode == 0
    assert run(root, "setpci", "-s", "1a:00.0", "CAP_EXP+0x8.w").stdout == "2930\n"
    assert run(root, "setpci", "-s", "1a:00.0", "CAP_EXP+0x8.w=5000:7000").returncode == 0
    assert run(root, "setpci", "-s", "1a:00.0", "CAP_EXP+0x8.w").stdout == "5930\n"


@pytest.mark.parametrize("args, rc, err", [
    (["-s", "15:00.0", "ECAP_ACS+0x6.w=0000"], 1,
     "setpci: 0000:15:00.0: Instance #0 of Extended capability 000d not found - there are no capabilities "
     "with that id.\n"),
    (["-s", "16:01.0", "ECAP_FOO+0x6.w"], 1, 'setpci: Unknown register "ECAP_FOO".\n'),
    (["-s", "16:01.0", "ECAP_ACS+0x6"], 1, "setpci: Missing width.\n"),
    (["-s", "16:01.0", "ECAP_ACS+0x6.q"], 1, 'setpci: Invalid width "q".\n'),
    (["-s", "16:01.0", "ECAP_ACS+0x5.w"], 1, "setpci: Unaligned register address 05.\n"),
    (["-s", "16:01.0", "ECAP_ACS+0x6.w=10000"], 1, 'setpci: Value "10000" is out of range.\n'),
    (["-s", "16:01.0", "ECAP_ACS+0x6.w=00zz"], 1, 'setpci: Invalid value "00zz".\n'),
    (["-s", "16:01.0", "ECAP_ACS+0x6.w="], 1, "setpci: Missing value.\n"),
    (["-s", "1g:01.0", "ECAP_ACS+0x6.w"], 1, "setpci: Unable to parse filter -s Invalid bus number.\n"),
    (["ECAP_ACS+0x6.w"], 1, "setpci: Filter specification expected.\n"),
    (["-s", "16:01.0", "SECONDARY_BUS.b=00"], 0, ""),  # a bridge has it
    (["-s", "1a:00.0", "SECONDARY_BUS"], 1, "setpci: 0000:1a:00.0: Does not have register SECONDARY_BUS.\n"),
    (["-s", "99:00.0", "ECAP_ACS+0x6.w=0000"], 0, "setpci: Warning: No devices selected for operation group 1.\n"),
])
def test_setpci_refuses_what_setpci_refuses(sysroot, args, rc, err):
    root = sysroot()
    before = all_configs(root)
    out = run(root, "setpci", *args)
    assert (out.returncode, out.stderr.split("Try `setpci")[0]) == (rc, err)
    if rc:
        assert all_configs(root) == before


def test_the_nccl_guide_loop_clears_acs_everywhere(sysroot):
    # NCCL's troubleshooting guide, verbatim but for sudo (the lab runs as root)
    root = sysroot("acs_redirect=0000:46:01.0")
    loop = ('for BDF in `lspci -d "*:*:*" | awk \'{print $1}\'`; do\n'
            '  setpci -v -s ${BDF} ECAP_ACS+0x6.w > /dev/null 2>&1\n'
            '  if [ $? -ne 0 ]; then\n    continue\n  fi\n'
            '  setpci -v -s ${BDF} ECAP_ACS+0x6.w=0000\ndone')
    out = run(root, None, shell=loop)
    assert out.returncode == 0, out.stderr
    assert "0000:46:01.0 (ecap 000d @100) @106 0000" in out.stdout
    snap_acs = {b: c[0x106] for b, c in all_configs(root).items() if c[0x100] == 0x0d}
    assert len(snap_acs) == 24 and set(snap_acs.values()) == {0}


# --- lspci ---------------------------------------------------------------------------

def test_lspci_shows_what_the_probe_parses(sysroot):
    root = sysroot("acs_redirect")
    out = run(root, "lspci", "-vvv", "-s", "16:01.0")
    assert out.stdout.startswith("16:01.0 PCI bridge: Broadcom / LSI Device c030 (rev b0)\n")
    assert "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n" \
        in out.stdout
    acs = pci.parse_lspci_acs(out.stdout.splitlines())
    assert (acs.cap, acs.ctl, acs.redirect) == (0x5f, 0x1d, True)
    nic = run(root, "lspci", "-D", "-vvv", "-s", "0000:1a:00.0").stdout.splitlines()
    assert nic[0] == "0000:1a:00.0 Ethernet controller: Mellanox Technologies Device 1021"
    assert "\tNUMA node: 0" in nic and "\tKernel driver in use: mlx5_core" in nic
    dc = pci.parse_lspci_devctl(nic)
    assert (dc.max_payload, dc.max_read_req, dc.relaxed_ordering) == (256, 512, True)
    assert not pci.parse_lspci_acs(nic).present
    assert run(root, "lspci", "-n", "-s", "18:00.0").stdout == "18:00.0 0302: 10de:2330 (rev a1)\n"
    assert run(root, "lspci", "-d", "10de:").stdout.count("3D controller") == 8


@pytest.mark.parametrize("args, err", [
    (["-s", "zz"], "lspci: -s: Invalid slot number\n"),
    (["-d", "10de"], "lspci: -d: At least two fields must be given\n"),
    (["-t"], "lspci: lab lspci: -t is a real option the lab does not emulate\n"),
])
def test_lspci_refuses(sysroot, args, err):
    out = run(sysroot(), "lspci", *args)
    assert (out.returncode, out.stderr, out.stdout) == (1, err, "")


def test_lspci_unknown_option_prints_usage(sysroot):
    out = run(sysroot(), "lspci", "-z")
    assert out.returncode == 1 and out.stderr.startswith("lspci: invalid option -- 'z'\nUsage: lspci")
