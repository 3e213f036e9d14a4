"""``ccrhost check``: the verification, on this node, before a job.

Gathers with the probes (sysfs snippet, NVML or nvidia-smi), evaluates
with the same functions the deploy uses, and prints in a format a
scheduler or monitoring system reads. Exit codes are Nagios-style.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ccrhost.model.datapath import DatapathReading, unreadable
from ccrhost.model.fabric import FabricReading, window_from_state
from ccrhost.model.managed import DRAIN_PREFIX
from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN, Reason
from ccrhost.model.verdict import (Verdict, evaluate, only_unproven, readings_from_facts, reason_action, scope_detail,
                                   scope_text, unjudged)
from ccrhost.output import write_state

if TYPE_CHECKING:  # the check runs on kept settings (node.prepared), without the settings model
    from ccrhost.settings import HostSettings

# A drain that rests on a fleet measurement (ib_write_bw between nodes): the
# node-local check cannot see what it found, so only another measurement or
# an operator lifts it. Its reason names the code; an older ccrhost's began
# with this prefix instead.
MEASURED_PREFIX = "ccrhost: measured:"
# codes only a fleet measurement gives (ib_write_bw, the all-reduce pairs): the node-local check cannot see them
MEASURED_CODES = ("measured_slow", "allreduce_slow", "allreduce_wrong", "ccr_measured_low")
# A node to replace because it failed too often (its history) or carries a
# board that failed elsewhere: no check, health check or remediation lifts
# this drain, since a passing check is what each repair gave before. Its
# codes lead the drain reason.
REPLACE_CODES = ("node_repeat_failures", "gpu_lemon")


def run_check(settings: HostSettings, gather=None, timeout: float = 20, gather_pci=None, started=None,
              gather_health=None, gather_fabric=None, refresh_nic: bool = False, query_nic=None) -> Verdict:
    """Gather this node's readings and evaluate them. ``started``: the reads
    already under way (:class:`ccrhost.node.gather.Started`), else they
    start here. ``gather`` (RDMA and GPUs) and ``gather_pci`` (the data
    path) are for tests; with ``gather`` alone the data path is not read,
    GPU health only with ``gather_health`` and the lossless-fabric counters
    only with ``gather_fabric``. ``refresh_nic`` (the health check, never the
    prolog): query the compute NICs' firmware settings first and store them
    (``query_nic``: the runner, for tests).

    What could not be read is UNKNOWN, never a guess: an RDMA probe that
    hangs past ``timeout`` or prints what sysfs never prints gives the
    UNKNOWN verdict of :func:`unknown`; GPUs or a data path that cannot be
    read are UNKNOWN reasons of the verdict.
    """
    if gather is None:
        from ccrhost.node.gather import Started
        from ccrhost.probes import fabric as fabric_probe
        from ccrhost.probes import local, rdma

        # The probes are separate processes that only read: run at once,
        # the check waits for the slowest rather than their sum.
        reads = started or Started(timeout)
        if gather_fabric is None:  # the reading now, joined with the stored one the settings name
            def gather_fabric():
                return fabric_probe.read_local(settings.verify_link_state, True, timeout, now=reads.fabric_now.result)

        try:
            rdma_state = reads.rdma.result()
        except (local.ProbeTimeout, rdma.RdmaFormatError) as exc:
            # the words and code the deploy gives for the same output (probes.node, operations.cache)
            return unknown("rdma_unreadable", f"cannot read {rdma.SOURCE}: {exc}")
        gpu_state = reads.gpus_result()
        if gather_pci is None:
            gather_pci = reads.pci.result
        if gather_health is None:
            gather_health = reads.gpu_health_result
    else:
        rdma_state, gpu_state = gather()
    datapath = local_datapath(settings, gather_pci) if gather_pci is not None else None
    health = local_gpu_health(settings, gather_health) if gather_health is not None else None
    readings = readings_from_facts(rdma_state, gpu_state, settings.rdma_exclude_devices, datapath=datapath,
                                   gpu_health=health)
    readings.fabric = local_fabric(settings, gather_fabric) if gather_fabric is not None else None
    if settings.allreduce_state:  # the stored results and their age: the check never runs the test itself
        from ccrhost.node.allreduce import stored_reading

        readings.allreduce = stored_reading(settings.allreduce_state)
    nic_state = getattr(settings, "nic_fw_state", None)
    if nic_state:  # the stored firmware readings and their age; the slow query only where asked
        from ccrhost.node import nicfw

        if refresh_nic:
            devices = sorted({p.device for p in readings.ports if not p.efa})
            nic = settings.policy().nic_fw  # not None: nic_fw_state is set only when one of them is on
            nicfw.run_and_store(nic_state, devices, settings.verify_nic_valid_for, run=query_nic,
                                firmware=nic.enabled, optics=nic.optics)
        readings.nic_fw = nicfw.stored_reading(nic_state)
    if getattr(settings, "dcgm_state", None):  # likewise the stored DCGM diag result (node/dcgm.py)
        from ccrhost.node import dcgm as node_dcgm

        readings.dcgm = node_dcgm.stored_reading(settings.dcgm_state)
    path = getattr(settings, "verify_history", None)
    if not path:
        verdict = evaluate(readings, settings.expectation(), settings.policy())
    else:
        # one check at a time reads and extends the history (a prolog beside
        # the health check would otherwise count one failure twice)
        with _locked(path):
            readings.history = read_history(path)
            verdict = evaluate(readings, settings.expectation(), settings.policy())
            keep_history(path, verdict, settings.policy().history)
    if getattr(settings, "verify_evidence_dir", None) and verdict.status == FAIL:
        from ccrhost.node.evidence import keep_evidence

        verdict.evidence = keep_evidence(settings, verdict)
    return verdict


class _locked:
    """An exclusive flock on ``<path>.lock`` while the block runs; a lock
    that cannot be had (a read-only folder) is no lock, and the history's
    own write says why."""

    def __init__(self, path: str):
        self.path, self.fd = path + ".lock", None

    def __enter__(self):
        import fcntl

        try:
            os.makedirs(os.path.dirname(self.path) or "/", exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError:
            self.fd = None
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)


# --- the node's failure history -----------------------------------------------

def read_history(path: str, now: float | None = None):
    """The stored history (``verify_history``); none yet, or one that is not
    ours, starts afresh, saying why in its ``error``."""
    from ccrhost.model.history import History, from_dict

    now = time.time() if now is None else now
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return History(now=now)
    except OSError as exc:
        return History(now=now, error=f"cannot read {path}: {exc.strerror or exc}")
    try:
        history = from_dict(json.loads(text))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return History(now=now, error=f"{path} is not a ccrhost failure history ({exc}): started afresh")
    history.now = now
    return history


def keep_history(path: str, verdict: Verdict, policy, read_nic_serials=None) -> None:
    """Write the history this verdict makes (model.history.record), through
    the state writer; a history that cannot be written is said, never fatal.
    ``read_nic_serials``: names -> {name: serial} (probes.vpd.nic_serials),
    asked only when a failure starts with a FAIL reason that names a NIC."""
    from ccrhost.model.history import failing_nics, record
    from ccrhost.model.plain import plain
    from ccrhost.model.verdict import gpu_serials

    before = verdict.readings.history
    nics = failing_nics(verdict.reasons) if verdict.status == FAIL and not before.failing else []
    if nics and read_nic_serials is None:
        from ccrhost.probes.vpd import nic_serials as read_nic_serials
    serials = read_nic_serials(nics) if nics else {}
    after = record(before, verdict.status, verdict.reasons, verdict.action, gpu_serials(verdict.readings), policy,
                   serials)
    data = plain(after)
    data.pop("now", None), data.pop("error", None)
    after.error = before.error
    verdict.readings.history = after  # the JSON carries it, this failure included: the fleet finds lemons in it
    try:
        os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
        write_state(path, json.dumps(data, sort_keys=True) + "\n")  # a root write: never through a planted link
    except OSError as exc:
        after.error = f"cannot keep the failure history in {path}: {exc.strerror or exc}"


def unknown(code: str, message: str, verdict: Verdict | None = None) -> Verdict:
    """UNKNOWN (exit 3) with ``message`` as its one reason; with ``verdict``,
    that verdict's reasons kept and the status forced to UNKNOWN (a failing
    helper, such as scontrol under --drain)."""
    if verdict is not None:
        return replace(verdict, status=UNKNOWN, reasons=[*verdict.reasons, Reason(UNKNOWN, code, message)])
    return unjudged(UNKNOWN, code, message)


# --- the data path, and the lossless fabric since the node's last reading -------

def local_datapath(settings: HostSettings, gather_pci) -> DatapathReading:
    """Read the data path here."""
    from ccrhost.probes.local import ProbeTimeout
    from ccrhost.probes.pci import PciFormatError

    try:
        snap = gather_pci()
    except (PciFormatError, ProbeTimeout, OSError) as exc:
        return unreadable(str(exc))
    return snap.datapath(settings.rdma_exclude_devices)


def local_fabric(settings: HostSettings, gather_fabric) -> FabricReading:
    """The fabric counters here, judged by the rule the deploy uses
    (``probes.fabric.fabric_reading``): rates since the node's stored
    reading, which this read replaces (``verify_link_state``)."""
    from ccrhost.probes.fabric import FabricFormatError, fabric_reading
    from ccrhost.probes.local import ProbeTimeout

    try:
        dump = gather_fabric()
    except (FabricFormatError, ProbeTimeout, OSError) as exc:
        return FabricReading(error=f"cannot read the lossless-fabric counters (ethtool, hw_counters): {exc}")
    return fabric_reading(dump, None, settings.rdma_exclude_devices, settings.verify_window_max_age)


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


# a stored GPU reading is a few hundred bytes per GPU; a bigger file is no reading of ours
_STATE_MAX_BYTES = 1 << 20


def read_stored(path: Path) -> tuple[object, str | None]:
    """The JSON a check stored at ``path`` (None: none), and why it was
    discarded when it cannot be parsed (too big, not JSON, nested past the
    parser's depth): never raises, so a corrupt file is replaced, not kept."""
    try:
        with open(path, "rb") as f:
            raw = f.read(_STATE_MAX_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read {path} ({exc.strerror or exc})"
    try:
        if len(raw) > _STATE_MAX_BYTES:
            raise ValueError(f"over {_STATE_MAX_BYTES} bytes")
        return json.loads(raw), None
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[...", deeper than json can go
        return None, f"it is not a reading ({str(exc)[:80] or type(exc).__name__})"


def local_gpu_health(settings: HostSettings, gather_health, now=None):
    """Read GPU health here, with the rates' window since the last check's
    reading (``verify_gpu_state``, as the link window keeps its counters:
    a reading from another boot is no baseline), else since boot. A stored
    reading that is corrupt or out of range is discarded, replaced and noted."""
    from ccrhost.model.fabric import DISCARDED
    from ccrhost.model.gpu_health import CounterWindow, counters
    from ccrhost.output import write_state

    reading = gather_health()
    if reading.error and not reading.gpus:
        return reading
    now = time.time() if now is None else now
    current = counters(reading)
    path = Path(settings.verify_gpu_state)
    previous, why = read_stored(path)
    boot = boot_id()
    link = window_from_state(previous, current, boot, now, settings.verify_window_max_age, reading.uptime_s)
    then = "rates are judged since boot" if link.since_boot else "rates are judged from the next check on"
    if why is not None:
        note = f"{DISCARDED} in {path} ({why}): discarded and replaced by this reading; the GPU counters' {then}"
    elif link.note is not None and link.note.startswith(DISCARDED):
        note = f"GPU counters in {path}: {link.note}"
    elif link.note is not None:
        note = "no earlier reading of the GPU counters this boot: their rates are judged from the next check on"
    else:
        note = None
    if link.seconds is not None:
        reading.window = CounterWindow(link.seconds, link.before, note, since_boot=link.since_boot)
    else:
        reading.window = CounterWindow(None, {}, note)
    try:
        write_state(path, json.dumps({"boot_id": boot, "time": now, "counters": current}) + "\n")
    except OSError as exc:
        reading.window.note = (f"cannot keep the GPU counters in {path} ({exc.strerror or exc}): "
                               "the next check cannot judge their rates")
    return reading


# Fixed sizes, whatever the log holds: a reason's message, the reasons of one
# code in the text report, and the one-line forms (NHC; Slurm keeps 255
# characters of a drain reason).
MESSAGE_MAX = 400
PER_CODE_MAX = 20
REASONS_MAX = 100
SUMMARY_MAX = 1000


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def bounded_summary(verdict: Verdict, limit: int = SUMMARY_MAX) -> str:
    """The verdict's reasons on one line, worst first, within ``limit``
    characters; what does not fit is counted ("+N more")."""
    from ccrhost.model.status import _RANK

    # what to replace leads (its serials must not be cut)
    bad = sorted((r for r in verdict.reasons if r.level != OK),
                 key=lambda r: (-_RANK[r.level], r.code not in REPLACE_CODES))
    if not bad:
        return "all checks passed"
    out = ""
    for i, r in enumerate(bad):
        part = _cut(r.message, 200)
        candidate = f"{out}; {part}" if out else part
        rest = len(bad) - i - 1
        if len(candidate) + len(f"; +{rest} more" if rest else "") > limit:
            if not out:  # the worst alone does not fit: cut it
                tail = f"; +{rest} more" if rest else ""
                return _cut(part, limit - len(tail)) + tail
            return f"{out}; +{rest + 1} more"  # fits: checked when ``out`` was taken
        out = candidate
    return out


def format_text(verdict: Verdict) -> str:
    lines = [f"ccrhost check: {verdict.status}"]
    if verdict.ccr:
        c = verdict.ccr
        lines.append(f"  CCR {c.ccr:.3e} (B {c.bandwidth_gbps:g} Gb/s {c.model}, F {c.tflops:.1f} TFLOPS, beta {c.beta:g})")
        if verdict.expected_ccr:
            lines.append(f"  expected {verdict.expected_ccr:.3e} from the declared hardware")
        if c.workload:
            lines.append(f"  workload model: {c.workload['statement']}")
    if verdict.measured_ccr:
        m = verdict.measured_ccr
        lines.append(f"  measured CCR {m.ccr:.3e} (B {m.bandwidth_gbps:g} Gb/s from the two-node all-reduce)")
    if verdict.status != OK:
        lines.append(f"  action: {verdict.action_text()}")
    shown: dict[str, int] = {}
    printed = 0
    for r in verdict.reasons:
        shown[r.code] = shown.get(r.code, 0) + 1
        if shown[r.code] <= PER_CODE_MAX and printed < REASONS_MAX:
            # `ccrhost explain` takes the code
            lines.append(f"  {r.level}: {r.code}: {_cut(r.message, MESSAGE_MAX)}{_action_note(r, verdict)}")
            printed += 1
    left = len(verdict.reasons) - printed
    if left:
        more = ", ".join(f"{n - min(n, PER_CODE_MAX)} {code}" for code, n in shown.items() if n > PER_CODE_MAX)
        lines.append(f"  ... and {left} more reasons{f' ({more} among them)' if more else ''} "
                     "(--format json lists them all)")
    if verdict.evidence:
        lines.append(f"  evidence: {verdict.evidence}")
    history = verdict.readings.history
    if history is not None and history.error:
        lines.append(f"  note: {history.error}")
    fabric = verdict.readings.fabric
    if fabric is not None and fabric.window is not None and fabric.window.note:
        lines.append(f"  note: {_cut(fabric.window.note, MESSAGE_MAX)}")
    health = verdict.readings.gpu_health
    if health is not None and health.window is not None and health.window.note:
        lines.append(f"  note: {_cut(health.window.note, MESSAGE_MAX)}")
    return "\n".join(lines) + "\n"


def _action_note(reason: Reason, verdict: Verdict) -> str:
    """`` [reset_gpu: gpu 0 0000:18:00.0 GPU-...]``: a reason's action and the part it is about."""
    if reason.level == OK:
        return ""
    return f" [{scope_detail(reason, verdict.readings)['action']}: {scope_text(reason, verdict.readings)}]"


def format_nhc(verdict: Verdict) -> str:
    """NHC's convention: silence when healthy, one ``ERROR:`` line otherwise."""
    if verdict.status == OK:
        return ""
    codes = ",".join(reason_codes(verdict))
    if verdict.status in (FAIL, UNKNOWN):
        return f"ERROR: ccrhost: Health check failed: {verdict.status}: {codes}: {bounded_summary(verdict)} "\
               f"[action {verdict.action}]\n"
    return f"WARNING: ccrhost: {codes}: {bounded_summary(verdict)} [action {verdict.action}]\n"


def reason_codes(verdict: Verdict) -> list[str]:
    """The codes of the verdict's non-OK reasons, each once, worst first
    (FAIL, UNKNOWN, WARN), in the order the reasons came (a code per port
    would hide the rest)."""
    codes: list[str] = []
    for level in (FAIL, UNKNOWN, WARN):
        for r in verdict.reasons:
            if r.level == level and r.code not in codes:
                codes.append(r.code)
    return sorted(codes, key=lambda c: c not in REPLACE_CODES)  # what to replace leads


# Node Problem Detector's custom-plugin contract (kubernetes/node-problem-detector
# pkg/custompluginmonitor/types/types.go: OK 0, NonOK 1, Unknown 2;
# plugin/plugin.go: any other exit code is Unknown too, stdout is trimmed and
# cut at max_output_length bytes; types/config.go: that length defaults to 80;
# docs/custom_plugin_monitor.md).
NPD_OK, NPD_PROBLEM, NPD_UNKNOWN = 0, 1, 2
NPD_MAX_OUTPUT = 80


def format_npd(verdict: Verdict, warn_unhealthy: bool = False) -> tuple[str, int]:
    """One stdout line and NPD's exit code for ``verdict``: FAIL is a
    problem, WARN only with ``warn_unhealthy`` (verify_npd_warn_unhealthy),
    UNKNOWN is NPD's Unknown. The line names the status and the reason
    codes, worst first, within NPD's default output length, so the node
    condition's message is never cut mid-code."""
    status = verdict.status
    if status == FAIL or (status == WARN and warn_unhealthy):
        code = NPD_PROBLEM
    elif status == UNKNOWN:
        code = NPD_UNKNOWN
    else:
        code = NPD_OK
    codes = reason_codes(verdict)
    # the action closes the line and is never cut: a remediation controller acts on it
    action = f"; action {verdict.action}" if codes and status != OK else ""
    line = f"{status}: " + (",".join(codes) if codes else "all checks passed") + action
    shown = len(codes)
    while len(line.encode()) > NPD_MAX_OUTPUT and shown > 1:
        shown -= 1
        line = f"{status}: {','.join(codes[:shown])} +{len(codes) - shown} more{action}"
    return line.encode()[:NPD_MAX_OUTPUT].decode(errors="ignore") + "\n", code


def _label(value) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def format_prometheus(verdict: Verdict) -> str:
    out = [
        "# HELP ccrhost_check_status Verdict of ccrhost check: 0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN.",
        "# TYPE ccrhost_check_status gauge",
        f"ccrhost_check_status {verdict.exit_code}",
    ]
    if verdict.ccr:
        c = verdict.ccr
        labels = f'model="{c.model}"'
        out += [
            "# HELP ccrhost_ccr Connection-to-compute ratio B / (beta * F).",
            "# TYPE ccrhost_ccr gauge",
            f"ccrhost_ccr{{{labels}}} {c.ccr:.6e}",
            "# HELP ccrhost_bandwidth_gbps Node network bandwidth B used for the CCR.",
            "# TYPE ccrhost_bandwidth_gbps gauge",
            f"ccrhost_bandwidth_gbps{{{labels}}} {c.bandwidth_gbps:g}",
            "# HELP ccrhost_compute_tflops Node GPU compute F used for the CCR.",
            "# TYPE ccrhost_compute_tflops gauge",
            f"ccrhost_compute_tflops {c.tflops:g}",
        ]
    if verdict.measured_ccr:
        m = verdict.measured_ccr
        out += [
            "# HELP ccrhost_ccr_measured CCR from the measured bandwidth: two-node ring all-reduce busbw / (beta * F).",
            "# TYPE ccrhost_ccr_measured gauge",
            f"ccrhost_ccr_measured {m.ccr:.6e}",
            "# HELP ccrhost_bandwidth_measured_gbps Node bandwidth measured by the two-node all-reduce.",
            "# TYPE ccrhost_bandwidth_measured_gbps gauge",
            f"ccrhost_bandwidth_measured_gbps {m.bandwidth_gbps:g}",
        ]
    out += ["# HELP ccrhost_port_effective_gbps Effective rate of each compute port.",
            "# TYPE ccrhost_port_effective_gbps gauge"]
    for p in verdict.readings.ports:
        if p.efa:  # its rate file is a driver constant, not a reading (efa_rate_unknown): left out, never a number
            continue
        out.append(f'ccrhost_port_effective_gbps{{device="{_label(p.device)}",port="{p.port}",'
                   f'active="{int(p.active)}"}} {p.effective_gbps:g}')
    out += ["# HELP ccrhost_gpus GPUs found.", "# TYPE ccrhost_gpus gauge", f"ccrhost_gpus {len(verdict.readings.gpus)}",
            *gpu_health_metrics(verdict.readings.gpu_health),
            "# HELP ccrhost_check_reason A reason for a non-OK verdict (its code, with the code's action and "
            "scope; the message is in the check's text and JSON output, never a label: a number in it would "
            "make a new series).",
            "# TYPE ccrhost_check_reason gauge"]
    seen = set()
    for r in verdict.reasons:
        if (r.level, r.code) not in seen:
            seen.add((r.level, r.code))
            part = scope_detail(r, verdict.readings)
            out.append(f'ccrhost_check_reason{{level="{r.level}",code="{r.code}",action="{part["action"]}",'
                       f'scope="{part["scope"]}"}} 1')
    out += ["# HELP ccrhost_check_action What to do about the node (1 for its action; none when OK).",
            "# TYPE ccrhost_check_action gauge", f'ccrhost_check_action{{action="{verdict.action}"}} 1']
    out += _fabric_metrics(verdict.readings.fabric)
    out += active_metrics(verdict.readings)
    return "\n".join(out) + "\n"


def active_metrics(readings) -> list[str]:
    """The stored active-check results' age and staleness (all-reduce, DCGM
    diag), labelled by check and mode only: an operator sees which nodes
    have not been proven lately. None when no result was read."""
    from ccrhost.model.active import ActiveResult

    rows = []
    for reading in (readings.allreduce, readings.dcgm):
        if reading is None or reading.error:
            continue
        for data in reading.results.values():
            try:
                r = ActiveResult.from_dict(data)
            except ValueError:
                continue  # an unreadable result is a reason of the verdict, not a number
            rows.append((r.check, r.mode, r.age(reading.read_at), int(r.stale(reading.read_at))))
    if not rows:
        return []
    out = ["# HELP ccrhost_active_result_age_seconds Age of the stored active-check result (all-reduce, DCGM diag).",
           "# TYPE ccrhost_active_result_age_seconds gauge"]
    out += [f'ccrhost_active_result_age_seconds{{check="{_label(c)}",mode="{_label(m)}"}} {a:.0f}'
            for c, m, a, _ in sorted(rows)]
    out += ["# HELP ccrhost_active_result_stale 1 when the stored result is past its validity (judged UNKNOWN).",
            "# TYPE ccrhost_active_result_stale gauge"]
    out += [f'ccrhost_active_result_stale{{check="{_label(c)}",mode="{_label(m)}"}} {s}' for c, m, _, s in sorted(rows)]
    return out


# (name, help, value of a GpuHealth): labels are the GPU index only, never a message
_GPU_METRICS = (
    ("ecc_uncorrectable", "Uncorrectable volatile ECC errors.", lambda g: g.ecc_uncorrectable),
    ("ecc_correctable", "Correctable volatile ECC errors.", lambda g: g.ecc_correctable),
    ("retired_pages_pending", "1 when retired pages wait for a reset.", lambda g: g.retired_pending),
    ("row_remap_pending", "1 when a row remapping waits for a reset.", lambda g: g.remap_pending),
    ("row_remap_failure", "1 when a row remapping failed.", lambda g: g.remap_failure),
    ("pcie_replays", "PCIe replays since reset.", lambda g: g.pcie_replays),
    ("nvlink_errors", "NVLink CRC, replay and recovery errors, all links.", lambda g: g.nvlink_errors),
    ("nvlinks_up", "NVLinks up.", lambda g: None if g.nvlinks is None else sum(1 for n in g.nvlinks if n.up)),
    ("fabric_ready", "1 when the fabric state is Completed with status Success (NVSwitch systems).",
     lambda g: None if g.fabric_state is None else (g.fabric_state, g.fabric_status) == ("Completed", "Success")),
)


def gpu_health_metrics(health) -> list[str]:
    """Prometheus lines for the GPU health readings (none when not read);
    a value not read is left out, never 0."""
    if health is None:
        return []
    out = []
    for name, text, value in _GPU_METRICS:
        rows = [(g.index, value(g)) for g in health.gpus]
        rows = [(i, int(v)) for i, v in rows if v is not None]
        if rows:
            out += [f"# HELP ccrhost_gpu_{name} {text}", f"# TYPE ccrhost_gpu_{name} gauge"]
            out += [f'ccrhost_gpu_{name}{{gpu="{i}"}} {v}' for i, v in rows]
    from ccrhost.model.gpu_health import pci_key

    index = {pci_key(g.pci): g.index for g in health.gpus}
    counts: dict[tuple[str, int], int] = {}
    for x in health.xids:  # one record per device, instance and code: its count is the lines'
        if x.sxid:
            continue
        gpu = str(index.get(pci_key(x.pci), x.pci))
        counts[(gpu, x.code)] = counts.get((gpu, x.code), 0) + x.count
    out += ["# HELP ccrhost_gpu_xids XID lines in the kernel log since boot, per GPU and code.",
            "# TYPE ccrhost_gpu_xids gauge"]
    out += [f'ccrhost_gpu_xids{{gpu="{_label(g)}",code="{c}"}} {n}' for (g, c), n in sorted(counts.items())]
    return out


def _fabric_metrics(fabric) -> list[str]:
    """The lossless-fabric readings, labelled only by device, counter,
    direction and priority (bounded sets): the raw counters (for rate()),
    the pause share per priority over the check's window, global pause."""
    from ccrhost.model.fabric import PRIO_PAUSE, RATE_COUNTERS, pause_shares

    if fabric is None or fabric.window is None:
        return []
    out = ["# HELP ccrhost_fabric_counter Lossless-fabric error counters as read (ethtool -S per netdev, "
           "hw_counters per RDMA port): storm events, drops, physical and transport errors.",
           "# TYPE ccrhost_fabric_counter counter"]
    for device, values in sorted(fabric.window.after.items()):
        for name in RATE_COUNTERS:
            if name in values:
                out.append(f'ccrhost_fabric_counter{{device="{_label(device)}",counter="{name}"}} {values[name]}')
    out += ["# HELP ccrhost_fabric_pause_seconds_total PFC pause per priority (<dir>_prio<N>_pause_duration, "
            "microseconds in ethtool), in seconds.", "# TYPE ccrhost_fabric_pause_seconds_total counter"]
    for device, values in sorted(fabric.window.after.items()):
        for name, value in sorted(values.items()):
            m = PRIO_PAUSE.match(name)
            if m and m.group(3) == "_duration":
                out.append(f'ccrhost_fabric_pause_seconds_total{{device="{_label(device)}",direction="{m.group(1)}",'
                           f'priority="{m.group(2)}"}} {value / 1e6:g}')
    out += ["# HELP ccrhost_fabric_pause_share Share of the window since the last check a priority was paused.",
            "# TYPE ccrhost_fabric_pause_share gauge"]
    for (device, way, prio), share in pause_shares(fabric.window).items():
        out.append(f'ccrhost_fabric_pause_share{{device="{_label(device)}",direction="{way}",priority="{prio}"}} '
                   f'{share:.6g}')
    out += ["# HELP ccrhost_fabric_global_pause Global 802.3x pause (ethtool -a): 1 on, 0 off.",
            "# TYPE ccrhost_fabric_global_pause gauge"]
    for device, p in sorted(fabric.pause.items()):
        for way, on in (("rx", p.rx), ("tx", p.tx)):
            out.append(f'ccrhost_fabric_global_pause{{device="{_label(device)}",direction="{way}"}} {int(bool(on))}')
    return out


# The reason runs to its " [user@time]" (the time: group 2) and the fields newer Slurm prints after it
REASON_FIELD = re.compile(r"\bReason=(.*?)(?:\s+\[[^\]@]*@([^\]]*)\])?"
                          r"(?=\s+(?:Comment|Extra|InstanceId|InstanceType|ResumeAfter)=|\s*$)")
# `scontrol show node -o`: Key=Value words; a comment may hold spaces, so it
# runs to the next Key=
_COMMENT = re.compile(r"\bComment=(.*?)(?=\s+[A-Z][A-Za-z]*=|\s*$)")
# The node comment ccrhost sets where the drain cap kept a failing node from
# jobs without draining it; the health check clears it once the node is fit.
HELD_PREFIX = "ccrhost: held:"


class DrainError(RuntimeError):
    """scontrol failed or hung: the node's drain state is not known."""


def _scontrol(args: list[str]) -> str:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DrainError(f"{os.path.basename(args[0])} {' '.join(args[1:3])}: {exc}") from None
    if out.returncode != 0:
        why = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[-1]
        raise DrainError(f"{os.path.basename(args[0])} {' '.join(args[1:3])} failed: {why}")
    return out.stdout


def _show_node(node: str, scontrol: str) -> tuple[str | None, str | None]:
    """The node's (reason, comment) as slurmctld has them."""
    out = _scontrol([scontrol, "show", "node", node, "-o"]).strip()
    found = []
    for pattern in (REASON_FIELD, _COMMENT):
        match = pattern.search(out)
        value = match.group(1).strip() if match else None
        found.append(None if value in (None, "", "(null)", "none") else value)
    return found[0], found[1]


def current_reason(node: str, scontrol: str) -> str | None:
    return _show_node(node, scontrol)[0]


# Slurm keeps a node's reason whole in slurmctld, but its accounting database
# (slurmdbd) stores it as a MySQL TINYTEXT, 255 bytes (the event table's
# "reason" column, src/plugins/accounting_storage/mysql/accounting_storage_mysql.c),
# and `sinfo -R` shows its first 20 characters ("%20E %9u %19H %N", sinfo(1)).
# So the codes come first, right after "ccrhost: ", and the reason is cut
# at 255 bytes, never inside the codes.
REASON_BYTES = 255


def _fit(text: str, limit: int) -> str:
    return text.encode()[:limit].decode(errors="ignore")


def drain_reason(verdict: Verdict) -> str:
    """The drain reason for ``verdict``: ``ccrhost: <codes>: <messages>``,
    ``ccrhost: <codes>: UNKNOWN: <what could not be read>`` for UNKNOWN,
    closed by `` [evidence NAME]`` where a bundle was kept and ``[action
    ACTION gpu N,M]``, never cut; :func:`parse_drain_reason` and
    :func:`parse_drain_action` read it back."""
    codes = reason_codes(verdict) or ["check_error"]
    tail = drain_action(verdict)
    if verdict.evidence:  # the bundle's name (its folder is verify_evidence_dir)
        tail = f" [evidence {os.path.basename(verdict.evidence)}]{tail}"
    head = f"{DRAIN_PREFIX} {','.join(codes)}:"
    shown = len(codes)
    while len(head.encode()) > REASON_BYTES // 2 and shown > 1:  # room for a message too
        shown -= 1
        head = f"{DRAIN_PREFIX} {','.join(codes[:shown])} +{len(codes) - shown} more:"
    marker = " UNKNOWN:" if verdict.status == UNKNOWN else ""
    room = REASON_BYTES - len(f"{head}{marker} ".encode()) - len(tail.encode())
    return _fit(f"{head}{marker} {bounded_summary(verdict, room)}", REASON_BYTES - len(tail.encode())) + tail


# what scontrol shows after a reason: " [root@2026-12-05T10:00:00]"
_SLURM_STAMP = re.compile(r"\s+\[[^\]\s]*@[^\]]*\]\s*$")
_DRAIN = re.compile(r"^ccrhost: (?P<codes>[a-z0-9_]+(?:,[a-z0-9_]+)*)(?: \+(?P<more>[0-9]+) more)?:"
                    r"(?P<unknown> UNKNOWN:)? ?(?P<text>.*)$", re.S)


@dataclass(frozen=True)
class DrainReason:
    """What a ccrhost drain reason says (:func:`drain_reason`)."""
    status: str              # FAIL, or UNKNOWN
    codes: tuple[str, ...]   # the codes it names, worst first
    text: str                # the messages after them
    more: int = 0            # codes left out for the length


def parse_drain_reason(reason: str | None) -> DrainReason | None:
    """The codes of a reason :func:`drain_reason` wrote (as Slurm shows it:
    ``scontrol`` adds `` [user@time]``, which is dropped); None for another
    reason, or one of an older ccrhost that named no codes, or one whose
    codes the registry does not know."""
    from ccrhost.model.reasons import REGISTRY

    if not reason:
        return None
    match = _DRAIN.match(_SLURM_STAMP.sub("", reason.strip()))
    if not match or not all(c in REGISTRY for c in match.group("codes").split(",")):
        return None
    return DrainReason(UNKNOWN if match.group("unknown") else FAIL, tuple(match.group("codes").split(",")),
                       match.group("text"), int(match.group("more") or 0))


def measured_drain(reason: str) -> bool:
    """A drain that rests on a measurement (``measured_slow``; an older
    ccrhost wrote ``ccrhost: measured: ...``)."""
    parsed = parse_drain_reason(reason)
    if parsed is None:
        return reason.startswith(MEASURED_PREFIX)
    return any(c in MEASURED_CODES for c in parsed.codes)


def replace_drain(reason: str) -> bool:
    """A drain for a node to replace (its history, a lemon GPU): only an
    operator lifts it."""
    parsed = parse_drain_reason(reason)
    return parsed is not None and any(c in REPLACE_CODES for c in parsed.codes)


class DrainNote(str):
    """What :func:`drain` did, in words; ``held``: the cap's decision when
    the drain cap kept the node from being drained."""
    held = None


def _note(text: str, held=None) -> DrainNote:
    note = DrainNote(text)
    note.held = held
    return note


_DRAIN_ACTION = re.compile(r" \[action ([a-z_]+)(?: gpu ([0-9]+(?:,[0-9]+)*))?\](?:\s+\[[^\]\s]*@[^\]]*\])?\s*$")


def drain_action(verdict: Verdict) -> str:
    """`` [action reset_gpu gpu 2,5]``: the node's action and the GPUs it is
    for, short enough never to be cut (``ccrhost slurm remediate`` reads it
    back with :func:`parse_drain_action`)."""
    gpus = sorted({r.gpu for r in verdict.reasons if r.gpu is not None and r.level == verdict.status
                   and reason_action(r) == verdict.action})
    return f" [action {verdict.action}" + (f" gpu {','.join(map(str, gpus[:16]))}" if gpus else "") + "]"


def parse_drain_action(reason: str) -> tuple[str, list[int]] | None:
    """(action, GPU indexes) of a drain reason :func:`drain_reason` wrote;
    None for any other (an operator's, an older ccrhost's)."""
    match = _DRAIN_ACTION.search(reason)
    return (match.group(1), [int(g) for g in match.group(2).split(",")] if match.group(2) else []) if match else None


def drain(verdict: Verdict, node: str | None = None, scontrol: str | None = None, measured: bool = False,
          unknown_drains: bool = False, cap=None, sinfo: str | None = None) -> DrainNote:
    """Drain this node on FAIL, undrain it when OK or WARN, and never touch
    a reason someone else set (one that does not start with ``ccrhost:``).
    UNKNOWN changes nothing (the node's state is not known) unless
    ``unknown_drains``: in a prolog, where Slurm drains the node for the
    failing prolog anyway, the reason then says what could not be read
    instead of Slurm's bare "Prolog error". ``measured``: the verdict
    includes a bandwidth measurement, so it may also lift or rewrite a drain
    that rests on one. ``cap`` (a :class:`~ccrhost.model.drain_cap.DrainCap`):
    a new drain only while the cap has room (:func:`capped`); past it the
    node is not drained, its comment says so, and the note's ``held`` is
    the decision."""
    import shutil  # only a drain needs it; every check would pay its import

    if os.environ.get("SLURM_SCRIPT_CONTEXT") == "prolog_slurmd" and verdict.status in (OK, WARN):
        # Slurm allocates no drained node, so a node whose prolog runs
        # carries no drain to lift: no RPC to slurmctld from every node of
        # every job start (Slurm sets this variable since 21.08; older ones
        # ask as the health check does).
        return _note("no drain change (a node starting a job is not drained)")
    scontrol = scontrol or shutil.which("scontrol")
    if not scontrol:
        return _note("scontrol not found; not draining")
    # slurmd names the node in the prolog's and health check's environment;
    # its NodeName need not be the host name
    node = node or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    if unknown_drains and only_unproven(verdict):
        return _note(f"{node} not drained: UNKNOWN only for want of an active check's proof "
                     f"({', '.join(dict.fromkeys(r.code for r in verdict.reasons if r.level == UNKNOWN))})")
    reason, comment = _show_node(node, scontrol)
    ours = reason is not None and reason.startswith(DRAIN_PREFIX)
    if reason is not None and not ours:
        return _note(f"{node} already has reason {reason!r} set by someone else; left alone")
    if ours and measured_drain(reason) and not measured:
        return _note(f"{node} stays drained: {reason!r} rests on a measurement this check cannot repeat")
    if ours and replace_drain(reason):
        return _note(f"{node} stays drained: {reason!r} is to be replaced; only an operator resumes it")
    if verdict.status == FAIL or (unknown_drains and verdict.status == UNKNOWN):
        text = drain_reason(verdict)
        if reason == text:
            return _note(f"{node} stays drained: {text}")  # no update: it would only restamp the reason
        if cap is not None and not ours:  # a new drain: only while the cap has room
            decision = capped(verdict, node, cap, scontrol, sinfo)
            if decision.held:
                return _held(verdict, node, cap, scontrol, comment, decision, "not drained")
        _scontrol([scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={text}"])
        if cap is not None and not ours:
            # nodes that failed at the same moment all saw room: the first
            # ones by drain time stay drained, the others lift their own
            decision = capped(verdict, node, cap, scontrol, sinfo)
            if decision.held:
                _scontrol([scontrol, "update", f"NodeName={node}", "State=RESUME"])
                return _held(verdict, node, cap, scontrol, comment, decision,
                             "drained, then lifted again (others drained first)")
        return _note(f"drained {node}: {text}")
    if verdict.status in (OK, WARN) and comment is not None and comment.startswith(HELD_PREFIX):
        _scontrol([scontrol, "update", f"NodeName={node}", "Comment="])
        cap_textfile(cap, None)
    if ours and verdict.status in (OK, WARN):
        _scontrol([scontrol, "update", f"NodeName={node}", "State=RESUME"])
        return _note(f"resumed {node} (its ccrhost drain reason no longer holds)")
    return _note("no drain change")


# --- the drain cap: no drain storm (ccrhost/model/drain_cap.py) ----------------

def parse_sinfo_drains(text: str, node: str):
    """``sinfo -h -N -o '%N|%R|%H|%E'`` (a node once per partition, the
    reason last: it may hold '|'): the nodes that share a partition with
    ``node`` (all, when it is in none shown), and their ccrhost drains."""
    from datetime import datetime

    from ccrhost.model.drain_cap import Drained

    rows = []
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) == 4 and parts[0]:
            rows.append(tuple(p.strip() for p in parts))
    mine = {part for name, part, _, _ in rows if name == node}
    names = {name for name, part, _, _ in rows if part in mine or not mine}
    drained = {}
    for name, _, when, reason in rows:
        parsed = parse_drain_reason(reason) if name in names else None
        if parsed is None or name in drained:
            continue
        try:  # sinfo prints the reason's time in the local zone, as datetime reads it back
            since = datetime.strptime(when, "%Y-%m-%dT%H:%M:%S").timestamp()
        except ValueError:
            since = None
        drained[name] = Drained(name, parsed.codes, since)
    return len(names), list(drained.values())


def capped(verdict: Verdict, node: str, cap, scontrol: str, sinfo: str | None = None):
    """The cap's decision for ``node``, from the drains Slurm shows now."""
    from ccrhost.model.drain_cap import decide, drain_codes

    sinfo = sinfo or os.path.join(os.path.dirname(scontrol), "sinfo")
    out = _scontrol([sinfo, "-h", "-N", "-o", "%N|%R|%H|%E"])
    population, drained = parse_sinfo_drains(out, node)
    return decide(node, drain_codes(verdict.reasons), drained, population, cap, time.time())


def _held(verdict: Verdict, node: str, cap, scontrol: str, comment: str | None, decision, what: str) -> DrainNote:
    """Say loudly that the cap held: the node's comment (what `slurm
    verify` and `scontrol show node` read), syslog, the textfile."""
    codes = ",".join(c.code for c in decision.counts)
    text = _fit(f"{HELD_PREFIX} {codes}: drain cap reached: {decision.text()}", REASON_BYTES)
    if comment != text:
        _scontrol([scontrol, "update", f"NodeName={node}", f"Comment={text}"])
    message = (f"{node} {what}: DRAIN CAP HELD for {codes} ({decision.text()}); "
               f"jobs are kept off it without a drain: {verdict.summary()}")
    try:
        import syslog

        syslog.openlog("ccrhost", syslog.LOG_PID, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_WARNING, message)
    except OSError:
        pass
    cap_textfile(cap, decision)
    return _note(message, decision)


def cap_textfile(cap, decision) -> None:
    """The node_exporter textfile of the cap (``slurm_drain_cap_textfile``):
    1 per code while it holds here, 0 once it no longer does."""
    if cap is None or not cap.textfile:
        return
    if decision is None and not os.path.exists(cap.textfile):
        return  # never held here: nothing to clear
    lines = ["# HELP ccrhost_drain_cap_held 1 while the drain cap keeps this failing node from jobs without a drain.",
             "# TYPE ccrhost_drain_cap_held gauge"]
    if decision is None:
        lines.append("ccrhost_drain_cap_held 0")
    else:
        lines += [f'ccrhost_drain_cap_held{{code="{c.code}",level="{c.level}"}} 1' for c in decision.counts]
        lines += ["# HELP ccrhost_drain_cap_drained Nodes of the partition drained by ccrhost for the code.",
                  "# TYPE ccrhost_drain_cap_drained gauge"]
        lines += [f'ccrhost_drain_cap_drained{{code="{c.code}"}} {c.rank - 1}' for c in decision.counts]
        lines += ["# HELP ccrhost_drain_cap_limit The cap for the code.", "# TYPE ccrhost_drain_cap_limit gauge"]
        lines += [f'ccrhost_drain_cap_limit{{code="{c.code}"}} {c.limit}' for c in decision.counts]
    from ccrhost.output import write_atomic  # only where the cap holds or did: every check would pay its import

    try:
        write_atomic(cap.textfile, "\n".join(lines) + "\n")
    except OSError:
        pass  # the log and the node's comment still say it


def hold_job(job: str, scontrol: str, scancel: str | None = None) -> str:
    """Keep job ``job`` off this node without draining it (the prolog, past
    the cap): requeue it (a batch job goes back to the queue), else cancel
    it (Slurm cancels an srun or salloc whose prolog fails too). Raises
    DrainError when neither works."""
    try:
        _scontrol([scontrol, "requeue", job])
        return f"requeued job {job}"
    except DrainError as first:
        scancel = scancel or os.path.join(os.path.dirname(scontrol), "scancel")
        try:
            _scontrol([scancel, job])
        except DrainError as exc:
            raise DrainError(f"cannot keep job {job} off this node: {first}; {exc}") from None
        return f"cancelled job {job} (it cannot be requeued: {first})"
