"""NIC firmware settings: the mlxconfig/mstconfig table from verbatim samples,
the profile's verdict, the stored reading and its age, and every path
(``ccrhost check``, the deploy's node verdict) judging alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from ccrhost.model import nicfw
from ccrhost.model.active import ActiveResult
from ccrhost.model.nicfw import FwParam, FwValue, NicFirmware, NicFwPolicy, NicFwReading
from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN
from ccrhost.node import active
from ccrhost.node import nicfw as node_nicfw
from ccrhost.node.active import ToolRun
from ccrhost.probes import nicfw as probe

FIX = Path(__file__).parent / "fixtures" / "nicfw"


def test_operator_fixture_parses_every_column_alias_and_marker():
    params = probe.parse_query((FIX / "operator_utils_test.txt").read_text())
    assert list(params) == ["KEEP_IB_LINK_UP_P2", "KEEP_LINK_UP_ON_BOOT_P2", "ESWITCH_HAIRPIN_DESCRIPTORS",
                            "MEMIC_SIZE_LIMIT"]
    keep = params["KEEP_IB_LINK_UP_P2"]
    assert keep.marked and keep.default == FwValue("False(0)", "False", 0)
    assert keep.current == FwValue("True(1)", "True", 1) and keep.next_boot == FwValue("True(1)", "True", 1)
    assert not params["KEEP_LINK_UP_ON_BOOT_P2"].marked
    array = params["ESWITCH_HAIRPIN_DESCRIPTORS"]
    assert array.current == FwValue("Array[0..7]") and array.current.number is None
    memic = params["MEMIC_SIZE_LIMIT"]
    assert memic.current == FwValue("_256KB(1)", "_256KB", 1)
    assert memic.next_boot == FwValue("DISABLED(0)", "DISABLED", 0) and memic.marked


def test_mstconfig_without_e_has_next_boot_only():
    params = probe.parse_query((FIX / "mstconfig_q_cx4lx.txt").read_text())
    assert params["CNP_DSCP_P1"] == FwParam("CNP_DSCP_P1", FwValue("48", None, 48))
    assert params["ADVANCED_PCI_SETTINGS"].next_boot.number == 0
    assert params["PCI_WR_ORDERING"].next_boot == FwValue("per_mkey(0)", "per_mkey", 0)
    assert "MAX_ACC_OUT_READ" not in params


# mstflint's printing (mlxconfig/mlxcfg_ui.cpp printConfHeader, printSingleParam, printValue), per era:
# the name's prefix and width, each value's "%-Ns", and PRINT_SPACE_IF_NEEDED's test of the printed width
LAYOUTS = {
    "2019": dict(prefix=lambda diff, ro: f"{diff}        ", name=36, value=16, space=lambda w: w > 16,
                 header="%-16s%36s%16s%18s" % ("Configurations:", "Default", "Current", "Next Boot")),
    "2023": dict(prefix=lambda diff, ro: f"{diff}{ro}     ", name=44, value=20, space=lambda w: w >= 20,
                 header="%-20s%44s%20s%18s" % ("Configurations:", "Default", "Current", "Next Boot")),
    "2026": dict(prefix=lambda diff, ro: f"{diff}{ro}     ", name=48, value=33, space=lambda w: w >= 33,
                 header="%-56s%-33s %-33s %-33s" % ("Configurations:", "Default", "Current", "Next Boot")),
}


def printed(layout: str, rows: list[tuple[str, str, str, str, bool]]) -> str:
    """``mlxconfig -d <bdf> -e q`` as that era's mlxconfig prints it."""
    lay = LAYOUTS[layout]
    out = ["", "Device #1:", "----------", "", "Device type:        ConnectX7", lay["header"]]
    for name, default, current, nxt, read_only in rows:
        diff = "*" if nxt != default or nxt != current else " "
        line, width = lay["prefix"](diff, "RO" if read_only else "  ") + f"{name:<{lay['name']}}", 0
        for i, v in enumerate((default, current, nxt)):
            if i and lay["space"](width):
                line += " "
            cell = f"{v:<{lay['value']}}"
            line, width = line + cell, len(cell)
        out.append(line)
    return "\n".join(out + ["The '*' shows parameters with next value different from default/current value.", ""])


