"""The lossless fabric: readings from verbatim samples, the stored-reading
window (no sleep), verdicts and their thresholds."""

import subprocess
from pathlib import Path

import pytest

from ccrhost.model.fabric import FabricPolicy, PauseSetting, check_fabric, window_from_state
from ccrhost.model.status import FAIL, UNKNOWN, WARN
from ccrhost.probes import fabric
from ccrhost.settings import InventoryDataError, validate_host

FIX = Path(__file__).parent / "fixtures" / "fabric"


def codes(reasons):
    return sorted((r.level, r.code) for r in reasons)


# --- readings -------------------------------------------------------------------

def test_ethtool_stats_keep_only_the_judged_counters_of_a_real_sample():
    lines = (FIX / "ethtool-S-cx4lx-pause.txt").read_text().splitlines()
    assert fabric.parse_stats(lines) == {"tx_pause_storm_warning_events": 0, "tx_pause_storm_error_events": 0}
    assert fabric.parse_stats(["NIC statistics:", "     rx_prio3_pause_duration: 8134",
                               "     rx_discards_phy: 7"]) == {"rx_prio3_pause_duration": 8134, "rx_discards_phy": 7}


def test_ethtool_pause_of_a_real_sample_and_a_driver_without_it():
    lines = (FIX / "ethtool-a-global-on.txt").read_text().splitlines()
    assert fabric.parse_pause(lines) == PauseSetting(autoneg=False, rx=True, tx=True)
    assert fabric.parse_pause(["Pause parameters for veth0:",
                               "Cannot get device pause settings: Operation not supported"]) is None
    with pytest.raises(fabric.FabricFormatError, match="ethtool -a printed 'RX: maybe'"):
        fabric.parse_pause(["Pause parameters for eth0:", "RX: maybe"])


def test_unreadable_ethtool_output_is_recorded_not_a_number():
    c = fabric.parse_reading(["@@t 10.0", "@@stats mlx5_0 eth0", "     rx_discards_phy: lots",
                              "@@pause mlx5_0 eth0", "Pause parameters for eth0:", "RX:\t\toff", "TX:\t\toff"])
    assert "eth0" not in c.counters and c.pause["eth0"] == PauseSetting(None, False, False)
    assert c.unreadable == {"ethtool -S eth0": "ethtool -S printed 'rx_discards_phy: lots'"}
    reading = fabric.fabric_reading(fabric.FabricDump(None, c))
    assert codes(check_fabric(reading)) == [(UNKNOWN, "fabric_unreadable")]


def test_the_snippet_keeps_its_reading_and_shows_it_next_time(tmp_path):
    """The real shell snippet on this machine: the first run has no stored
    reading, the second shows the first one's; no sleep anywhere."""
    state = tmp_path / "sub" / "counters"
    cmd = fabric.command(str(state), keep=True)
    assert "sleep" not in cmd
    first = fabric.parse_fabric_dump(subprocess.run(["sh", "-c", cmd], capture_output=True, text=True,
                                                    check=True).stdout.splitlines())
    assert first.previous is None and first.now.time and state.is_file() and first.unkept is None
    second = fabric.parse_fabric_dump(subprocess.run(["sh", "-c", cmd], capture_output=True, text=True,
                                                     check=True).stdout.splitlines())
    assert second.previous.time == first.now.time and second.now.time >= first.now.time
    assert second.previous.boot_id == second.now.boot_id
    readonly = fabric.command(str(state), keep=False)
    third = fabric.parse_fabric_dump(subprocess.run(["sh", "-c", readonly], capture_output=True, text=True,
                                                    check=True).stdout.splitlines())
    assert third.previous.time == second.now.time  # a read that does not keep leaves the state alone


