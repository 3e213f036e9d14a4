"""What the Slurm prolog and health check judged and did, or in observe
mode (``slurm_mode: observe``, ``ccrhost check --dry-run``) would have
done, told where people and alerts look: one log line (syslog, and a file
where ``slurm_log`` names one) and a node_exporter textfile
(``slurm_textfile``). A fault of ccrhost's own configuration or
installation is told the same way: it never drains or holds (node/drain.py
is not called for it), so this is its only alert on the node.
"""

from __future__ import annotations

import os
import time

from ccrhost.model.status import EXIT_CODES
from ccrhost.model.verdict import Verdict

# UNKNOWN for ccrhost's own configuration or installation, not the node's hardware: the
# settings file, an internal error, the NIC tool it needs. Never a reason to keep a job off.
OWN_FAULT_CODES = ("check_config", "check_error", "nic_fw_tool_missing")


def own_fault(verdict: Verdict) -> list[str]:
    """The own-fault codes when every reason against the node is one (else []): a FAIL found
    beside them, or another UNKNOWN, is the node's and is acted on as ever."""
    from ccrhost.model.status import FAIL, UNKNOWN

    against = [r for r in verdict.reasons if r.level in (FAIL, UNKNOWN)]
    if verdict.status != UNKNOWN or not against or any(r.code not in OWN_FAULT_CODES for r in against):
        return []
    return list(dict.fromkeys(r.code for r in against))


def context() -> str:
    return {"prolog_slurmd": "prolog"}.get(os.environ.get("SLURM_SCRIPT_CONTEXT", ""), "check")


def log_line(node: str, verdict: Verdict, observe: bool, what: list[str], own: list[str], now: float) -> str:
    codes = ",".join(dict.fromkeys(r.code for r in verdict.reasons if r.level == verdict.status)) or "-"
    job = os.environ.get("SLURM_JOB_ID")
    head = (f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now))} {node} {context()}"
            f"{f' job {job}' if job else ''} mode={'observe' if observe else 'enforce'} {verdict.status} {codes}")
    if own:
        head += f": OWN FAULT ({','.join(own)}): not drained, no job held: {verdict.reasons[-1].message}"
    return head + "".join(f"; {w}" for w in what)


def textfile_text(verdict: Verdict, observe: bool, would_drain: bool, would_hold: bool, own: list[str],
                  now: float) -> str:
    status = [f'ccrhost_slurm_check_status{{status="{s}"}} {int(s == verdict.status)}' for s in EXIT_CODES]
    codes = sorted({r.code for r in verdict.reasons if r.level == verdict.status}) if would_drain else []
    lines = [
        "# HELP ccrhost_slurm_check_status The last prolog or health check verdict on this node (1: its status).",
        "# TYPE ccrhost_slurm_check_status gauge", *status,
        "# HELP ccrhost_slurm_observe 1 while the prolog and health check only observe (slurm_mode: observe).",
        "# TYPE ccrhost_slurm_observe gauge", f"ccrhost_slurm_observe {int(observe)}",
        "# HELP ccrhost_slurm_would_drain 1 when the last check would have drained the node but observed only.",
        "# TYPE ccrhost_slurm_would_drain gauge",
        *([f'ccrhost_slurm_would_drain{{code="{c}"}} 1' for c in codes] or ["ccrhost_slurm_would_drain 0"]),
        "# HELP ccrhost_slurm_would_hold 1 when the last prolog would have kept its job off the node.",
        "# TYPE ccrhost_slurm_would_hold gauge", f"ccrhost_slurm_would_hold {int(would_hold)}",
        "# HELP ccrhost_slurm_own_fault 1 per code when ccrhost's own configuration or installation failed "
        "(it lets jobs run).",
        "# TYPE ccrhost_slurm_own_fault gauge",
        *([f'ccrhost_slurm_own_fault{{code="{c}"}} 1' for c in own] or ["ccrhost_slurm_own_fault 0"]),
        "# HELP ccrhost_slurm_check_timestamp_seconds When the last check ran.",
        "# TYPE ccrhost_slurm_check_timestamp_seconds gauge", f"ccrhost_slurm_check_timestamp_seconds {now:.0f}",
    ]
    return "\n".join(lines) + "\n"


def record(node: str, verdict: Verdict, observe: bool, what: list[str], own: list[str], would_drain: bool,
           would_hold: bool, log: str | None, textfile: str | None, now: float | None = None) -> str:
    """Tell it: syslog and ``log`` when there is something to tell (not OK,
    an action, a would-be one), the textfile every time. Returns the line.
    Nothing here may fail the check: a file that cannot be written is skipped."""
    now = time.time() if now is None else now
    line = log_line(node, verdict, observe, what, own, now)
    if verdict.status != "OK" or what or own:
        try:
            import syslog

            syslog.openlog("ccrhost", syslog.LOG_PID, syslog.LOG_DAEMON)
            syslog.syslog(syslog.LOG_WARNING if own or verdict.status != "OK" else syslog.LOG_INFO, line)
        except OSError:
            pass
        if log:
            try:
                os.makedirs(os.path.dirname(log), exist_ok=True)
                with open(log, "a") as f:
                    f.write(line + "\n")
            except OSError:
                pass
    if textfile:
        from ccrhost.output import write_atomic

        try:
            write_atomic(textfile, textfile_text(verdict, observe, would_drain, would_hold, own, now))
        except OSError:
            pass
    return line
