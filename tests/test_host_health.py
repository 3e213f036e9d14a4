"""Host health: each parser from verbatim samples (tests/fixtures/host_health/) and each judge."""

from pathlib import Path

import pytest

from ccrhost.model import host_health as hh
from ccrhost.model.status import FAIL, UNKNOWN, WARN
from ccrhost.probes import gpu_health as gh_probe
from ccrhost.probes import host_health as probe

FIX = Path(__file__).parent / "fixtures" / "host_health"


def lines(name: str) -> list[str]:
    return (FIX / name).read_text().splitlines()


def codes(reasons) -> list[tuple[str, str]]:
    return [(r.level, r.code) for r in reasons]


# --- parsers --------------------------------------------------------------------------

def test_systemctl_show_blocks_are_the_units_asked_in_order_whatever_the_property_order():
    units = probe.parse_units(lines("systemctl_show.txt"), ["printnanny-update", "slurmd"])
    assert units["printnanny-update"] == hh.Unit("printnanny-update", "loaded", "inactive", "dead", 0, "65536")
    assert units["slurmd"] == hh.Unit("slurmd", "loaded", "active", "running", 3, "infinity")


def test_systemctl_show_with_fewer_blocks_than_asked_or_a_strange_line_is_refused():
    with pytest.raises(probe.HostHealthFormatError, match="printed 2 units for the 3 asked"):
        probe.parse_units(lines("systemctl_show.txt"), ["a", "b", "c"])
    with pytest.raises(probe.HostHealthFormatError, match="NRestarts='many' is no count"):
        probe.parse_units(["Id=a.service", "NRestarts=many"], ["a"])
    with pytest.raises(probe.HostHealthFormatError, match="LimitMEMLOCK='8M'"):
        probe.parse_units(["Id=a.service", "LimitMEMLOCK=8M"], ["a"])
    with pytest.raises(probe.HostHealthFormatError, match="systemctl show printed 'Failed to connect to bus'"):
        probe.parse_units(["Failed to connect to bus"], ["a"])


def test_chrony_leap_status_comes_first_then_timedatectl():
    chrony = lines("chrony_tracking.txt")
    assert probe.parse_time(chrony, "0", None, "") == hh.TimeSync("chrony", True, "Leap status : Normal")
    unsynced = [x.replace("Normal", "Not synchronised") for x in chrony]
    assert probe.parse_time(unsynced, "0", lines("timedatectl_show.txt"), "0").synchronised is False
    # chronyd not running: timedatectl answers
    sync = probe.parse_time(["506 Cannot talk to daemon"], "1", lines("timedatectl_show.txt"), "0")
    assert sync == hh.TimeSync("timesyncd", False, "NTPSynchronized=no")
    none = probe.parse_time(["506 Cannot talk to daemon"], "1", ["Failed to connect to bus: Host is down"], "1")
    assert none.synchronised is None
    assert none.error == ("chronyc tracking: 506 Cannot talk to daemon; timedatectl show: Failed to connect to bus: "
                          "Host is down")
    assert probe.parse_time(None, "", None, "").error == "neither chronyc nor timedatectl is installed"


def test_edac_counts_and_what_is_not_a_count():
    assert probe.parse_edac(["mc0 3 0", "mc1 0 1"]) == hh.Edac({"mc0": (3, 0), "mc1": (0, 1)})
    assert probe.parse_edac([]).error.startswith("no EDAC memory controller")
    assert probe.parse_edac(["mc0 ? 0"]).error == "mc0: ce_count ?, ue_count 0 (? = unreadable)"
    with pytest.raises(probe.HostHealthFormatError):
        probe.parse_edac(["csrow0 1 2"])


def test_memlock_is_kib_or_unlimited_and_knows_the_prolog():
    assert probe.parse_memlock("prolog_slurmd", ["unlimited"]) == hh.Memlock(True, None)
    assert probe.parse_memlock("", ["8192"]) == hh.Memlock(False, 8192)
    assert probe.parse_memlock("", ["sh: ulimit: bad"]).error == "ulimit -l printed 'sh: ulimit: bad'"