ATOMIC = "PCI_ATOMIC_DISABLED_EXT_ATOMIC_ENABLED(0)"  # wider than the column in every layout


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_values_that_fill_their_column_parse_in_every_layout(layout):
    # main: split on 2+ spaces, "PCI_ATOMIC_MODE" made the NIC UNKNOWN nic_fw_unreadable
    rows = [("PCI_ATOMIC_MODE", ATOMIC, ATOMIC, ATOMIC, False),
            ("EXP_ROM_UEFI_x86_ENABLE", "True(1)", "True(1)", "True(1)", False),  # mlxconfig_host.db's name
            ("PCI_BUS00_HIERARCHY_TYPE", "PCIE_ENDPOINT(0)", "PCIE_ENDPOINT(0)", "PCIE_ENDPOINT(0)", False),
            ("MAX_ACC_OUT_READ", "0", "44", "128", False),
            ("CNP_DSCP_P1", "48", "48", "48", layout != "2019")]
    text = printed(layout, rows)
    if layout == "2019":
        assert "PCIE_ENDPOINT(0)PCIE_ENDPOINT(0)" in text  # 16 characters: no space after them
    else:
        assert f"{ATOMIC} {ATOMIC}" in text and " RO     CNP_DSCP_P1" in text
    params = probe.parse_query(text)
    assert list(params) == [r[0] for r in rows]
    for name, default, current, nxt, _ in rows:
        assert (params[name].default.text, params[name].current.text, params[name].next_boot.text) == \
            (default, current, nxt)
    assert params["PCI_ATOMIC_MODE"].current == FwValue(ATOMIC, "PCI_ATOMIC_DISABLED_EXT_ATOMIC_ENABLED", 0)
    assert params["MAX_ACC_OUT_READ"].marked and not params["PCI_ATOMIC_MODE"].marked
    assert judge(text) == [(WARN, "nic_fw_pending", "NIC mlx5_0 (0000:1a:00.0): firmware setting pending reboot: "
                            "MAX_ACC_OUT_READ is 44, 128 at the next boot")]


def test_the_lab_mlxconfig_prints_by_the_same_rule():
    import sys

    from ccrhost.lab import nicfw as lab_nicfw

    sys.path.insert(0, str(Path(__file__).parent.parent / "ccrhost/lab/shims"))
    try:
        import labfw
    finally:
        sys.path.pop(0)
    values = {name: spec[3] for name, spec in lab_nicfw.PARAMS.items()} | {"ADVANCED_PCI_SETTINGS": 1}
    state = {"params": {n: list(spec) for n, spec in lab_nicfw.PARAMS.items()}, "current": dict(values),
             "next": {**values, "MAX_ACC_OUT_READ": 128}}
    text = labfw.query("0000:1a:00.0", state, True, "mlxconfig")
    assert f"{ATOMIC} {ATOMIC} {ATOMIC}" in text  # one space after a value that fills its column
    want = printed("2026", [(n, *(labfw.text(spec, v) for v in (spec[3], state["current"][n], state["next"][n])),
                             False) for n, spec in state["params"].items()]).splitlines()

    def table(lines):
        return lines[next(i for i, x in enumerate(lines) if x.startswith("Configurations:")):]
    assert table(text.splitlines()) == table(want)
    params = probe.parse_query(text)
    assert params["PCI_ATOMIC_MODE"].current.number == 0 and params["MAX_ACC_OUT_READ"].marked


@pytest.mark.parametrize("text, quoted", [
    ("-E- Failed to open the device", "-E- Failed to open the device"),
    ("", "no output"),
    ("Configurations:     Default     Next Boot\n", "unexpected columns"),
    ("Configurations:    Next Boot\n   SRIOV_EN   True(1)   False(0)\n", "unexpected row"),
])
def test_output_no_tool_prints_is_an_error_quoting_it(text, quoted):
    with pytest.raises(probe.NicFwFormatError, match=quoted):
        probe.parse_query(text)


def _row(name, current, next_boot=None, default="0"):
    nxt = next_boot if next_boot is not None else current
    return f"         {name:<36}{default:<16}{current:<16}{nxt}"


