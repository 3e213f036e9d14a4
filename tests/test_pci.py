"""PCI probe parsers on the reference's verbatim samples (tests/fixtures/gdr)."""

from pathlib import Path

import pytest

from ccrhost.model import datapath as dp
from ccrhost.probes import pci
from ccrhost.probes.pci import PciFormatError

FIX = Path(__file__).parent / "fixtures" / "gdr"


def lines(name):
    return (FIX / name).read_text().splitlines()


# --- lspci -vvv ----------------------------------------------------------------

def test_acsctl_lines_off_and_on():
    off, on = lines("lspci_acsctl_nccl629.txt")
    assert pci.parse_lspci_acs([off]) == pci.AcsControl(True, None, 0)
    acs = pci.parse_lspci_acs([on])
    assert acs.ctl == dp.ACS_SV | dp.ACS_RR | dp.ACS_CR | dp.ACS_UF == 0x1d
    assert acs.redirect and not pci.parse_lspci_acs([off]).redirect
    assert dp.acs_flags(acs.ctl) == on.split("ACSCtl:")[1].strip()


def test_acs_capability_block():
    acs = pci.parse_lspci_acs(lines("lspci_acs_openvmm.txt"))
    # SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+
    assert (acs.present, acs.cap, acs.ctl) == (True, 0x5f, 0)


def test_acs_absent_denied_and_malformed():
    assert pci.parse_lspci_acs(lines("lspci_devctl_cx6dx.txt")) == pci.AcsControl(False, None, None)
    denied = pci.parse_lspci_acs(["\tCapabilities: <access denied>"])
    assert not denied.present and "needs root" in denied.error
    with pytest.raises(PciFormatError, match="seven ACS flags"):
        pci.parse_lspci_acs(["\t\tACSCtl:\tSrcValid- TransBlk-"])
    with pytest.raises(PciFormatError, match="ACSCap without ACSCtl"):
        pci.parse_lspci_acs([lines("lspci_acs_openvmm.txt")[1]])


def test_devctl_older_wording_cx6dx():
    dc = pci.parse_lspci_devctl(lines("lspci_devctl_cx6dx.txt"))
    # the DevCap's "MaxPayload 512 bytes" is not the DevCtl's 256
    assert (dc.max_payload, dc.max_read_req, dc.relaxed_ordering) == (256, 4096, True)
    assert dc.word == 0x5030 and dp.devctl_max_read_req(dc.word) == 4096
    assert pci.parse_lspci_devctl(lines("lspci_acs_openvmm.txt")) is None
    with pytest.raises(PciFormatError, match="DevCtl without"):
        pci.parse_lspci_devctl(["\t\tDevCtl:\tCorrErr- NonFatalErr- FatalErr- UnsupReq-", "\t\tDevSta:\t"])


# --- setpci (formats of pciutils setpci.c exec_op(): "%04x\n" per .w read) ------

def test_setpci_acs_words_and_missing_capability():
    assert pci.parse_setpci_acs("005f\n001d\n") == pci.AcsControl(True, 0x5f, 0x1d)
    missing = ("setpci: 0000:15:00.0: Instance #0 of Extended capability 000d not found - "
               "there are no capabilities with that id.")
    assert pci.parse_setpci_acs(missing) == pci.AcsControl(False, None, None)
    broken = pci.parse_setpci_acs("setpci: Unable to read the configuration space header.")
    assert not broken.present and broken.error.startswith("setpci: Unable")
    with pytest.raises(PciFormatError, match="4 hex digits"):
        pci.parse_setpci_acs("5f 1d")
    with pytest.raises(PciFormatError, match="capability and control words"):
        pci.parse_setpci_acs("005f")


def test_setpci_devctl():
    dc = pci.parse_setpci_devctl("2930 ")
    assert (dc.word, dc.max_payload, dc.max_read_req, dc.relaxed_ordering) == (0x2930, 256, 512, True)
    assert pci.parse_setpci_devctl("").error == "setpci printed nothing"
    with pytest.raises(PciFormatError):
        pci.parse_setpci_devctl("2930 0000")


