"""Slurm as the fleet engine.

Two halves. What each node gets so that Slurm runs ``ccrhost check`` itself
(:func:`integration_files`: the check's settings, a prolog, a
HealthCheckProgram wrapper and a slurm.conf fragment, installed by
deploys/slurm.py). And the fleet job, ``ccrhost slurm verify``: one
allocation, a job step that runs ``ccrhost check`` on every node at once,
with ``--measure`` ib_write_bw between node pairs as job steps (the pairing,
retries and culprit isolation of ``ccrhost.measure``), the fleet reports,
and a drain for every FAIL node. With ``--nccl`` the allocation is cut into
batches of at most ``--nccl-max-nodes`` idle nodes (:class:`Batches`), one
held at a time.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace

import click
import yaml

from ccrhost.model.verdict import (
    EXIT_CODES,
    FAIL,
    OK,
    UNKNOWN,
    WARN,
    Verdict,
    apply_fleet_rules,
    evaluate,
    unjudged,
    with_measurement,
    worst,
)
from ccrhost import numbers
from ccrhost.settings import HostSettings, InventoryDataError, validate_host

from ccrhost.model.managed import CHECK_CONFIG, DRAIN_PREFIX
from ccrhost.model.status import Reason


# -- talking to Slurm --------------------------------------------------------

class SlurmError(RuntimeError):
    pass


def run_slurm(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    """A Slurm client command (SLURM_CONF from the environment)."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SlurmError(f"{args[0]} not found: install Slurm's client commands (slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(args)}: no answer within {timeout:g} s") from None
    if check and proc.returncode != 0:
        raise SlurmError(f"{' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip() or f'exit {proc.returncode}'}")
    return proc


@dataclass(frozen=True)
class SlurmNode:
    name: str
    address: str      # NodeAddr: what peers connect to for the bandwidth test
    state: str        # sinfo %T: idle, mixed, allocated, drained, down*, ...
    reason: str | None
    held: str | None = None  # the node comment ccrhost sets where the drain cap held (scontrol show node)

    @property
    def usable(self) -> bool:
        """Whether a new job can get it (a drained or down node never starts one; on a node
        the drain cap held, ccrhost's prolog keeps every job off)."""
        bad = ("drain", "down", "fail", "maint", "reboot", "unknown", "inval", "power", "future")
        return not self.state.endswith("*") and not any(word in self.state for word in bad) and not self.held


def parse_sinfo(text: str) -> dict[str, SlurmNode]:
    """``sinfo -h -N -o '%N|%o|%T|%E'``: a node once per partition; reason last (it may hold '|')."""
    nodes = {}
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) != 4 or not parts[0]:
            continue
        name, addr, state, reason = (p.strip() for p in parts)
        nodes.setdefault(name, SlurmNode(name, addr, state, None if reason in ("", "none", "(null)") else reason))
    return nodes


def list_nodes(partition: str | None = None, nodelist: str | None = None) -> dict[str, SlurmNode]:
    args = ["sinfo", "-h", "-N", "-o", "%N|%o|%T|%E"]
    if partition:
        args += ["-p", partition]
    if nodelist:
        args += ["-n", nodelist]
    nodes = parse_sinfo(run_slurm(*args).stdout)
    held = held_nodes(run_slurm("scontrol", "show", "node", "-o").stdout)
    return {n: replace(v, held=held[n]) if n in held else v for n, v in nodes.items()}


def node_fields(line: str) -> dict[str, str]:
    """One node's ``scontrol show node -o`` line: its KEY=VALUE fields
    (State, BootTime, ...), with Reason whole (it holds spaces) and, where
    Slurm stamped it, ``ReasonTime``: the TIME of the ``[USER@TIME]`` it ends with."""
    from ccrhost.model.drain_reason import REASON_FIELD

    fields = dict(re.findall(r"(\w+)=(\S*)", line))
    reason = REASON_FIELD.search(line)
    if reason:
        fields["Reason"] = reason.group(1)
        if reason.group(2):
            fields["ReasonTime"] = reason.group(2)
    return fields


def held_nodes(text: str) -> dict[str, str]:
    """``scontrol show node -o``: {node: its comment} where ccrhost's drain cap held."""
    from ccrhost.model.drain_reason import COMMENT_FIELD as _COMMENT, HELD_PREFIX

    held = {}
    for line in text.splitlines():
        name, comment = re.match(r"NodeName=(\S+)", line), _COMMENT.search(line)
        if name and comment and comment.group(1).strip().startswith(HELD_PREFIX):
            held[name.group(1)] = comment.group(1).strip()
    return held


def expand_hostlist(expression: str) -> list[str]:
    return run_slurm("scontrol", "show", "hostnames", expression).stdout.split()


# -- the check step ----------------------------------------------------------

_LABEL = re.compile(r"^\s*([0-9]{1,9}): ?(.*)$")  # ASCII digits: int() takes any Unicode one


def check_script(ccrhost: str, config: str, refresh_nic: bool = False) -> str:
    """What each task of the check step runs: the node's name, its check
    settings (so the controller judges with the node's own) and its check
    (``refresh_nic``: a sweep that queries the NICs' tools and stores the readings)."""
    cfg = shlex.quote(config)
    refresh = " --refresh-nic" if refresh_nic else ""
    # base64 in 76-character lines: srun cuts a long output line into several
    return (f'echo "@@node $SLURMD_NODENAME"; '
            f'if [ -r {cfg} ]; then echo "@@config"; base64 < {cfg}; else echo "@@config -"; fi; '
            f'echo "@@check"; {shlex.quote(ccrhost)} check --config {cfg} --format json{refresh} 2>&1; echo "@@rc $?"')


@dataclass
class CheckOutput:
    node: str
    config: str | None   # the node's check.yaml, None when it has none
    text: str            # what ``ccrhost check --format json`` printed
    rc: int | None
    config_error: str | None = None  # the config's base64 did not decode


