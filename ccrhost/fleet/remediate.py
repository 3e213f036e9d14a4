"""``ccrhost slurm remediate``: from a drained node's action to a node back
in service, or one that stays drained with what was tried.

For each node Slurm shows drained with a ccrhost reason, the action the
reason carries (``[action reset_gpu gpu 2]``, written by the node's own
check: ccrhost.model.drain_reason.drain_reason) is carried out when it is safe to
automate and the operator enabled it:

- ``reset_gpu``: each GPU named, only while no process holds it
  (``nvidia-smi --query-compute-apps=pid -i N``), with ``nvidia-smi -r -i N``
  run by the node's ``ccrhost reset-gpu`` (which keeps the reset's time, so
  the check judges that GPU only on what the driver logged since); then the node's check, and ``scontrol update State=RESUME`` only when it
  passes (OK or WARN) and the reason is still the one acted on;
- ``reboot``: ``scontrol reboot NODE`` (Slurm's RebootProgram does it), at
  most ``max_reboots`` nodes rebooting at once (those Slurm already shows
  rebooting count); the node comes back drained with its reason. A later run
  sees that it booted after its reason was set (``BootTime`` against the
  reason's ``[USER@TIME]``), so it does not reboot it again: it checks it and
  resumes it if it passes. A failure that comes back gets a new reason (a
  later time), hence another reboot, until the node's history makes it
  ``node_repeat_failures`` (replace), which is never automated.

An operator's reason, a drain for replacement (``node_repeat_failures``,
``gpu_lemon``) or one resting on a measurement, and any other action are left alone, and said so. Commands on a node
run over the operator's ssh (``--ssh``). Every step is logged per node; a dry
run logs each command it would run, exactly as it would run it (``would run:
ssh ... ADDRESS '...'``, ``would run: scontrol ...``), and runs none of them.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from ccrhost.fleet.slurm_client import Remote, node_fields, run_slurm
from ccrhost.model.actions import REBOOT, RESET_GPU
from ccrhost.model.managed import CHECK_CONFIG, DRAIN_PREFIX
from ccrhost.model.status import OK, WARN
from ccrhost.model.verdict import Verdict


@dataclass(frozen=True)
class RemediateOptions:
    enabled: tuple[str, ...] = (RESET_GPU,)  # the automatable actions the operator allows
    max_reboots: int = 1                       # nodes rebooting at once, at most
    dry_run: bool = False
    ssh: str = "ssh -o BatchMode=yes -o ConnectTimeout=10"
    ccrhost: str = "/usr/local/bin/ccrhost"
    config: str = CHECK_CONFIG
    timeout: float = 120
    dcgm_level: int = 0                        # the DCGM diag run before the check (0: none)
    accept: bool = True                        # a node with a certificate re-runs its failure's stages first


# The command's exit codes (docs/check-and-slurm.md, the table of every command's):
# a repair or the check after it failed on some node, which stays drained.
EXIT_OK, EXIT_FAILED = 0, 2


@dataclass
class NodeLog:
    node: str
    steps: list[str] = field(default_factory=list)
    outcome: str = "left drained"
    failed: bool = False  # a step it tried failed (not: a node left alone on purpose)
    again: tuple = ()     # the acceptance stages its repair must pass before it returns (its certificate's)
    would_run: list[str] = field(default_factory=list)  # a dry run: the commands, exactly as they would run

    def __call__(self, step: str) -> None:
        self.steps.append(step)

    def fail(self, step: str) -> None:
        self.steps.append(step)
        self.failed = True

    def would(self, command: str, when: str = "") -> None:
        """A dry run's command, logged as a step of its own (``when``: the condition it waits on)."""
        self.would_run.append(command)
        self.steps.append(f"would run: {command}" + (f"   # {when}" if when else ""))

    def to_dict(self) -> dict:
        return {"node": self.node, "outcome": self.outcome, "failed": self.failed, "steps": list(self.steps),
                **({"would_run": list(self.would_run)} if self.would_run else {})}


def exit_code(logs: list[NodeLog]) -> int:
    return EXIT_FAILED if any(log.failed for log in logs) else EXIT_OK


# The commands on a node, one place for what runs and what a dry run prints.
def reset_command(opts: RemediateOptions, gpu: int) -> str:
    return f"{shlex.quote(opts.ccrhost)} reset-gpu --config {shlex.quote(opts.config)} {gpu}"


