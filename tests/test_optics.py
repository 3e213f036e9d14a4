"""mlxlink -m and -c from verbatim samples (gcm's test, a 400G capture with
ANSI colours, an NDR module without signal), judged by gcm's rules and the
IBTA effective-BER limit; stored and read back with the NIC's reading."""

from pathlib import Path

import pytest

from ccrhost.model import nicfw
from ccrhost.model.nicfw import NicFirmware, NicFwPolicy, NicFwReading
from ccrhost.model.optics import judge_link
from ccrhost.model.status import FAIL, UNKNOWN, WARN
from ccrhost.node import nicfw as node_nicfw
from ccrhost.probes import mlxlink
from ccrhost.probes import nicfw as probe

FIX = Path(__file__).parent / "fixtures" / "mlxlink"
HEALTHY = (FIX / "gcm_healthy_m.txt").read_text()
BER = (FIX / "ber_400g_ansi_c.txt").read_text()


def judged(text, raw_ber_max=None):
    return [(r.level, r.code, r.message) for r in judge_link("NIC mlx5_0", mlxlink.parse(text), raw_ber_max)]


def test_the_healthy_samples_pass_and_ansi_colours_are_stripped():
    link = mlxlink.parse(HEALTHY + BER)
    assert link.module_state == "Ready state" and link.datapath == ["DPActivated"] * 4
    assert link.ddm["Rx Power Current [dBm]"].values == (1.945, 1.892, 2.167, 2.025)
    assert (link.ddm["Rx Power Current [dBm]"].low, link.ddm["Rx Power Current [dBm]"].high) == (-5.003, 3.998)
    assert link.effective_ber == 15e-255 and link.raw_ber == 2e-9
    assert judged(HEALTHY + BER) == []


@pytest.mark.parametrize("find, replace, wanted", [
    # gcm's own variants of its sample
    ("Rx LOS [per lane]                  : 0,0,0,0", "Rx LOS [per lane]                  : 0,0,1,0",
     (FAIL, "nic_module_fault", "NIC mlx5_0: transceiver Rx LOS set on lane 2")),
    ("Tx CDR LOL [per lane]              : 0,0,0,0", "Tx CDR LOL [per lane]              : 1,0,0,0",
     (WARN, "nic_module_warning", "NIC mlx5_0: transceiver Tx CDR LOL set on lane 0")),
    ("Bias Current [mA]                  : 9.210,9.264,9.054,9.142 [7..11]",
     "Bias Current [mA]                  : 9.210,12.5,9.054,9.142 [7..11]",
     (WARN, "nic_module_ddm", "NIC mlx5_0: transceiver Bias Current [mA] 12.5 outside its range [7..11]")),
    ("Module State                       : Ready state", "Module State                       : Low Power state",
     (FAIL, "nic_module_fault", "NIC mlx5_0: transceiver Module State is 'Low Power state', not 'Ready state'")),
    ("Module FW Fault                    : 0", "Module FW Fault                    : 1",
     (FAIL, "nic_module_fault", "NIC mlx5_0: transceiver Module FW Fault set")),
])
def test_each_gcm_condition(find, replace, wanted):
    assert judged(HEALTHY.replace(find, replace)) == [wanted]


def test_the_ndr_module_without_signal_fails_on_rx_los_and_warns_on_cdr_lol():
    got = judged((FIX / "ib_rx_los_m.txt").read_text())
    assert got == [(FAIL, "nic_module_fault", "NIC mlx5_0: transceiver Rx LOS set on lanes 0, 2, 3"),
                   (WARN, "nic_module_warning", "NIC mlx5_0: transceiver Rx CDR LOL set on lanes 0, 1, 2, 3")]


def test_ber_above_the_limits():
    high = BER.replace("\x1b[32m15E-255\x1b[0m", "1E-10")
    assert judged(high) == [(FAIL, "nic_ber_high", "NIC mlx5_0: effective physical BER 1e-10 above 1e-12 "
                                                   "(errors FEC did not correct)")]
    assert judged(BER, raw_ber_max=1e-9) == [(WARN, "nic_ber_high_raw", "NIC mlx5_0: raw physical BER 2e-09 above "
                                                                        "verify_nic_raw_ber_max 1e-09")]


@pytest.mark.parametrize("text, said", [("", "no output"), ("-E- Device not found", "-E- Device not found"),
                                        (HEALTHY.replace("Tx LOS [per lane]                  : 0,0,0,0",
                                                         "Tx LOS [per lane]                  : 0,x,0,0"), "Tx LOS")])
def test_output_mlxlink_never_prints_is_an_error(text, said):
    with pytest.raises(mlxlink.MlxlinkFormatError, match=said):
        mlxlink.parse(text)


def test_stored_with_the_nic_and_judged_only_when_optics_is_on():
    nic = probe.link_reading(NicFirmware("mlx5_0", "0000:1a:00.0", "mlxconfig"), "mlxlink",
                             HEALTHY.replace("Rx LOS [per lane]                  : 0,0,0,0",
                                             "Rx LOS [per lane]                  : 0,0,1,0") + BER, 0)
    data = node_nicfw.result(nic, 600, 10.0).to_dict()
    reading = NicFwReading(20.0, {"mlx5_0": data})
    on = NicFwPolicy(False, {}, optics=True)
    assert [r.code for r in nicfw.check_nic_firmware(reading, on, {"mlx5_0": True})] == ["nic_module_fault"]
    assert nicfw.check_nic_firmware(reading, NicFwPolicy(False, {}), {"mlx5_0": True}) == []
    missing = probe.link_reading(NicFirmware("mlx5_0", "0000:1a:00.0", None), None, "", None, missing=True)
    reasons = nicfw.check_nic_firmware(NicFwReading(20.0, {"mlx5_0": node_nicfw.result(missing, 600, 10.0).to_dict()}),
                                       on, {"mlx5_0": True})
    assert [(r.level, r.code) for r in reasons] == [(UNKNOWN, "nic_link_unreadable")]
    assert "neither mlxlink (MFT) nor mstlink (mstflint) is installed" in reasons[0].message


def test_the_remote_dump_carries_the_link_section():
    out = ["@@nic mlx5_0 0000:1a:00.0 mlxconfig", "Configurations:      Next Boot", "@@rc 0",
           "@@link mlxlink", *HEALTHY.splitlines(), *BER.splitlines(), "@@rc 0"]
    (nic,) = probe.parse_dump(out)
    assert nic.link is not None and nic.link.raw_ber == 2e-9 and nic.error is None
    assert "@@link" in probe.command(["mlx5_0"], optics=True) and "@@link" not in probe.command(["mlx5_0"])
