"""The ``ccrhost`` command."""

from __future__ import annotations

import importlib
import os
import sys

import click

from ccrhost.node.gather import DEFAULT_TIMEOUT


# Subcommands that live outside the core package are imported only when
# used, so production commands never load the lab.
_LAZY = {"baseline": "ccrhost.baseline_cli:baseline", "lab": "ccrhost.lab.cli:lab", "slurm": "ccrhost.fleet.slurm:slurm", "ci": "ccrhost.lab.ci:ci"}


class _Group(click.Group):
    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *_LAZY])

    def get_command(self, ctx, name):
        if name in _LAZY:
            module, attr = _LAZY[name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ccrhost")
def main():
    """Tune GPU nodes for RDMA and prove their connection-to-compute ratio."""


def _settings(config_path, overrides=None, text: bytes | None = None):
    """This node's validated settings from ``--config`` (``text``: its bytes,
    already read) plus command-line overrides; a bad key or value is a usage
    error naming both."""
    from ccrhost.settings import InventoryDataError, validate_host

    try:
        # os.uname().nodename is what socket.gethostname() returns, without importing socket
        return validate_host(os.uname().nodename, _load_check_data(config_path, overrides or {}, text))
    except InventoryDataError as exc:
        raise click.ClickException("; ".join(str(e) for e in exc.errors)) from None


def _check_settings(config_path, overrides):
    """What the check uses of its validated settings: kept from an earlier
    check with the same config bytes, overrides and ccrhost (node.prepared),
    else validated in full (a usage error as :func:`_settings`) and kept."""
    from ccrhost.node import prepared

    given = _given(overrides)
    try:
        config = None
        if config_path:
            with open(config_path, "rb") as f:
                config = f.read()
    except OSError:
        return _settings(config_path, overrides).check_settings()  # its usage error names the file
    host = os.uname().nodename
    inputs = prepared.inputs(config, given, host)
    kept = prepared.load(inputs)
    if kept is None:
        kept = _settings(config_path, overrides, config).check_settings()
        prepared.store(inputs, kept)
    return kept


YAML_MAX_DEPTH = 64  # ccrhost's own files nest 3 levels at most


def _yaml_too_deep(text: bytes) -> bool:
    """Whether the YAML nests deeper than YAML_MAX_DEPTH, read from the
    parser's events (no recursion), stopping at the first level too deep."""
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > YAML_MAX_DEPTH:
                return True
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    return False


def _yaml_mapping(flag: str, path: str, what: str, text: bytes | None = None) -> dict:
    """A YAML file of keys (``text``: its bytes, already read); a missing,
    unreadable or non-mapping file is a usage error naming the flag."""
    import yaml

    try:
        if text is None:
            with open(path, "rb") as f:
                text = f.read()
        if _yaml_too_deep(text):  # the loader recurses per level: a RecursionError traceback otherwise
            raise click.ClickException(f"{flag} {path}: nested more than {YAML_MAX_DEPTH} levels deep; allowed: "
                                       f"a mapping of {what}, at most {YAML_MAX_DEPTH} levels")
        loaded = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise click.ClickException(f"{flag} {path}: {exc}") from None
    if not isinstance(loaded, dict):
        raise click.ClickException(f"{flag} {path}: expected a mapping of {what}")
    return loaded


def _given(overrides: dict) -> dict:
    """The overrides the command line set (an option left out is None, or
    () for --exclude): what is validated, and so what a kept record is for."""
    return {k: v for k, v in overrides.items() if v not in (None, ())}


def _load_check_data(config_path, overrides, text: bytes | None = None) -> dict:
    data = _yaml_mapping("--config", config_path, "inventory keys", text) if config_path else {}
    data.update(_given(overrides))
    return data


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="YAML file of the same keys as inventory data (verify_*, rdma_exclude_devices).")
@click.option("--profile", "verify_profile", help="The platform (verify_profile): a built-in, e.g. hgx-h100-8x400, or a platform file.")
@click.option("--gpu-model", "verify_gpu_model", help="Expected GPU name as NVML reports it.")
@click.option("--gpus", "verify_gpu_count", type=int, help="Expected number of GPUs.")
@click.option("--ports", "verify_ports", type=int, help="Expected active compute ports.")
@click.option("--port-gbps", "verify_port_gbps", type=float, help="Expected rate of each compute port.")
@click.option("--precision", "verify_precision", help="fp64, fp32, tf32, bf16 (default), fp16 or fp8.")
@click.option("--beta", "verify_beta", type=float, help="Bytes per FLOP (default 4).")
@click.option("--min-ccr", "verify_min_ccr", type=float, help="Absolute CCR floor.")
@click.option("--min-ccr-fraction", "verify_min_ccr_fraction", type=float, help="Share of the expected CCR (0.9).")
@click.option("--exclude", "rdma_exclude_devices", multiple=True, help="RDMA device (or pattern) that is not compute.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "prometheus", "nhc", "npd"]), default="text",
              show_default=True, help="npd: a Node Problem Detector custom plugin (exit 0 fit, 1 not, 2 UNKNOWN; "
              "one line naming the reason codes).")