def dcgm_command(opts: RemediateOptions) -> str:
    return f"{shlex.quote(opts.ccrhost)} dcgm --config {shlex.quote(opts.config)} --level {opts.dcgm_level}"


def check_command(opts: RemediateOptions) -> str:
    return f"{shlex.quote(opts.ccrhost)} check --config {shlex.quote(opts.config)} --format json"


def holders_command(gpu: int) -> str:
    return f"nvidia-smi --query-compute-apps=pid --format=csv,noheader -i {gpu}"


def ssh_line(opts: RemediateOptions, address: str, command: str) -> str:
    """``command`` on the node as Remote runs it (the operator's --ssh, the address, the command)."""
    return shlex.join([*shlex.split(opts.ssh), address, command])


def resume_args(node: str) -> tuple[str, ...]:
    return ("scontrol", "update", f"NodeName={node}", "State=RESUME")


def _verdict(text: str) -> Verdict | None:
    try:
        return Verdict.from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError):
        return None


def remediate_node(node, opts: RemediateOptions, remote, slurm, rebooting: list[str]) -> NodeLog:
    """One drained node: its action, carried out or not, each step logged.
    ``remote(address, command)`` runs on the node, ``slurm(*args)`` is a
    Slurm client command (both return (rc, output)); ``rebooting`` the nodes
    rebooting now, this run's included."""
    from ccrhost.model.drain_reason import measured_drain, parse_drain_action, replace_drain

    log = NodeLog(node.name)
    reason = node.reason or ""
    if not reason.startswith(DRAIN_PREFIX):
        log(f"reason {reason!r} is not ccrhost's: left alone")
        return log
    if replace_drain(reason):
        log("to be replaced: only an operator resumes it")
        return log
    if measured_drain(reason):
        log("drained by a measurement (ib_write_bw or the all-reduce gate): `ccrhost slurm verify --measure` or `--nccl` lifts it")
        return log
    parsed = parse_drain_action(reason)
    if parsed is None:
        log("the reason carries no action (written by an older ccrhost?): left drained")
        return log
    action, gpus = parsed
    if action not in opts.enabled:
        log(f"action {action} is not enabled for automation (--allow {','.join(opts.enabled) or 'nothing'}): "
            "left drained for a person")
        return log
    if action == RESET_GPU:
        if not gpus:
            log("reset_gpu names no GPU: left drained")
            return log
        for i in gpus:
            if opts.dry_run:
                log.would(ssh_line(opts, node.address, reset_command(opts, i)),
                          f"if `{holders_command(i)}` there prints no process")
                continue
            rc, out = remote(node.address, holders_command(i))
            if rc != 0:
                log.fail(f"cannot tell whether a process holds GPU {i} (exit {rc}: {out}): not reset")
                return log
            if out.strip():
                log(f"GPU {i} is held by pid {', '.join(out.split())}: not reset")
                return log
            # nvidia-smi -r -i N through the node's ccrhost, which keeps the reset's time: the check
            # after it judges the GPU on what the driver logged since, not on the XID it repaired
            rc, out = remote(node.address, reset_command(opts, i))
            if rc != 0:
                log.fail(f"reset of GPU {i} (ccrhost reset-gpu: nvidia-smi -r -i {i}) failed (exit {rc}): "
                         f"{out.splitlines()[0] if out else ''}")
                return log
            log(f"reset GPU {i}: {out.splitlines()[0] if out else 'done'}")
    elif action == REBOOT:
        if node.name in rebooting:
            log("a reboot is under way")
            return log
        booted, since = rebooted_since_drain(node.name, slurm)
        if booted:
            log(f"booted at {booted}, after its drain at {since}: the reboot is done")
            if opts.dry_run:
                return _would_check(node, opts, log)
            return check_and_resume(node, opts, remote, slurm, log)
        if len(rebooting) >= opts.max_reboots:
            log(f"not rebooted: {len(rebooting)} node(s) rebooting already (--max-reboots {opts.max_reboots})")
            return log
        if opts.dry_run:
            log.would(shlex.join(("scontrol", "reboot", node.name)), "a later run checks it and resumes it if it passes")
            rebooting.append(node.name)
            log.outcome = "dry run"
            return log
        rc, out = slurm("scontrol", "reboot", node.name)
        if rc != 0:
            log.fail(f"scontrol reboot failed: {out}")
            return log
        rebooting.append(node.name)
        log("rebooting (scontrol reboot); a later run checks it and resumes it if it passes")
        log.outcome = "rebooting"
        return log
    else:
        log(f"action {action} cannot be automated: left drained for a person")
        return log
    if opts.dry_run:
        return _would_check(node, opts, log)
    return check_and_resume(node, opts, remote, slurm, log)