def test_gpu_use_is_read_only_where_the_node_is_known_idle():
    out = ["@@idle prolog 0,1", "@@gpumem", "0, 00000000:18:00.0, 2048", "1, 00000000:2A:00.0, 0", "@@gpumemrc 0",
           "@@gpuprocs", "00000000:18:00.0, 4242, python3, 2048 MiB", "@@gpuprocsrc 0"]
    reading = probe.parse_command_output(out)
    use = reading.gpu_use
    assert use.idle == "the prolog, before the job's processes" and use.job_gpus == (0, 1)
    assert use.memory_mib == {0: ("00000000:18:00.0", 2048), 1: ("00000000:2A:00.0", 0)}
    assert use.processes == [hh.GpuProcess("00000000:18:00.0", 4242, "python3", "2048 MiB")]
    assert probe.parse_command_output(["@@idle slurm State=MIXED"]).gpu_use == hh.GpuUse()
    assert probe.parse_command_output(["@@idle slurm State=IDLE+COMPLETING"]).gpu_use == hh.GpuUse()
    drained = probe.parse_command_output(["@@idle slurm State=IDLE+DRAIN", "@@gpumemrc none"]).gpu_use
    assert drained.idle == "Slurm: State=IDLE+DRAIN" and drained.error == "nvidia-smi not found"


def test_the_whole_output_systemctl_missing_or_failing_is_the_units_error():
    missing = probe.parse_command_output(["@@units none slurmd"])
    assert missing.units.error == "systemctl not found"
    failing = probe.parse_command_output(["@@units 1 slurmd", "System has not been booted with systemd as init "
                                          "system (PID 1). Can't operate."])
    assert failing.units.error.startswith("systemctl show exit 1: System has not been booted")


def test_the_previous_reading_counts_only_from_this_boot():
    block = ["NRestarts=2", "Id=slurmd.service", "LoadState=loaded", "ActiveState=active", "SubState=running"]
    now = ["@@previous", "=boot b1", *("=" + x for x in block), "@@boot b1", "@@units 0 slurmd", *block]
    assert probe.parse_command_output(now).units.previous == {"slurmd": 2}
    other_boot = [x.replace("=boot b1", "=boot b0") for x in now]
    assert probe.parse_command_output(other_boot).units.previous is None


def test_the_kernel_log_read_keeps_the_host_fatal_lines_with_their_age():
    log = ["@@journal 10000", "9000.000000 gpu01 kernel: watchdog: BUG: soft lockup - CPU#3 stuck for 21s! [grep:4749]",
           "9100.0 gpu01 kernel: INFO: task kworker/1:0:707 blocked for more than 120 seconds.",
           "9200.0 gpu01 kernel: Memory cgroup out of memory: Killed process 123 (python3) total-vm:1kB",
           "9300.0 gpu01 kernel: Buffer I/O error on dev sda1, logical block 0, async page read",
           "9400.0 gpu01 kernel: nvme nvme0: I/O 123 QID 4 timeout, reset controller",
           "9500.0 gpu01 kernel: EXT4-fs (sda1): Remounting filesystem read-only",
           "9600.0 gpu01 kernel: watchdog: BUG: soft lockup - CPU#5 stuck for 26 seconds! [bash:537]"]
    reading = gh_probe.parse_command_output(log)
    assert reading.log_error is None
    events = {e.kind: e for e in reading.host_events}
    assert set(events) == {"soft_lockup", "hung_task", "io_error", "fs_readonly"}  # a cgroup's own OOM is the job's
    assert (events["soft_lockup"].count, events["soft_lockup"].age_s) == (2, 400.0)
    assert events["soft_lockup"].text == "watchdog: BUG: soft lockup - CPU#5 stuck for 26 seconds! [bash:537]"
    assert events["io_error"].count == 2
    # the one read's grep keeps them
    assert "soft lockup - CPU#" in gh_probe.COMMAND_LOG and "Remounting filesystem read-only" in gh_probe.COMMAND_LOG


# --- judges ---------------------------------------------------------------------------

def unit(name, active="active", restarts=0, memlock="infinity", load="loaded"):
    return hh.Unit(name, load, active, "running" if active == "active" else "failed", restarts, memlock)


def healthy(**units) -> hh.HostHealthReading:
    all_units = {n: unit(n) for n in ("slurmd", "nvidia-persistenced", "nvidia-dcgm", "nvidia-fabricmanager")}
    all_units.update(units)
    return hh.HostHealthReading(units=hh.UnitsReading(all_units), time=hh.TimeSync("chrony", True, "Normal"),
                                edac=hh.Edac({"mc0": (0, 0)}), memlock=hh.Memlock(False, 8192))


def judge(reading, kernel=(), error=None, fabric=True, **policy):
    return hh.check_host_health(reading, hh.HostHealthPolicy(**policy), list(kernel), error, fabric)


