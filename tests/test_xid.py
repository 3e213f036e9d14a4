"""Issue 36: a sick GPU is never OK and never merely UNKNOWN. XIDs in every form the driver prints, judged
by one table (ccrhost/model/xids.py); lost GPUs; the kernel log read apart from NVML; bounded reports."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ccrhost.model.gpu_health import GpuHealth, GpuHealthPolicy, GpuHealthReading, Xid, check_gpu_health
from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN, Reason
from ccrhost.model.verdict import Verdict, unjudged
from ccrhost.probes import gpu_health as probe

F = Path(__file__).parent / "fixtures/gpu"


def lines(name: str) -> list[str]:
    return (F / name).read_text().splitlines()


def judged(xids, gpus=(), **reading) -> list[tuple[str, str, str]]:
    r = GpuHealthReading(gpus=list(gpus), xids=xids, **reading)
    return [(x.level, x.code, x.message) for x in check_gpu_health(r, [], GpuHealthPolicy())]


# --- the driver's forms --------------------------------------------------------

def test_every_form_the_open_modules_print_is_read():
    xids, error = probe.parse_log("dmesg", "1000", lines("xid_forms_open_modules.txt"))
    assert error is None
    got = [(x.sxid, x.pci, x.instance, x.code, x.count) for x in xids]
    assert got == [
        (False, "0000:01:00", "GPU-I:05", 94, 1),   # MIG: attributed to GPU instance 5
        (False, "0000:01:00", None, 94, 1),
        (False, "0000:01:00", None, 95, 1),
        (False, "0000:97:00", None, 119, 1),
        (False, "0000:97:00", None, 154, 1),
        (False, "0000:01:00", None, 154, 1),
        (False, "0000:cb:00", None, 109, 1),
        (True, "0000:c3:00", None, 20009, 1),      # NVSwitch SXids: the ".N" function form
        (True, "0000:c3:00", None, 24007, 1),
        (True, "0000:05:00", None, 12028, 1)]
    assert xids[0].text == "pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No"
    assert xids[0].age_s == 498.9


def test_the_driver_format_strings_gpu_and_compute_instance_and_function():
    xids, _ = probe.parse_log("dmesg", "700", lines("xid_forms_driver_format.txt"))
    assert [(x.pci, x.instance, x.code) for x in xids] == [
        ("0000:18:00", "GPU-I:01 GPU-CI:00", 48), ("0000:18:00", "GPU-I:01", 140), ("0000:18:00", None, 45),
        ("0000:3b:00", None, 79)]
    # on main the MIG lines were no XIDs at all: 0 XIDs, OK
    reasons = judged(xids)
    assert [(lvl, code) for lvl, code, _ in reasons] == [
        (FAIL, "gpu_xid_critical"), (FAIL, "gpu_xid_critical"), (WARN, "gpu_xid"), (FAIL, "gpu_fell_off_bus")]
    assert reasons[0][2].startswith("GPU at 0000:18:00 GPU-I:01 GPU-CI:00 Xid 48 (Double Bit ECC Error) 2 min ago")


def test_a_mig_xid_names_the_gpu_by_its_index():
    xids, _ = probe.parse_log("dmesg", "700", lines("xid_forms_driver_format.txt")[:1])
    [(level, code, message)] = judged(xids, gpus=[GpuHealth(3, pci="00000000:18:00.0")])
    assert (level, code) == (FAIL, "gpu_xid_critical") and message.startswith("GPU 3 (0000:18:00) GPU-I:01 GPU-CI:00")


# --- every code has a level -----------------------------------------------------

def test_the_table_gives_every_catalogue_code_a_level_an_action_and_a_source():
    from ccrhost.model import xids as table

    assert sorted(table.XIDS) == list(range(1, 173))
    for e in table.XIDS.values():
        assert e.level in (WARN, FAIL) and e.action in table.ACTIONS and e.source in ("NVIDIA", "Azure", "gcm",
                                                                                      "ccrhost")
    # the reproductions: uncontained (95) and unrecovered (140) ECC were silent on main
    assert [(table.XIDS[c].level, table.XIDS[c].action) for c in (95, 140, 79, 94, 13)] == [
        (FAIL, "reset_gpu"), (FAIL, "reset_gpu"), (FAIL, "reboot"), (WARN, "restart_job"), (WARN, "restart_job")]
    # the documented overrides: Azure fails on 69 and 80, gcm keeps 63, 68, 92 at WARN
    assert [(table.XIDS[c].level, table.XIDS[c].source) for c in (69, 80, 68, 92)] == [
        (FAIL, "Azure"), (FAIL, "Azure"), (WARN, "gcm"), (WARN, "gcm")]


@pytest.mark.parametrize("code, level, reason", [
    (95, FAIL, "gpu_xid_critical"), (140, FAIL, "gpu_xid_critical"), (94, WARN, "gpu_xid"),
    (173, WARN, "gpu_xid"), (999, WARN, "gpu_xid"), (65535, WARN, "gpu_xid")])
def test_codes_outside_the_old_lists_are_never_silent(code, level, reason):
    [(got_level, got_code, message)] = judged([Xid(code, "0000:18:00", 60, "text")])
    assert (got_level, got_code) == (level, reason)
    if code > 172:
        assert "(not in the catalogue)" in message and "action: investigate" in message


@pytest.mark.parametrize("text, level, action", [
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", FAIL, "reset_gpu"),
    ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", FAIL, "reboot"),
    ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", FAIL, "reset_gpu"),
    ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", WARN, "none"),
    ("GPU recovery action changed to something new", WARN, "investigate")])
def test_xid_154_is_judged_by_the_action_its_text_names(text, level, action):
    [(got, code, message)] = judged([Xid(154, "0000:97:00", 60, text)])
    assert got == level and message.endswith(f"action: {action}]")
    assert code == ("gpu_xid_critical" if level == FAIL else "gpu_xid")


@pytest.mark.parametrize("line, level, action", [
    # verbatim lines users posted: the driver words the same number differently
    ("NVRM: Xid (PCI:0000:0d:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)",
     FAIL, "reset_gpu"),
    ("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)",
     FAIL, "reboot"),
    ("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Some New Words)",
     FAIL, "reset_gpu"),   # NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET
    ("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x1 (PF FLR) to 0x0",
     WARN, "none"),
    # 5 on differ between nvml.h versions: the words decide
    ("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x5 (Node Reboot Required)",
     FAIL, "reboot"),
    ("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x5 (Recover IMEX Domain)",
     WARN, "investigate")])
def test_xid_154_is_judged_by_the_recovery_actions_number(line, level, action):
    # main: "0x1 (PF FLR)" WARNed to investigate though 0x1 is a GPU reset
    xids, _ = probe.parse_log("dmesg", "600", [f"[  500.000000] {line}"])
    [(got, code, message)] = judged(xids)
    assert (got, code) == (level, "gpu_xid_critical" if level == FAIL else "gpu_xid")
    assert message.endswith(f"action: {action}]")
    shown = line.split(" to ")[1]
    assert f"(recovery action {shown!r})" in message


def test_the_latest_xid_154_decides():
    log = ["[ 100.0] NVRM: Xid (PCI:0000:97:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
           "(GPU Reset Required)",
           "[ 200.0] NVRM: Xid (PCI:0000:97:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) "
           "to 0x0 (None)"]
    xids, _ = probe.parse_log("dmesg", "300", log)
    [(level, _, message)] = judged(xids)
    assert level == WARN and "2 times since boot, latest 2 min ago" in message


def test_a_reboot_owed_counts_for_the_whole_boot():
    day = 24 * 3600.0
    # main: Xid 79 aged out after the 2 h lookback, UNKNOWN or OK with the GPU still lost
    assert [c for _, c, _ in judged([Xid(79, "0000:18:00", day, "GPU has fallen off the bus.")])] == \
        ["gpu_fell_off_bus"]
    assert [lvl for lvl, _, _ in judged([Xid(154, "0000:18:00", day, "... to 0x2 (Node Reboot Required)")])] == [FAIL]
    assert judged([Xid(95, "0000:18:00", day, "Uncontained")]) == []  # a reset clears it: the lookback holds


def test_nvswitch_sxids():
    xids, _ = probe.parse_log("dmesg", "600", lines("xid_forms_open_modules.txt")[7:])
    assert [(lvl, code) for lvl, code, _ in judged(xids)] == [
        (WARN, "gpu_sxid"), (FAIL, "gpu_sxid_fatal"), (WARN, "gpu_sxid")]


# A fatal SXid's head line and the two detail lines the driver prints after it (details verbatim from a
# user's A100 log, vllm-project/vllm#40652; the head in the driver's form, gpud's sample of 24007)
FATAL_SXID = ["[ 1108.858286] nvidia-nvswitch1: SXid (PCI:0000:aa:00.0): 24007, Fatal, Link 12 sourcetrack timeout "
              "error (First)",
              "[ 1108.859000] nvidia-nvswitch1: SXid (PCI:0000:aa:00.0): 24007, Severity 1 Engine instance 12 "
              "Sub-engine instance 00",
              "[ 1108.860000] nvidia-nvswitch1: SXid (PCI:0000:aa:00.0): 24007, Data {0x10000000, 0x10008100, "
              "0x10000000, 0x10008100, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}"]
# the Fabric Manager user guide's example (non-fatal)
NONFATAL_SXID = ["[ 1200.000000] nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Non-fatal, Link 46 MC TS "
                 "crumbstore MCTO (First)",
                 "[ 1200.000100] nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Severity 0 Engine instance 46 "
                 "Sub-engine instance 00",
                 "[ 1200.000200] nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Data {0x00140004, 0x00100000, "
                 "0x00140004, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}"]


def test_a_fatal_sxid_stays_fatal_after_its_detail_lines():
    # main: the merge kept the latest line ("Data {...}"), so a fatal SXid read WARN gpu_sxid
    xids, _ = probe.parse_log("dmesg", "1300", [*FATAL_SXID, *NONFATAL_SXID])
    assert [(x.code, x.count, x.text.split(",")[0]) for x in xids] == [(24007, 1, "Fatal"), (28006, 1, "Non-fatal")]
    [(fatal_level, fatal, message), (other_level, other, _)] = judged(xids)
    assert (fatal_level, fatal, other_level, other) == (FAIL, "gpu_sxid_fatal", WARN, "gpu_sxid")
    assert message == "NVSwitch at 0000:aa:00 SXid 24007 3 min ago: Fatal, Link 12 sourcetrack timeout error (First)"
    # a second event counts once more; a later non-fatal line of the code never hides the fatal one
    again, _ = probe.parse_log("dmesg", "1300", [*FATAL_SXID, *FATAL_SXID, FATAL_SXID[0].replace("Fatal", "Non-fatal")])
    assert [(x.count, x.text.split(",")[0]) for x in again] == [(3, "Fatal")]
    # the head cut by a wrapped ring buffer: the details alone still say an SXid was logged
    cut, _ = probe.parse_log("dmesg", "1300", FATAL_SXID[1:])
    assert [(lvl, code) for lvl, code, _ in judged(cut)] == [(WARN, "gpu_sxid")]
    # readings merged again by the check (e.g. from another source) keep the fatal head too
    split = [Xid(24007, "0000:aa:00", 200, "Fatal, Link 12 sourcetrack timeout error", sxid=True),
             Xid(24007, "0000:aa:00", 100, "Data {0x10000000}", sxid=True)]
    assert [(lvl, code) for lvl, code, _ in judged(split)] == [(FAIL, "gpu_sxid_fatal")]


# --- a lost GPU FAILs whatever else failed to read ---------------------------------

def test_a_lost_gpu_fails_when_nvidia_smi_fails_too():
    out = ["@@pcigpus", "0000:18:00.0", "0000:28:00.0", "@@logerror", "neither journalctl nor dmesg found",
           "@@error", "Unable to determine the device handle for GPU0000:28:00.0: Unknown Error",
           "@@lost", "Unable to determine the device handle for GPU0000:28:00.0: Unknown Error"]
    r = probe.parse_command_output(out)
    reasons = check_gpu_health(r, [], GpuHealthPolicy())
    assert [(x.level, x.code) for x in reasons] == [
        (UNKNOWN, "gpu_health_unreadable"), (UNKNOWN, "gpu_health_unreadable"), (FAIL, "gpu_fell_off_bus")]
    assert reasons[-1].message == "GPU at 0000:28:00 fell off the bus: nvidia-smi cannot reach it"


def test_an_xid_79_fails_though_nvidia_smi_and_the_pci_comparison_cannot_run():
    r = GpuHealthReading(error="nvidia-smi -q did not answer within 20 s (killed)", pci_gpus=["0000:18:00.0"],
                         xids=[Xid(79, "0000:18:00", 30, "GPU has fallen off the bus.")])
    assert [(x.level, x.code) for x in check_gpu_health(r, [], GpuHealthPolicy())] == [
        (UNKNOWN, "gpu_health_unreadable"), (FAIL, "gpu_fell_off_bus")]


class LostNvml:
    """pynvml with GPU 1 lost: its handle raises, the others answer."""

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlDeviceGetCount(self): return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        if i == 1:
            raise RuntimeError("GPU is lost")
        return i

    def nvmlDeviceGetPciInfo(self, h):
        return type("Pci", (), {"busId": b"00000000:18:00.0"})()

    def __getattr__(self, name):  # every other call: not supported
        raise AttributeError(name)


def test_nvml_reads_the_gpus_it_can_and_names_the_lost_one():
    reading = probe.read_gpus(LostNvml())
    assert [g.pci for g in reading.gpus] == ["0000:18:00.0"] and reading.lost == ["GPU 1 (NVML: GPU is lost)"]
    reading.pci_gpus = ["0000:18:00.0", "0000:28:00.0"]
    assert [x.message for x in check_gpu_health(reading, [], GpuHealthPolicy())] == [
        "GPU at 0000:28:00.0 fell off the bus: the PCI bus lists it, NVML does not see it (GPU 1 (NVML: GPU is lost))"]
    reading.pci_gpus = []  # no bus listing: the index alone names it
    assert [x.message for x in check_gpu_health(reading, [], GpuHealthPolicy())] == [
        "GPU 1 (NVML: GPU is lost) fell off the bus: NVML cannot reach it"]


# --- the kernel log first, apart from NVML ------------------------------------------

class HungNvml:
    """pynvml on a wedged driver: nvmlInit never returns."""

    def __init__(self):
        self.release = threading.Event()

    def nvmlInit(self):
        self.release.wait(30)
        raise RuntimeError("released")


def test_a_hung_nvml_costs_neither_the_kernel_log_nor_its_xid(tmp_path, monkeypatch):
    from ccrhost.node.gather import Started

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dmesg = bin_dir / "dmesg"
    dmesg.write_text("#!/bin/sh\necho '[  400.000000] NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, "
                     "GPU has fallen off the bus.'\n")
    dmesg.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setattr(probe, "COMMAND_LOG", probe.COMMAND_LOG.replace("[ -d /run/systemd/system ]", "false"))
    nvml = HungNvml()
    try:
        reads = Started(2, nvml=nvml)
        reading = reads.gpu_health_result()
    finally:
        nvml.release.set()
    # main: the log read started after NVML, so nothing was read: UNKNOWN
    assert reading.error == "the GPU health probe did not answer within 2 s (abandoned)"
    assert [(x.code, x.pci) for x in reading.xids] == [(79, "0000:18:00")]
    assert FAIL in {r.level for r in check_gpu_health(reading, [], GpuHealthPolicy())}


def test_the_deploy_snapshot_reads_the_log_before_nvidia_smi():
    assert probe.COMMAND.index("@@pcigpus") < probe.COMMAND.index("nvidia-smi -q")


# --- bounded output ---------------------------------------------------------------

def storm(n: int) -> list[str]:
    return [f"[{1000 + i}.000000] NVRM: Xid (PCI:0000:18:00): 13, pid={i}, name=python, Graphics SM Warp "
            "Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter" for i in range(n)]


def test_a_storm_of_one_code_is_one_reason_with_its_count_and_latest_time():
    xids, _ = probe.parse_log("dmesg", "101000", storm(100_000))
    assert len(xids) == 1 and xids[0].count == 100_000 and xids[0].text.startswith("pid=99999,")
    [(level, code, message)] = judged(xids)
    assert (level, code) == (WARN, "gpu_xid")
    assert "100000 times since boot, latest 0 min ago: pid=99999," in message and len(message) < 400


def verdict_of(reasons) -> Verdict:
    v = unjudged(OK, "x", "x")
    from dataclasses import replace

    from ccrhost.model.status import worst
    return replace(v, status=worst(r.level for r in reasons), reasons=reasons)


def test_the_npd_line_lists_each_code_once_worst_first():
    from ccrhost.node.formats import format_npd

    reasons = [Reason(FAIL, "port_down", f"port mlx5_{i}/1 is DOWN") for i in range(8)]
    reasons.append(Reason(FAIL, "gpu_xid_critical", "GPU 0 Xid 95"))
    reasons.append(Reason(WARN, "gpu_xid", "GPU 0 Xid 13"))
    line, code = format_npd(verdict_of(reasons))
    # main: "FAIL: port_down,port_down,... +3 more", the XID hidden behind them
    assert (line, code) == ("FAIL: port_down,gpu_xid_critical,gpu_xid; action reseat_cable\n", 1)


def test_text_nhc_and_drain_stay_within_fixed_sizes_whatever_the_log_holds():
    from ccrhost.model.drain_reason import drain_reason
    from ccrhost.model.verdict_line import SUMMARY_MAX
    from ccrhost.node.formats import format_nhc, format_text

    reasons = [Reason(FAIL, "gpu_xid_critical", f"GPU {i} Xid {c} " + "x" * 5000) for i in range(8)
               for c in range(1, 173)] + [Reason(WARN, "gpu_xid", "w" * 10**6)]
    v = verdict_of(reasons)
    text, nhc, drained = format_text(v), format_nhc(v), drain_reason(v)
    assert len(text) < 10_000 and "... and 1356 more reasons (1356 gpu_xid_critical among them)" in text
    assert len(nhc) <= SUMMARY_MAX + 60 and nhc.rstrip().endswith("more [action reset_gpu]")
    assert len(drained) <= 255 and drained.startswith("ccrhost: gpu_xid_critical,gpu_xid: GPU 0 Xid 1 ") and drained.endswith(" more [action reset_gpu]")


# --- docs/gpu-health.md and ccrhost explain show the table --------------------------

def test_the_docs_list_every_code_with_its_level_and_source():
    from ccrhost.model import xids as table

    page = (Path(__file__).parent.parent / "docs/gpu-health.md").read_text()
    for e in table.XIDS.values():
        assert f"| {e.code} | {e.name.replace('|', '/')} | {e.level} | `{e.action}` |" in page
    assert table.CATALOG_VERSION in page


def test_explain_shows_the_codes_of_a_level_and_one_code():
    from click.testing import CliRunner

    from ccrhost.cli import main

    out = CliRunner().invoke(main, ["explain", "gpu_xid_critical"]).output
    assert "XID codes at FAIL (NVIDIA Xid catalog" in out
    assert "   95  Uncontained memory error" in out and "   13  " not in out
    one = CliRunner().invoke(main, ["explain", "xid-140"])
    assert one.exit_code == 0 and one.output == (
        "Xid 140: ECC Unrecovered Error - FAIL, action reset_gpu (NVIDIA: RESET_GPU; level from NVIDIA catalogue)\n")
    assert "WARN, action investigate" in CliRunner().invoke(main, ["explain", "xid-4242"]).output


def test_the_xid_metric_counts_lines_not_records():
    from ccrhost.node.formats import gpu_health_metrics

    xids, _ = probe.parse_log("dmesg", "101000", storm(1000))
    health = GpuHealthReading(gpus=[GpuHealth(2, pci="00000000:18:00.0")], xids=xids)
    assert 'ccrhost_gpu_xids{gpu="2",code="13"} 1000' in gpu_health_metrics(health)