@click.option("--output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write here instead of stdout (a file is replaced atomically; `-` is stdout).")
@click.option("--drain", is_flag=True, help="HealthCheckProgram use: drain this node in Slurm on FAIL.")
@click.option("--drain-unknown", is_flag=True,
              help="Prolog use, with --drain: UNKNOWN drains too (Slurm drains a node whose prolog fails anyway), "
                   "with a reason that says what could not be read.")
@click.option("--hold", is_flag=True,
              help="Prolog use, with --drain: where the drain cap (slurm_drain_cap_*) keeps the node from being "
                   "drained, keep the job off it instead (requeue it, or cancel one that cannot be requeued) and "
                   "exit 0, so slurmd does not drain the node either.")
@click.option("--probe-timeout", type=click.FloatRange(1, 600), default=DEFAULT_TIMEOUT, show_default=True,
              help="Seconds a probe (the RDMA snippet, nvidia-smi) may take before it counts as hung: UNKNOWN.")
@click.option("--refresh-nic", is_flag=True,
              help="Health-check use, with verify_nic_firmware: query each compute NIC's firmware settings "
                   "(mlxconfig, seconds per NIC) and store them before judging. Never in a prolog, which judges "
                   "the stored reading and its age. With wiring_enable it also reads the fabric's wiring "
                   "(lldpctl, smpquery) again where the stored reading is missing, unreadable or past half "
                   "wiring_valid_for.")
@click.option("--refresh-wiring", is_flag=True,
              help="With wiring_enable: read the fabric's wiring (lldpctl, smpquery) and store it now, whatever "
                   "the stored reading's age (after recabling). Read-only; never in a prolog.")
@click.option("--active-when-busy", "verify_active_when_busy", is_flag=True, default=None,
              help="With --refresh-nic: query the NICs on a node running GPU work or a Slurm job too "
                   "(verify_active_when_busy; `ccrhost slurm rollout` asks so, read-only) [default: skip the queries "
                   "there, UNKNOWN node_busy].")
@click.option("--budget", type=click.FloatRange(5, 3600), default=None,
              help="Seconds the whole run may take (the health check: below slurmd's 60 s limit): the "
                   "--refresh-nic queries stop where they would not finish within it, and stderr names the NICs left.")
@click.option("--dry-run", is_flag=True,
              help="With --drain: read Slurm as ever, print the scontrol lines it would run (drain, resume, hold) "
                   "and change nothing: the observe mode's prolog and health check (slurm_mode: observe).")
@click.option("--log", "log_path", type=click.Path(dir_okay=False),
              help="With --drain: append a line here (and to syslog) when the node is not OK or an action was, or "
                   "would be, taken (slurm_log).")
@click.option("--textfile", type=click.Path(dir_okay=False),
              help="With --drain: a node_exporter textfile of the verdict, the would-be drain or hold, and a fault "
                   "of ccrhost's own (slurm_textfile).")