def test_a_state_that_cannot_be_written_says_so(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cmd = fabric.command(str(blocker / "counters"), keep=True)
    dump = fabric.parse_fabric_dump(subprocess.run(["sh", "-c", cmd], capture_output=True, text=True,
                                                   check=True).stdout.splitlines())
    assert dump.unkept == f"cannot write {blocker / 'counters'}"
    reasons = check_fabric(fabric.fabric_reading(dump))
    assert [(r.level, r.code) for r in reasons] == [(WARN, "link_state_unwritable")]


# --- the window: one rule for the deploy and the check ----------------------------

def test_window_from_state_rules():
    now = {"mlx5_0/1": {"link_downed": 1}}
    assert window_from_state(None, now, "b", 100.0).note.startswith("no earlier reading")
    other_boot = window_from_state({"boot_id": "a", "time": 50.0, "counters": now}, now, "b", 100.0)
    assert other_boot.before == {} and other_boot.note.startswith("first reading since boot")
    old = window_from_state({"boot_id": "b", "time": 50.0, "counters": now}, now, "b", 5000.0, max_age=3600)
    assert old.before == {} and "4950 s old, over the 3600 s limit (verify_window_max_age)" in old.note
    future = window_from_state({"boot_id": "b", "time": 150.0, "counters": now}, now, "b", 100.0)
    assert future.before == {} and "not before now" in future.note
    ok = window_from_state({"boot_id": "b", "time": 40.0, "counters": {"mlx5_0/1": {"link_downed": 0}}}, now, "b",
                           100.0, max_age=3600)
    assert ok.seconds == 60.0 and ok.before == {"mlx5_0/1": {"link_downed": 0}} and ok.note is None


def _dump(before: dict, after: dict, seconds=300.0, pause=None, boot="b"):
    prev = fabric.Counters(1000.0, boot, before, {"eth0": "mlx5_0"})
    now = fabric.Counters(1000.0 + seconds, "b", after, {"eth0": "mlx5_0"}, pause or {})
    return fabric.FabricDump(prev, now)


# --- verdicts ---------------------------------------------------------------------

def test_link_downed_rising_fails_as_before():
    dump = _dump({"mlx5_0/1": {"link_downed": 0}}, {"mlx5_0/1": {"link_downed": 2}})
    assert codes(check_fabric(fabric.fabric_reading(dump))) == [(FAIL, "link_flap")]


def test_global_pause_beside_pfc_fails_only_where_pfc_is_configured():
    reading = fabric.fabric_reading(_dump({}, {}, pause={"eth0": PauseSetting(False, True, True)}))
    reasons = check_fabric(reading, FabricPolicy(pfc=True))
    assert codes(reasons) == [(FAIL, "global_pause_on")]
    assert reasons[0].message.startswith("global pause on beside PFC on eth0 (ethtool -a: RX on, TX on)")
    assert check_fabric(reading, FabricPolicy(pfc=False)) == []


def test_pause_share_and_storms():
    before = {"eth0": {"tx_prio3_pause_duration": 0, "rx_prio3_pause_duration": 0, "tx_pause_storm_error_events": 4,
                       "tx_pause_storm_warning_events": 0}}
    after = {"eth0": {"tx_prio3_pause_duration": 60_000_000, "rx_prio3_pause_duration": 1_000_000,
                      "tx_pause_storm_error_events": 4, "tx_pause_storm_warning_events": 1}}
    reasons = check_fabric(fabric.fabric_reading(_dump(before, after, seconds=300.0)))
    # 60 s of 300 s paused: 20% > 10%; rx 1 s: 0.3%
    assert codes(reasons) == [(FAIL, "pfc_pause_share"), (WARN, "pause_storm_warning")]
    assert "eth0 sent PFC pause on priority 3 20% of the last 300 s (limit 10%)" in reasons[0].message
    after["eth0"]["tx_pause_storm_error_events"] = 5
    assert (FAIL, "pause_storm") in codes(check_fabric(fabric.fabric_reading(_dump(before, after))))


def test_error_rates_warn_or_fail_by_the_settings():
    before = {"eth0": {"rx_symbol_err_phy": 0, "rx_discards_phy": 0}, "mlx5_0/1": {"rnr_nak_retry_err": 0,
                                                                                    "out_of_sequence": 0}}
    after = {"eth0": {"rx_symbol_err_phy": 5, "rx_discards_phy": 3}, "mlx5_0/1": {"rnr_nak_retry_err": 0,
                                                                                  "out_of_sequence": 9}}
    dump = _dump(before, after, seconds=3600.0)
    s = validate_host("h", {})
    assert codes(check_fabric(fabric.fabric_reading(dump), s.policy().fabric)) == [
        (WARN, "netdev_phy_errors"), (WARN, "netdev_rx_drops"), (WARN, "rdma_transport_errors")]
    after["mlx5_0/1"]["rnr_nak_retry_err"] = 1
    after["eth0"]["rx_symbol_err_phy"] = 121
    assert codes(check_fabric(fabric.fabric_reading(dump), s.policy().fabric)) == [
        (FAIL, "netdev_phy_errors_high"), (FAIL, "rdma_transport_failing"), (WARN, "netdev_rx_drops"),
        (WARN, "rdma_transport_errors")]
    quiet = validate_host("h", {"verify_fabric_warn_per_hour": {"rx_discards_phy": 10, "out_of_sequence": None},
                                "verify_fabric_fail_per_hour": {"rnr_nak_retry_err": None}})
    assert codes(check_fabric(fabric.fabric_reading(dump), quiet.policy().fabric)) == [
        (FAIL, "netdev_phy_errors_high"), (WARN, "rdma_transport_errors")]  # rnr still WARNs at any rise


def test_no_stored_reading_judges_levels_and_says_rates_start_now():
    dump = fabric.FabricDump(None, fabric.Counters(5.0, "b", {"mlx5_0/1": {"link_downed": 9}}, {"eth0": "mlx5_0"},
                                                   {"eth0": PauseSetting(False, False, True)}))
    reading = fabric.fabric_reading(dump)
    assert reading.window.note.startswith("no earlier reading")
    assert codes(check_fabric(reading, FabricPolicy(pfc=True))) == [(FAIL, "global_pause_on")]


def test_excluded_devices_and_their_netdevs_are_not_judged():
    before = {"eth0": {"rx_discards_phy": 0}, "mlx5_0/1": {"link_downed": 0}}
    after = {"eth0": {"rx_discards_phy": 5}, "mlx5_0/1": {"link_downed": 1}}
    reading = fabric.fabric_reading(_dump(before, after), exclude=("mlx5_*",))
    assert check_fabric(reading) == [] and reading.netdevs == {}


@pytest.mark.parametrize("key, value, message", [
    ("verify_link_window", 3, "removed: rates are now the change since the node's last stored reading"),
    ("verify_window_max_age", -1, "allowed: 0 to 604800"),
    ("verify_pause_share_max", 0, "greater than 0"),
    ("verify_fabric_warn_per_hour", {"rx_drops": 1}, "allowed:"),
    ("verify_fabric_fail_per_hour", {"rx_discards_phy": -1}, "greater than or equal to 0"),
])
def test_bad_fabric_settings_are_refused_naming_the_key(key, value, message):
    with pytest.raises(InventoryDataError) as err:
        validate_host("gpu01", {key: value})
    assert key in str(err.value) and message in str(err.value)


# --- tuning: global pause off where PFC is on ----------------------------------------

def test_qos_turns_global_pause_off_beside_pfc_restorably_and_the_boot_unit_always():
    from ccrhost.model import qos
    from ccrhost.probes.qos import QosInterface

    wanted = validate_host("h", {}).qos_wanted()
    on = PauseSetting(False, True, False)
    steps, _ = qos.plan_steps("ens1np0", "ofed", wanted, QosInterface(), pause=on)
    last = steps[-1]
    assert last.forward == ["ethtool", "-A", "ens1np0", "rx", "off", "tx", "off"]
    assert last.restore == (["ethtool", "-A", "ens1np0", "rx", "on", "tx", "off"],)  # what was read
    script = qos.unit_script("ens1np0", steps, [])
    assert "ethtool -A ens1np0 rx off tx off" in script and "ethtool -A ens1np0 rx on tx off" in script
    off = PauseSetting(False, False, False)
    assert all(s.forward[0] != "ethtool" for s in qos.plan_steps("ens1np0", "ofed", wanted, QosInterface(),
                                                                  pause=off)[0])  # idempotent
    no_pfc = validate_host("h", {"qos_pfc_priorities": []}).qos_wanted()
    assert all(s.forward[0] != "ethtool" for s in qos.plan_steps("ens1np0", "ofed", no_pfc, QosInterface(),
                                                                  pause=on)[0])
    assert all(s.forward[0] != "ethtool" for s in qos.plan_steps("ens1np0", "ofed", wanted, QosInterface())[0])
    forced, _ = qos.plan_interface("ens1np0", "ofed", wanted, QosInterface(), force=True, pause=off)
    assert forced[-1] == ["ethtool", "-A", "ens1np0", "rx", "off", "tx", "off"]  # the boot unit re-applies it