def parse_check_task(lines: list[str]) -> CheckOutput | None:
    """One task's output of :func:`check_script`; a config that does not
    decode is kept as a note for the judgement (the node's own trouble)."""
    node = rc = None
    config: list[str] | None = None
    body, part = [], None
    for line in lines:
        if line.startswith("@@node "):
            node = line[7:].strip()
        elif line.startswith("@@config"):
            part, config = ("config", []) if line.strip() == "@@config" else (None, None)
        elif line == "@@check":
            part = "check"
        elif line.startswith("@@rc ") and part == "check":
            rc, part = numbers.integer(line[5:], 0, 255), None
        elif part == "config":
            config.append(line.strip())
        elif part == "check":
            body.append(line)
    if not node:
        return None
    text = error = None
    if config is not None:
        try:
            text = base64.b64decode("".join(config), validate=True).decode(errors="replace")
        except ValueError as exc:  # binascii.Error
            error = f"its base64 does not decode ({exc})"
    return CheckOutput(node, text, "\n".join(body), rc, error)


def _unknown(code: str, message: str) -> Verdict:
    return unjudged(UNKNOWN, code, message)


def judge(out: CheckOutput, measured=None, allreduce=None, dcgm=None) -> tuple[Verdict, HostSettings | None]:
    """The node's verdict as its own ``ccrhost check`` made it: taken, never
    judged again from part of its readings. A check that printed no verdict
    is UNKNOWN with what it said. With a ``measured`` bandwidth the node's
    whole readings (the document carries them all) and the measurement go
    through the same node evaluation, with the node's own settings; a node
    whose check judged no readings (a probe that hung) stays as it said."""
    start, end = out.text.find("{"), out.text.rfind("}")
    try:
        doc = json.loads(out.text[start:end + 1]) if start >= 0 else None
        verdict = Verdict.from_dict(doc) if isinstance(doc, dict) else None
    except (ValueError, KeyError, TypeError):  # pydantic's ValidationError is a ValueError
        verdict = None
    if verdict is None:
        said = " ".join(out.text.split())[-300:] or "no output"
        return _unknown("check_failed", f"ccrhost check on {out.node} exited {out.rc}: {said}"), None
    try:
        if out.config_error:
            raise ValueError(out.config_error)
        settings = validate_host(out.node, yaml.safe_load(out.config or "") or {})
    except (InventoryDataError, yaml.YAMLError, ValueError) as exc:
        return _unknown("check_config", f"{out.node}: {CHECK_CONFIG}: {exc}"), None
    if (measured is None and allreduce is None and dcgm is None) or not verdict.evaluated:
        return verdict, settings
    readings = with_measurement(verdict.readings, measured) if measured is not None else verdict.readings
    if allreduce is not None:  # the all-reduce results of this run (ccrhost.fleet.slurm_nccl)
        readings = replace(readings, allreduce=allreduce)
    if dcgm is not None:  # the DCGM diag result of this run (ccrhost.fleet.slurm_dcgm)
        readings = replace(readings, dcgm=dcgm)
    # the bundle the node's check kept stays named (the report and the drain reason name it)
    return replace(evaluate(readings, settings.expectation(), settings.policy()), evidence=verdict.evidence), settings


def _labelled(lines, tasks: dict[int, list[str]]) -> None:
    for line in lines:
        match = _LABEL.match(line.rstrip("\n"))
        if match:
            tasks.setdefault(int(match.group(1)), []).append(match.group(2))


def srun_args(job: str, nodes: list[str], name: str) -> list[str]:
    """One task per node, output labelled by task; ``--overlap`` shares the
    allocation with the job's own batch step and with other steps."""
    return ["srun", f"--jobid={job}", "--overlap", "-J", name, "-N", str(len(nodes)), "-n", str(len(nodes)),
            "--ntasks-per-node=1", "-w", ",".join(nodes), "-l", "--kill-on-bad-exit=0"]


# -- the measurement, as job steps ------------------------------------------

MAX_SCRIPT = 96 * 1024  # one step's command must stay under Linux's 128 KiB per argument


def _case_steps(branches: dict[str, str]) -> list[tuple[list[str], str]]:
    """Split per-node scripts into steps: (nodes, one script that picks its branch by node name)."""
    steps, nodes, parts, size = [], [], [], 0
    for node, script in branches.items():
        part = f"{shlex.quote(node)}) {script} ;;\n"
        if nodes and size + len(part) > MAX_SCRIPT:
            steps.append((nodes, parts))
            nodes, parts, size = [], [], 0
        nodes.append(node)
        parts.append(part)
        size += len(part)
    if nodes:
        steps.append((nodes, parts))
    return [(n, 'echo "@@node $SLURMD_NODENAME"\ncase "$SLURMD_NODENAME" in\n' + "".join(p) + "esac\n")
            for n, p in steps]


def _by_node(tasks: dict[int, list[str]]) -> dict[str, list[str]]:
    out = {}
    for lines in tasks.values():
        if lines and lines[0].startswith("@@node "):
            out[lines[0][7:].strip()] = lines[1:]
    return out


def _run_steps(job: str, branches: dict[str, str], name: str, timeout: float):
    """Start the steps for ``branches``; return a function that waits and gives {node: lines}."""
    procs = []
    for nodes, script in _case_steps(branches):
        procs.append(subprocess.Popen([*srun_args(job, nodes, name), "/bin/sh", "-c", script],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))

    def collect() -> tuple[dict[str, list[str]], str]:
        tasks: dict[int, list[str]] = {}
        results, errors = {}, []
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                errors.append(f"step {name} ran past {timeout:g} s")
            tasks.clear()
            _labelled(out.splitlines(), tasks)
            results.update(_by_node(tasks))
            errors += [x for x in err.splitlines() if x.strip()][-2:]
        return results, "; ".join(errors)

    return collect


def slurm_round(job: str, pairs: list[tuple[str, str]], plan) -> list:
    """One measurement round as two job steps: every server of the round,
    then (a second later) every client; see ``ccrhost.measure.run_round``."""
    from ccrhost.fleet.measure import judge_pair
    from ccrhost.probes.perftest import (
        MISSING,
        clients_script,
        parse_clients_output,
        parse_servers_output,
        server_runs,
    )

    widths = [min(len(plan.devices[s]), len(plan.devices[c])) for s, c in pairs]
    servers = {s: MISSING + " ".join(f"{run} </dev/null >/dev/null 2>&1 &" for run in
                                     server_runs(plan.devices[s][:n], plan.port, plan.seconds, plan.timeout))
               + " wait"
               for (s, c), n in zip(pairs, widths)}
    clients = {c: clients_script(plan.devices[c][:n], plan.address[s], plan.port, plan.seconds, plan.timeout)
               for (s, c), n in zip(pairs, widths)}
    longest = max(widths) * (plan.timeout + 1) + 15
    wait_servers = _run_steps(job, servers, "ccrhost-bw-servers", longest + 5)
    time.sleep(1)  # let the servers listen
    client_out, client_err = _run_steps(job, clients, "ccrhost-bw-clients", longest)()
    server_out, server_err = wait_servers()
    results = []
    for (s, c), n in zip(pairs, widths):
        server = (parse_servers_output(server_out[s]) if s in server_out
                  else {"error": f"no result from its job step ({server_err or 'no output'})"})
        client = (parse_clients_output(client_out[c]) if c in client_out
                  else {"@all": {"gbps": None, "error": f"no result from its job step ({client_err or 'no output'})"}})
        results.append(judge_pair(s, c, n, server, client, plan))
    return results