def check(config_path, fmt, output, drain, drain_unknown, hold, probe_timeout, refresh_nic, refresh_wiring, budget,
          dry_run, log_path, textfile, **overrides):
    """Verify this node now. Exit 0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN (--format
    npd: Node Problem Detector's codes).

    Whatever cannot be told (a hung or garbled probe, a failing scontrol,
    an internal error) is UNKNOWN with one line naming it, never WARN.
    """
    import json
    import time

    from ccrhost.node.gather import Started, take_early

    # The node's reads start first (ccrhost.console starts them before this
    # command is parsed) and run while the settings are loaded and
    # validated, which takes longer than they do.
    reads = take_early(probe_timeout) or Started(probe_timeout)
    deadline = None if budget is None else time.monotonic() + budget  # the whole run's, from here
    skipped: list[str] = []

    from ccrhost.model.verdict import only_unproven
    from ccrhost.node import check as node_check
    from ccrhost.node import formats
    from ccrhost.output import write_output

    if overrides.get("rdma_exclude_devices"):
        overrides["rdma_exclude_devices"] = tuple(overrides["rdma_exclude_devices"])
    problem, drained, settings = None, None, None
    try:
        settings = _check_settings(config_path, overrides)
    except click.ClickException as exc:  # settings it cannot judge with: UNKNOWN, and a prolog says why
        problem = exc.message
        verdict = node_check.unknown("check_config", problem)
    else:
        try:
            verdict = node_check.run_check(settings, timeout=probe_timeout, started=reads, refresh_nic=refresh_nic,
                                           deadline=deadline, skipped=skipped,
                                           refresh_wiring="force" if refresh_wiring else refresh_nic)
        except Exception as exc:  # a bug must not read as WARN to the scheduler
            problem = f"internal error: {type(exc).__name__}: {exc}"
            verdict = node_check.unknown("check_error", problem)
    held, own = None, []
    if drain:
        from ccrhost.model.drain_cap import DrainCap
        from ccrhost.node import drain as node_drain
        from ccrhost.node import observe

        # ccrhost's own configuration or installation at fault: it alerts and lets the job run, in
        # either mode (a bad check.yaml pushed everywhere must not stop every job)
        own = observe.own_fault(verdict)
        try:
            if own:
                drained = node_drain.DrainNote(f"not drained, no job held: UNKNOWN for ccrhost's own configuration "
                                               f"or installation ({', '.join(own)})")
            else:
                drained = node_drain.drain(verdict, unknown_drains=drain_unknown, dry_run=dry_run,
                                           cap=settings.drain_cap if settings else DrainCap())
            job = os.environ.get("SLURM_JOB_ID")
            if drained.held and hold and job and os.environ.get("SLURM_SCRIPT_CONTEXT") == "prolog_slurmd":
                import shutil

                held = node_drain.hold_job(job, shutil.which("scontrol") or "scontrol", dry_run=dry_run)
        except node_drain.DrainError as exc:
            problem = f"--drain: {exc}"
            verdict = node_check.unknown("check_error", problem, verdict)
        if log_path or textfile or dry_run or own:
            said = str(drained or "").removeprefix("dry run, nothing changed: ")
            acted = bool(said) and not said.startswith("no drain change")
            what = [*([str(drained)] if acted else []),
                    *([held] if held else [])]
            observe.record(os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0], verdict,
                           dry_run, what, own, node_drain.would_drain(drained) if drained else False,
                           bool(held) and dry_run, log_path, textfile)
    if problem is None and not verdict.evaluated:  # nothing was judged: say why on stderr too
        problem = verdict.reasons[-1].message
    if fmt == "npd":  # NPD reads its own exit codes, WARN per the settings (none readable: the default)
        text, exit_code = formats.format_npd(verdict, settings.verify_npd_warn_unhealthy if settings else False)
    else:
        render = {
            "text": formats.format_text,
            "json": lambda v: json.dumps(v.to_dict(), indent=2, default=str) + "\n",
            "prometheus": formats.format_prometheus,
            "nhc": formats.format_nhc,
        }[fmt]
        text, exit_code = render(verdict), verdict.exit_code
    if output:
        write_output(output, text)
    else:
        click.echo(text, nl=False)
    if drained:
        click.echo(drained, err=True)
    if skipped:
        click.echo(f"ccrhost check: --budget {budget:g} s: skipped the NIC firmware query (--refresh-nic) on "
                   f"{', '.join(skipped)}; their stored readings stay and are judged by their age", err=True)
    if problem:
        click.echo(f"ccrhost check: UNKNOWN: {problem}", err=True)
    if held and not dry_run:  # past the drain cap, in a prolog: the job is off the node; a non-zero exit would drain it
        click.echo(f"ccrhost check: {held}; exit 0 so that slurmd does not drain the node", err=True)
        return 0
    if held:
        click.echo(f"ccrhost check: {held}", err=True)
    if own and drain_unknown:  # prolog use: a non-zero exit would fail the job and drain the node
        click.echo(f"ccrhost check: UNKNOWN for ccrhost's own configuration or installation ({', '.join(own)}); "
                   "exit 0 so that the job runs and slurmd does not drain the node", err=True)
        return 0
    if drain and drain_unknown and problem is None and only_unproven(verdict):
        # prolog use: an active check's missing or old proof says nothing against the node, and any
        # non-zero exit would make slurmd drain it (a sweep that fell behind must not drain the fleet)
        click.echo("ccrhost check: UNKNOWN only for want of an active check's proof; exit 0 so that the job "
                   "starts and slurmd does not drain the node", err=True)
        return 0
    return exit_code


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="YAML file of the same keys as inventory data (monitor_*, rdma_exclude_devices).")
@click.option("--interval", type=click.FloatRange(min=0.1, max=3600), default=1.0, show_default=True,
              help="Seconds between samples.")
