"""Slurm as the fleet engine.

Two halves. What each node gets so that Slurm runs ``ccrhost check`` itself
(:func:`integration_files`: the check's settings, a prolog, a
HealthCheckProgram wrapper and a slurm.conf fragment, installed by
deploys/slurm.py). And the fleet job, ``ccrhost slurm verify``: one
allocation, a job step that runs ``ccrhost check`` on every node at once,
with ``--measure`` ib_write_bw between node pairs as job steps (the pairing,
retries and culprit isolation of ``ccrhost.measure``), the fleet reports,
and a drain for every FAIL node.
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
from dataclasses import dataclass

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

    @property
    def usable(self) -> bool:
        """Whether a new job can get it (a drained or down node never starts one)."""
        bad = ("drain", "down", "fail", "maint", "reboot", "unknown", "inval", "power", "future")
        return not self.state.endswith("*") and not any(word in self.state for word in bad)


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
    return parse_sinfo(run_slurm(*args).stdout)


def expand_hostlist(expression: str) -> list[str]:
    return run_slurm("scontrol", "show", "hostnames", expression).stdout.split()


# -- the check step ----------------------------------------------------------

_LABEL = re.compile(r"^\s*([0-9]{1,9}): ?(.*)$")  # ASCII digits: int() takes any Unicode one


def check_script(ccrhost: str, config: str) -> str:
    """What each task of the check step runs: the node's name, its check
    settings (so the controller judges with the node's own) and its check."""
    cfg = shlex.quote(config)
    # base64 in 76-character lines: srun cuts a long output line into several
    return (f'echo "@@node $SLURMD_NODENAME"; '
            f'if [ -r {cfg} ]; then echo "@@config"; base64 < {cfg}; else echo "@@config -"; fi; '
            f'echo "@@check"; {shlex.quote(ccrhost)} check --config {cfg} --format json 2>&1; echo "@@rc $?"')


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


def judge(out: CheckOutput, measured=None) -> tuple[Verdict, HostSettings | None]:
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
    if measured is None or not verdict.evaluated:
        return verdict, settings
    return evaluate(with_measurement(verdict.readings, measured), settings.expectation(), settings.policy()), settings


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
    and named why; any other reason is not a verdict of ours."""
    reason = node.reason or ""
    if reason.startswith(f"{DRAIN_PREFIX} UNKNOWN:"):
        return _unknown("drained_unknown", f"drained by its own check before the check step: {reason}")
    if reason.startswith(DRAIN_PREFIX):
        return unjudged(FAIL, "drained_fail", f"drained by its own check before the check step: {reason}")
    return _unknown("not_checked", f"not checked: {node.state}" + (f" ({node.reason})" if node.reason else ""))


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


def _check_step(job: str, nodes: list[str], opts: VerifyOptions, say) -> dict[str, CheckOutput]:
    proc = subprocess.Popen([*srun_args(job, nodes, "ccrhost-check"), "/bin/sh", "-c",
                             check_script(opts.ccrhost, opts.config)],
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


def _measure(job: str, verdicts: dict[str, Verdict], settings: dict, addresses: dict, opts: VerifyOptions, say):
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
        return slurm_round(job, pairs, plan)

    return measure_fleet(None, dict.fromkeys(names), plan, runner=runner)


def run_verify(opts: VerifyOptions, stream=None) -> tuple[int, dict[str, Verdict], dict]:
    """The fleet job. Returns (exit code, verdict per node, report paths)."""
    from ccrhost.fleet.report import text_table, write_reports
    from ccrhost.node import check as node_check

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
    verdicts: dict[str, Verdict] = {n: drained_verdict(v) for n, v in nodes.items() if n not in usable}
    say(f"{len(nodes)} nodes, {len(usable)} can run the check"
        + (f"; not checked: {', '.join(sorted(verdicts))}" if verdicts else ""))
    job = inside
    try:
        if inside:
            say(f"running in the existing allocation of job {inside}")
        while usable and not job:
            try:
                job = _submit(usable, opts, say)
            except _Drained as lost:  # never wait on them: report each with its reason, go on with the rest
                for name, node in lost.nodes.items():
                    verdicts[name] = drained_verdict(node)
                usable = [n for n in usable if n not in lost.nodes]
        if usable:
            outputs = _check_step(job, usable, opts, say)
            settings = {}
            for name in usable:
                verdicts[name], node_settings = judge(outputs[name])
                if node_settings is not None:
                    settings[name] = node_settings
            if opts.measure:
                measured = _measure(job, {n: verdicts[n] for n in usable}, settings,
                                    {n: nodes[n].address for n in usable}, opts, say)
                for name, m in measured.items():
                    verdicts[name] = judge(outputs[name], m)[0]
            apply_fleet_rules(verdicts, opts.fleet_tolerance)
            if opts.drain:
                # before the allocation ends, so no job lands on a node about to be drained
                for name in usable:
                    v, reason = verdicts[name], nodes[name].reason
                    ours = reason is not None and reason.startswith(DRAIN_PREFIX)
                    if v.status == FAIL or (ours and v.status in (OK, WARN)):
                        say(node_check.drain(v, node=name, scontrol="scontrol", measured=opts.measure))
    finally:
        if job and not inside:
            run_slurm("scancel", job, check=False)
    paths = write_reports(verdicts, opts.report_dir,
                          meta={"engine": "slurm", "job": job, "partition": opts.partition,
                                "addresses": {n: v.address for n, v in nodes.items()}},
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
def verify(partition, nodelist, measure, ccrhost_cmd, config, report_dir, drain, fleet_tolerance, measure_seconds,
           measure_retries, measure_timeout, measure_port, measure_ports, wait_s, check_timeout, sbatch_options):
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
    try:
        code, _, _ = run_verify(opts)
    except SlurmError as exc:
        raise VerifyError(str(exc)) from None
    return code


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
def remediate(partition, nodelist, allowed, max_reboots, dry_run, ssh, ccrhost_cmd, config):
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

    opts = RemediateOptions(tuple(allowed), max_reboots, dry_run, ssh, ccrhost_cmd, config)
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