def test_a_healthy_host_gives_no_reason_and_a_disabled_check_none_at_all():
    assert judge(healthy()) == []
    assert judge(hh.HostHealthReading(error="garbled"), enabled=False) == []
    assert codes(judge(hh.HostHealthReading(error="garbled"))) == [(UNKNOWN, "host_health_unreadable")]


def test_units_down_fail_or_warn_by_their_list_and_fabric_manager_where_nvswitches_are():
    reading = healthy(**{"nvidia-fabricmanager": unit("nvidia-fabricmanager", "failed"),
                         "nvidia-dcgm": unit("nvidia-dcgm", "inactive")})
    reasons = judge(reading)
    assert codes(reasons) == [(WARN, "host_unit_inactive_warn"), (FAIL, "host_unit_inactive")]
    assert reasons[1].message == "systemd unit nvidia-fabricmanager is not active: failed/failed"
    assert codes(judge(reading, fabric=False)) == [(WARN, "host_unit_inactive_warn")]  # no NVSwitch: FM not needed
    assert codes(judge(reading, fabric=False, fabricmanager="required"))[-1] == (FAIL, "host_unit_inactive")
    gone = judge(healthy(slurmd=unit("slurmd", "inactive", load="not-found")))
    assert gone[0].message == "systemd unit slurmd is not active: not found"


def test_restarts_rising_between_readings_is_flapping():
    reading = healthy(**{"nvidia-fabricmanager": unit("nvidia-fabricmanager", restarts=7)})
    assert judge(reading) == []  # no previous reading: nothing to compare
    reading.units.previous = {"nvidia-fabricmanager": 4}
    reasons = judge(reading)
    assert codes(reasons) == [(WARN, "host_unit_flapping")]
    assert reasons[0].message == ("systemd unit nvidia-fabricmanager restarted 3 times since the last reading "
                                  "(NRestarts 4 -> 7; more than 0 is flapping)")
    assert judge(reading, restarts_max=3) == []


def test_units_unreadable_is_unknown_never_a_pass():
    reading = healthy()
    reading.units = hh.UnitsReading(error="systemctl not found")
    assert codes(judge(reading)) == [(UNKNOWN, "host_units_unreadable")]
    assert judge(reading, units=(), units_warn=(), fabricmanager="off") == []  # nothing watched


def test_time_not_synchronised_warns_and_unknown_is_unknown():
    reading = healthy()
    reading.time = hh.TimeSync("chrony", False, "Leap status : Not synchronised")
    assert [(r.code, r.message) for r in judge(reading)] == [
        ("host_time_unsynced", "the clock is not synchronised (chrony: Leap status : Not synchronised)")]
    reading.time = hh.TimeSync(error="neither chronyc nor timedatectl is installed")
    assert codes(judge(reading)) == [(UNKNOWN, "host_time_unknown")]
    assert judge(reading, time_sync=False) == []


def test_edac_corrected_warn_then_fail_above_nine_and_any_uncorrected_fails():
    def edac(ce, ue):
        reading = healthy()
        reading.edac = hh.Edac({"mc0": (ce, ue)})
        return codes(judge(reading))
    assert edac(0, 0) == []
    assert edac(1, 0) == [(WARN, "host_edac_corrected")]
    assert edac(9, 0) == [(WARN, "host_edac_corrected")]
    assert edac(10, 0) == [(FAIL, "host_edac_corrected_high")]
    assert edac(0, 1) == [(FAIL, "host_edac_uncorrected")]
    reading = healthy()
    reading.edac = hh.Edac(error="no EDAC memory controller")
    assert codes(judge(reading)) == [(UNKNOWN, "host_edac_unreadable")]