def table(**params) -> str:
    """An ``-e q`` table in the operator fixture's layout, for the values given."""
    rows = [_row(k, *v) if isinstance(v, tuple) else _row(k, v) for k, v in params.items()]
    return ("\nDevice #1:\n----------\n\nDevice type:    ConnectX7\n"
            "Configurations:                              Default         Current         Next Boot\n"
            + "\n".join(rows) + "\nThe '*' shows parameters with next value different from default/current value.\n")


GOOD = dict(ADVANCED_PCI_SETTINGS="True(1)", MAX_ACC_OUT_READ="0", ATS_ENABLED="False(0)",
            ROCE_CC_PRIO_MASK_P1="255", CNP_DSCP_P1="48", CNP_802P_PRIO_P1="6")


def judge(text, ethernet=True, **profile):
    nic = NicFirmware("mlx5_0", "0000:1a:00.0", "mlxconfig", probe.parse_query(text))
    policy = NicFwPolicy(True, nicfw.default_profile(**profile))
    return [(r.level, r.code, r.message) for r in nicfw.judge_nic(nic, policy, ethernet)]


def test_the_profile_passes_a_nic_set_as_the_operator_sets_it():
    assert judge(table(**GOOD)) == []


def test_a_wrong_current_fails_or_warns_by_setting():
    got = judge(table(**{**GOOD, "MAX_ACC_OUT_READ": "64", "ATS_ENABLED": "True(1)"}))
    assert got == [(FAIL, "nic_fw_wrong", "NIC mlx5_0 (0000:1a:00.0): MAX_ACC_OUT_READ is 64, the profile wants "
                    "0 or 44 or 128"),
                   (WARN, "nic_fw_differs", "NIC mlx5_0 (0000:1a:00.0): ATS_ENABLED is True(1), the profile wants 0")]


def test_cnp_values_come_from_the_qos_settings_and_only_on_ethernet():
    assert judge(table(**GOOD), cnp_dscp=46)[0][:2] == (WARN, "nic_fw_differs")
    assert judge(table(**GOOD), ethernet=False, cnp_dscp=46) == []


def test_a_pending_next_boot_warns_naming_the_parameter():
    got = judge(table(**{**GOOD, "MAX_ACC_OUT_READ": ("0", "128")}))
    assert got == [(WARN, "nic_fw_pending", "NIC mlx5_0 (0000:1a:00.0): firmware setting pending reboot: "
                    "MAX_ACC_OUT_READ is 0, 128 at the next boot")]


def test_max_acc_hidden_by_advanced_pci_settings_off_is_its_own_reason():
    good = {k: v for k, v in GOOD.items() if k != "MAX_ACC_OUT_READ"}
    got = judge(table(**{**good, "ADVANCED_PCI_SETTINGS": "False(0)"}))
    assert [(lvl, code) for lvl, code, _ in got] == [(FAIL, "nic_fw_wrong"), (FAIL, "nic_fw_pci_hidden")]
    assert "MAX_ACC_OUT_READ is hidden because ADVANCED_PCI_SETTINGS is False(0)" in got[1][2]


def test_mstconfig_sample_is_judged_on_its_next_boot_column():
    got = judge((FIX / "mstconfig_q_cx4lx.txt").read_text())
    assert [(lvl, code) for lvl, code, _ in got] == [(FAIL, "nic_fw_wrong"), (FAIL, "nic_fw_pci_hidden")]


def test_link_type_only_when_declared():
    assert judge(table(**GOOD, LINK_TYPE_P1="ETH(2)")) == []
    assert judge(table(**GOOD, LINK_TYPE_P1="ETH(2)"), link_type=1)[0][:2] == (FAIL, "nic_fw_wrong")