# --- driver versions --------------------------------------------------------------

def test_nvidia_version_open_and_proprietary():
    open_ = pci.parse_nvidia_version((FIX / "nvidia_version_open.txt").read_text())
    assert (open_.version, open_.open) == ("565.57.01", True)
    prop = pci.parse_nvidia_version((FIX / "nvidia_version_proprietary.txt").read_text())
    assert (prop.version, prop.open) == ("515.76", False)
    assert pci.parse_nvidia_version("\n") is None
    with pytest.raises(PciFormatError, match="NVRM version"):
        pci.parse_nvidia_version("GCC version:  gcc version 13.3.0")
    # the reference's elided proprietary line carries no version
    with pytest.raises(PciFormatError, match="no driver version"):
        pci.parse_nvidia_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  [...]")


def test_modinfo_nvidia():
    drv = pci.parse_modinfo(lines("modinfo_nvidia_open.txt"))
    assert (drv.version, drv.open, drv.source) == ("590.44.01", True, "modinfo nvidia")
    assert pci.parse_modinfo([]) is None
    with pytest.raises(PciFormatError, match="without a dotted version"):
        pci.parse_modinfo(["license:        NVIDIA"])


def test_mlx5_version_is_one_word():
    text = (FIX / "mlx5_core_version_ofed.txt").read_text()
    snap = pci.parse_pci_dump(["@@mlx5", *text.splitlines(), "@@ib", "mlx5_0/fw_ver:28.39.2048"])
    assert snap.mlx5_version == "5.8-4.1.5"
    assert snap.versions().mlx5 == "5.8-4.1.5"
    with pytest.raises(PciFormatError, match="one version word"):
        pci.parse_pci_dump(["@@mlx5", "5.8 4.1.5"])


# --- counters, firmware --------------------------------------------------------------

def test_counters_and_firmware_from_the_sysfs_dump():
    # gpud#943's files, laid out as the probe's `grep -H ''` prints them
    raw = lines("counters_gpud943.txt")
    dump = [f"mlx5_0/ports/1/counters/{raw[i][6:-4]}:{raw[i + 1]}" for i in range(0, len(raw), 2)]
    dump += ["mlx5_0/fw_ver:28.41.1000", "mlx5_0/hca_type:MT4129", "mlx5_0/board_id:MT_0000000838",
             "mlx5_0/node_guid:0c42:a103:0040:29a0", "mlx5_1/ports/1/counters/symbol_error:N/A (no PMA)"]
    nics = pci.parse_ib(dump)
    assert nics["mlx5_0"].fw_ver == "28.41.1000" and nics["mlx5_0"].board_id == "MT_0000000838"
    # the value of reference/roce.md's ibv_devinfo sample, in sysfs's own form
    assert nics["mlx5_0"].node_guid == "0c42:a103:0040:29a0" and nics["mlx5_1"].node_guid is None
    # port_xmit_wait and excessive_buffer_overrun_errors are not among the six read
    assert nics["mlx5_0"].counters == {1: {"link_downed": 255, "port_xmit_discards": 65535}}
    assert nics["mlx5_1"].counters == {}
    with pytest.raises(PciFormatError, match="port 'x' is not a number"):
        pci.parse_ib(["mlx5_0/ports/x/counters/link_downed:1"])


# --- IOMMU, peer memory -----------------------------------------------------------

def test_iommu_groups_and_peer_memory():
    assert pci.parse_iommu_groups(["12 identity", "13 DMA-FQ", "14 "]) == {"12": "identity", "13": "DMA-FQ",
                                                                        "14": None}
    with pytest.raises(PciFormatError, match="type 'Translated'"):
        pci.parse_iommu_groups(["12 Translated"])
    assert pci.parse_peermem(["/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/module/nvidia_peermem/version"]) \
        == ("nv_mem", "nvidia_peermem")
    with pytest.raises(PciFormatError, match="unexpected peer-memory path"):
        pci.parse_peermem(["/sys/module/nvidia/version"])
    assert pci.parse_shipped(["kernel/drivers/infiniband/nvidia_peermem.ko",
                              "updates/dkms/nvidia-peermem.ko.zst"]) == ("nvidia_peermem",)