@click.option("--duration", type=click.FloatRange(min=0.1), default=None, help="Seconds to watch [default: until Ctrl-C].")
@click.option("--gpu-target", type=click.FloatRange(0, 100), default=90.0, show_default=True, help="Mean GPU utilization, %.")
@click.option("--net-target", type=click.FloatRange(0, 100), default=80.0, show_default=True,
              help="Network utilization, % of the effective rate.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "prometheus"]), default="text", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the summary here (a file is replaced atomically; `-` is stdout).")
@click.option("--quiet", is_flag=True, help="No live display.")
def monitor(config_path, interval, duration, gpu_target, net_target, fmt, output, quiet):
    """Watch GPU utilization and RDMA throughput; summarize against the targets.

    Exit 0 when both targets are met, 2 when one is missed, 3 when a figure
    could not be read.
    """
    from ccrhost.model.status import EXIT_CODES
    from ccrhost.node import monitor as mon
    from ccrhost.output import write_output
    from ccrhost.probes import counters, gpu, rdma

    settings = _settings(config_path)
    effective = mon.effective_rates(rdma.read_local(), settings.rdma_exclude_devices)
    gpu_count = len(gpu.read_local().gpus)
    summary = mon.run(effective, gpu_count, interval, duration, counters.sample_local, gpu_target, net_target,
                      stream=None if quiet else sys.stderr)
    text = {"text": mon.format_text, "json": mon.format_json, "prometheus": mon.format_prometheus}[fmt](summary)
    if output:
        write_output(output, text)
    else:
        click.echo(text, nl=False)
    return EXIT_CODES[summary.verdict]


@main.command()
@click.argument("text", nargs=-1, required=True)
def explain(text):
    """Explain reason codes: what each means, what is read, the likely
    causes, and the commands that confirm and fix it (the handbook's entry).
    ``xid-CODE`` (``xid-95``) gives one XID code's level, action and source.

    TEXT is a code, or any line that names codes, pasted whole: a drain
    reason, a line of `sinfo -R`, `ccrhost check` output. Every code found
    in it (any case) is explained, each once. A code that `sinfo -R` cut at
    its 20 characters is found by its start when only one code starts so.
    A line that carries a prefix ccrhost writes (``ccrhost rollout:``,
    ``ccrhost: held:``) is explained by it too. Exits 2 only when neither a
    code nor such a prefix is found, listing the codes closest to it.
    """
    import re

    from ccrhost.model import reasons, xids

    line = " ".join(text)
    xid = re.fullmatch(r"(?i)xid[-: ]?(\d{1,5})", line.strip())
    if xid:  # one XID code: its level, action and source (the table in ccrhost/model/xids.py)
        click.echo(xids.entry_line(xids.xid_entry(int(xid.group(1)))))
        return
    from ccrhost.model.drain_reason import DRAIN_PREFIX, WRITTEN_PREFIXES, written_prefix

    found = reasons.codes_in(line)
    prefix = written_prefix(line)
    if prefix and (prefix != DRAIN_PREFIX or not found):  # what the reason's own prefix says, then its codes
        import textwrap

        click.echo(textwrap.fill(f"{prefix} {WRITTEN_PREFIXES[prefix]}", 78) + ("\n" if found else ""))
        if not found:
            return
    if not found:
        words = line.strip()
        close = reasons.close_matches(words) if " " not in words else []
        hint = f"; did you mean: {', '.join(close)}?" if close else f"; known codes: {', '.join(sorted(reasons.REGISTRY))}"
        raise click.UsageError(f"unknown reason code {words!r}{hint}" if " " not in words
                               else f"no reason code found in {words!r}{hint}")
    for i, code in enumerate(found):
        click.echo(("\n" if i else "") + reasons.entry_text(reasons.REGISTRY[code]), nl=False)
        if code in ("gpu_xid_critical", "gpu_xid"):
            click.echo("\n" + xids.table_text(reasons.REGISTRY[code].level) + "One code: ccrhost explain xid-CODE",
                       nl=True)