def test_a_dual_port_nics_second_function_is_judged_by_its_ports_p2_values():
    # main: port 2 (the PF at .1) was judged, and planned, by port 1's _P1 values
    dual = table(**GOOD, LINK_TYPE_P1="ETH(2)", LINK_TYPE_P2="IB(1)", ROCE_CC_PRIO_MASK_P2="255",
                 CNP_DSCP_P2="26", CNP_802P_PRIO_P2="6")
    policy = NicFwPolicy(True, nicfw.default_profile(link_type=2))

    def got(bdf):
        nic = NicFirmware("mlx5_1", bdf, "mlxconfig", probe.parse_query(dual))
        return [(r.level, r.code, r.message) for r in nicfw.judge_nic(nic, policy, True)], \
            nicfw.plan(nic, policy.wants, True)
    assert got("0000:1a:00.0") == ([], {})
    assert got("0000:1a:00.1") == (
        [(WARN, "nic_fw_differs", "NIC mlx5_1 (0000:1a:00.1): CNP_DSCP_P2 is 26, the profile wants 48"),
         (FAIL, "nic_fw_wrong", "NIC mlx5_1 (0000:1a:00.1): LINK_TYPE_P2 is IB(1), the profile wants 2")],
        {"CNP_DSCP_P2": 48, "LINK_TYPE_P2": 2})
    # the verbatim dual-port sample, queried through its second function (Device: 01:00.1), lists both ports
    sample = probe.parse_query((FIX / "mstconfig_q_cx4lx.txt").read_text())
    assert {"CNP_DSCP_P1", "CNP_DSCP_P2"} <= set(sample) and nicfw.port_of("0000:01:00.1") == 2
    assert [nicfw.port_of(b) for b in ("0000:01:00.0", None, "garbage")] == [1, 1, 1]


# -- the stored reading, its age, and every path ---------------------------------

def _sysfs(tmp_path, monkeypatch, devices=("mlx5_0",)):
    real = node_nicfw.bdf_of
    for i, d in enumerate(devices):
        (tmp_path / f"pci/0000:{0x1a + i:02x}:00.0").mkdir(parents=True)
        (tmp_path / "class/infiniband" / d).mkdir(parents=True)
        (tmp_path / "class/infiniband" / d / "device").symlink_to(tmp_path / f"pci/0000:{0x1a + i:02x}:00.0")
    monkeypatch.setattr(node_nicfw, "bdf_of", lambda dev: real(dev, str(tmp_path)))


def _runner(output, rc=0, **kw):
    calls = []

    def run(argv, deadline, env=None):
        calls.append(argv)
        return ToolRun(tuple(argv), rc, output, 0.1, **kw)
    run.calls = calls
    return run


def test_runner_stores_each_nic_with_its_time_and_the_check_judges_its_age(tmp_path, monkeypatch):
    _sysfs(tmp_path, monkeypatch)
    state = str(tmp_path / "active.json")
    run = _runner(table(**{**GOOD, "ATS_ENABLED": "True(1)"}))
    node_nicfw.run_and_store(state, ["mlx5_0"], 600, run=run, clock=lambda: 1000.0, which=lambda t: t == "mstconfig")
    assert run.calls == [["mstconfig", "-d", "0000:1a:00.0", "-e", "q"]]
    policy = NicFwPolicy(True, nicfw.default_profile())
    fresh = node_nicfw.stored_reading(state, clock=lambda: 1100.0)
    assert [r.code for r in nicfw.check_nic_firmware(fresh, policy, {"mlx5_0": True})] == ["nic_fw_differs"]
    old = node_nicfw.stored_reading(state, clock=lambda: 1700.0)
    assert [(r.level, r.code) for r in nicfw.check_nic_firmware(old, policy, {"mlx5_0": True})] == \
        [(UNKNOWN, "nic_fw_stale")]
    assert [r.code for r in nicfw.check_nic_firmware(fresh, policy, {"mlx5_0": True, "mlx5_1": True})] == \
        ["nic_fw_differs", "nic_fw_never_read"]
    # off: not judged at all
    assert nicfw.check_nic_firmware(fresh, NicFwPolicy(False, policy.wants), {"mlx5_0": True}) == []


