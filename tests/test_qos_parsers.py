"""QoS tool output: the verbatim mlnx_qos and dcb samples."""

from pathlib import Path

import pytest

from ccrhost.probes import qos as p

FIX = Path(__file__).parent / "fixtures"


def test_mlnx_qos_older_ofed_sample():
    out = p.parse_mlnx_qos((FIX / "mlnx_qos_sample1.txt").read_text())
    assert out["trust"] == "dscp" and out["dcbx"] == "OS controlled"
    assert out["cable_len"] == 7
    assert out["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert out["buffer_size"] is None and out["prio2buffer"] is None
    assert out["dscp2prio"][26] == 3 and out["dscp2prio"][48] == 6 and len(out["dscp2prio"]) == 64


def test_mlnx_qos_ofed_23_sample_with_unknown_line():
    out = p.parse_mlnx_qos((FIX / "mlnx_qos_sample2.txt").read_text())
    assert out["buffer_size"] == [19872, 220896, 0, 0, 0, 0, 0, 0]
    assert out["max_buffer_size"] == 4151520
    assert out["cable_len"] == 30
    assert out["pfc"] == [0, 0, 0, 0, 0, 1, 0, 0]
    assert out["prio2buffer"] == [0, 0, 0, 0, 0, 1, 0, 0]
    assert out["dscp2prio"][40] == 5 and out["dscp2prio"][48] == 6


def test_mlnx_qos_without_trust_line_is_an_error():
    with pytest.raises(p.QosFormatError):
        p.parse_mlnx_qos("DCBX mode: OS controlled\n")


def test_dcb_pfc_man_page_and_pre_release_samples():
    out = p.parse_dcb_pfc("pfc-cap 8 macsec-bypass off delay 4096\nprio-pfc 0:off 1:off 2:off 3:off 4:off 5:off 6:on 7:on\n")
    assert out == {"pfc_cap": 8, "macsec_bypass": "off", "delay": 4096, "prio_pfc": [0, 0, 0, 0, 0, 0, 1, 1]}
    old = p.parse_dcb_pfc("pfc-cap 8 macsec-bypass on delay 0\npg-pfc 0:off 1:on 2:off 3:off 4:off 5:off 6:off 7:on\n"
                          "requests 0:0 1:217 2:0 3:0 4:0 5:0 6:0 7:28\nindications 0:0 1:179 2:0 3:0 4:0 5:0 6:0 7:18\n")
    assert old["prio_pfc"] == [0, 1, 0, 0, 0, 0, 0, 1] and old["delay"] == 0


def test_dcb_app_numeric_sample():
    assert p.parse_dcb_app_dscp("dscp-prio 0:0 24:2 24:3 48:6\n") == {0: 0, 24: 3, 48: 6}
    with pytest.raises(p.QosFormatError, match="-N"):
        p.parse_dcb_app_dscp("dscp-prio 0:0 CS3:2 CS3:3 CS6:6")
    assert p.parse_dcb_app_dscp("") == {}


def test_dcb_buffer_sample():
    out = p.parse_dcb_buffer("prio-buffer 0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7\n"
                             "buffer-size 0:10Kb 1:10Kb 2:10Kb 3:10Kb 4:10Kb 5:10Kb 6:1Mb 7:10Kb\ntotal-size 1222Kb\n")
    assert out["prio_buffer"] == list(range(8))
    assert out["buffer_size"] == [10240] * 6 + [1048576, 10240]
    assert out["total_size"] == 1222 * 1024


def test_ofed_buffer_files():
    text = ("Port buffer size = 262016\nSpare buffer size = 0\nBuffer\tSize\txoff_threshold\txon_threshold\n"
            "0\t130944\t0\t0\n1\t131072\t100000\t95000\n" + "".join(f"{i}\t0\t0\t0\n" for i in range(2, 8)))
    out = p.parse_ofed_buffer_size(text)
    assert out["port_buffer_size"] == 262016 and out["buffers"][1] == {"buffer": 1, "size": 131072, "xoff": 100000, "xon": 95000}
    assert p.parse_ofed_prio2buffer("Priority\tBuffer\n" + "".join(f"{i}\t\t{int(i == 3)}\n" for i in range(8))) == \
        [0, 0, 0, 1, 0, 0, 0, 0]


@pytest.mark.parametrize("parse, text, quoted", [
    (p.parse_dcb_pfc, "pfc-cap 8 macsec-bypass off delay 7\nprio-pfc -1:on 0:off\n", "prio-pfc -1:on 0:off"),
    (p.parse_dcb_pfc, "prio-pfc 0:off 8:on\n", "prio-pfc 0:off 8:on"),
    (p.parse_dcb_pfc, "prio-pfc 0:off 3:maybe\n", "prio-pfc 0:off 3:maybe"),
    (p.parse_dcb_pfc, "prio-pfc 0:off 3on\n", "prio-pfc 0:off 3on"),
    (p.parse_dcb_app_dscp, "dscp-prio CS3:3\n", "dscp-prio CS3:3"),
    (p.parse_dcb_app_dscp, "dscp-prio 64:3\n", "dscp-prio 64:3"),
    (p.parse_dcb_app_dscp, "dscp-prio \u0661:3\n", "dscp-prio \u0661:3"),
    (p.parse_dcb_buffer, "prio-buffer 0:0 8:1\n", "prio-buffer 0:0 8:1"),
    (p.parse_dcb_buffer, "buffer-size 0:10Kb 1:-1Kb\n", "buffer-size 0:10Kb 1:-1Kb"),
    (p.parse_ofed_prio2buffer, "Priority\tBuffer\n8\t\t0\n", "8\t\t0"),
    (p.parse_ofed_buffer_size, "Port buffer size 4151520\n", "Port buffer size 4151520"),
    (p.parse_mlnx_qos, "Priority trust state: dscp\n\tprio:8 dscp:07,06,\n", "prio:8 dscp:07,06,"),
    (p.parse_mlnx_qos, "Priority trust state: dscp\nPFC configuration:\n\tenabled 0 0 0 1 0 0 0\n", "enabled 0 0 0 1 0 0 0"),
])
def test_bad_qos_output_is_refused_quoting_the_line(parse, text, quoted):
    with pytest.raises(p.QosFormatError) as info:
        parse(text)
    assert repr(quoted) in str(info.value), str(info.value)


def test_qos_dump_names_the_command_and_keeps_the_error_with_its_interface():
    pfc = "prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off"
    reading = p.parse_qos_dump(["@@if ens1np0", "@@dcb_app 0", "dscp-prio CS3:3", "@@dcb_pfc 0", pfc,
                                "@@if ens2np0", "@@dcb_app 0", "dscp-prio 26:3", "@@dcb_pfc 0", pfc])
    bad, good = reading.interfaces["ens1np0"], reading.interfaces["ens2np0"]
    assert bad.errors == ["cannot read dcb -N app show dev ens1np0 dscp-prio: line 'dscp-prio CS3:3': "
                          "DSCP 'CS3' by name: run dcb with -N"]
    assert good.errors == [] and good.dscp2prio == {26: 3} and good.pfc == [0, 0, 0, 1, 0, 0, 0, 0]


def test_ecn_value_that_is_no_integer_names_the_file():
    reading = p.parse_qos_dump(["@@if ens1np0", "@@ecn", "roce_rp/enable/3:yes"])
    assert reading.interfaces["ens1np0"].errors == [
        "cannot read /sys/class/net/ens1np0/ecn: /sys/class/net/ens1np0/ecn/roce_rp/enable/3 holds 'yes', not an integer"]


# --- a record cut short is no record (issue 24) -----------------------------------
# Every parser knows its record's whole shape: eight priorities (or buffers),
# each once. Samples: /work/shared/reference/roce.md (dcb man pages, mlx5e's
# qos/ files) cut where a short read or a killed tool would cut them.

@pytest.mark.parametrize("parse, text, message", [
    (p.parse_dcb_pfc, "pfc-cap 8 macsec-bypass off delay 4096\nprio-pfc 0:off 1:off 2:off 3:on\n",
     "line 'prio-pfc 0:off 1:off 2:off 3:on': priority 4, 5, 6, 7 missing; expected all eight (0-7)"),
    (p.parse_dcb_pfc, "prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:on 6:off 7:on\n",
     "line 'prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:on 6:off 7:on': priority 6 appears twice"),
    (p.parse_dcb_buffer, "prio-buffer 0:0 1:1 2:2 3:3\n",
     "line 'prio-buffer 0:0 1:1 2:2 3:3': priority 4, 5, 6, 7 missing; expected all eight (0-7)"),
    (p.parse_dcb_buffer, "buffer-size 0:10Kb 1:10Kb 2:10Kb 3:10Kb 4:10Kb 5:10Kb 6:1Mb\n",
     "line 'buffer-size 0:10Kb 1:10Kb 2:10Kb 3:10Kb 4:10Kb 5:10Kb 6:1Mb': buffer 7 missing; expected all eight (0-7)"),
    (p.parse_ofed_prio2buffer, "Priority\tBuffer\n0\t\t0\n1\t\t0\n2\t\t0\n3\t\t1\n",
     "line 'priority rows': priority 4, 5, 6, 7 missing; expected all eight (0-7)"),
    (p.parse_ofed_buffer_size, "Port buffer size = 262016\nSpare buffer size = 0\n"
                               "Buffer\tSize\txoff_threshold\txon_threshold\n0\t0\t0\t\t0\n1\t262016\t150000\t\t140000\n",
     "line 'buffer rows': buffer 2, 3, 4, 5, 6, 7 missing; expected all eight (0-7)"),
    (p.parse_ofed_buffer_size, "Port buffer size = 262016\n", "no 'Spare buffer size = N' line"),
])
def test_a_record_cut_short_is_refused(parse, text, message):
    with pytest.raises(p.QosFormatError) as info:
        parse(text)
    assert str(info.value) == message


def _sample2() -> str:
    return (Path(__file__).parent / "fixtures/mlnx_qos_sample2.txt").read_text()


@pytest.mark.parametrize("cut, message", [
    ("\tenabled", "no PFC 'enabled' row"),
    ("\tbuffer  ", "a 'Receive buffer size' line without the PFC 'buffer' row"),
    ("\tprio:0", "trust is dscp but no 'prio:N dscp:...' line follows"),
])
def test_mlnx_qos_output_cut_short_is_refused(cut, message):
    lines = _sample2().splitlines()
    at = next(i for i, line in enumerate(lines) if line.replace("        ", "\t").startswith(cut))
    with pytest.raises(p.QosFormatError) as info:
        p.parse_mlnx_qos("\n".join(lines[:at]) + "\n")
    assert str(info.value) == message


def test_mlnx_qos_with_a_dscp_mapped_twice_is_refused():
    text = _sample2().replace("prio:1 dscp:15,14,13,12,11,10,09,08,", "prio:1 dscp:15,14,13,12,11,10,09,07,")
    with pytest.raises(p.QosFormatError, match=r"DSCP 7 is mapped twice$"):
        p.parse_mlnx_qos(text)


def test_the_whole_samples_still_read():
    assert p.parse_mlnx_qos(_sample2())["pfc"] == [0, 0, 0, 0, 0, 1, 0, 0]
    sample1 = (Path(__file__).parent / "fixtures/mlnx_qos_sample1.txt").read_text()
    assert p.parse_mlnx_qos(sample1)["prio2buffer"] is None  # older OFED: neither buffer line nor row


def test_a_truncated_dcb_pfc_line_leaves_the_interface_unread():
    """The reproduction: the missing priorities read as "off", so the deploy
    planned a PFC write on a node that matched and its restore would switch
    the lossless priorities off. Now the interface has an error and no PFC."""
    reading = p.parse_qos_dump(["@@if ens1np0", "@@dcb_app 0", "dscp-prio 26:3 48:6", "@@dcb_pfc 0",
                                "pfc-cap 8 macsec-bypass off delay 7", "prio-pfc 0:off 1:off 2:off 3:on"])
    st = reading.interfaces["ens1np0"]
    assert st.pfc is None
    assert st.errors == ["cannot read dcb pfc show dev ens1np0: line 'prio-pfc 0:off 1:off 2:off 3:on': "
                         "priority 4, 5, 6, 7 missing; expected all eight (0-7)"]
