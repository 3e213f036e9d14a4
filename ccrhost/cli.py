"""The ``ccrhost`` command."""

from __future__ import annotations

import importlib
import sys

import click

# Subcommands that live outside the core package are imported only when
# used, so production commands never load the lab.
_LAZY = {"lab": "ccrhost.lab.cli:lab", "slurm": "ccrhost.fleet.slurm:slurm"}


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


def _load_check_data(config_path, overrides) -> dict:
    import yaml

    data = {}
    if config_path:
        try:
            with open(config_path) as f:
                loaded = yaml.safe_load(f) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise click.ClickException(f"--config {config_path}: {exc}") from None
        if not isinstance(loaded, dict):
            raise click.ClickException(f"--config {config_path}: expected a mapping of inventory keys")
        data.update(loaded)
    data.update({k: v for k, v in overrides.items() if v not in (None, ())})
    return data


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="YAML file of the same keys as inventory data (verify_*, rdma_exclude_devices).")
@click.option("--profile", "verify_profile", help="Declared hardware, e.g. hgx-h100-8x400.")
@click.option("--gpu-model", "verify_gpu_model", help="Expected GPU name as NVML reports it.")
@click.option("--gpus", "verify_gpu_count", type=int, help="Expected number of GPUs.")
@click.option("--ports", "verify_ports", type=int, help="Expected active compute ports.")
@click.option("--port-gbps", "verify_port_gbps", type=float, help="Expected rate of each compute port.")
@click.option("--precision", "verify_precision", help="fp64, fp32, tf32, bf16 (default), fp16 or fp8.")
@click.option("--beta", "verify_beta", type=float, help="Bytes per FLOP (default 4).")
@click.option("--min-ccr", "verify_min_ccr", type=float, help="Absolute CCR floor.")
@click.option("--min-ccr-fraction", "verify_min_ccr_fraction", type=float, help="Share of the expected CCR (0.9).")
@click.option("--exclude", "rdma_exclude_devices", multiple=True, help="RDMA device (or pattern) that is not compute.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "prometheus", "nhc"]), default="text",
              show_default=True)
@click.option("--output", type=click.Path(dir_okay=False), help="Write here atomically instead of stdout.")
@click.option("--drain", is_flag=True, help="HealthCheckProgram use: drain this node in Slurm on FAIL.")
def check(config_path, fmt, output, drain, **overrides):
    """Verify this node now. Exit 0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN."""
    import json
    import socket

    from ccrhost import node_check
    from ccrhost.config import InventoryDataError, validate_host

    if overrides.get("rdma_exclude_devices"):
        overrides["rdma_exclude_devices"] = tuple(overrides["rdma_exclude_devices"])
    try:
        settings = validate_host(socket.gethostname(), _load_check_data(config_path, overrides))
    except InventoryDataError as exc:
        raise click.ClickException("; ".join(str(e) for e in exc.errors)) from None
    verdict = node_check.run_check(settings)
    render = {
        "text": node_check.format_text,
        "json": lambda v: json.dumps(v.to_dict(), indent=2, default=str) + "\n",
        "prometheus": node_check.format_prometheus,
        "nhc": node_check.format_nhc,
    }[fmt]
    text = render(verdict)
    if output:
        node_check.write_atomic(output, text)
    else:
        click.echo(text, nl=False)
    if drain:
        click.echo(node_check.drain(verdict), err=True)
    return verdict.exit_code


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
@click.option("--output", type=click.Path(dir_okay=False), help="Write the summary here atomically.")
@click.option("--quiet", is_flag=True, help="No live display.")
def monitor(config_path, interval, duration, gpu_target, net_target, fmt, output, quiet):
    """Watch GPU utilization and RDMA throughput; summarize against the targets.

    Exit 0 when both targets are met, 2 when one is missed, 3 when a figure
    could not be read.
    """
    import socket

    from ccrhost import monitor as mon
    from ccrhost.config import InventoryDataError, validate_host
    from ccrhost.node_check import write_atomic
    from ccrhost.probes import counters, gpu, rdma

    try:
        settings = validate_host(socket.gethostname(), _load_check_data(config_path, {}))
    except InventoryDataError as exc:
        raise click.ClickException("; ".join(str(e) for e in exc.errors)) from None
    effective = mon.effective_rates(rdma.read_local(), settings.rdma_exclude_devices)
    gpu_count = len(gpu.read_local().get("gpus", []))
    summary = mon.run(effective, gpu_count, interval, duration, counters.sample_local, gpu_target, net_target,
                      stream=None if quiet else sys.stderr)
    text = {"text": mon.format_text, "json": mon.format_json, "prometheus": mon.format_prometheus}[fmt](summary)
    if output:
        write_atomic(output, text)
    else:
        click.echo(text, nl=False)
    return {"OK": 0, "FAIL": 2, "UNKNOWN": 3}[summary.verdict]


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
    import socket

    from ccrhost import nccl
    from ccrhost.config import InventoryDataError, validate_host
    from ccrhost.probes import rdma

    try:
        settings = validate_host(socket.gethostname(), _load_check_data(config_path, {}))
        env = nccl.derive(rdma.read_local(), settings)
    except InventoryDataError as exc:
        raise click.ClickException("; ".join(str(e) for e in exc.errors)) from None
    except nccl.NcclError as exc:
        raise click.ClickException(str(exc)) from None
    if fmt == "json":
        click.echo(nccl.render_json(env), nl=False)
    else:
        for key, value in env.items():
            click.echo(f"export {key}={shlex.quote(value)}" if fmt == "shell" else f"{key}={value}")


