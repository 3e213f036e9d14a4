"""GPU health: parsers on verbatim samples (tests/fixtures/gpu/README.md), the NVML path giving the same
record, and the one check's verdicts with their codes and messages."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ccrhost.model.gpu_health import (
    CounterWindow,
    GpuHealth,
    GpuHealthPolicy,
    GpuHealthReading,
    NvLink,
    Xid,
    check_gpu_health,
)
from ccrhost.model.gpus import GpuReading
from ccrhost.model.verdict import Readings, Verdict, evaluate, readings_from_dict
from ccrhost.probes import gpu_health as probe

F = Path(__file__).parent / "fixtures/gpu"
H100 = "NVIDIA H100 80GB HBM3"


def lines(name: str) -> list[str]:
    return (F / name).read_text().splitlines()


def codes(reasons) -> list[tuple[str, str]]:
    return [(r.level, r.code) for r in reasons]


# --- parsers on the verbatim samples -----------------------------------------

def test_query_reads_the_550_sample():
    [g] = probe.parse_query(lines("nvsmi_q_a40_550.txt"))
    assert g == GpuHealth(index=0, pci="0000:4f:00.0", serial="1322221017584", ecc_uncorrectable=0, ecc_correctable=0,
                          retired_pending=None, remap_pending=False, remap_failure=False, remap_correctable=2,
                          remap_uncorrectable=0, pcie_replays=0, fabric_state=None, fabric_status=None)


def _with_fabric(sample: str) -> list[str]:
    q = lines("nvsmi_q_a40_550.txt")
    start = q.index("    Fabric")
    return q[:start] + lines(sample) + q[start + 3:]


def test_query_reads_the_fabric_samples():
    [done] = probe.parse_query(_with_fabric("fabric_completed.txt"))
    assert (done.fabric_state, done.fabric_status) == ("Completed", "Success")
    [busy] = probe.parse_query(_with_fabric("fabric_in_progress.txt"))
    assert (busy.fabric_state, busy.fabric_status) == ("In Progress", None)
    reasons = check_gpu_health(GpuHealthReading(gpus=[busy], fabric_manager="active"), [], GpuHealthPolicy())
    assert codes(reasons) == [("FAIL", "gpu_fabric_not_ready")]
    assert reasons[0].message == "GPU 0 (0000:4f:00.0) fabric not ready: state In Progress, status N/A"


def test_query_refuses_a_value_no_nvidia_smi_prints():
    q = [x.replace("Pending                           : No", "Pending                           : Maybe")
         for x in lines("nvsmi_q_a40_550.txt")]
    with pytest.raises(probe.GpuHealthFormatError, match="Remapped Rows/Pending 'Maybe' is neither Yes nor No"):
        probe.parse_query(q)


def test_nvlink_samples():
    links = probe.parse_nvlink(lines("nvlink_status_a6000.txt"), [])
    assert [len(links[i]) for i in (0, 1, 2)] == [4, 4, 0]  # GPU 2: "all links are inActive"
    assert all(n.up for n in links[0])
    h100 = probe.parse_nvlink(lines("nvlink_status_h100pcie.txt"), lines("nvlink_errors_h100.txt"))[0]
    assert [n.link for n in h100 if n.up is False] == [4]
    assert h100[0] == NvLink(0, True, 0, 0, 0, 26.562)  # the speed nvlink -s prints
    assert h100[-1] == NvLink(17, None, 0, 0, 0)  # in -e only: its state not read


def test_xid_lines_new_and_old_driver_format():
    xids, error = probe.parse_log("dmesg", "100", lines("dmesg_ctime_gpud.txt"))
    assert error is None
    # three lines of one code on one GPU: one record, counted, with the latest line (--ctime: no uptime stamp)
    assert [(x.code, x.pci, x.age_s, x.count) for x in xids] == [(13, "0000:cb:00", None, 3)]
    assert xids[0].text.startswith("pid='<unknown>', name=<unknown>, Graphics Exception: ESR")
    old, _ = probe.parse_log("dmesg", "0", lines("syslog_old_driver.txt"))
    assert [(x.code, x.pci) for x in old] == [(13, "0000:03:00")]
    assert old[0].text == "0003 00000000 00008297 00001098 00000000 00000044"


def test_dmesg_ages_a_wrapped_buffer_and_a_log_without_nvrm():
    log = [
        "d (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",  # cut by the wrap
        "[ 7000.250000] NVRM: Xid (PCI:0000:2a:00): 48, pid=1, name=python, An uncorrectable double bit error",
        "[ 9000.000000] NVRM: Xid (PCI:0000:3a",  # a line cut short
    ]
    xids, error = probe.parse_log("dmesg", "9200.5", log)
    assert (error, [(x.code, x.pci, x.age_s) for x in xids]) == (None, [(48, "0000:2a:00", 2200.2)])
    assert probe.parse_log("dmesg", "10", []) == ([], None)
    assert probe.parse_log("dmesg", "10", ["dmesg: read kernel buffer failed: Operation not permitted"]) == \
        ([], "dmesg: read kernel buffer failed: Operation not permitted")


def test_journal_lines_are_aged_from_the_nodes_clock():
    log = ["1733300000.500000 gpu01 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, "
           "GPU has fallen off the bus."]
    xids, error = probe.parse_log("journal", "1733300600", log)
    assert error is None and [(x.code, x.age_s) for x in xids] == [(79, 599.5)]
    _, error = probe.parse_log("journal", "1733300600", ["No journal files were found."])
    assert error == "No journal files were found."


# journalctl's own words (systemd src/shared/journal-util.c journal_access_check_and_warn), printed even with -q
TRUNCATED = ("Journal file /var/log/journal/173da2fad3064e3e9211a7ed7d59360b/system@00061e84932b9110-"
             "fcfc2bf59397404f.journal~ is truncated, ignoring file.")
UNSUPPORTED = ["Journal file /var/log/journal/674cc4f6256143379fd7935e328f9d5a/system.journal uses an unsupported "
               "feature, ignoring file.",
               "Use SYSTEMD_LOG_LEVEL=debug journalctl --file=/var/log/journal/674cc4f6256143379fd7935e328f9d5a/"
               "system.journal to see the details."]


def test_a_journal_file_journalctl_skips_is_no_unreadable_log():
    # main: "cannot read XIDs from the kernel log: journalctl: Journal file ... is truncated, ignoring file."
    # (UNKNOWN gpu_health_unreadable, and the prolog drained a healthy node on it)
    gpus = ["@@query", *lines("nvsmi_q_a40_550.txt"), "@@nvlinkstatus", "@@nvlinkerrors", "@@pcigpus", "0000:4f:00.0"]
    healthy = probe.parse_command_output([*gpus, "@@journal 1733300600", TRUNCATED, *UNSUPPORTED])
    assert (healthy.log_source, healthy.log_error, healthy.xids) == ("journalctl", None, [])
    assert check_gpu_health(healthy, [], GpuHealthPolicy()) == []
    sick = probe.parse_command_output([*gpus, "@@journal 1733300600", TRUNCATED, "1733300000.500000 gpu01 kernel: "
                                       "NVRM: Xid (PCI:0000:4f:00): 48, pid=1, name=python, An uncorrectable double "
                                       "bit error"])
    assert sick.log_error is None and codes(check_gpu_health(sick, [], GpuHealthPolicy())) == \
        [("FAIL", "gpu_xid_critical")]
    # what stops the read is still said
    _, error = probe.parse_log("journal", "1733300600", [TRUNCATED, "No journal files were opened due to "
                                                         "insufficient permissions."])
    assert error == "No journal files were opened due to insufficient permissions."


def test_command_output_sections():
    out = ["@@query", *lines("nvsmi_q_a40_550.txt"), "@@nvlinkstatus", "@@nvlinkerrors",
           "@@pcigpus", "0000:4f:00.0", "0000:52:00.0", "@@fabricmanager", "inactive",
           "@@dmesg 500.0", "[  400.000000] NVRM: Xid (PCI:0000:52:00): 79, pid='<unknown>', name=<unknown>, "
           "GPU has fallen off the bus."]
    r = probe.parse_command_output(out)
    assert (r.error, r.log_error, r.log_source, r.fabric_manager) == (None, None, "dmesg", "inactive")
    # nvlink -s listed no GPU (no NVLink on this system): links not read, not "none up"
    assert r.pci_gpus == ["0000:4f:00.0", "0000:52:00.0"] and r.gpus[0].nvlinks is None
    reasons = check_gpu_health(r, [], GpuHealthPolicy())
    # the fallen GPU is named once, by its XID; the fabric manager is not judged without a fabric
    assert codes(reasons) == [("FAIL", "gpu_fell_off_bus")]
    assert reasons[0].message == ("GPU at 0000:52:00 fell off the bus: Xid 79 2 min ago "
                                  "(pid='<unknown>', name=<unknown>, GPU has fallen off the bus.); "
                                  "lost until the node reboots")
    error = probe.parse_command_output(["@@error", "nvidia-smi not found", "@@logerror", "neither journalctl nor "
                                        "dmesg found"])
    assert codes(check_gpu_health(error, [], GpuHealthPolicy())) == [("UNKNOWN", "gpu_health_unreadable")] * 2


# --- NVML gives the same record -----------------------------------------------

class FakeNvml(SimpleNamespace):
    """pynvml's calls this probe makes, over one GpuHealth per GPU."""

    def __init__(self, gpus: list[GpuHealth]):
        super().__init__(gpus=gpus)

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlDeviceGetCount(self): return len(self.gpus)
    def nvmlDeviceGetHandleByIndex(self, i): return self.gpus[i]

    def nvmlDeviceGetPciInfo(self, g):
        domain, bus, dev = g.pci.upper().split(":")
        return SimpleNamespace(busId=f"0000{domain}:{bus}:{dev}".encode())

    def nvmlDeviceGetTotalEccErrors(self, g, kind, counter):
        return g.ecc_uncorrectable if kind == 1 else g.ecc_correctable

    def nvmlDeviceGetRetiredPagesPendingStatus(self, g):
        if g.retired_pending is None:
            raise RuntimeError("NVMLError_NotSupported")
        return int(g.retired_pending)

    def nvmlDeviceGetRemappedRows(self, g):
        return (g.remap_correctable, g.remap_uncorrectable, int(g.remap_pending), int(g.remap_failure))

    def nvmlDeviceGetPcieReplayCounter(self, g): return g.pcie_replays
    def nvmlDeviceGetSerial(self, g): return g.serial.encode()

    def nvmlDeviceGetGpuFabricInfo(self, g):
        if g.fabric_state is None:
            raise RuntimeError("NVMLError_NotSupported")
        return SimpleNamespace(state={"Completed": 3, "In Progress": 2}[g.fabric_state], status=0)

    def nvmlDeviceGetNvLinkState(self, g, n):
        if n >= len(g.nvlinks):
            raise RuntimeError("NVMLError_InvalidArgument")
        return int(g.nvlinks[n].up)

    def nvmlDeviceGetNvLinkErrorCounter(self, g, n, counter):
        link = g.nvlinks[n]
        return (link.replay, link.recovery, link.crc)[counter]


