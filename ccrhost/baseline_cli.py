"""``ccrhost baseline``: a node's contract as a platform file (issue 47):
``results`` and ``calibrate`` (site figures from a good fleet), ``capture``
(a platform file from a known-good node) and ``diff`` (what a node differs
from its platform file by). docs/baseline.md."""

from __future__ import annotations

import json
import os
import sys

import click

from ccrhost.model.calibrate import K, MIN_MARGIN, MIN_NODES

_CONFIG = click.option("--config", "config_path", type=click.Path(dir_okay=False),
                       help="YAML file of the same keys as inventory data (the state file paths, "
                            "rdma_exclude_devices).")


@click.group()
def baseline():
    """A node's contract as a platform file: capture, diff, calibrate."""


def _settings(config_path):
    from ccrhost.cli import _settings as settings

    return settings(config_path)


@baseline.command("results")
@_CONFIG
@click.option("--output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write here instead of stdout (replaced atomically): collect one per node into a folder.")
def results(config_path, output):
    """Print this node's stored active results and the versions they ran
    under (driver, NCCL library, NIC firmware), for `baseline calibrate`."""
    from ccrhost.node.baseline_results import export
    from ccrhost.output import write_output

    doc = export(_settings(config_path), os.uname().nodename)
    write_output(output or "-", json.dumps(doc, indent=1) + "\n")


@baseline.command("calibrate")
@click.option("--from", "folders", multiple=True, type=click.Path(file_okay=False, exists=True),
              help="A folder of `ccrhost baseline results` documents (*.json, one per node); repeatable.")
@click.option("--report", "reports", multiple=True, type=click.Path(exists=True),
              help="The deploy's verification report (ccr-report.json, or its folder) whose GPUDirect "
                   "measurement (verify_measure_gpudirect) gives ib_write_bw.gpudirect; repeatable.")
@click.option("--output", required=True, type=click.Path(dir_okay=False),
              help="The site platform file: created (with --extends), or its fleet: section replaced.")
@click.option("--extends", help="The built-in platform a new site file extends (e.g. hgx-h100-8x400).")
@click.option("--k", "k", type=click.FloatRange(0, 20), default=K, show_default=True,
              help="Each figure is the fleet's median less k times its MAD (scaled: 1.4826 x the median "
                   "absolute deviation, so k counts standard deviations).")
@click.option("--min-margin", type=click.FloatRange(0, 0.5), default=MIN_MARGIN, show_default=True,
              help="The least margin below the median, as a share of it: a uniform fleet's MAD can be below a "
                   "tool's run-to-run spread (0: none).")
@click.option("--min-nodes", type=click.IntRange(2, 100_000), default=MIN_NODES, show_default=True,
              help="Refuse a figure fewer nodes measured.")
@click.option("--figure", "only", multiple=True, help="Calibrate only this figure (e.g. allreduce.nvlink); repeatable.")
@click.option("--node", "nodes", multiple=True, help="Take only this node's results; repeatable.")
@click.option("--date", "date", help="The date written with each figure [default: today, UTC].")
def calibrate(folders, reports, output, extends, k, min_margin, min_nodes, only, nodes, date):
    """Write site figures (median - k x MAD) from a good fleet's stored
    results (--from) and its verification reports' GPUDirect bandwidth
    (--report: each node's slowest GPU-NIC pair, Gb/s).

    Refused, and nothing written, where fewer than --min-nodes nodes
    measured a figure, or where the nodes measured under different
    driver, NCCL or NIC firmware versions (each group named)."""
    import datetime

    from ccrhost.fleet import calibrate as gather
    from ccrhost.model.calibrate import CalibrateError, calibrate as figures_of
    from ccrhost.output import write_atomic

    if not folders and not reports:
        raise click.UsageError("give the results: --from FOLDER and/or --report ccr-report.json")
    date = date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    left_out: list[str] = []
    try:
        fleet = gather.read_folders(list(folders))
        if reports:
            measured, left_out = gather.read_reports(list(reports))
            fleet = gather.merge(fleet, measured)
        fleet = gather.pick(fleet, tuple(nodes))
        figures = figures_of(fleet, date, k, min_nodes, tuple(only), origin=", ".join([*folders, *reports]),
                             min_margin=min_margin)
        try:
            with open(output) as f:
                current = f.read()
        except FileNotFoundError:
            current = None
        text = gather.site_file_text(current, figures, gather.platform_name(output), extends)
    except (CalibrateError, OSError) as exc:
        for note in left_out:  # a host left out may be why too few remain
            click.echo(f"note: {note}", err=True)
        raise click.ClickException(f"calibrate: {exc}") from None
    write_atomic(output, text)
    for note in left_out:
        click.echo(f"note: {note}", err=True)
    for n in fleet:
        for note in n.notes:
            click.echo(f"note: {n.node}: {note}", err=True)
    for f in figures:
        click.echo(f"{f.key}: {f.value:g} {f.unit} ({f.source})")
    click.echo(f"wrote {output}: {len(figures)} figure(s) from {len(fleet)} node(s)")
    sys.exit(0)