# --- one function, the whole dump ---------------------------------------------------------

NIC_SECTION = ["role nic mlx5_0", "path /sys/devices/pci0000:14/0000:14:01.0/0000:15:00.0/0000:16:01.0/0000:1a:00.0",
               "class 0x020000", "vendor 0x15b3", "device 0x1021", "numa_node 0", "iommu_group 3",
               "acs setpci: 0000:1a:00.0: Instance #0 of Extended capability 000d not found - there are no "
               "capabilities with that id. ", "devctl 2930 "]


def test_function_section():
    f = pci.parse_function("0000:1a:00.0", NIC_SECTION)
    assert (f.role, f.ibdev, f.class_code, f.vendor, f.numa_node, f.iommu_group) == \
        ("nic", "mlx5_0", 0x020000, 0x15b3, 0, "3")
    assert f.bridges == ("0000:14:01.0", "0000:15:00.0", "0000:16:01.0")
    assert not f.acs.present and f.devctl.max_read_req == 512
    assert pci.parse_function("0000:1a:00.0", [*NIC_SECTION[:5], "numa_node -1"]).numa_node is None
    # with lspci instead of setpci
    f = pci.parse_function("0000:1a:00.0", NIC_SECTION[:7], lines("lspci_devctl_cx6dx.txt"))
    assert f.devctl.max_read_req == 4096 and not f.acs.present


@pytest.mark.parametrize("bdf, body, why", [
    ("1a:00.0", NIC_SECTION, "is not a PCI address"),
    ("0000:1a:00.0", ["role switch", *NIC_SECTION[1:]], "role 'switch'"),
    ("0000:1a:00.0", [NIC_SECTION[0], "path /sys/bus/pci/devices/0000:1a:00.0"], "not a resolved"),
    ("0000:1a:00.0", [*NIC_SECTION[:5], "numa_node zero"], "numa_node 'zero'"),
    ("0000:1a:00.0", [*NIC_SECTION[:2], "class 0xzz"], "class '0xzz' is not a hex number"),
])
def test_function_section_refuses_malformed(bdf, body, why):
    with pytest.raises(PciFormatError, match=why):
        pci.parse_function(bdf, body)


def test_whole_dump_from_a_lab_node():
    snap = pci.parse_pci_dump(lines("pci_dump_lab_hgx.txt"))
    assert snap.tools == ("setpci", "lspci")
    gpus, nics = snap.gpus(), snap.nic_endpoints()
    assert [g.name for g in gpus] == [f"GPU{i}" for i in range(8)]
    assert [n.name for n in nics] == [f"mlx5_{i}" for i in range(8)]
    assert [(p.gpu.name, p.nic.name, p.level) for p in snap.pairs()] == [
        (f"GPU{i}", f"mlx5_{i}", "PIX") for i in range(8)]
    assert dp.check_acs(snap.pairs(), snap.acs_ctl()) == []
    assert dp.check_gpudirect(snap.peer, len(gpus)) == []
    assert dp.check_iommu(snap.iommu, {g.name: g.bdf for g in gpus}) == []
    assert snap.peer.loaded == ("nv_mem", "nv_mem_nc", "nvidia_peermem")
    assert set(snap.versions().nic_fw.values()) == {"28.39.3560"}
    assert snap.counters()["mlx5_0/1"] == dict.fromkeys(dp.COUNTERS, 0)
    assert all(v == 0x2930 for v in snap.devctl().values())


def test_unicode_digits_are_no_port_number():
    # str.isdigit() takes "²", int() does not: found by tests/test_fuzz.py
    with pytest.raises(PciFormatError, match="is not a number"):
        pci.parse_ib(["mlx5_0/ports/\u00b2/counters/link_downed:12"])
