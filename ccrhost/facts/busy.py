"""The node's running GPU work, read before an active test or a disruptive
tuning step (``ccrhost.model.busy``): its GPU compute processes and, where
Slurm is in use on it, the jobs Slurm runs there."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from ccrhost.model.busy import QUERY, GpuWork, parse_compute_apps, parse_squeue, slurm_query

TIMEOUT = 30  # seconds: nvidia-smi on a node with a hung GPU must not hold the deploy
SLURM_TIMEOUT = 15  # seconds: a slurmctld that does not answer is an unreadable node, not an idle one
SLURM_CONF = "/etc/slurm/slurm.conf"  # Slurm's own default


class GpuWorkFact(FactBase):
    """The compute processes holding the node's GPUs and its Slurm jobs
    (``GpuWork``); a node without nvidia-smi has no GPU work to disturb.
    Slurm is in use where SLURM_CONF or ``slurm_conf`` (the setting) names a
    slurm.conf or Slurm's default one exists; the node is its short host
    name. ``attempt`` makes each read a new one (the stages before may have
    started or ended work)."""

    def default(self):
        return GpuWork(error="the query printed nothing")

    def command(self, attempt=0, slurm_conf=None):
        line = " ".join(shlex.quote(a) for a in QUERY)
        squeue = " ".join(shlex.quote(a) for a in slurm_query("NODE")).replace("NODE", '"$(hostname -s)"')
        conf = shlex.quote(slurm_conf or "")
        return (f"if command -v nvidia-smi >/dev/null 2>&1; then timeout -k 5 {TIMEOUT} {line} 2>&1; "
                f"echo \"@@rc $?\"; else echo '@@none'; fi; "
                f"conf=${{SLURM_CONF:-{conf}}}; "
                f"if [ -n \"$conf\" ] || [ -e {SLURM_CONF} ]; then echo '@@slurm'; "
                f"if command -v squeue >/dev/null 2>&1; then "
                f"if [ -n \"$conf\" ]; then SLURM_CONF=\"$conf\"; export SLURM_CONF; fi; "
                f"timeout -k 5 {SLURM_TIMEOUT} {squeue} 2>&1; echo \"@@src $?\"; "
                f"else echo '@@src missing'; fi; fi")

    def process(self, output):
        return parse_script(list(output))


def _status(lines: list[str], marker: str) -> tuple[int | None | str, list[str]]:
    """(the exit status a ``marker N`` line gives: None when ``timeout`` ended it, "unprinted"
    when no such line; the lines before it)."""
    rc, body = "unprinted", []
    for line in lines:
        if line.startswith(marker):
            value = line[len(marker):]
            rc = int(value) if value.isdigit() else 255
        else:
            body.append(line)
    return (None if rc in (124, 137) else rc), body


def parse_script(lines: list[str]) -> GpuWork:
    gpu_lines, slurm_lines = lines, None
    if "@@slurm" in lines:
        cut = lines.index("@@slurm")
        gpu_lines, slurm_lines = lines[:cut], lines[cut + 1:]
    if "@@none" in gpu_lines:
        work = GpuWork()
    else:
        rc, body = _status(gpu_lines, "@@rc ")
        work = GpuWork(error="the query's exit status was not printed") if rc == "unprinted" else \
            parse_compute_apps(rc, "\n".join(body))
    if slurm_lines is None:
        return work
    if "@@src missing" in slurm_lines:
        return work.with_slurm(GpuWork(error="Slurm is in use here but squeue not found"))
    rc, body = _status(slurm_lines, "@@src ")
    if rc == "unprinted":
        return work.with_slurm(GpuWork(error="squeue's exit status was not printed"))
    return work.with_slurm(parse_squeue(rc, "\n".join(body)))