def test_no_tool_is_unknown_for_these_keys_only(tmp_path, monkeypatch):
    _sysfs(tmp_path, monkeypatch)
    state = str(tmp_path / "active.json")
    got = node_nicfw.query(["mlx5_0"], run=_runner(""), which=lambda name: None)
    assert got == [NicFirmware("mlx5_0", "0000:1a:00.0", None, missing=True)]
    node_nicfw.run_and_store(state, ["mlx5_0"], 600, which=lambda name: None)
    reasons = nicfw.check_nic_firmware(node_nicfw.stored_reading(state), NicFwPolicy(True, nicfw.default_profile()),
                                       {"mlx5_0": True})
    assert [(r.level, r.code) for r in reasons] == [(UNKNOWN, "nic_fw_tool_missing")]


def test_other_checks_results_are_kept_in_the_shared_state_file(tmp_path):
    state = str(tmp_path / "active.json")
    active.store(state, [ActiveResult("allreduce", "nvlink", OK, None, "passed", 1.0, 10.0, 476.0)])
    text = Path(state).read_text()
    nic = node_nicfw.result(NicFirmware("mlx5_0", "0000:1a:00.0", "mlxconfig"), 600, 2.0)
    both = active.merged(text, [nic])
    assert sorted((r.check, r.mode) for r in both) == [("allreduce", "nvlink"), ("nic_fw", "mlx5_0")]
    assert active.merged("not json", [nic]) == [nic]


def test_dump_of_the_remote_command_reads_each_device():
    out = ["@@nic mlx5_0 0000:1a:00.0 mlxconfig", *table(**GOOD).splitlines(), "@@rc 0",
           "@@nic mlx5_1 0000:2a:00.0 -", "@@nic mlx5_2 - mlxconfig",
           "@@nic mlx5_3 0000:3a:00.0 mstconfig", "-E- Failed to open the device", "@@rc 1",
           "@@nic mlx5_4 0000:4a:00.0 mlxconfig", "@@rc 124"]
    got = probe.parse_dump(out)
    assert [n.device for n in got] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"]
    assert got[0].params["CNP_DSCP_P1"].current.number == 48 and got[0].error is None
    assert got[1].missing
    assert "PCI function is not known" in got[2].error
    assert got[3].error == "mstconfig -d 0000:3a:00.0 -e q (exit 1): -E- Failed to open the device"
    assert "did not answer within" in got[4].error


def test_the_stored_reading_rides_in_the_readings_document():
    from ccrhost.model.verdict import Readings, readings_from_dict

    data = node_nicfw.result(NicFirmware("mlx5_0", "0000:1a:00.0", "mlxconfig",
                                         probe.parse_query(table(**GOOD))), 600, 5.0).to_dict()
    readings = Readings([], [], nic_fw=NicFwReading(6.0, {"mlx5_0": data}))
    again = readings_from_dict(readings.to_dict())
    assert again.nic_fw == readings.nic_fw


def test_the_plan_writes_only_what_differs_in_next_boot():
    policy = nicfw.default_profile()
    good = NicFirmware("mlx5_0", "b", "mlxconfig", probe.parse_query(table(**GOOD)))
    assert nicfw.plan(good, policy, True) == {} and nicfw.reboot_owed(good, {}) == []
    wrong = NicFirmware("mlx5_0", "b", "mlxconfig", probe.parse_query(table(**{**GOOD, "MAX_ACC_OUT_READ": "64",
                                                                               "CNP_DSCP_P1": "26"})))
    assert nicfw.plan(wrong, policy, True) == {"MAX_ACC_OUT_READ": 0, "CNP_DSCP_P1": 48}
    assert nicfw.plan(wrong, policy, False) == {"MAX_ACC_OUT_READ": 0}  # no RoCE congestion keys on IB
    # written already, a reboot owed: nothing to write again
    pending = NicFirmware("mlx5_0", "b", "mlxconfig", probe.parse_query(table(**{**GOOD, "MAX_ACC_OUT_READ": ("64", "0")})))
    assert nicfw.plan(pending, policy, True) == {} and nicfw.reboot_owed(pending, {}) == ["MAX_ACC_OUT_READ"]
    hidden = NicFirmware("mlx5_0", "b", "mlxconfig", probe.parse_query((FIX / "mstconfig_q_cx4lx.txt").read_text()))
    assert nicfw.plan(hidden, policy, True) == {"ADVANCED_PCI_SETTINGS": 1, "MAX_ACC_OUT_READ": 0}
    assert nicfw.plan(NicFirmware("mlx5_0", "b", None, missing=True), policy, True) == {}
    # both written, the reboot not yet made: MAX_ACC_OUT_READ is still hidden, nothing more to write
    owed = table(**{k: v for k, v in GOOD.items() if k != "MAX_ACC_OUT_READ"} | {"ADVANCED_PCI_SETTINGS": ("False(0)", "True(1)")})
    written = NicFirmware("mlx5_0", "b", "mlxconfig", probe.parse_query(owed))
    assert nicfw.plan(written, policy, True) == {}
    assert nicfw.reboot_owed(written, {}) == ["ADVANCED_PCI_SETTINGS"]