@main.command("dcgm")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="YAML file of the same keys as inventory data (verify_dcgm_*).")
@click.option("--level", type=click.IntRange(1, 4), help="The diag level [default: verify_dcgm_level_sweep].")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: every diag, nvbandwidth and GEMM result the node now holds (this run's merged into the "
              "stored), what its checks judge.")
@click.option("--nvbandwidth/--no-nvbandwidth", "with_nvbandwidth", default=None,
              help="Run nvbandwidth after the diag [default: verify_nvbandwidth]; the prolog's quick step never does.")
@click.option("--gemm-only", is_flag=True,
              help="Run only the GEMM (dcgmproftester), no diag and no nvbandwidth, verify_gemm on or off "
              "(an acceptance soak).")
@click.option("--gemm-seconds", type=click.IntRange(5, 3 * 3600), metavar="N",
              help="Seconds of GEMM load per GPU for this run [default: verify_gemm_seconds].")
def dcgm_diag(config_path, level, fmt, with_nvbandwidth, gemm_only, gemm_seconds):
    """Run DCGM's diagnostics on this node now and store the result.

    Asks the host engine first (verify_dcgm_engine_timeout), then runs
    `dcgmi diag -r LEVEL -j` under the level's deadline, judges the report
    and stores the result in verify_dcgm_state, where `ccrhost check` and
    the prolog read it with its age; with verify_nvbandwidth, nvbandwidth's
    copy bandwidths too; with verify_gemm (or --gemm-only), each GPU's GEMM
    throughput under dcgmproftester against its fp16 peak.
    Exit 0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN (the worst).
    The diag holds every GPU: on a node whose GPUs hold a compute process
    (nvidia-smi --query-compute-apps) nothing runs or is stored, and the
    result is UNKNOWN node_busy (exit 3), unless verify_active_when_busy.
    """
    import json

    from ccrhost.model.status import EXIT_CODES
    from ccrhost.node import dcgm as node_dcgm

    from ccrhost.model.status import worst

    settings = _settings(config_path)
    level = level or settings.verify_dcgm_level_sweep
    skipped = None
    if not settings.verify_active_when_busy:
        from ccrhost.model import gemm
        from ccrhost.model.dcgm import CHECK, mode
        from ccrhost.node import busy

        check, what = ((gemm.CHECK, gemm.PRECISION[gemm.TENSOR_FIELD]), "GEMM (dcgmproftester)") if gemm_only \
            else ((CHECK, mode(level)), f"DCGM diag level {level}")
        skipped = busy.not_run(busy.read_local(slurm_conf=settings.slurm_conf), *check, what,
                               settings.verify_dcgm_valid_for)
    results = [skipped] if skipped else [] if gemm_only else [node_dcgm.run_and_store(settings, level)]
    wanted = settings.verify_nvbandwidth if with_nvbandwidth is None else with_nvbandwidth
    if wanted and skipped is None and not gemm_only:  # the copy bandwidths, stored beside the diag
        from ccrhost.node import nvbandwidth

        results.append(nvbandwidth.run_and_store(settings))
    if (settings.verify_gemm or gemm_only) and skipped is None:  # the GEMM, stored beside them
        from ccrhost.node import gemm as node_gemm

        results.append(node_gemm.run_and_store(settings, gemm_seconds))
    if fmt == "json":  # what the node holds now: a fleet run judges it, as the node's own check does
        from ccrhost.node.active import load

        try:
            held = [r for r in load(settings.verify_dcgm_state).values()
                    if r.check in ("dcgm_diag", "nvbandwidth", "gemm")]
        except ValueError:
            held = results
        click.echo(json.dumps([r.to_dict() for r in held or results], separators=(",", ":")))
    else:
        for r in results:
            click.echo(f"{r.status}: {r.message}")
    sys.exit(EXIT_CODES[worst(r.status for r in results)])


@main.command("reset-gpu")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="YAML file of the same keys as inventory data (verify_gpu_state).")
@click.argument("index", type=click.IntRange(0, 63))
def reset_gpu(config_path, index):
    """Reset GPU INDEX (nvidia-smi -r -i INDEX) and keep when, so that the
    checks after it judge the GPU only on what the driver logged since.

    `ccrhost slurm remediate` runs it for a reset_gpu drain. Exits with
    nvidia-smi's status. Never run it under a job.
    """
    from ccrhost.node.gpu_reset import reset_gpu as reset

    rc, out = reset(_settings(config_path).verify_gpu_state, index)
    if out:
        click.echo(out)
    sys.exit(rc)


