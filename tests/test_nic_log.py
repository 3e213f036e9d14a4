"""mlx5_core's fatal kernel-log lines (NVSentinel's verbatim test lines), read
in the same kernel-log read as the XIDs and judged in the one node verdict."""

from ccrhost.model.nic_log import NicLogEvent, check_nic_log
from ccrhost.model.status import FAIL
from ccrhost.probes import gpu_health

# NVSentinel tests/syslog_health_monitor_test.go, the fatal NIC driver lines, verbatim
NVSENTINEL = [
    "kernel: [   66.816635] mlx5_core 0000:03:00.0: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a "
    "leak of a command resource",
    "kernel: [   17.982092] mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached "
    "miss count",
    "kernel: [   17.982217] mlx5_core 0000:41:00.0: print_health_info:458:(pid 0): synd 0x8: unrecoverable hardware "
    "error",
]
NOT_FATAL = [  # NVSentinel's non-fatal ones: not judged here
    "kernel: [    8.951695] mlx5_core 0000:63:00.1: Port module event: module 1, Cable unplugged",
    "kernel: [123.456795] mlx5_core 0000:d2:00.0: mlx5_cmd_out_err:838:(pid 1441871): ACCESS_REG(0x805) op_mod(0x1) "
    "failed, status bad operation(0x2), syndrome (0x305684), err(-22)",
]


def dmesg(lines):
    return [line.removeprefix("kernel: ") for line in lines]


def test_each_fatal_pattern_maps_to_its_pci_function():
    events = gpu_health.parse_nic_events("dmesg", "100", dmesg(NVSENTINEL + NOT_FATAL))
    assert [(e.pci, e.kind, e.age_s) for e in events] == [
        ("0000:03:00.0", "cmd_exec_timeout", 33.2), ("0000:41:00.0", "health_poll_failed", 82.0),
        ("0000:41:00.0", "unrecoverable_err", 82.0)]
    assert events[1].text == "poll_health:852:(pid 0): device's health compromised - reached miss count"


def test_repeats_merge_and_the_grep_keeps_the_lines():
    import re

    lines = dmesg(NVSENTINEL[1:2] * 3)
    (e,) = gpu_health.parse_nic_events("dmesg", "100", lines)
    assert e.count == 3
    kept = re.compile(gpu_health._LOG_LINES)
    assert all(kept.search(line) for line in NVSENTINEL) and not any(kept.search(line) for line in NOT_FATAL)
    assert "'" not in gpu_health._LOG_LINES  # it sits in the probe's single-quoted grep -E


def test_the_reading_carries_them_and_the_verdict_fails_naming_the_nic():
    out = gpu_health.parse_command_output(["@@dmesg 100", *dmesg(NVSENTINEL[2:])])
    assert [e.kind for e in out.nic_events] == ["unrecoverable_err"]
    (r,) = check_nic_log(out.nic_events, {"0000:41:00.0": "mlx5_3"})
    assert (r.level, r.code) == (FAIL, "nic_fatal_log")
    assert r.message.startswith("NIC mlx5_3 (0000:41:00.0): mlx5_core logged a fatal error (unrecoverable_err) "
                                "82 s ago: print_health_info:458")
    (unnamed,) = check_nic_log([NicLogEvent("0000:9a:00.0", "cmd_exec_timeout", None, "x", 2)], {})
    assert unnamed.message.startswith("NIC at 0000:9a:00.0: mlx5_core logged a fatal error (cmd_exec_timeout) "
                                      "this boot, 2 times this boot")
