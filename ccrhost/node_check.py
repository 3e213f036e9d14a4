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
import tempfile

from ccrhost.checks import FAIL, OK, WARN, Verdict, evaluate, readings_from_facts
from ccrhost.config import HostSettings

DRAIN_PREFIX = "ccrhost:"
# A drain that rests on a fleet measurement (ib_write_bw between nodes): the
# node-local check cannot see what it found, so only another measurement or
# an operator lifts it.
MEASURED_PREFIX = "ccrhost: measured:"
MEASURED_CODES = ("measured_slow",)


def run_check(settings: HostSettings, gather=None) -> Verdict:
    """Gather this node's readings and evaluate them. ``gather`` is for tests."""
    if gather is None:
        from ccrhost.probes import gpu, rdma

        rdma_state, gpu_state = rdma.read_local(), gpu.read_local()
    else:
        rdma_state, gpu_state = gather()
    readings = readings_from_facts(rdma_state, gpu_state, settings.rdma_exclude_devices)
    return evaluate(readings, settings.expectation(), settings.policy())


def format_text(verdict: Verdict) -> str:
    lines = [f"ccrhost check: {verdict.status}"]
    if verdict.ccr:
        c = verdict.ccr
        lines.append(f"  CCR {c.ccr:.3e} (B {c.bandwidth_gbps:g} Gb/s {c.model}, F {c.tflops:.1f} TFLOPS, beta {c.beta:g})")
        if verdict.expected_ccr:
            lines.append(f"  expected {verdict.expected_ccr:.3e} from the declared hardware")
    for r in verdict.reasons:
        lines.append(f"  {r.level}: {r.message}")
    return "\n".join(lines) + "\n"


def format_nhc(verdict: Verdict) -> str:
    """NHC's convention: silence when healthy, one ``ERROR:`` line otherwise."""
    if verdict.status == OK:
        return ""
    if verdict.status == FAIL or verdict.status == "UNKNOWN":
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


def write_atomic(path: str, text: str) -> None:
    """Write so that a node_exporter scrape never sees half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ccrhost-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


_REASON = re.compile(r"\bReason=(.*?)(?:\s+\[[^\]]*\])?\s*$")


def current_reason(node: str, scontrol: str) -> str | None:
    out = subprocess.run([scontrol, "show", "node", node, "-o"], capture_output=True, text=True, timeout=20)
    if out.returncode != 0:
        raise RuntimeError(f"scontrol show node {node}: {out.stderr.strip() or out.stdout.strip()}")
    match = _REASON.search(out.stdout.strip())
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
        subprocess.run([scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={text}"],
                       check=True, capture_output=True, text=True, timeout=20)
        return f"drained {node}: {text}"
    if ours and verdict.status in (OK, WARN):
        subprocess.run([scontrol, "update", f"NodeName={node}", "State=RESUME"],
                       check=True, capture_output=True, text=True, timeout=20)
        return f"resumed {node} (its ccrhost drain reason no longer holds)"
    return "no drain change"