def test_the_health_checks_budget_stops_the_queries_in_time_and_names_the_nics_left(tmp_path, monkeypatch):
    # issue 46: slurmd kills a health check at 60 s; mlxconfig and mlxlink take seconds per NIC on 8 NICs
    _sysfs(tmp_path, monkeypatch, devices=[f"mlx5_{i}" for i in range(8)])
    state = str(tmp_path / "active.json")
    now = [100.0]
    calls = []

    def slow(argv, deadline, env=None):  # each tool takes 4 s, whatever it is given
        calls.append((argv[0], argv[2], deadline))
        now[0] += min(4.0, deadline)
        return ToolRun(tuple(argv), 0, table(**GOOD), 4.0)
    skipped = []
    node_nicfw.run_and_store(state, [f"mlx5_{i}" for i in range(8)], 600, run=slow, clock=lambda: 1000.0,
                             which=lambda t: t in ("mlxconfig", "mlxlink"), optics=True,
                             deadline=100.0 + 45, monotonic=lambda: now[0], skipped=skipped)
    # 45 s, 5 s kept for judging and the drain, 10 s needed to start a NIC's two tools: 4 NICs at 8 s
    assert [c[:2] for c in calls] == [(tool, f"0000:{0x1a + i:02x}:00.0") for i in range(4)
                                      for tool in ("mlxconfig", "mlxlink")]
    assert all(c[2] <= 40 for c in calls)
    assert skipped == ["mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"]
    assert sorted(node_nicfw.stored_reading(state, clock=lambda: 1000.0).results) == [f"mlx5_{i}" for i in range(4)]
    assert now[0] <= 100.0 + 45 - node_nicfw.RESERVE


def test_a_query_the_budget_cut_short_is_not_stored_as_unreadable(tmp_path, monkeypatch):
    _sysfs(tmp_path, monkeypatch, devices=["mlx5_0"])
    state = str(tmp_path / "active.json")
    skipped = []
    node_nicfw.run_and_store(state, ["mlx5_0"], 600, run=_runner("", rc=None, timed_out=True),
                             which=lambda t: t == "mlxconfig", deadline=100.0 + 20,
                             monotonic=lambda: 100.0, skipped=skipped)
    assert skipped == ["mlx5_0"]
    assert node_nicfw.stored_reading(state).results == {}


def test_the_check_names_the_nics_its_budget_left_and_gives_run_check_its_deadline(monkeypatch, capsys):
    import time

    from test_checks import H100, healthy

    from ccrhost.cli import entry
    from ccrhost.model.verdict import evaluate
    from ccrhost.node import check as node_check

    given = {}

    def run_check(settings, deadline=None, skipped=None, refresh_nic=False, **kw):
        given.update(deadline=deadline, refresh_nic=refresh_nic)
        skipped += ["mlx5_6", "mlx5_7"]
        return evaluate(healthy(), H100)
    monkeypatch.setattr(node_check, "run_check", run_check)
    before = time.monotonic()
    with pytest.raises(SystemExit) as done:
        entry(["check", "--format", "nhc", "--refresh-nic", "--budget", "45"])
    assert done.value.code == 0 and given["refresh_nic"]
    assert before + 45 <= given["deadline"] <= time.monotonic() + 45
    assert capsys.readouterr().err == (
        "ccrhost check: --budget 45 s: skipped the NIC firmware query (--refresh-nic) on mlx5_6, mlx5_7; their "
        "stored readings stay and are judged by their age\n")