# -- the fleet job -------------------------------------------------------------

class VerifyError(click.ClickException):
    exit_code = 3  # the fleet could not be checked: UNKNOWN, never FAIL

    def show(self, file=None):
        click.echo(f"ccrhost slurm verify: {self.message}", err=True)


class RolloutError(VerifyError):
    def show(self, file=None):
        click.echo(f"ccrhost slurm rollout: {self.message}", err=True)


@dataclass
class VerifyOptions:
    partition: str | None = None
    nodelist: str | None = None
    measure: bool = False
    ccrhost: str = "/usr/local/bin/ccrhost"
    config: str = CHECK_CONFIG
    report_dir: str = "ccrhost-report"
    drain: bool = True
    fleet_tolerance: float | None = None
    measure_seconds: int = 10
    measure_retries: int = 2
    measure_timeout: int = 60
    measure_port: int = 18515
    measure_ports: int | None = None   # at most this many ports per node
    wait: float = 600                  # for the allocation
    check_timeout: float = 300
    sbatch_options: tuple[str, ...] = ()
    nccl: object = None                # a ccrhost.fleet.slurm_nccl.NcclOptions: run the all-reduce gate
    refresh_nic: bool = False  # --refresh-nic: the checks query the NICs' tools and store their readings
    dcgm: object = None                # a ccrhost.fleet.slurm_dcgm.DcgmOptions: run DCGM's diagnostics
    idle_only: bool = False            # ccrhost slurm sweep: only idle nodes, in capped batches, even without a gate
    max_nodes: int | None = None       # ccrhost slurm sweep: the cap on nodes held at once (else the gates' own)
    evidence_max_bytes: int = 32 << 20  # --evidence-max-mb: the cap on each evidence bundle fetched; 0: none fetched


class Progress:
    """One line per event on stderr, each with the seconds since the start."""

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        self.stream.write(f"[{time.monotonic() - self.start:6.1f}s] {message}\n")
        self.stream.flush()


class _Drained(Exception):
    """Nodes of the job drained or went down while it waited: most often its
    own prolog (``ccrhost check``) failed there, and Slurm would keep the job
    pending until ``--wait`` ran out."""

    def __init__(self, nodes: dict[str, SlurmNode]):
        super().__init__(", ".join(nodes))
        self.nodes = nodes


def drained_verdict(node: SlurmNode) -> Verdict:
    """A node that left the job before its check step ran, by its drain
    reason: ccrhost's own prolog or health check said FAIL or UNKNOWN there
    and named the codes, which become the verdict's reasons (each at its
    registry level), so the node reads as its check read it. A ccrhost
    reason without codes (an older ccrhost) is ``drained_fail`` or
    ``drained_unknown``; any other reason is not a verdict of ours."""
    from ccrhost.model.reasons import REGISTRY
    from ccrhost.model.drain_reason import parse_drain_reason

    if node.held and not node.reason:
        return held_verdict(node)
    reason = node.reason or ""
    said = f"drained by its own check before the check step: {reason}"
    parsed = parse_drain_reason(reason)
    if parsed is not None:
        docs = [REGISTRY[code] for code in parsed.codes]
        reasons = [Reason(doc.level, doc.code, said if i == 0 else "named in the same drain reason")
                   for i, doc in enumerate(docs)]
        if parsed.more:
            more = f"and {parsed.more} more code(s) the drain reason had no room for"
            reasons.append(Reason(FAIL, "drained_fail", more) if parsed.status == FAIL
                           else Reason(UNKNOWN, "drained_unknown", more))
        return replace(_unknown("drained_unknown", said), status=parsed.status, reasons=reasons)
    if reason.startswith(f"{DRAIN_PREFIX} UNKNOWN:"):
        return _unknown("drained_unknown", said)
    if reason.startswith(DRAIN_PREFIX):
        return unjudged(FAIL, "drained_fail", said)
    return _unknown("not_checked", f"not checked: {node.state}" + (f" ({node.reason})" if node.reason else ""))


def held_verdict(node: SlurmNode) -> Verdict:
    """A node whose own check failed past the drain cap: not drained, kept
    from jobs by its prolog; its comment names the codes and the cap."""
    from ccrhost.model.reasons import REGISTRY

    text = node.held or ""
    codes = text[len("ccrhost: held: "):].split(":", 1)[0].split(",")
    docs = [REGISTRY[c] for c in codes if c in REGISTRY]
    reasons = [Reason(doc.level, doc.code, f"its own check failed here ({text})") for doc in docs]
    reasons.append(Reason(WARN, "drain_capped", f"the drain cap held: kept from jobs, not drained ({text})"))
    return replace(_unknown("drained_unknown", text), status=worst(r.level for r in reasons), reasons=reasons)


def _submit(nodes: list[str], opts: VerifyOptions, say) -> str:
    args = ["sbatch", "--parsable", "-J", "ccrhost-verify", "-N", str(len(nodes)), "-w", ",".join(nodes),
            "--exclusive", "-o", "/dev/null", "-e", "/dev/null", *opts.sbatch_options]
    if opts.partition:
        args += ["-p", opts.partition]
    job = run_slurm(*args, "--wrap", "exec sleep 86400").stdout.strip().split(";")[0]
    say(f"submitted job {job} for {len(nodes)} nodes")
    deadline, last, next_look = time.monotonic() + opts.wait, None, time.monotonic()
    while True:
        out = run_slurm("squeue", "-h", "-j", job, "-o", "%T|%r", check=False).stdout.strip()
        if out != last:
            say(f"job {job}: {out.replace('|', ', reason ') or 'gone'}")
            last = out
        if out == "RUNNING|None":  # and every node's prolog has passed (PrologFlags=Alloc)
            return job
        if not out or out.split("|")[0] in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "COMPLETED"):
            raise VerifyError(f"job {job} ended before it started: {out or 'no longer in the queue'}")
        if out.startswith("PENDING") and time.monotonic() >= next_look:
            next_look = time.monotonic() + 1.0
            lost = {n: v for n, v in list_nodes(nodelist=",".join(nodes)).items() if n in nodes and not v.usable}
            if lost:
                run_slurm("scancel", job, check=False)
                say(f"job {job}: {', '.join(f'{n} {v.state} ({v.reason})' for n, v in sorted(lost.items()))}; "
                    "cancelled, the other nodes go on")
                raise _Drained(lost)
        if time.monotonic() > deadline:
            run_slurm("scancel", job, check=False)
            raise VerifyError(f"job {job} did not start within {opts.wait:g} s ({out}); cancelled")
        time.sleep(0.3)


_ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "STOPPED")


def _release(job: str, nodes: list[str], say, timeout: float = 120) -> None:
    """Cancel the job and wait until Slurm has given its nodes back (no
    longer the job's, none completing), so the next batch never overlaps it."""
    run_slurm("scancel", job, check=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = run_slurm("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()
        if state not in _ACTIVE:
            now = list_nodes(nodelist=",".join(nodes)) if nodes else {}
            if not any("comp" in v.state for v in now.values()):
                return
        time.sleep(0.2)
    say(f"job {job}: still not released after {timeout:g} s")


class Batches:
    """Allocations of at most ``cap`` nodes, one at a time: each batch is
    its own exclusive job on the batch's nodes that are idle when it starts,
    released before the next (``--nccl-max-nodes``: the rest of the
    partition stays free for jobs). A node running another job is never
    allocated; inside an existing allocation (``job``) nothing new is held."""

    def __init__(self, opts: VerifyOptions, say, cap: int, job: str | None = None):
        self.opts, self.say, self.cap, self.job = opts, say, cap, job
        self.lost: dict[str, SlurmNode] = {}   # drained or down while their job waited
        self.busy: dict[str, SlurmNode] = {}   # running another job when their batch came

    def chunks(self, names: list[str]) -> list[list[str]]:
        return [names[i:i + self.cap] for i in range(0, len(names), self.cap)]

    @contextmanager
    def hold(self, nodes: list[str]):
        """Yields ``(job, taken)``: the job and the nodes it holds (maybe fewer than asked, maybe none)."""
        if self.job:
            yield self.job, list(nodes)
            return
        now = list_nodes(nodelist=",".join(nodes)) if nodes else {}
        taken = [n for n in nodes if n in now and now[n].state == "idle"]
        for n in nodes:
            if n not in taken and n in now:
                self.busy[n] = now[n]
        job = None
        try:
            while taken and not job:
                try:
                    job = _submit(taken, self.opts, self.say)
                except _Drained as lost:
                    self.lost.update(lost.nodes)
                    taken = [n for n in taken if n not in lost.nodes]
            yield job, taken
        finally:
            if job:
                _release(job, taken, self.say)


def busy_verdict(node: SlurmNode) -> Verdict:
    return _unknown("not_checked", f"not checked: {node.state}: running another job when its batch came "
                                   "(--nccl-max-nodes allocates only idle nodes)")


def _check_step(job: str, nodes: list[str], opts: VerifyOptions, say) -> dict[str, CheckOutput]:
    proc = subprocess.Popen([*srun_args(job, nodes, "ccrhost-check"), "/bin/sh", "-c",
                             check_script(opts.ccrhost, opts.config, opts.refresh_nic)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    killer = threading.Timer(opts.check_timeout, proc.kill)
    killer.start()
    tasks: dict[int, list[str]] = {}
    results: dict[str, CheckOutput] = {}
    try:
        for line in proc.stdout:
            match = _LABEL.match(line.rstrip("\n"))
            if not match:
                continue
            task = int(match.group(1))
            tasks.setdefault(task, []).append(match.group(2))
            if match.group(2).startswith("@@rc "):
                out = parse_check_task(tasks[task])
                if out is not None:
                    results[out.node] = out
                    status = {0: OK, 1: WARN, 2: FAIL}.get(out.rc, UNKNOWN)
                    say(f"checked {len(results)}/{len(nodes)}: {out.node} {status}")
        proc.wait()
    finally:
        killer.cancel()
    reader.join(timeout=5)
    for node in nodes:
        if node not in results:
            said = " ".join(x.strip() for x in err[-3:]) or f"srun exited {proc.returncode}"
            results[node] = CheckOutput(node, None, f"no result from the check step: {said}", None)
    return results


def _fetch_evidence(job: str, outputs: dict[str, CheckOutput], opts: VerifyOptions, say) -> dict:
    """The evidence bundles the checks named, copied into the report directory (ccrhost.fleet.slurm_evidence)."""
    from ccrhost.fleet import slurm_evidence

    named = {n: p for n, out in outputs.items() if (p := slurm_evidence.evidence_of(out.text))}
    if not named or not opts.evidence_max_bytes:
        return {}
    return slurm_evidence.collect(job, named, opts.report_dir, say, opts.check_timeout, opts.evidence_max_bytes)


def batch_pairs(batches: Batches, pairs: list[tuple[str, str]]):
    """Each group of pairs that fits the cap, with its allocation held while the caller uses it."""
    per = max(1, batches.cap // 2)
    for i in range(0, len(pairs), per):
        group = pairs[i:i + per]
        with batches.hold(list(dict.fromkeys(n for p in group for n in p))) as (held, taken):
            yield group, (held, taken)


def busy_note(batches: Batches, *nodes: str) -> str:
    why = [f"{n} {(batches.busy.get(n) or batches.lost.get(n)).state}" for n in nodes
           if n in batches.busy or n in batches.lost]
    return ", ".join(why) or "not allocated"


def _measure(job: str, verdicts: dict[str, Verdict], settings: dict, addresses: dict, opts: VerifyOptions, say,
             batches: Batches | None = None):
    from ccrhost.fleet.measure import MeasurePlan, measure_fleet

    names = [n for n in verdicts if n in settings]
    devices, expected = {}, {}
    for name in names:
        ports = [p for p in verdicts[name].readings.ports if p.active]
        devices[name] = list(dict.fromkeys(p.device for p in ports))[:opts.measure_ports]
        expected[name] = {p.device: p.link_gbps for p in ports}
    first = settings[names[0]] if names else HostSettings()
    plan = MeasurePlan(devices=devices, expected=expected, address={n: addresses[n] for n in names},
                       seconds=opts.measure_seconds, timeout=opts.measure_timeout, retries=opts.measure_retries,
                       min_fraction=first.verify_measure_min_fraction, port=opts.measure_port)
    rounds = [0]

    def runner(pairs):
        rounds[0] += 1
        say(f"measure round {rounds[0]}: {len(pairs)} pair(s): "
            + ", ".join(f"{s}<->{c}" for s, c in pairs[:4]) + (" ..." if len(pairs) > 4 else ""))
        if batches is None:
            return slurm_round(job, pairs, plan)
        from ccrhost.fleet.measure import PairResult

        out = []
        for group, (held, taken) in batch_pairs(batches, pairs):
            ok = [p for p in group if p[0] in taken and p[1] in taken]
            out += slurm_round(held, ok, plan) if ok else []
            out += [PairResult(s, c, [], [f"{s}<->{c}: not run: {busy_note(batches, s, c)}"], False)
                    for s, c in group if (s, c) not in ok]
        return out

    return measure_fleet(None, dict.fromkeys(names), plan, runner=runner)


def _store_allreduce(job: str | None, readings: dict, settings: dict, say, batches: Batches | None = None) -> None:
    """Each node's results in its state file, where the prolog and the
    health check read them with their age: only on nodes whose settings
    turn the gate on (``verify_allreduce``), each at its own path."""
    from ccrhost.model.active import ActiveResult
    from ccrhost.node.active import store_script

    branches = {name: store_script(settings[name].verify_allreduce_state,
                                   [ActiveResult.from_dict(d) for d in reading.results.values()])
                for name, reading in readings.items() if name in settings and settings[name].verify_allreduce}
    if not branches:
        return
    stored, errors = {}, []
    for chunk in ([list(branches)] if batches is None else batches.chunks(list(branches))):
        with (nullcontext((job, chunk)) if batches is None else batches.hold(chunk)) as (held, taken):
            if taken:
                out, err = _run_steps(held, {n: branches[n] for n in taken}, "ccrhost-nccl-store", 60)()
                stored.update(out)
                errors += [err] if err else []
    say(f"all-reduce results stored on {len(stored)} of {len(branches)} node(s)"
        + (f" ({'; '.join(errors)})" if errors else ""))


def run_verify(opts: VerifyOptions, stream=None) -> tuple[int, dict[str, Verdict], dict]:
    """The fleet job. Returns (exit code, verdict per node, report paths)."""
    from ccrhost.fleet.report import text_table, write_reports
    from ccrhost.node import drain as node_drain

    say = Progress(stream)
    inside = os.environ.get("SLURM_JOB_ID")
    nodes = list_nodes(opts.partition, opts.nodelist)
    if inside:
        mine = set(expand_hostlist(os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST", "")))
        if not opts.nodelist:
            nodes = {n: v for n, v in nodes.items() if n in mine}
        strangers = sorted(set(nodes) - mine)
        if strangers:
            raise VerifyError(f"nodes {','.join(strangers)} are not in the allocation of job {inside}")
        usable = list(nodes)
    else:
        usable = [n for n, v in nodes.items() if v.usable]
    if not nodes:
        raise VerifyError(f"no nodes{f' in partition {opts.partition}' if opts.partition else ''}"
                          f"{f' matching {opts.nodelist}' if opts.nodelist else ''}")
    capped = (opts.nccl is not None or opts.dcgm is not None or opts.idle_only) and not inside
    if capped:  # only idle nodes, in batches of at most the cap
        usable = [n for n in usable if nodes[n].state == "idle"]
    batch_cap = opts.max_nodes or min((o.max_nodes for o in (opts.nccl, opts.dcgm) if o is not None), default=64)
    verdicts: dict[str, Verdict] = {n: drained_verdict(v) if not v.usable or inside else busy_verdict(v)
                                    for n, v in nodes.items() if n not in usable}
    say(f"{len(nodes)} nodes, {len(usable)} can run the check"
        + (f"; not checked: {', '.join(sorted(verdicts))}" if verdicts else ""))
    job = inside
    batches = None
    evidence: dict = {}  # node -> slurm_evidence.Fetched: the bundles its check named
    try:
        if inside:
            say(f"running in the existing allocation of job {inside}")
        if capped:
            batches = Batches(opts, say, batch_cap)
            say(f"at most {batches.cap} nodes held at once: each batch its own job, released before the next")
        while usable and not job and not capped:
            try:
                job = _submit(usable, opts, say)
            except _Drained as lost:  # never wait on them: report each with its reason, go on with the rest
                for name, node in lost.nodes.items():
                    verdicts[name] = drained_verdict(node)
                usable = [n for n in usable if n not in lost.nodes]
        if usable:
            if capped:
                outputs = {}
                for chunk in batches.chunks(usable):
                    with batches.hold(chunk) as (held, taken):
                        if taken:
                            got = _check_step(held, taken, opts, say)
                            outputs.update(got)
                            evidence.update(_fetch_evidence(held, got, opts, say))  # while the batch is held
                usable = [n for n in usable if n in outputs]
            else:
                outputs = _check_step(job, usable, opts, say)
                evidence.update(_fetch_evidence(job, outputs, opts, say))
            settings = {}
            for name in usable:
                verdicts[name], node_settings = judge(outputs[name])
                if node_settings is not None:
                    settings[name] = node_settings
            measured, allreduce = {}, {}
            if opts.measure:
                measured = _measure(job, {n: verdicts[n] for n in usable}, settings,
                                    {n: nodes[n].address for n in usable}, opts, say, batches)
                for name, m in measured.items():
                    verdicts[name] = judge(outputs[name], m)[0]
            if opts.nccl is not None:
                from ccrhost.fleet.slurm_nccl import node_infos, run_modes

                infos = node_infos({n: verdicts[n] for n in usable if n in settings},
                                   {n: nodes[n].address for n in usable})
                readings = run_modes(job, infos, opts.nccl, say, batches=batches)
                for name, reading in readings.items():
                    verdicts[name] = judge(outputs[name], measured.get(name), reading)[0]
                _store_allreduce(job, readings, settings, say, batches)
                allreduce = readings
            if opts.dcgm is not None:
                from ccrhost.fleet.slurm_dcgm import run_diag

                # nodes whose own check judged readings (the same nodes the all-reduce gate runs on)
                judged = [n for n in usable if n in settings and verdicts[n].evaluated]
                diag = run_diag(job, judged, opts.dcgm, opts.ccrhost, opts.config, say, batches)
                for name, reading in diag.items():
                    verdicts[name] = judge(outputs[name], measured.get(name), allreduce.get(name), reading)[0]
            if batches is not None:
                for name, node in batches.lost.items():
                    if name not in outputs:
                        verdicts[name] = drained_verdict(node)
                for name, node in batches.busy.items():
                    if name not in outputs:
                        verdicts[name] = busy_verdict(node)
            apply_fleet_rules(verdicts, opts.fleet_tolerance)
            if opts.drain:
                # before the allocation ends, so no job lands on a node about to be drained
                # (capped: after the last batch; a job that landed meanwhile runs to its end)
                for name in usable:
                    v, reason = verdicts[name], nodes[name].reason
                    ours = reason is not None and reason.startswith(DRAIN_PREFIX)
                    if v.status == FAIL or (ours and v.status in (OK, WARN)):
                        cap = settings[name].drain_cap() if name in settings else None
                        if cap is not None:
                            cap = replace(cap, textfile=None)  # the node's own file, not the controller's
                        note = node_drain.drain(v, node=name, scontrol="scontrol",
                                                measured=opts.measure or opts.nccl is not None,
                                                cap=cap)
                        say(note)
                        if note.held:
                            v.reasons.append(Reason(WARN, "drain_capped",
                                                    f"the drain cap held: not drained ({note.held.text()})"))
    finally:
        if job and not inside:
            run_slurm("scancel", job, check=False)
    paths = write_reports(verdicts, opts.report_dir,
                          meta={"engine": "slurm", "job": job, "partition": opts.partition,
                                "addresses": {n: v.address for n, v in nodes.items()},
                                **({"evidence": {n: f.to_dict() for n, f in sorted(evidence.items())}}
                                   if evidence else {})},
                          addresses={n: v.address for n, v in nodes.items()})
    stream = stream if stream is not None else sys.stderr
    stream.write("\n" + text_table(verdicts))
    stream.write(f"Reports: {', '.join(str(p) for p in paths.values())}\n")
    return EXIT_CODES[worst(v.status for v in verdicts.values())], verdicts, paths


# -- the command -------------------------------------------------------------

@click.group()
def slurm():
    """Slurm as the fleet engine: check, measure and drain nodes through slurmctld."""


@slurm.command()
@click.option("--partition", "-p", help="Check this partition's nodes.")
@click.option("--nodes", "-w", "nodelist", help="Slurm hostlist of the nodes to check, e.g. gpu[001-064].")
@click.option("--measure", is_flag=True, help="Also measure bandwidth with ib_write_bw between node pairs.")
@click.option("--ccrhost", "ccrhost_cmd", default="/usr/local/bin/ccrhost", show_default=True,
              help="The ccrhost command on the nodes.")
@click.option("--config", default=CHECK_CONFIG, show_default=True, help="The check settings on the nodes.")
@click.option("--report-dir", default="ccrhost-report", show_default=True,
              help="Where the reports go (JSON, JUnit, text, HTML).")
@click.option("--drain/--no-drain", default=True, show_default=True,
              help="Drain FAIL nodes (reason 'ccrhost: ...'); an operator's reason is never touched.")
@click.option("--fleet-tolerance", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Also FAIL nodes whose CCR is this share below the fleet median.")
@click.option("--measure-seconds", type=int, default=10, show_default=True)
@click.option("--measure-retries", type=int, default=2, show_default=True)
@click.option("--measure-timeout", type=int, default=60, show_default=True)
@click.option("--measure-port", type=int, default=18515, show_default=True)
@click.option("--measure-ports", type=click.IntRange(1, 64), help="Measure at most this many ports per node.")
@click.option("--wait", "wait_s", type=click.FloatRange(1), default=600, show_default=True,
              help="Seconds to wait for the allocation.")
@click.option("--check-timeout", type=click.FloatRange(1), default=300, show_default=True)
@click.option("--sbatch-option", "sbatch_options", multiple=True, metavar="OPT",
              help="Passed to sbatch, e.g. --sbatch-option=--account=ops (repeatable).")
@click.option("--refresh-nic", is_flag=True, help="A sweep: each node's check queries its NICs' firmware settings "
              "and transceivers (mlxconfig, mlxlink; seconds per NIC, where verify_nic_firmware or verify_nic_optics "
              "is on) and stores them for the prolog, as the health check does.")
@click.option("--nccl", is_flag=True, help="Also run the NCCL all-reduce gate (nccl-tests all_reduce_perf): "
              "single-node NVLink and NIC-loopback modes on every node, and node pairs on ring (docs/allreduce.md).")
@click.option("--nccl-modes", default="nvlink,loopback,pair", show_default=True, help="Comma-separated modes.")
@click.option("--nccl-binary", help="all_reduce_perf on the nodes [default: verify_allreduce_binary].")
@click.option("--nccl-max-bytes", help="The size judged [default: verify_allreduce_max_bytes].")
@click.option("--nccl-iters", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--nccl-retries", type=click.IntRange(0, 10), help="[default: verify_allreduce_retries]")
@click.option("--nccl-timeout", type=click.IntRange(10, 7200), help="[default: verify_allreduce_timeout]")
@click.option("--nccl-max-nodes", type=click.IntRange(2), default=64, show_default=True,
              help="With --nccl, at most this many nodes of the partition held at once: each batch its own "
              "job on idle nodes, released before the next (inside an allocation: steps on at most this many).")
@click.option("--nccl-port", type=click.IntRange(1024, 60000), default=29500, show_default=True,
              help="NCCL_COMM_ID port of the first pair; each pair takes the next four.")
@click.option("--nccl-srun-option", "nccl_srun_options", multiple=True, metavar="OPT",
              help="Passed to each all-reduce srun step, e.g. --nccl-srun-option=--mpi=pmix (repeatable).")
@click.option("--dcgm", is_flag=True, help="Also run DCGM's diagnostics (dcgmi diag) on every idle node, by the "
              "node's own `ccrhost dcgm`: host engine first, the level under its deadline, the result stored on the "
              "node (docs/dcgm.md).")
@click.option("--dcgm-level", type=click.IntRange(1, 4), default=2, show_default=True)
@click.option("--dcgm-max-nodes", type=click.IntRange(1), default=64, show_default=True,
              help="With --dcgm, at most this many nodes held at once (each batch its own exclusive job).")
@click.option("--dcgm-timeout", type=click.IntRange(10, 6 * 3600),
              help="Seconds the diag step may take [default: the level's deadline + 70].")
@click.option("--evidence-max-mb", type=click.IntRange(0, 4096), default=32, show_default=True,
              help="Copy each FAIL node's evidence bundle (verify_evidence_dir) into <report-dir>/evidence/<node>/ "
              "when it is at most this size; a larger one stays on the node, named in the report (0: copy none).")
def verify(partition, nodelist, measure, ccrhost_cmd, config, report_dir, drain, fleet_tolerance, measure_seconds,
           measure_retries, measure_timeout, measure_port, measure_ports, wait_s, check_timeout, sbatch_options,
           nccl, nccl_modes, nccl_binary, nccl_max_bytes, nccl_iters, nccl_retries, nccl_timeout, nccl_max_nodes,
           nccl_port, nccl_srun_options, refresh_nic, dcgm, dcgm_level, dcgm_max_nodes, dcgm_timeout,
           evidence_max_mb):
    """Check every node in one Slurm job; drain the ones that FAIL.

    Runs in the current allocation when there is one (SLURM_JOB_ID), else
    submits a job for the usable nodes and cancels it at the end. Exit code:
    the worst verdict (0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN).
    """
    try:  # the measurement keys validate as in inventory data
        validate_host("ccrhost slurm verify", {
            "verify_measure_seconds": measure_seconds, "verify_measure_retries": measure_retries,
            "verify_measure_timeout": measure_timeout, "verify_measure_port": measure_port,
            "verify_report_dir": report_dir})
    except InventoryDataError as exc:
        raise click.UsageError("; ".join(str(e) for e in exc.errors)) from None
    opts = VerifyOptions(partition, nodelist, measure, ccrhost_cmd, config, report_dir, drain, fleet_tolerance,
                         measure_seconds, measure_retries, measure_timeout, measure_port, measure_ports, wait_s,
                         check_timeout, tuple(sbatch_options))
    opts.refresh_nic = refresh_nic
    opts.evidence_max_bytes = evidence_max_mb << 20
    if nccl:
        opts.nccl = nccl_options(nccl_modes, nccl_binary, nccl_max_bytes, nccl_iters, nccl_retries, nccl_timeout,
                                 nccl_max_nodes, nccl_port, nccl_srun_options)
    if dcgm:
        from ccrhost.fleet.slurm_dcgm import DcgmOptions

        opts.dcgm = DcgmOptions(dcgm_level, dcgm_max_nodes, dcgm_timeout)
    try:
        code, _, _ = run_verify(opts)
    except SlurmError as exc:
        raise VerifyError(str(exc)) from None
    return code


def nccl_options(modes, binary, max_bytes, iters, retries, timeout, max_nodes, port, srun_options):
    """The gate's options, each validated as its inventory key is (defaults: the keys' own)."""
    from ccrhost.fleet.slurm_nccl import NcclOptions
    from ccrhost.model.allreduce import MODES

    picked = tuple(m.strip() for m in modes.split(",") if m.strip())
    bad = [m for m in picked if m not in MODES]
    if bad or not picked:
        raise click.UsageError(f"--nccl-modes {modes!r}: allowed a comma-separated list of {', '.join(MODES)}")
    given = {k: v for k, v in {"verify_allreduce_binary": binary, "verify_allreduce_max_bytes": max_bytes,
                               "verify_allreduce_retries": retries, "verify_allreduce_timeout": timeout}.items()
             if v is not None}
    try:
        s = validate_host("ccrhost slurm verify", given)
    except InventoryDataError as exc:
        raise click.UsageError("; ".join(str(e) for e in exc.errors)) from None
    return NcclOptions(modes=picked, binary=s.verify_allreduce_binary, max_bytes=s.verify_allreduce_max_bytes,
                       iters=iters, retries=s.verify_allreduce_retries, timeout=s.verify_allreduce_timeout,
                       valid_for=s.verify_allreduce_valid_for, max_nodes=max_nodes, port=port,
                       min_busbw=s.verify_allreduce_min_busbw, srun_options=tuple(srun_options))


@slurm.command()
@click.option("--partition", "-p", help="Roll through this partition's nodes.")
@click.option("--nodes", "-w", "nodelist", help="Slurm hostlist of the nodes, e.g. gpu[001-064].")
@click.option("--max-nodes", "-k", type=click.IntRange(1), default=1, show_default=True,
              help="Nodes draining or rebooting at once.")
@click.option("--max-failures", "-f", type=click.IntRange(1), default=1, show_default=True,
              help="Stop before the next batch once this many nodes failed to verify.")
@click.option("--reason", default="NIC firmware settings", show_default=True, help="Said in the drain reason.")
@click.option("--ccrhost", "ccrhost_cmd", default="/usr/local/bin/ccrhost", show_default=True,
              help="ccrhost on the nodes.")
@click.option("--config", default=CHECK_CONFIG, show_default=True, help="The check settings on the nodes.")
@click.option("--wait", "wait_s", type=click.FloatRange(1), default=3600, show_default=True,
              help="Seconds a batch may take: its jobs ending, then the reboot.")
@click.option("--check-timeout", type=click.FloatRange(1), default=300, show_default=True)
def rollout(partition, nodelist, max_nodes, max_failures, reason, ccrhost_cmd, config, wait_s, check_timeout):
    """Reboot nodes a batch at a time so firmware written for the next boot
    takes effect (deploys/nic_firmware.py writes it; docs/nic-firmware.md).

    Slurm drains each node (jobs finish), reboots it when idle and brings it
    back DOWN; each node's own check then runs in a reservation of its own:
    OK resumes it, anything else leaves it drained with the check's reason.
    Exit 0 when every node verified OK, 2 otherwise.
    """
    from ccrhost.fleet import rollout as ro

    if not (partition or nodelist):
        raise click.UsageError("name the nodes: --partition or --nodes")
    try:
        nodes = sorted(list_nodes(partition, nodelist))
        if not nodes:
            raise click.UsageError("no such nodes")
        outcomes = ro.rollout(nodes, max_nodes, max_failures, reason, ccrhost_cmd, config, wait_s, check_timeout,
                              say=Progress())
    except SlurmError as exc:
        raise RolloutError(str(exc)) from None
    for o in outcomes:
        click.echo(f"{o.node}: {o.status}: {o.note}")
    return ro.exit_code(outcomes)


@slurm.command()
@click.option("--partition", "-p", help="Only this partition's nodes.")
@click.option("--nodes", "-w", "nodelist", help="Slurm hostlist of the nodes to consider, e.g. gpu[001-064].")
@click.option("--allow", "allowed", multiple=True, type=click.Choice(["reset_gpu", "reboot"]),
              help="An action this run may carry out (repeatable); none by default: the run only says what "
                   "each drained node needs.")
@click.option("--max-reboots", type=click.IntRange(0), default=1, show_default=True,
              help="Nodes rebooting at once, at most (those Slurm shows rebooting count).")
@click.option("--dry-run", is_flag=True, help="Say what would be done on each node; change nothing.")
@click.option("--ssh", default="ssh -o BatchMode=yes -o ConnectTimeout=10", show_default=True,
              help="How to run a command on a node (its NodeAddr is appended, then the command).")
@click.option("--ccrhost", "ccrhost_cmd", default="/usr/local/bin/ccrhost", show_default=True,
              help="The ccrhost command on the nodes.")
@click.option("--config", default=CHECK_CONFIG, show_default=True, help="The check settings on the nodes.")
@click.option("--dcgm-level", type=click.IntRange(0, 4), default=0, show_default=True,
              help="After a repair, run DCGM's diag at this level on the node (`ccrhost dcgm`; it is drained, so "
                   "idle) before its check, which judges the stored result where the node's settings set "
                   "verify_dcgm (0: none).")
def remediate(partition, nodelist, allowed, max_reboots, dry_run, ssh, ccrhost_cmd, config, dcgm_level):
    """Repair drained nodes and return the ones that pass their check.

    For each drained node with a ccrhost drain reason, the action the reason
    names (``[action reset_gpu gpu 2]``) when --allow enables it: reset an
    idle GPU (nvidia-smi -r -i N), or reboot (scontrol reboot, within
    --max-reboots); then the node's check, and RESUME only when it passes.
    An operator's reason, a replace or a measured drain is never touched.
    Every step is printed per node.
    """
    from ccrhost.fleet.remediate import RemediateOptions
    from ccrhost.fleet.remediate import remediate as run

    opts = RemediateOptions(tuple(allowed), max_reboots, dry_run, ssh, ccrhost_cmd, config, dcgm_level=dcgm_level)
    try:
        nodes = list_nodes(partition, nodelist)
        logs = run(nodes, opts)
    except SlurmError as exc:
        raise click.ClickException(f"ccrhost slurm remediate: {exc}") from None
    for log in logs:
        for step in log.steps:
            click.echo(f"{log.node}: {step}")
        click.echo(f"{log.node}: {'dry run' if dry_run else log.outcome}")
    if not logs:
        click.echo("no drained node")


@slurm.command()
@click.option("--partition", "-p", required=True, help="The partition to sweep.")
@click.option("--nodes", "-w", "nodelist", help="Only these nodes of it (a Slurm hostlist).")
@click.option("--max-nodes", type=click.IntRange(1), default=4, show_default=True,
              help="At most this many nodes held at once.")
@click.option("--max-percent", type=click.FloatRange(0, 100, min_open=True), default=10.0, show_default=True,
              help="At most this share of the partition's nodes held at once (rounded up; the smaller cap wins).")
@click.option("--nice", type=click.IntRange(0, 2147483645), default=10000, show_default=True,
              help="sbatch --nice for each batch job: the lowest priority, so every waiting job goes first.")
@click.option("--dcgm-level", type=click.IntRange(0, 4), default=2, show_default=True,
              help="DCGM diag level (0: no diag).")
@click.option("--nccl", is_flag=True, help="Also run the single-node all-reduce modes (nvlink, loopback).")
@click.option("--ccrhost", "ccrhost_cmd", default="/usr/local/bin/ccrhost", show_default=True)
@click.option("--config", default=CHECK_CONFIG, show_default=True)
@click.option("--report-dir", default="ccrhost-sweep", show_default=True)
@click.option("--drain/--no-drain", default=True, show_default=True,
              help="Drain nodes that FAIL (never on UNKNOWN: a hung host engine drains nothing).")
@click.option("--wait", "wait_s", type=click.FloatRange(1), default=600, show_default=True)
@click.option("--check-timeout", type=click.FloatRange(1), default=300, show_default=True)
@click.option("--sbatch-option", "sbatch_options", multiple=True, metavar="OPT")
def sweep(partition, nodelist, max_nodes, max_percent, nice, dcgm_level, nccl, ccrhost_cmd, config, report_dir,
          drain, wait_s, check_timeout, sbatch_options):
    """Run the active checks on the partition's idle nodes only, a few at a time.

    Each batch is an exclusive job of the lowest priority (--nice) on nodes
    that are idle when it starts, holding at most min(--max-nodes,
    --max-percent of the partition) nodes, released before the next: a node
    running a job is never touched. Each node stores its results with their
    time and validity, where its prolog and health check read them (a
    result past its validity is UNKNOWN as stale). Run it from cron.
    """
    import math

    from ccrhost.fleet.slurm_dcgm import DcgmOptions

    nodes = list_nodes(partition, nodelist)
    if not nodes:
        raise VerifyError(f"no nodes in partition {partition}" + (f" matching {nodelist}" if nodelist else ""))
    cap = max(1, min(max_nodes, math.ceil(len(nodes) * max_percent / 100)))
    opts = VerifyOptions(partition, nodelist, False, ccrhost_cmd, config, report_dir, drain, None, wait=wait_s,
                         check_timeout=check_timeout,
                         sbatch_options=(f"--nice={nice}", *sbatch_options), idle_only=True, max_nodes=cap)
    if dcgm_level:
        opts.dcgm = DcgmOptions(dcgm_level, cap)
    if nccl:
        if cap < 2:
            raise click.UsageError(f"--nccl: the cap is {cap} node(s) of {len(nodes)}; raise --max-nodes or --max-percent")
        opts.nccl = nccl_options("nvlink,loopback", None, None, 20, None, None, cap, 29500, ())
    Progress()(f"sweep of {partition}: {len(nodes)} nodes, at most {cap} held at once, nice {nice}")
    try:
        code, _, _ = run_verify(opts)
    except SlurmError as exc:
        raise VerifyError(str(exc)) from None
    return code