def test_nvml_gives_the_record_nvidia_smi_gives():
    [g] = probe.parse_query(_with_fabric("fabric_completed.txt"))
    g.nvlinks = probe.parse_nvlink(lines("nvlink_status_h100pcie.txt"), lines("nvlink_errors_h100.txt"))[0][:9]
    g.nvlinks = [NvLink(n.link, n.up, 0, 0, 0) for n in g.nvlinks]
    assert probe.read_nvml(FakeNvml([g])) == [g]


# --- the check ------------------------------------------------------------------

def gpu(index=0, **kw) -> GpuHealth:
    base = dict(pci=f"0000:{0x18 + index * 0x10:02x}:00.0", ecc_uncorrectable=0, ecc_correctable=0,
                retired_pending=False, remap_pending=False, remap_failure=False, pcie_replays=0,
                fabric_state="Completed", fabric_status="Success",
                nvlinks=[NvLink(n, True, 0, 0, 0) for n in range(18)])
    return GpuHealth(index=index, **{**base, **kw})


def h100(index=0, reasons=0) -> GpuReading:
    return GpuReading(index, H100, clock_reasons=reasons)


@pytest.mark.parametrize("field, value, code, message", [
    ("remap_pending", True, "gpu_row_remap_pending",
     "GPU 1 (0000:28:00.0) has a row remapping pending: the GPU needs a reset"),
    ("remap_failure", True, "gpu_row_remap_failure",
     "GPU 1 (0000:28:00.0) failed a row remapping (uncorrectable remaps not read)"),
    ("ecc_uncorrectable", 3, "gpu_ecc_uncorrectable", "GPU 1 (0000:28:00.0) has 3 uncorrectable volatile ECC errors"),
    ("retired_pending", True, "gpu_retired_pages_pending",
     "GPU 1 (0000:28:00.0) has retired pages pending: the GPU needs a reset"),
    ("fabric_status", "Insufficient Resources", "gpu_fabric_not_ready",
     "GPU 1 (0000:28:00.0) fabric not ready: state Completed, status Insufficient Resources"),
])
def test_each_failing_reading_fails_with_its_code(field, value, code, message):
    reading = GpuHealthReading(gpus=[gpu(0), gpu(1, **{field: value})], fabric_manager="active")
    reasons = check_gpu_health(reading, [h100(0), h100(1)], GpuHealthPolicy())
    assert [(r.level, r.code, r.message) for r in reasons] == [("FAIL", code, message)]


