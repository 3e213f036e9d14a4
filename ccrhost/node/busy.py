"""The node's running GPU work, read here before an active test that a
command runs on the node itself (``ccrhost dcgm``: the remediation's and the
Kubernetes sweep's diag, ``slurm verify --dcgm``'s and the sweep's step;
``ccrhost check --refresh-nic``'s NIC queries), and on a Slurm node the
jobs Slurm runs there."""

from __future__ import annotations

import os
import time

from ccrhost.model.active import ActiveResult
from ccrhost.model.busy import QUERY, GpuWork, busy_reason, parse_compute_apps, parse_squeue, slurm_query
from ccrhost.node import active

DEADLINE = 30  # seconds for nvidia-smi: a hung driver must not hold the command
SLURM_DEADLINE = 15  # seconds for squeue: a slurmctld that does not answer is an unreadable node, not an idle one
SLURM_CONF = "/etc/slurm/slurm.conf"  # Slurm's own default


def slurm_node(slurm_conf: str | None, environ=os.environ) -> str | None:
    """This node's Slurm name where Slurm is in use here (slurmd started us, or a slurm.conf is
    named or in its default place), else None. slurmd names the node (SLURMD_NODENAME); over ssh
    its short host name stands for it."""
    used = any(environ.get(k) for k in ("SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_CONF")) or slurm_conf \
        or os.path.exists(SLURM_CONF)
    return (environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]) if used else None


def own_jobs(environ=os.environ) -> frozenset[str]:
    """The job asking (its step or prolog runs the test), as squeue's %i prints it."""
    ids = {environ.get("SLURM_JOB_ID")}
    if environ.get("SLURM_ARRAY_JOB_ID") and environ.get("SLURM_ARRAY_TASK_ID"):
        ids.add(f"{environ['SLURM_ARRAY_JOB_ID']}_{environ['SLURM_ARRAY_TASK_ID']}")
    return frozenset(i for i in ids if i)


def read_local(run=None, slurm_conf: str | None = None, environ=os.environ) -> GpuWork:
    """``nvidia-smi --query-compute-apps`` here; no nvidia-smi: no GPU work to disturb. Where Slurm
    is in use (:func:`slurm_node`), also the node's jobs, ``slurm_conf`` (the setting) exported as
    SLURM_CONF where the environment names none; no squeue there: unreadable.
    ``run(argv, deadline, env) -> ToolRun`` is for tests."""
    run = run or active.run_tool
    tool = run(list(QUERY), DEADLINE, None)
    work = GpuWork() if tool.missing else parse_compute_apps(None if tool.timed_out else tool.rc, tool.output)
    node = slurm_node(slurm_conf, environ)
    if node is None:
        return work
    env = {"SLURM_CONF": slurm_conf} if slurm_conf and not environ.get("SLURM_CONF") else None
    jobs = run(list(slurm_query(node)), SLURM_DEADLINE, env)
    if jobs.missing:
        return work.with_slurm(GpuWork(error=f"Slurm is in use here but {jobs.missing}"))
    return work.with_slurm(parse_squeue(None if jobs.timed_out else jobs.rc, jobs.output, own_jobs(environ)))


def not_run(work: GpuWork, check: str, mode: str, what: str, valid_for: float, clock=time.time) -> ActiveResult | None:
    """The result of a test not started on a busy node (UNKNOWN ``node_busy``,
    for the caller to print, never to store over an earlier result); None
    when the node is idle."""
    reason = busy_reason(work, what, "verify_active_when_busy")
    if reason is None:
        return None
    return ActiveResult(check, mode, reason.level, reason.code, reason.message, clock(), valid_for,
                        reasons=(reason.to_dict(),))