def _would_check(node, opts: RemediateOptions, log: NodeLog) -> NodeLog:
    """A dry run's check and resume: the commands :func:`check_and_resume` would run."""
    if opts.dcgm_level:
        log.would(ssh_line(opts, node.address, dcgm_command(opts)))
    log.would(ssh_line(opts, node.address, check_command(opts)))
    again = reason_stages(node.reason) if opts.accept else ()
    if again:
        # the dry run reads no certificate: both ways out, each with its condition
        log.would(accept_line(opts, [node.name], again), "if the check says OK or WARN and the node keeps an "
                  "acceptance certificate (its stages among these): resumes it only if it is certified again")
    log.would(shlex.join(resume_args(node.name)), "if the check says OK or WARN and the drain reason is unchanged"
              + (", where the node keeps no certificate" if again else ""))
    log.outcome = "dry run"
    return log


def rebooted_since_drain(name: str, slurm) -> tuple[str | None, str | None]:
    """(BootTime, the reason's time) when the node booted after its drain
    reason was set, else (None, the reason's time). Both are slurmctld's
    local ISO times, so they compare as text."""
    rc, out = slurm("scontrol", "show", "node", "-o", name)
    fields = node_fields(out) if rc == 0 else {}
    boot, since = fields.get("BootTime"), fields.get("ReasonTime")
    if boot and since and boot[:1].isdigit() and boot > since:
        return boot, since
    return None, since


def check_and_resume(node, opts: RemediateOptions, remote, slurm, log: NodeLog) -> NodeLog:
    """The node's own check; RESUME only when it passes and the drain is still the one acted on.
    With ``dcgm_level``, DCGM's diag runs first on the node (drained, so idle) and stores its result,
    which the check then judges like every stored active result (where the node's settings judge it)."""
    if opts.dcgm_level:
        rc, out = remote(node.address, dcgm_command(opts))
        log(f"dcgm diag level {opts.dcgm_level} (exit {rc}): {out.splitlines()[-1] if out else 'no output'}")
    rc, out = remote(node.address, check_command(opts))
    verdict = _verdict(out)
    if verdict is None:
        log.fail(f"the check gave no verdict (exit {rc}): {out[-200:]}")
        return log
    log(f"check: {verdict.status}" + (f" ({verdict.summary()})" if verdict.status not in (OK,) else ""))
    if verdict.status not in (OK, WARN):
        log.fail(f"stays drained: action now {verdict.action}")
        return log
    again = accept_stages(verdict, node.reason) if opts.accept else ()
    if again:
        rc, now = slurm("sinfo", "-h", "-n", node.name, "-o", "%T|%E")
        if now.strip().partition("|")[2] != node.reason:
            log(f"not accepted: the reason changed meanwhile to {now.strip().partition('|')[2]!r}")
            return log
        # a node once accepted proves its repair by the stages its failure concerned (model/certificate.py)
        log(f"it holds an acceptance certificate: the stages its failure concerns run before it returns: "
            f"{', '.join(again)}")
        log.again = again
        log.outcome = "to accept"
        return log
    rc, now = slurm("sinfo", "-h", "-n", node.name, "-o", "%T|%E")
    state, _, reason = now.strip().partition("|")
    if "drain" not in state:
        log(f"already back in service ({state}): its health check resumed it")
        log.outcome = "resumed"
        return log
    if reason != node.reason:
        log(f"not resumed: the reason changed meanwhile to {reason!r}")
        return log
    rc, out = slurm(*resume_args(node.name))
    if rc != 0:
        log.fail(f"scontrol update State=RESUME failed: {out}")
        return log
    log("resumed")
    log.outcome = "resumed"
    return log


