"""Issue 35, "A first verification is blind to what is rising": with no
stored reading every counter rate is judged over the time since boot (the
counters are totals since they started, /proc/uptime), link flaps also from
the kernel log's mlx5e "Link down" lines over a lookback; a stored reading
narrows the window as before; only what has no history at all (no uptime)
says rates start from now. Each test here failed on main before the change."""

from __future__ import annotations

import json
from pathlib import Path

from ccrhost.model.fabric import FabricPolicy, check_fabric, window_from_state
from ccrhost.model.gpu_health import GpuHealth, GpuHealthPolicy, GpuHealthReading, check_gpu_health
from ccrhost.model.status import FAIL, WARN
from ccrhost.model.verdict import Readings, evaluate, readings_from_dict
from ccrhost.probes import fabric
from ccrhost.probes import gpu_health as probe

FIX = Path(__file__).parent / "fixtures"


def codes(reasons):
    return sorted((r.level, r.code) for r in reasons)


def first_dump(counters: dict, uptime: str | None = "600.25", netdev: str = "ens1f0np0") -> fabric.FabricDump:
    """The fabric probe's output on a node that kept no reading: @@previous empty."""
    lines = ["@@previous", "@@t 1733300000.5", "@@boot 0a4c-boot"]
    if uptime is not None:
        lines.append(f"@@uptime {uptime}")
    lines.append("@@ib")
    for key, values in counters.items():
        dev, port = key.split("/")
        for name, value in values.items():
            group = "counters" if name in ("link_downed", "symbol_error", "port_rcv_errors") else "hw_counters"
            lines.append(f"{dev}/ports/{port}/{group}/{name}:{value}")
    lines += [f"@@stats mlx5_0 {netdev}", "NIC statistics:", "     rx_discards_phy: 0",
              f"@@pause mlx5_0 {netdev}", f"Pause parameters for {netdev}:", "Autonegotiate:\toff", "RX:\t\toff",
              "TX:\t\toff"]
    return fabric.parse_fabric_dump(lines)


# --- the fabric counters --------------------------------------------------------

def test_a_link_flapping_since_boot_fails_on_the_first_reading():
    # flapping every 2 s for the 600 s since boot: link_downed saturated at its 8-bit maximum
    dump = first_dump({"mlx5_0/1": {"link_downed": 255}})
    assert dump.previous is None and dump.now.uptime == 600.25
    reading = fabric.fabric_reading(dump)
    assert reading.window.since_boot and reading.window.seconds == 600.2
    reasons = check_fabric(reading)
    assert codes(reasons) == [(FAIL, "link_flap")]
    assert reasons[0].message == ("port mlx5_0/1 link_downed rose by at least 255 in the 600.2 s since boot "
                                  "(0 -> 255): the link is flapping")


def test_transport_errors_since_boot_are_judged_per_hour():
    # rnr_nak_retry_err: any rise FAILS (per hour); 3 in the 600 s since boot is 18/h
    reasons = check_fabric(fabric.fabric_reading(first_dump({"mlx5_0/1": {"rnr_nak_retry_err": 3}})))
    assert codes(reasons) == [(FAIL, "rdma_transport_failing")]
    assert reasons[0].message == "port mlx5_0/1 rnr_nak_retry_err rose by 3 in 600.2 s since boot (18/h, above 0/h)"


def test_one_old_link_down_over_weeks_is_no_flapping_link():
    """A count threshold is per window (verify_window_max_age): since boot it
    is judged by the whole rises an average window held. One link-down in
    30 days is none per hour; 2 in the first 10 minutes is a flap."""
    month = f"{30 * 86400}"
    assert check_fabric(fabric.fabric_reading(first_dump({"mlx5_0/1": {"link_downed": 1}}, uptime=month))) == []
    # 800 symbol errors in 30 days: about 1 an hour, within 10 a window
    quiet = first_dump({"mlx5_0/1": {"symbol_error": 800}}, uptime=month)
    assert check_fabric(fabric.fabric_reading(quiet), FabricPolicy(window_s=3600)) == []
    young = first_dump({"mlx5_0/1": {"link_downed": 2}}, uptime="600")
    assert codes(check_fabric(fabric.fabric_reading(young))) == [(FAIL, "link_flap")]


def test_a_stored_reading_narrows_the_window_and_no_uptime_means_no_history():
    now = {"mlx5_0/1": {"link_downed": 7}}
    stored = {"boot_id": "b", "time": 1000.0, "counters": now}
    narrow = window_from_state(stored, now, "b", 1060.0, 3600, uptime=86400.0)
    assert (narrow.seconds, narrow.since_boot, narrow.before) == (60.0, False, now)
    assert check_fabric(fabric.fabric_reading(fabric.FabricDump(
        fabric.Counters(1000.0, "b", now), fabric.Counters(1060.0, "b", now, uptime=86400.0)))) == []
    other_boot = window_from_state({**stored, "boot_id": "a"}, now, "b", 1060.0, 3600, uptime=500.0)
    assert (other_boot.seconds, other_boot.since_boot) == (500.0, True)
    stale = window_from_state(stored, now, "b", 9000.0, 3600, uptime=20000.0)
    assert (stale.seconds, stale.since_boot) == (20000.0, True)
    blind = fabric.fabric_reading(first_dump(now, uptime=None))
    assert blind.window.seconds is None and blind.window.note.startswith("no earlier reading")
    assert window_from_state(None, now, "b", 1.0, 0, uptime=500.0).note.startswith("verify_window_max_age is 0")