def test_nvlink_down_and_missing_links():
    links = [NvLink(n, n != 5, 0, 0, 0) for n in range(18)]
    reasons = check_gpu_health(GpuHealthReading(gpus=[gpu(0, nvlinks=links)]), [h100()], GpuHealthPolicy())
    assert [r.message for r in reasons] == ["GPU 0 (0000:18:00.0) NVLink links 5 down: 17 of 18 up"]
    none = check_gpu_health(GpuHealthReading(gpus=[gpu(0, nvlinks=[])]), [h100()], GpuHealthPolicy())
    assert [r.message for r in none] == ["GPU 0 (0000:18:00.0) NVLink links missing: 0 of 18 up"]
    unread = check_gpu_health(GpuHealthReading(gpus=[gpu(0, nvlinks=None)]), [h100()], GpuHealthPolicy())
    assert unread == []  # not read: not judged (UNKNOWN comes from the probe's error, if any)


def test_correctable_threshold_and_fabric_manager():
    reading = GpuHealthReading(gpus=[gpu(0, ecc_correctable=10001)], fabric_manager="failed")
    reasons = check_gpu_health(reading, [h100()], GpuHealthPolicy())
    assert [(r.level, r.code) for r in reasons] == [("WARN", "gpu_ecc_correctable"), ("FAIL", "gpu_fabric_not_ready")]
    assert reasons[1].message == "fabric not ready: the nvidia-fabricmanager service is failed"
    assert check_gpu_health(GpuHealthReading(gpus=[gpu(0, ecc_correctable=10000)], fabric_manager="active"),
                            [h100()], GpuHealthPolicy()) == []


