"""``ccrhost check``: the verification, on this node, before a job.

Gathers with the probes (sysfs snippet, NVML or nvidia-smi), evaluates
with the same functions the deploy uses, and prints in a format a
scheduler or monitoring system reads. Exit codes are Nagios-style.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from dataclasses import replace

from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN, Reason
from ccrhost.model.verdict import Readings, Verdict, evaluate, readings_from_facts
from ccrhost.settings import HostSettings

DRAIN_PREFIX = "ccrhost:"
# A drain that rests on a fleet measurement (ib_write_bw between nodes): the
# node-local check cannot see what it found, so only another measurement or
# an operator lifts it.
MEASURED_PREFIX = "ccrhost: measured:"
MEASURED_CODES = ("measured_slow",)


def run_check(settings: HostSettings, gather=None, timeout: float = 20) -> Verdict:
    """Gather this node's readings and evaluate them. ``gather`` is for tests.

    What could not be read is UNKNOWN, never a guess: an RDMA probe that
    hangs past ``timeout`` or prints what sysfs never prints gives the
    UNKNOWN verdict of :func:`unknown`; GPUs that cannot be read are an
    UNKNOWN reason of the verdict.
    """
    if gather is None:
        from ccrhost.probes import gpu, local, rdma

        try:
            rdma_state = rdma.read_local(timeout)
        except (local.ProbeTimeout, rdma.RdmaFormatError) as exc:
            return unknown(f"cannot read the RDMA ports: {exc}")
        gpu_state = gpu.read_local(timeout=timeout)
    else:
        rdma_state, gpu_state = gather()
    readings = readings_from_facts(rdma_state, gpu_state, settings.rdma_exclude_devices)
    return evaluate(readings, settings.expectation(), settings.policy())


def unknown(message: str, verdict: Verdict | None = None) -> Verdict:
    """UNKNOWN (exit 3) with ``message`` as its one reason; with ``verdict``,
    that verdict's reasons kept and the status forced to UNKNOWN (a failing
    helper, such as scontrol under --drain)."""
    reason = Reason(UNKNOWN, "check_error", message)
    if verdict is not None:
        return replace(verdict, status=UNKNOWN, reasons=[*verdict.reasons, reason])
    return Verdict(UNKNOWN, [reason], None, None, Readings([], []))


def format_text(verdict: Verdict) -> str:
    lines = [f"ccrhost check: {verdict.status}"]
    if verdict.ccr:
        c = verdict.ccr
        lines.append(f"  CCR {c.ccr:.3e} (B {c.bandwidth_gbps:g} Gb/s {c.model}, F {c.tflops:.1f} TFLOPS, beta {c.beta:g})")
        if verdict.expected_ccr:
            lines.append(f"  expected {verdict.expected_ccr:.3e} from the declared hardware")
        if c.workload:
            lines.append(f"  workload model: {c.workload['statement']}")
    for r in verdict.reasons:
        lines.append(f"  {r.level}: {r.message}")
    return "\n".join(lines) + "\n"


def format_nhc(verdict: Verdict) -> str:
    """NHC's convention: silence when healthy, one ``ERROR:`` line otherwise."""
    if verdict.status == OK:
        return ""
    if verdict.status in (FAIL, UNKNOWN):
        return f"ERROR: ccrhost: Health check failed: {verdict.status}: {verdict.summary()}\n"
    return f"WARNING: ccrhost: {verdict.summary()}\n"


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
    out += ["# HELP ccrhost_port_effective_gbps Effective rate of each compute port.",
            "# TYPE ccrhost_port_effective_gbps gauge"]
    for p in verdict.readings.ports:
        out.append(f'ccrhost_port_effective_gbps{{device="{_label(p.device)}",port="{p.port}",'
                   f'active="{int(p.active)}"}} {p.effective_gbps:g}')
    out += ["# HELP ccrhost_gpus GPUs found.", "# TYPE ccrhost_gpus gauge", f"ccrhost_gpus {len(verdict.readings.gpus)}",
            "# HELP ccrhost_check_reason A reason for a non-OK verdict.", "# TYPE ccrhost_check_reason gauge"]
    for r in verdict.reasons:
        out.append(f'ccrhost_check_reason{{level="{r.level}",code="{r.code}",message="{_label(r.message)}"}} 1')
    return "\n".join(out) + "\n"


_REASON = re.compile(r"\bReason=(.*?)(?:\s+\[[^\]]*\])?\s*$")


class DrainError(RuntimeError):
    """scontrol failed or hung: the node's drain state is not known."""


def _scontrol(args: list[str]) -> str:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DrainError(f"scontrol {' '.join(args[1:3])}: {exc}") from None
    if out.returncode != 0:
        why = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[-1]
        raise DrainError(f"scontrol {' '.join(args[1:3])} failed: {why}")
    return out.stdout


def current_reason(node: str, scontrol: str) -> str | None:
    out = _scontrol([scontrol, "show", "node", node, "-o"])
    match = _REASON.search(out.strip())
    reason = match.group(1).strip() if match else None
    return None if reason in (None, "", "(null)", "none") else reason


def drain(verdict: Verdict, node: str | None = None, scontrol: str | None = None, measured: bool = False) -> str:
    """Drain this node on FAIL, undrain it when OK or WARN, and never touch
    a reason someone else set (one that does not start with ``ccrhost:``).
    UNKNOWN changes nothing: the node's state is not known. ``measured``:
    the verdict includes a bandwidth measurement, so it may also lift or
    rewrite a drain that rests on one."""
    scontrol = scontrol or shutil.which("scontrol")
    if not scontrol:
        return "scontrol not found; not draining"
    # slurmd names the node in the prolog's and health check's environment;
    # its NodeName need not be the host name
    node = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    reason = current_reason(node, scontrol)
    ours = reason is not None and reason.startswith(DRAIN_PREFIX)
    if reason is not None and not ours:
        return f"{node} already has reason {reason!r} set by someone else; left alone"
    if ours and reason.startswith(MEASURED_PREFIX) and not measured:
        return f"{node} stays drained: {reason!r} rests on a measurement this check cannot repeat"
    if verdict.status == FAIL:
        prefix = MEASURED_PREFIX if any(r.code in MEASURED_CODES for r in verdict.reasons) else DRAIN_PREFIX
        text = f"{prefix} {verdict.summary()}"[:255]
        if reason == text:
            return f"{node} stays drained: {text}"  # no update: it would only restamp the reason
        _scontrol([scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={text}"])
        return f"drained {node}: {text}"
    if ours and verdict.status in (OK, WARN):
        _scontrol([scontrol, "update", f"NodeName={node}", "State=RESUME"])
        return f"resumed {node} (its ccrhost drain reason no longer holds)"
    return "no drain change"