def test_kernel_lines_each_their_code_within_the_lookback_and_not_allowed():
    events = [hh.KernelEvent("soft_lockup", 2, 30.0, "watchdog: BUG: soft lockup - CPU#3 stuck for 21s! [grep:4749]"),
              hh.KernelEvent("hung_task", 1, 60.0, "INFO: task jbd2/sda1:99 blocked for more than 120 seconds."),
              hh.KernelEvent("oom_kill", 1, None, "Out of memory: Killed process 124 (python3)"),
              hh.KernelEvent("io_error", 1, 10.0, "Buffer I/O error on dev sda1, logical block 0, async page read"),
              hh.KernelEvent("fs_readonly", 1, 200000.0, "EXT4-fs (sda1): Remounting filesystem read-only")]
    reasons = judge(healthy(), events)
    assert codes(reasons) == [(FAIL, "host_kernel_soft_lockup"), (WARN, "host_kernel_hung_task"),
                              (WARN, "host_kernel_oom_kill"), (FAIL, "host_kernel_io_error")]  # read-only: too old
    assert reasons[0].message == ("the kernel logged a soft lockup 2 times, latest 30 s ago: watchdog: BUG: soft "
                                  "lockup - CPU#3 stuck for 21s! [grep:4749]")
    assert len(judge(healthy(), events, kernel_lookback_s=None)) == 5
    assert codes(judge(healthy(), events, kernel_allow=(r"jbd2/sda1", "sda1"))) == [
        (FAIL, "host_kernel_soft_lockup"), (WARN, "host_kernel_oom_kill")]
    assert codes(judge(healthy(), [], "dmesg: read kernel buffer failed")) == [(UNKNOWN, "host_kernel_unreadable")]


def test_gpu_memory_or_a_process_on_an_idle_node_is_a_leftover_only_there():
    reading = healthy()
    reading.gpu_use = hh.GpuUse(None, None, {0: ("00000000:18:00.0", 2048)})
    assert judge(reading) == []  # not known idle: a job's
    reading.gpu_use = hh.GpuUse("the prolog, before the job's processes", None,
                                {0: ("00000000:18:00.0", 2048), 1: ("00000000:2A:00.0", 15),
                                 2: ("00000000:3A:00.0", 0)},
                                [hh.GpuProcess("00000000:18:00.0", 4242, "python3", "2048 MiB"),
                                 hh.GpuProcess("00000000:3A:00.0", 77, "dcgm", "0 MiB")])
    reasons = judge(reading)
    assert [(r.code, r.gpu) for r in reasons] == [("host_gpu_leftover", 0), ("host_gpu_leftover", 2)]  # 15 MiB: ok
    assert reasons[0].message == ("GPU 0 holds 2048 MiB on an idle node (the prolog, before the job's processes; "
                                  "more than 15 MiB is a leftover process): pid 4242 python3 (2048 MiB)")
    reading.gpu_use.job_gpus = (1, 2)  # the prolog judges its job's GPUs only
    assert [r.gpu for r in judge(reading)] == [2]
    reading.gpu_use = hh.GpuUse("Slurm: State=IDLE", error="nvidia-smi not found")
    assert codes(judge(reading)) == [(UNKNOWN, "host_gpu_use_unreadable")]


def test_memlock_below_the_setting_or_not_unlimited_fails_naming_both():
    reading = healthy(slurmd=unit("slurmd", memlock="8388608"))
    reading.memlock = hh.Memlock(True, 65536)
    reasons = judge(reading)
    assert [(r.code, r.message) for r in reasons] == [
        ("host_memlock_low", "the prolog's locked-memory limit (ulimit -l, what the job inherits) is 65536 KiB; "
                             "wanted unlimited"),
        ("host_memlock_low", "slurmd's LimitMEMLOCK is 8388608 (8192 KiB), which its jobs inherit; wanted unlimited")]
    assert judge(reading, memlock_kib=8192) == []  # both at least 8192 KiB
    assert [r.message for r in judge(reading, memlock_kib=65537)][0].endswith("wanted at least 65537 KiB")
    # outside the prolog its own limit (an SSH session's) says nothing about a job's
    reading.memlock = hh.Memlock(False, 64)
    assert codes(judge(reading)) == [(FAIL, "host_memlock_low")]
    reading.memlock = hh.Memlock(True, error="ulimit -l printed 'x'")
    assert (UNKNOWN, "host_memlock_unknown") in codes(judge(reading))


def test_the_verdict_judges_host_health_with_the_gpu_health_probes_kernel_lines():
    from ccrhost.model.gpu_health import GpuHealthReading
    from ccrhost.model.verdict import Readings, evaluate

    health = GpuHealthReading(host_events=[hh.KernelEvent("soft_lockup", 1, 5.0, "watchdog: BUG: soft lockup - "
                                                                                 "CPU#1 stuck for 22s! [x:1]")])
    verdict = evaluate(Readings(ports=[], gpus=[], gpu_health=health, host_health=healthy()))
    assert "host_kernel_soft_lockup" in {r.code for r in verdict.reasons}
    assert not {r.code for r in evaluate(Readings(ports=[], gpus=[], gpu_health=health)).reasons} & {
        "host_kernel_soft_lockup"}  # not read: not judged