@main.command("nccl-env")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="YAML file of the same keys as inventory data (roce_*, nccl_*, rdma_exclude_devices).")
@click.option("--format", "fmt", type=click.Choice(["shell", "conf", "json"]), default="shell", show_default=True)
def nccl_env(config_path, fmt):
    """Print this node's NCCL settings, for sbatch scripts and containers.

    eval "$(ccrhost nccl-env)" exports them; --format conf prints
    /etc/nccl.conf lines.
    """
    import shlex

    from ccrhost.model import nccl
    from ccrhost.probes import rdma

    settings = _settings(config_path)
    try:
        env = nccl.derive(rdma.read_local(), settings)
    except nccl.NcclError as exc:
        raise click.ClickException(str(exc)) from None
    if fmt == "json":
        click.echo(nccl.render_json(env), nl=False)
    else:
        for key, value in env.items():
            click.echo(f"export {key}={shlex.quote(value)}" if fmt == "shell" else f"{key}={value}")


def _check_writable(flag: str, path: str) -> None:
    """A file ``flag`` will write: its directory exists and may be written,
    checked before any work is done."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise click.UsageError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise click.UsageError(f"{flag} {path}: not writable")


class _Hardware(click.ParamType):
    """A calc hardware figure: finite and in the range a sweep of it allows too (``whatif.HARDWARE_RANGES``)."""

    def __init__(self, key: str, kind=float):
        self.key, self.kind, self.name = key, kind, "integer" if kind is int else "float"

    def convert(self, value, param, ctx):
        from ccrhost import whatif

        try:
            number = self.kind(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not {'an integer' if self.kind is int else 'a number'}", param, ctx)
        problem = whatif.number_problem(self.key, number)
        if problem:
            self.fail(problem, param, ctx)
        return number


@main.command()
@click.option("--gpu", "gpu", help="GPU model: an NVML name or a table model such as 'H100 SXM'.")
@click.option("--gpus", type=_Hardware("gpus", int), default=8, show_default=True, help="GPUs per node.")
@click.option("--nics", type=_Hardware("nics", int), default=8, show_default=True, help="Compute NICs per node.")
@click.option("--nic-gbps", type=_Hardware("nic-gbps"), default=400, show_default=True)
@click.option("--precision", type=click.Choice(["fp64", "fp32", "tf32", "bf16", "fp16", "fp8"]), default="bf16",
              show_default=True, help="Precision of F, the GPUs' peak compute.")
@click.option("--tflops", type=_Hardware("tflops"), help="Peak TFLOPS per GPU (overrides the table).")
@click.option("--beta", type=_Hardware("beta"), help="Bytes per FLOP [default: 4].")
@click.option("--workload", "workload_file", type=click.Path(dir_okay=False),
              help="YAML file of verify_workload keys; the flags below override it.")
@click.option("--grad-bytes", type=click.FloatRange(min=0, min_open=True),
              help="Workload: gradient bytes per parameter on the wire [default: from --train-precision].")
@click.option("--tokens", type=click.FloatRange(min=0, min_open=True), help="Workload: tokens per GPU per step.")
@click.option("--dp", type=click.IntRange(1), help="Workload: data-parallel size (model replicas).")
@click.option("--train-precision", type=click.Choice(["fp32", "bf16", "fp16", "fp8"]),
              help="Workload: training precision, the bytes of gradients, parameters and activations on the "
                   "wire [default: bf16]. --precision is F's.")
@click.option("--tp", type=click.IntRange(1), help="Workload: tensor-parallel size, inside a node [1].")
@click.option("--pp", type=click.IntRange(1), help="Workload: pipeline stages, across nodes [1].")
@click.option("--sharded", type=click.Choice(["none", "optimizer", "full"]), is_flag=False, flag_value="full",
              help="Workload: ZeRO-1/2 (optimizer) or ZeRO-3/FSDP (full, what a bare --sharded means).")
@click.option("--reduction", help="Workload: collective algorithm between nodes: ring (default), tree, sharp "
                                  "(InfiniBand SHARP) or nvls (NVLink SHARP inside the node, NVLS-tree between).")
@click.option("--compression", type=float, help="Workload: gradient bytes on the wire / uncompressed, (0, 1].")
@click.option("--overlap", type=float, help="Workload: share of the gradient reduce hidden behind backward (and of "
                                            "parameter gathers behind their pass), [0, 1].")
@click.option("--param-overlap", type=float, help="Workload: share of parameter gathers hidden, [0, 1] [--overlap].")
@click.option("--pipeline-overlap", type=float, help="Workload: share of pipeline sends hidden behind the next "
                                                     "micro-batch, [0, 1] [0].")
@click.option("--a2a-overlap", type=float, help="Workload: share of the expert all-to-all hidden behind the other "
                                                "micro-batch (DualPipe), [0, 1] [0].")
@click.option("--hidden-size", type=click.IntRange(1), help="Workload: model width.")
@click.option("--params", type=click.FloatRange(min=0, min_open=True), help="Workload: total parameters.")
@click.option("--preset", help="Workload: a named workload (llama3-8b, llama3-70b, llama3-405b, llama3-405b-128k, "
                               "gpt3-175b, mixtral-8x7b, deepseek-v3); the other workload flags override it.")
@click.option("--framework", help="Workload: whose byte widths: megatron, torchtitan, deepspeed, ddp-amp "
                                  "[default: none, fp32 gradient reduce].")
@click.option("--param-bytes", type=float, help="Workload: parameter all-gather bytes per value.")
@click.option("--activation-bytes", type=float, help="Workload: activation bytes per value (pipeline, "
                                                     "all-to-all, KV).")
@click.option("--cp", type=int, help="Workload: context-parallel size, dividing --seq-len [1].")
@click.option("--cp-method", help="Workload: context parallelism by ring (3 passes) or all-gather (2) [ring].")
@click.option("--recompute", help="Workload: activation recompute, none or full [none].")
@click.option("--kernel-share", type=float, help="Workload: share of peak F the kernels reach while computing, "
                                                 "[0.01, 1] [1].")
@click.option("--mfu", type=float, help="Workload: a published or measured end-to-end MFU, [0.01, 1]; the model "
                                        "solves the kernel share from it (not with --kernel-share).")
@click.option("--mfu-attention", help="Workload: how --mfu counts attention: full (12 L s a, default) or causal "
                                      "(6 L s a).")
@click.option("--attention-width", type=int, help="Workload: heads x (qk dim + v dim) / 2 [hidden size].")
@click.option("--dispatch-bytes", type=float, help="Workload: all-to-all dispatch bytes per value [activation].")
@click.option("--combine-bytes", type=float, help="Workload: all-to-all combine bytes per value [activation].")
@click.option("--layers", type=int, help="Workload: transformer layers.")
@click.option("--seq-len", type=int, help="Workload: tokens per sequence.")
@click.option("--kv-size", type=int, help="Workload: K/V width per token per layer (GQA) [hidden size].")
@click.option("--experts", type=int, help="Workload: routed experts per MoE layer.")
@click.option("--expert-params", type=float, help="Workload: parameters in routed experts.")
@click.option("--top-k", type=int, help="Workload: experts per token [1].")
@click.option("--ep", type=int, help="Workload: expert-parallel size [1].")
@click.option("--capacity-factor", type=float, help="Workload: expert capacity factor [1].")
@click.option("--moe-layers", type=int, help="Workload: MoE layers [all].")
@click.option("--moe-max-nodes", type=int, help="Workload: node-limited routing, nodes per token.")
@click.option("--virtual-stages", type=int, help="Workload: interleaved pipeline chunks per stage [1].")
@click.option("--micro-batches", type=int, help="Workload: micro-batches per step (pipeline bubble).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--sweep", "sweeps", multiple=True, metavar="KEY=V1,V2,...",
              help="Compare options: KEY is a Workload option's name without its dashes (dp, tp, pp, cp, ep, "
                   "tokens, reduction, preset, framework, mfu, ...: the options marked Workload above) or gpu, "
                   "gpus, nics, nic-gbps. A second --sweep draws a line per value.")
@click.option("--chart", type=click.Path(dir_okay=False), help="With --sweep: draw the sweep as a PNG here.")
def calc(gpu, gpus, nics, nic_gbps, precision, tflops, beta, workload_file, fmt, sweeps, chart, **flags):
    """What-if: the CCR of a GPU model x count with NICs x rate, for a workload.

    With a workload the CCR is the node's, from the same model the
    verification uses, and the 0.5/2 bands apply.
    """
    import json

    from ccrhost import whatif
    from ccrhost.settings import InventoryDataError, validate_host

    given = {whatif.FLAG_KEYS.get(k, k): v for k, v in flags.items() if v is not None}
    workload = _yaml_mapping("--workload", workload_file, "verify_workload keys") if workload_file else {}
    if workload_file and not workload:  # else an empty file would fall back to beta 4 without a word
        raise click.UsageError(f"--workload {workload_file}: empty; give verify_workload keys (preset, "
                               "tokens_per_gpu_step, dp_size, ...)")
    workload.update(given)
    try:
        parsed = [whatif.parse_sweep(text) for text in sweeps]
    except whatif.WhatIfError as exc:
        raise click.UsageError(str(exc)) from None
    if len(parsed) > 2:
        raise click.UsageError("at most two --sweep: the x axis and a line per value")
    swept = {k for k, _ in parsed}
    if len(swept) < len(parsed):
        raise click.UsageError("each --sweep key once")
    swept_keys = {whatif.WORKLOAD_KEYS[k][0] for k in swept if k in whatif.WORKLOAD_KEYS}
    if (given and not workload_file and "preset" not in set(given) | swept_keys
            and not ({"tokens_per_gpu_step", "dp_size"} <= set(given) | swept_keys)):
        raise click.UsageError("a workload needs --tokens and --dp (or --preset NAME, or --workload FILE); "
                               "the other workload flags refine it")
    if beta is not None and (workload or "preset" in swept_keys):
        raise click.UsageError("give --beta or a workload, not both")
    if parsed and not workload and "preset" not in swept_keys:
        raise click.UsageError("a sweep compares a workload's CCR against the bands: give --preset NAME, "
                               "--tokens and --dp, or --workload FILE")
    if chart and not parsed:
        raise click.UsageError("--chart draws a sweep: give --sweep KEY=V1,V2,...")
    if chart:
        _check_writable("--chart", chart)
    if chart and (missing := whatif.chart_missing()):
        raise click.ClickException(missing)
    if gpu is None and "gpu" not in swept:
        raise click.UsageError("Missing option '--gpu' (or --sweep gpu=...)")

    def validate(data):
        try:  # the inventory's own schema: the same keys, ranges and messages
            return validate_host("calc", {"verify_precision": precision,
                                          "verify_workload": data}).verify_workload.spec()
        except InventoryDataError as exc:
            raise whatif.WhatIfError("; ".join(str(e) for e in exc.errors)) from None

    hw = whatif.Hardware(gpu or "", gpus, nics, nic_gbps, precision, tflops)
    try:
        if parsed:
            rows = whatif.sweep(hw, workload, parsed, validate)
        else:
            single = whatif.row(hw, validate(workload) if workload else None, beta)
    except whatif.WhatIfError as exc:
        raise click.UsageError(str(exc)) from None
    if not parsed:
        click.echo(json.dumps(single, indent=2) + "\n" if fmt == "json" else whatif.text_single(single), nl=False)
        return
    if chart:
        try:
            whatif.draw_chart(rows, parsed, chart, whatif.chart_title(hw, workload, parsed))
        except OSError as exc:
            raise click.ClickException(f"--chart {chart}: cannot write: {exc.strerror or exc}") from None
    if fmt == "json":
        click.echo(json.dumps({"sweep": [k for k, _ in parsed], "chart": chart, "rows": rows}, indent=2))
    else:
        click.echo(whatif.text_table(rows, parsed), nl=False)
        if chart:
            click.echo(f"chart: {chart}")


def entry(argv=None) -> None:
    """Console entry point. The commands whose codes are verdicts (``check``,
    ``monitor``, ``dcgm``, ``slurm ...``) map their usage and config errors,
    and any error they did not expect, to exit 3 (UNKNOWN):
    click's own 2 would read as FAIL, and Python's 1 as WARN, to a scheduler."""
    argv = sys.argv[1:] if argv is None else argv
    # the commands whose exit codes are verdicts (ccrhost/exit_codes.py, VERDICT_COMMANDS)
    verdict = bool(argv) and (argv[0] in ("check", "monitor", "dcgm", "slurm") or argv[:2] == ["baseline", "diff"])
    if verdict:
        # ccrhost's models use no pydantic plugin: skip scanning every
        # installed package's entry points for one, on each check
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        rv = main.main(args=argv, prog_name="ccrhost", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(3 if verdict else exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(3 if verdict else 1)
    except Exception as exc:
        if not verdict:
            raise
        click.echo(f"ccrhost {argv[0]}: UNKNOWN: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(3)
    sys.exit(rv if isinstance(rv, int) else 0)