def test_xid_levels_lookback_and_ignore():
    xids = [Xid(48, "0000:18:00", 60, "double bit"), Xid(13, "0000:18:00", 60, "app"),
            Xid(94, "0000:18:00", 60, "contained"), Xid(63, "0000:18:00", 60, "remap"),
            Xid(74, "0000:18:00", 3 * 3600, "old nvlink"), Xid(45, "0000:99:00", None, "preempt")]
    reading = GpuHealthReading(gpus=[gpu(0)], xids=xids)
    reasons = check_gpu_health(reading, [h100()], GpuHealthPolicy())
    assert [(r.level, r.code, r.message) for r in reasons] == [
        ("FAIL", "gpu_xid_critical", "GPU 0 (0000:18:00) Xid 48 (Double Bit ECC Error) 1 min ago: double bit "
                                     "[NVIDIA: WORKFLOW_XID_48; action: reset_gpu]"),
        ("WARN", "gpu_xid", "GPU 0 (0000:18:00) Xid 13 (Graphics Engine Exception) 1 min ago: app "
                            "[NVIDIA: RESTART_APP; action: restart_job]"),
        # a code neither Azure nor gcm lists is judged by NVIDIA's catalogue, never left out
        ("WARN", "gpu_xid", "GPU 0 (0000:18:00) Xid 94 (Contained memory error) 1 min ago: contained "
                            "[NVIDIA: RESTART_APP; action: restart_job]"),
        ("WARN", "gpu_xid", "GPU 0 (0000:18:00) Xid 63 (GPU memory remapping event) 1 min ago: remap "
                            "[NVIDIA: IGNORE; action: none]"),
        ("WARN", "gpu_xid", "GPU at 0000:99:00 Xid 45 (Preemptive cleanup, due to previous errors) since boot: "
                            "preempt [NVIDIA: WORKFLOW_XID_45; action: restart_job]")]
    ignored = check_gpu_health(reading, [h100()], GpuHealthPolicy(xid_ignore=(13, 63, 45, 94),
                                                                  xid_lookback_s=4 * 3600))
    assert [r.message.split(": ")[0] for r in ignored] == ["GPU 0 (0000:18:00) Xid 48 (Double Bit ECC Error) 1 min ago",
                                                          "GPU 0 (0000:18:00) Xid 74 (NVLINK Error) 180 min ago"]


def test_a_gpu_the_bus_lists_but_nvidia_smi_does_not_see_fell_off():
    reading = GpuHealthReading(gpus=[gpu(0)], pci_gpus=["0000:18:00.0", "0000:28:00.0"])
    reasons = check_gpu_health(reading, [h100()], GpuHealthPolicy())
    assert [(r.code, r.message) for r in reasons] == [
        ("gpu_fell_off_bus", "GPU at 0000:28:00.0 fell off the bus: the PCI bus lists it, nvidia-smi does not see it")]


