"""``ccrhost lab``: start, inspect and stop emulated nodes."""

from __future__ import annotations

import click

from ccrhost.lab.fleet import Lab, LabError, parse_faults
from ccrhost.lab.profile import FAULT_KINDS, ProfileError, profile_names


def _lab(directory):
    return Lab(directory)


@click.group()
def lab():
    """Emulated nodes for tests and demos (needs root)."""


_dir = click.option("--dir", "directory", default=None, envvar="CCRHOST_LAB_DIR",
                    help="Lab folder [default: /var/lib/ccrhost/lab].")


@lab.command()
@click.option("--nodes", type=click.IntRange(1, 200), default=4, show_default=True)
@click.option("--profile", default="hgx-h100-8x400", show_default=True,
              help=f"Hardware profile: {', '.join(profile_names())}, or a YAML file.")
@click.option("--node-profile", "node_profiles", multiple=True, metavar="NODE=PROFILE",
              help="A different profile for one node.")
@click.option("--fault", "faults", multiple=True, metavar="NODE:KIND[=VALUE]",
              help="Inject a fault: " + "; ".join(f"{k} {v}" for k, v in FAULT_KINDS.items()))
@click.option("--name", default="lab", show_default=True, help="Prefix of namespaces and links.")
@click.option("--subnet", type=click.IntRange(0, 255), default=0, show_default=True,
              help="Use 198.18.<subnet>.0/24.")
@click.option("--link-mbit", type=click.IntRange(10, 10000), default=200, show_default=True,
              help="Rate each node's lab link is shaped to; bandwidth tests scale it to the profile's rates.")
@click.option("--slurm", is_flag=True, help="Also start munged, a slurmctld and a slurmd in every node.")
@_dir
def up(nodes, profile, node_profiles, faults, name, subnet, link_mbit, slurm, directory):
    """Start a lab, or reuse the running one if it has the same shape."""
    profiles = {}
    for item in node_profiles:
        node, sep, prof = item.partition("=")
        if not sep or not node or not prof:
            raise click.BadParameter(f"{item!r}: expected NODE=PROFILE", param_hint="--node-profile")
        profiles[node] = prof
    try:
        state = _lab(directory).up(nodes, profile, parse_faults(list(faults)), name=name,
                                   subnet=subnet, profiles=profiles, link_mbit=link_mbit, slurm=slurm)
    except (LabError, ProfileError) as exc:
        raise click.ClickException(str(exc)) from None
    for node in state.nodes:
        extra = f"  faults: {', '.join(node.faults)}" if node.faults else ""
        click.echo(f"{node.name}  {node.address}  {node.profile}{extra}")


@lab.command()
@_dir
def down(directory):
    """Remove every namespace, link, process and file the lab created."""
    try:
        removed = _lab(directory).down()
    except LabError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"removed {len(removed)} lab objects" if removed else "no lab was running")


@lab.command()
@_dir
def status(directory):
    """List the lab's nodes."""
    rows = _lab(directory).status()
    if not rows:
        click.echo("no lab is running")
        raise SystemExit(1)
    for row in rows:
        faults = ",".join(row["faults"]) or "-"
        slurmd = f" slurmd {row['slurmd']:4}" if "slurmd" in row else ""
        click.echo(f"{row['node']:8} {row['address']:15} sshd {row['sshd']:4}{slurmd} {row['profile']}  faults: {faults}")


@lab.command()
@click.argument("node")
@_dir
def reboot(node, directory):
    """Power-cycle NODE: /sys and configfs go back to the profile's defaults; /etc stays."""
    try:
        _lab(directory).reboot(node)
    except LabError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{node} rebooted")


@lab.command()
@click.argument("node")
@click.argument("kind", metavar="KIND[=VALUE]")
@_dir
def fault(node, kind, directory):
    """Inject a fault into running NODE without a restart.

    Live kinds: port_down[=DEV], port_rate=DEV:GBPS, pcie_width=DEV:WIDTH,
    gpu_missing[=INDEX], gpu_throttled[=INDEX], link_slow=MBIT.
    """
    try:
        faults = _lab(directory).fault(node, kind)
    except (LabError, ProfileError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{node} faults: {', '.join(faults)}")


@lab.command()
@click.argument("node")
@click.argument("kind", metavar="KIND[=VALUE]")
@_dir
def clear(node, kind, directory):
    """Remove a fault from running NODE (KIND: every value of it)."""
    try:
        faults = _lab(directory).clear(node, kind)
    except (LabError, ProfileError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{node} faults: {', '.join(faults) or 'none'}")


@lab.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@_dir
def slurm(command, directory):
    """Run a Slurm client command against the lab's cluster: ccrhost lab slurm -- sinfo -N"""
    import os

    from ccrhost.lab import slurm as lab_slurm

    lab_ = _lab(directory)
    state = lab_.load()
    if state is None or not state.slurm:
        raise click.ClickException(f"no lab with Slurm is running in {lab_.dir}; start one with `ccrhost lab up --slurm`")
    os.execvpe(command[0], list(command), lab_slurm.client_env(lab_))