# --- link flaps from the kernel log, read once with the XIDs -----------------------

def test_link_down_lines_come_from_the_same_log_read_as_the_xids():
    from ccrhost.model.fabric import LinkDown

    assert "Link down" in probe.COMMAND_LOG and probe.COMMAND_LOG.count("dmesg 2>&1") == 1
    log = (FIX / "fabric/dmesg-mlx5-link-down.txt").read_text().splitlines()
    reading = probe.parse_command_output(["@@query", "@@uptime 18900.5", "@@dmesg 18900.5", *log])
    assert reading.uptime_s == 18900.5 and reading.log_error is None and reading.xids == []
    assert reading.link_downs == [LinkDown("enp1s0f0np0", "0000:01:00.0", 34.7),
                                  LinkDown("enp1s0f1np1", "0000:01:00.1", 34.4)]
    journal = probe.parse_command_output(["@@query", "@@journal 1733300600",
                                          "1733300000.25 node kernel: mlx5_core 0000:01:00.0 enp1s0f0np0: Link down"])
    assert journal.link_downs == [LinkDown("enp1s0f0np0", "0000:01:00.0", 599.8)] and journal.log_error is None


def flapping_log(netdev: str, times: int, every: float = 2.0, now: float = 600.0) -> list[str]:
    out = []
    for k in range(1, times + 1):
        out += [f"[{k * every:12.6f}] mlx5_core 0000:1a:00.0 {netdev}: Link down",
                f"[{k * every + 0.5:12.6f}] mlx5_core 0000:1a:00.0 {netdev}: Link up"]
    return ["@@query", f"@@uptime {now}", f"@@dmesg {now}", *out]


def test_a_netdev_that_logged_link_down_past_the_limit_fails_through_the_one_verdict():
    health = probe.parse_command_output(flapping_log("ens1f0np0", 6))
    readings = Readings([], [], gpu_health=health, fabric=fabric.fabric_reading(first_dump({})))
    verdict = evaluate(readings)
    assert [(r.level, r.code) for r in verdict.reasons if r.code == "link_flap"] == [(FAIL, "link_flap")]
    flap = next(r for r in verdict.reasons if r.code == "link_flap")
    assert flap.message == ("ens1f0np0 (mlx5_0) logged 'Link down' 6 times in the last 24 h (kernel log; limit 4): "
                            "the link is flapping")
    # the same judgement from the readings a check printed (slurm verify)
    again = evaluate(readings_from_dict(json.loads(json.dumps(readings.to_dict()))))
    assert [r.message for r in again.reasons] == [r.message for r in verdict.reasons]
    # a boot's one link-down is no flap; a netdev ccrhost does not judge is not judged; old lines are past the lookback
    calm = Readings([], [], gpu_health=probe.parse_command_output(flapping_log("ens1f0np0", 1)),
                    fabric=fabric.fabric_reading(first_dump({})))
    assert "link_flap" not in {r.code for r in evaluate(calm).reasons}
    other = Readings([], [], gpu_health=health, fabric=fabric.fabric_reading(first_dump({}, netdev="eno1")))
    assert "link_flap" not in {r.code for r in evaluate(other).reasons}
    old = Readings([], [], gpu_health=probe.parse_command_output(flapping_log("ens1f0np0", 6, now=200000.0)),
                   fabric=fabric.fabric_reading(first_dump({})))
    assert "link_flap" not in {r.code for r in evaluate(old).reasons}


# --- the GPUs' PCIe replays and NVLink errors ------------------------------------------

def test_pcie_replays_rising_since_boot_warn_on_the_first_reading():
    gpu = GpuHealth(index=0, pci="0000:18:00.0", pcie_replays=3000)
    reading = GpuHealthReading(gpus=[gpu], uptime_s=600.0)  # the deploy's path: no stored GPU reading
    reasons = check_gpu_health(reading, [], GpuHealthPolicy())
    assert codes(reasons) == [(WARN, "gpu_pcie_replay")]
    assert reasons[0].message == ("GPU 0 (0000:18:00.0) PCIe replays rose by 3000 in 600 s since boot "
                                  "(300.0/min, threshold 8/min)")
    # 3000 over 30 days: well under 8 a minute
    assert check_gpu_health(GpuHealthReading(gpus=[gpu], uptime_s=30 * 86400.0), [], GpuHealthPolicy()) == []


def test_the_check_judges_gpu_counters_since_boot_then_since_its_stored_reading(tmp_path, monkeypatch):
    from ccrhost.node import check
    from ccrhost.settings import validate_host

    monkeypatch.setattr(check, "boot_id", lambda: "b")
    settings = validate_host("n", {"verify_gpu_state": str(tmp_path / "gpu.json")})
    replays = {"n": 3000}

    def read():
        return GpuHealthReading(gpus=[GpuHealth(index=0, pci="0000:18:00.0", pcie_replays=replays["n"])],
                                uptime_s=600.0)

    first = check.local_gpu_health(settings, read, now=1000.0)
    assert first.window.since_boot and first.window.seconds == 600.0
    assert codes(check_gpu_health(first, [], settings.policy().gpu_health)) == [(WARN, "gpu_pcie_replay")]
    replays["n"] = 3001  # one more in the minute since: the stored reading narrows the window
    second = check.local_gpu_health(settings, read, now=1060.0)
    assert (second.window.since_boot, second.window.seconds) == (False, 60.0)
    assert check_gpu_health(second, [], settings.policy().gpu_health) == []