def _today() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


@baseline.command("capture")
@_CONFIG
@click.option("--output", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="The platform file to write (`-`: stdout); its stem is the platform's name.")
@click.option("--name", help="The platform's name [default: the output file's stem].")
@click.option("--extends", help="A platform the captured file extends (its figures, NIC firmware profile...).")
@click.option("--probe-timeout", type=click.FloatRange(1, 600), default=20, show_default=True,
              help="Seconds a probe may take.")
def capture(config_path, output, name, extends, probe_timeout):
    """Write a platform file from what this known-good node reads.

    The hardware section (GPU model, count and PCIe, active compute ports,
    their rate, link layer and PCIe, NUMA nodes), as nhc-genconf writes
    its configuration: a key that cannot be read is left out (a comment
    says why), and a part that reads otherwise than the rest is named."""
    from ccrhost.fleet.calibrate import platform_name
    from ccrhost.node.baseline_capture import BaselineError, capture_text, read_local
    from ccrhost.output import write_output

    settings = _settings(config_path)
    try:
        readings = read_local(settings, probe_timeout)
    except BaselineError as exc:
        raise click.ClickException(f"capture: {exc}") from None
    node = os.uname().nodename
    name = name or (platform_name(output) if output != "-" else node)
    text, notes = capture_text(readings, node, name, _today(), extends)
    write_output(output, text)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if output != "-":
        click.echo(f"wrote {output}")


@baseline.command("diff")
@_CONFIG
@click.option("--platform", "ref", help="A platform file (or a built-in's name) [default: verify_profile].")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--probe-timeout", type=click.FloatRange(1, 600), default=20, show_default=True,
              help="Seconds a probe may take.")
def diff(config_path, ref, fmt, probe_timeout):
    """Show what this node differs from its platform file by.

    Each key that differs: expected (and the file that set it), read (and
    where), with the GPUs or ports that differ. Exit 0 nothing differs, 2 a
    key differs (FAIL), 3 a key could not be read (UNKNOWN), and 3 too on
    a bad option or a platform file that cannot be read."""
    from ccrhost.model import contract
    from ccrhost.model.status import EXIT_CODES
    from ccrhost.node.baseline_capture import BaselineError, read_local, read_platform

    settings = _settings(config_path)
    ref = ref or getattr(settings, "verify_profile", None)
    if not ref:
        raise click.UsageError("name the platform: --platform FILE, or verify_profile in the settings")
    try:
        expected, where = read_platform(ref)
        _validate(ref)
        readings = read_local(settings, probe_timeout)
    except BaselineError as exc:
        raise click.ClickException(f"diff: {exc}") from None
    differences = contract.diff(expected, where, readings)
    status = contract.status(differences)
    if fmt == "json":
        click.echo(json.dumps({"status": status, "platform": ref, "differences": [
            {"key": d.key, "level": d.level, "expected": d.expected, "read": d.read, "where": d.where,
             "source": d.source} for d in differences]}, indent=1))
    else:
        for d in differences:
            click.echo(f"{d.level}: {d.text()}")
        click.echo(f"{status}: {len(differences)} key(s) differ from {ref}" if differences
                   else f"OK: this node matches {ref}")
    sys.exit(EXIT_CODES[status])


def _validate(ref: str) -> None:
    """The platform loader's own checks, where this ccrhost has it (model/platform.py)."""
    from ccrhost.node.baseline_capture import BaselineError

    try:
        from ccrhost.model.platform import PlatformError, resolve
    except ImportError:
        return
    try:
        resolve(ref)
    except PlatformError as exc:
        raise BaselineError(str(exc)) from None