def accept_stages(verdict: Verdict, reason: str | None) -> tuple[str, ...]:
    """The acceptance stages a repaired node re-runs: those its drain reason's codes concern, where the node
    keeps a certificate (none: it was never accepted, and returns as ever)."""
    from ccrhost.model import certificate as cm
    from ccrhost.model.drain_reason import parse_drain_reason
    from ccrhost.model.reasons import SOURCES

    stored = verdict.readings.certificate
    if stored is None or stored.error or not stored.data:
        return ()
    return tuple(s for s in reason_stages(reason) if s in stored.wanted)


def reason_stages(reason: str | None) -> tuple[str, ...]:
    """The node-local acceptance stages a drain reason's codes concern: a lone repaired node has no partner
    for the mesh, pairs or group runs, which `ccrhost slurm accept --nodes NODE,PEERS --again ...` runs
    with certified peers."""
    from ccrhost.model import certificate as cm
    from ccrhost.model.drain_reason import parse_drain_reason
    from ccrhost.model.reasons import SOURCES

    parsed = parse_drain_reason(reason)
    return tuple(s for s in cm.stages_for(parsed.codes if parsed else (), SOURCES) if s not in cm.FLEET_STAGES)


def accept_line(opts: RemediateOptions, nodes: list[str], again: tuple[str, ...]) -> str:
    from ccrhost.fleet.slurm_client import hostlist

    return shlex.join(["ccrhost", "slurm", "accept", "--nodes", hostlist(nodes), "--again", ",".join(again),
                       "--ccrhost", opts.ccrhost, "--config", opts.config])


def _accept(logs: list[NodeLog], opts: RemediateOptions, accept) -> None:
    """The repaired nodes with a certificate, through ``accept(nodes, again) -> {node: state}`` (one run per
    set of stages): resumed by it when certified, else left drained by it, naming the stage."""
    groups: dict[tuple, list[NodeLog]] = {}
    for log in logs:
        if log.again:
            groups.setdefault(log.again, []).append(log)
    for again, group in groups.items():
        names = [g.node for g in group]
        if opts.dry_run:
            for log in group:
                log.would(accept_line(opts, names, again), "resumes it only if it is certified again")
                log.outcome = "dry run"
            continue
        states = accept(names, again)
        for log in group:
            state = states.get(log.node, "not run")
            if state == "certified":
                log(f"accepted again ({', '.join(again)}): certified, resumed")
                log.outcome = "resumed"
            else:
                log.fail(f"acceptance ({', '.join(again)}): {state}: stays drained")


def _run_accept(opts: RemediateOptions):
    def run(names: list[str], again: tuple[str, ...]) -> dict[str, str]:
        from ccrhost.fleet.accept import AcceptOptions, run_accept
        from ccrhost.fleet.slurm_client import hostlist

        _, out = run_accept(AcceptOptions(nodelist=hostlist(names), ccrhost=opts.ccrhost, config=opts.config,
                                          again=again, report_dir="ccrhost-report"))
        return out.states
    return run


def remediate(nodes: dict, opts: RemediateOptions, remote=None, slurm=None, done=None, accept=None) -> list[NodeLog]:
    """Every drained node of ``nodes`` (``fleet.slurm_client.SlurmNode`` by name), in name order;
    ``done(log)`` as each node finishes (a reboot or a check takes minutes: the operator sees each).
    Repaired nodes that keep an acceptance certificate then run ``ccrhost slurm accept`` on the stages
    their failure concerned (``accept``: that run, for tests) and return only if certified again."""
    remote = remote or Remote(opts.ssh, opts.timeout)

    def default_slurm(*args):
        proc = run_slurm(*args, check=False)
        return proc.returncode, (proc.stdout + proc.stderr).strip()

    slurm = slurm or default_slurm
    rebooting = [n.name for n in nodes.values() if "reboot" in n.state]
    logs = []
    for name in sorted(nodes):
        node = nodes[name]
        if "drain" not in node.state or node.state.startswith("draining"):
            continue  # a draining node still runs a job: nothing may be reset under it
        logs.append(remediate_node(node, opts, remote, slurm, rebooting))
        if done is not None and not logs[-1].again:
            done(logs[-1])
    if any(log.again for log in logs):
        _accept(logs, opts, accept or _run_accept(opts))
        for log in logs:
            if log.again and done is not None:
                done(log)
    return logs