@main.command()
@click.option("--gpu", "gpu", required=True, help="GPU model: an NVML name or a table model such as 'H100 SXM'.")
@click.option("--gpus", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option("--nics", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option("--nic-gbps", type=click.FloatRange(min=0, min_open=True), default=400, show_default=True)
@click.option("--precision", type=click.Choice(["fp64", "fp32", "tf32", "bf16", "fp16", "fp8"]), default="bf16",
              show_default=True)
@click.option("--tflops", type=click.FloatRange(min=0, min_open=True), help="Peak TFLOPS per GPU (overrides the table).")
@click.option("--beta", type=click.FloatRange(min=0, min_open=True), help="Bytes per FLOP [default: 4].")
@click.option("--grad-bytes", type=click.FloatRange(min=0, min_open=True), help="Workload: gradient bytes per parameter.")
@click.option("--tokens", type=click.FloatRange(min=0, min_open=True), help="Workload: tokens per GPU per step.")
@click.option("--dp", type=click.IntRange(1), help="Workload: data-parallel size.")
def calc(gpu, gpus, nics, nic_gbps, precision, tflops, beta, grad_bytes, tokens, dp):
    """What-if: the CCR of a GPU model x count with NICs x rate."""
    from ccrhost import ccr as ccrmod
    from ccrhost import gpu_peaks

    workload = (grad_bytes, tokens, dp)
    if any(v is not None for v in workload) and None in workload:
        raise click.UsageError("a workload needs --grad-bytes, --tokens and --dp together")
    if beta is not None and workload[0] is not None:
        raise click.UsageError("give --beta or a workload, not both")
    if tflops is None:
        row = gpu_peaks.lookup(gpu) or next((r for r in gpu_peaks.TABLE if r.model.lower() == gpu.lower()), None)
        if row is None:
            models = ", ".join(r.model for r in gpu_peaks.TABLE)
            raise click.UsageError(f"unknown GPU {gpu!r}; known: {models} (or pass --tflops)")
        tflops = row.tflops.get(precision)
        if tflops is None:
            raise click.UsageError(f"{row.model} has no dense {precision} figure; pass --tflops")
        gpu = f"{row.model} ({row.source})"
    from_workload = workload[0] is not None
    b = ccrmod.beta_from_workload(*workload) if from_workload else (beta or ccrmod.SEED_BETA)
    result = ccrmod.compute([nic_gbps] * nics, tflops * gpus, b, "bottleneck", from_workload)
    click.echo(f"GPU: {gpus} x {gpu}: {tflops * gpus:g} TFLOPS {precision}")
    click.echo(f"Network: {nics} x {nic_gbps:g} Gb/s = {result.bandwidth_gbps:g} Gb/s "
               f"= {result.bandwidth_gbps / 8:g} GB/s")
    click.echo(f"beta: {b:.4g} bytes/FLOP" + (" (from the workload)" if from_workload else ""))
    click.echo(f"CCR = B / (beta x F) = {result.ccr:.4g}")
    click.echo(f"(the seed guide's formula, without the 1000 from TFLOPS: {ccrmod.seed_ccr(result.bandwidth_gbps, tflops * gpus):.4g})")
    if result.band:
        click.echo(f"band: {result.band} (below {ccrmod.LOW_BAND}: bandwidth-bound; above {ccrmod.HIGH_BAND}: compute under-used)")
    else:
        click.echo("band: not classified: with the literal beta = 4 the 0.5/2 bands mean nothing; give a workload")


def entry(argv=None) -> None:
    """Console entry point. ``check`` maps its usage and config errors to
    exit 3 (UNKNOWN): click's own 2 would read as FAIL to a scheduler."""
    argv = sys.argv[1:] if argv is None else argv
    is_check = bool(argv) and argv[0] == "check"
    try:
        rv = main.main(args=argv, prog_name="ccrhost", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(3 if is_check else exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(3 if is_check else 1)
    except Exception:
        if not is_check:
            raise
        # Python's own exit code for a crash is 1, which a prolog reads as WARN and lets the job through.
        import traceback

        traceback.print_exc()
        sys.exit(3)
    sys.exit(rv if isinstance(rv, int) else 0)