def test_rates_from_the_stored_reading():
    links = [NvLink(0, True, 100, 0, 5)]
    reading = GpuHealthReading(gpus=[gpu(0, nvlinks=links, pcie_replays=500)], window=CounterWindow(
        600, {"0000:18:00.0": {"nvlink": 0, "pcie_replays": 400}}))
    reasons = check_gpu_health(reading, [GpuReading(0, "NVIDIA H100 PCIe")], GpuHealthPolicy())
    assert [(r.level, r.code, r.message) for r in reasons] == [
        ("WARN", "gpu_nvlink_errors", "GPU 0 (0000:18:00.0) NVLink errors (CRC, replay, recovery) rose by 105 in "
                                      "600 s (10.5/min, threshold 1/min)"),
        ("WARN", "gpu_pcie_replay", "GPU 0 (0000:18:00.0) PCIe replays rose by 100 in 600 s (10.0/min, threshold "
                                    "8/min)")]
    calm = GpuHealthReading(gpus=[gpu(0, nvlinks=links, pcie_replays=500)], window=CounterWindow(
        60 * 60, {"0000:18:00.0": {"nvlink": 50, "pcie_replays": 600}}))  # 55 in an hour; replay counter reset
    assert check_gpu_health(calm, [GpuReading(0, "NVIDIA H100 PCIe")], GpuHealthPolicy()) == []


def test_hw_slowdown_level_is_a_setting_and_sw_power_cap_is_not_judged():
    reading = GpuHealthReading(gpus=[gpu(0), gpu(1)])
    gpus = [h100(0, 0x40), h100(1, 0x4)]
    assert check_gpu_health(reading, gpus, GpuHealthPolicy()) == []  # WARN: gpu_throttled says it
    failing = check_gpu_health(reading, gpus, GpuHealthPolicy(hw_slowdown_level="FAIL"))
    assert [(r.level, r.code, r.message) for r in failing] == [
        ("FAIL", "gpu_hw_slowdown",
         "GPU 0 (0000:18:00.0) clocks held down by HW thermal slowdown (clock event reasons 0x40)")]
    verdict = evaluate(Readings(ports=[], gpus=gpus, gpu_health=reading))
    assert [r.code for r in verdict.reasons if r.code.startswith("gpu_")] == ["gpu_throttled", "gpu_throttled"]


def test_readings_round_trip_and_evaluate_judges_them():
    from ccrhost.model.ports import Port

    health = GpuHealthReading(gpus=[gpu(0, remap_failure=True)], xids=[Xid(79, "0000:18:00", 5.0, "gone")],
                              window=CounterWindow(None, {}, "first check since boot"))
    port = Port("mlx5_0", 1, "InfiniBand", "4: ACTIVE", "5: LinkUp", 400.0, None, None, None, None)
    readings = Readings(ports=[port], gpus=[h100()], gpu_health=health)
    assert readings_from_dict(json.loads(json.dumps(readings.to_dict()))) == readings
    verdict = evaluate(readings)
    assert verdict.status == "FAIL"
    assert {"gpu_fell_off_bus", "gpu_row_remap_failure"} <= {r.code for r in verdict.reasons}
    printed = Verdict.from_dict(json.loads(json.dumps(verdict.to_dict())))
    assert printed.readings.gpu_health == health


def test_the_check_keeps_the_counters_for_the_next_ones_rates(tmp_path, monkeypatch):
    from ccrhost.node import check
    from ccrhost.settings import validate_host

    state = tmp_path / "gpu.json"
    settings = validate_host("gpu01", {"verify_gpu_state": str(state)})
    replays = iter([100, 100 + 9 * 10, 100 + 9 * 10 + 5])

    def read():
        return GpuHealthReading(gpus=[gpu(0, pcie_replays=next(replays))])

    monkeypatch.setattr(check, "boot_id", lambda: "boot-1")
    first = check.local_gpu_health(settings, read, now=1000.0)
    assert first.window.seconds is None and "next check" in first.window.note
    assert json.loads(state.read_text()) == {"boot_id": "boot-1", "time": 1000.0,
                                             "counters": {"0000:18:00.0": {"nvlink": 0, "pcie_replays": 100}}}
    second = check.local_gpu_health(settings, read, now=1060.0)  # 90 in a minute
    assert [r.message for r in check_gpu_health(second, [], GpuHealthPolicy())] == [
        "GPU 0 (0000:18:00.0) PCIe replays rose by 90 in 60 s (90.0/min, threshold 8/min)"]
    monkeypatch.setattr(check, "boot_id", lambda: "boot-2")  # a reboot: the stored reading is no baseline
    third = check.local_gpu_health(settings, read, now=1120.0)
    assert third.window.seconds is None and check_gpu_health(third, [], GpuHealthPolicy()) == []
