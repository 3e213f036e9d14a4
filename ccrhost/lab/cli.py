"""``ccrhost lab``: start, inspect and stop emulated nodes."""

from __future__ import annotations

import contextlib

import click

from ccrhost.lab.fleet import MAX_NODES, Lab, LabError, parse_faults
from ccrhost.lab.profile import FAULT_KINDS, ProfileError, profile_names


def _lab(directory):
    return Lab(directory)


@contextlib.contextmanager
def _refused():
    """A lab or profile error ends the command with its one-line message."""
    try:
        yield
    except (LabError, ProfileError) as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
def lab():
    """Emulated nodes for tests and demos (needs root)."""


_dir = click.option("--dir", "directory", default=None, envvar="CCRHOST_LAB_DIR",
                    help="Lab folder [default: /var/lib/ccrhost/lab].")


@lab.command()
@click.option("--nodes", type=click.IntRange(1, MAX_NODES), default=4, show_default=True,
              help="More than 245 take 198.18.<subnet>.0/23 (an even --subnet).")
@click.option("--profile", "profile_args", multiple=True, metavar="[GROUP=]PROFILE",
              help=f"Hardware profile: {', '.join(profile_names())} (default: the first), or a YAML file. "
                   "With --inventory: GROUP=PROFILE for each inventory group (all=PROFILE: every host).")
@click.option("--inventory", type=click.Path(dir_okay=False),
              help="A pyinfra inventory: one node per host, booted from its group's profile; writes a lab "
                   "inventory that runs the inventory's own data against the lab.")
@click.option("--per-group", type=click.IntRange(1, 200), help="With --inventory: only the first N hosts of each group.")
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
@click.option("--wiring", is_flag=True,
              help="Also cable every compute NIC to a leaf switch per rail (leaf-r0, leaf-r1, ...) that announces "
                   "itself with lldpd, and run lldpd on every node (RoCE profiles).")
@_dir
def up(nodes, profile_args, inventory, per_group, node_profiles, faults, name, subnet, link_mbit, slurm, wiring,
       directory):
    """Start a lab, or reuse the running one if it has the same shape."""
    if inventory and slurm:
        raise click.BadParameter("a lab from an inventory has no Slurm cluster", param_hint="--slurm")
    if inventory:
        return _up_inventory(inventory, profile_args, per_group, node_profiles, faults, name, subnet, link_mbit,
                             directory)
    if per_group:
        raise click.BadParameter("needs --inventory", param_hint="--per-group")
    if len(profile_args) > 1 or any("=" in p and not p.endswith((".yaml", ".yml")) for p in profile_args):
        raise click.BadParameter("one profile (GROUP=PROFILE needs --inventory)", param_hint="--profile")
    profile = profile_args[0] if profile_args else "hgx-h100-8x400"
    profiles = {}
    for item in node_profiles:
        node, sep, prof = item.partition("=")
        if not sep or not node or not prof:
            raise click.BadParameter(f"{item!r}: expected NODE=PROFILE", param_hint="--node-profile")
        profiles[node] = prof
    with _refused():
        state = _lab(directory).up(nodes, profile, parse_faults(list(faults)), name=name,
                                   subnet=subnet, profiles=profiles, link_mbit=link_mbit, slurm=slurm,
                                   wiring=wiring)
    for node in state.nodes:
        extra = f"  faults: {', '.join(node.faults)}" if node.faults else ""
        click.echo(f"{node.name}  {node.address}  {node.profile}{extra}")


def group_profiles(items, flag: str = "--profile") -> dict[str, str]:
    """``GROUP=PROFILE`` items -> {group: profile}; a bare PROFILE is all=."""
    out: dict[str, str] = {}
    for item in items:
        group, sep, prof = item.partition("=")
        if not sep:
            group, prof = "all", item
        if not group or not prof:
            raise click.BadParameter(f"{item!r}: expected GROUP=PROFILE", param_hint=flag)
        if group in out and out[group] != prof:
            raise click.BadParameter(f"{group}: given twice ({out[group]}, {prof})", param_hint=flag)
        out[group] = prof
    return out


def _up_inventory(inventory, profile_args, per_group, node_profiles, faults, name, subnet, link_mbit, directory):
    from ccrhost.lab import from_inventory

    if node_profiles or faults:
        raise click.BadParameter("with --inventory, profiles come from the groups (--profile GROUP=PROFILE)",
                                 param_hint="--node-profile/--fault")
    with _refused():
        _, placements, path = from_inventory.up(inventory, group_profiles(profile_args), per_group, directory,
                                                name=name, subnet=subnet, link_mbit=link_mbit)
    for p in placements:
        click.echo(f"{p.node}  {p.address}  {p.host}  ({', '.join(p.groups) or 'no group'})  {p.profile}")
    click.echo(f"lab inventory: {path}")


@lab.command()
@_dir
def down(directory):
    """Remove every namespace, link, process and file the lab created."""
    with _refused():
        removed = _lab(directory).down()
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
    with _refused():
        _lab(directory).reboot(node)
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
    with _refused():
        faults = _lab(directory).fault(node, kind)
    click.echo(f"{node} faults: {', '.join(faults)}")


@lab.command()
@click.argument("node")
@click.argument("kind", metavar="KIND[=VALUE]")
@_dir
def clear(node, kind, directory):
    """Remove a fault from running NODE (KIND: every value of it)."""
    with _refused():
        faults = _lab(directory).clear(node, kind)
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


@lab.command()
@click.option("--output", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the profile here (`-` is stdout) [default: stdout].")
@click.option("--anonymize", is_flag=True,
              help="Replace addresses, GIDs, GPU UUIDs and the host name with consistent stand-ins.")
@click.option("--name", help="The profile's name [default: capture-<host>].")
def capture(output, anonymize, name):
    """Write a lab profile of THIS node from what ccrhost's probes read here.

    Read-only; run it as root on one real node per hardware type (setpci
    needs root for the ACS registers). What the profile cannot replay is
    listed in its capture.not_replayed and on stderr.
    """
    from ccrhost.lab.capture import CaptureError, build_profile, read_local, render
    from ccrhost.output import write_output

    try:
        profile = build_profile(read_local(), name=name, anonymize=anonymize)
    except CaptureError as exc:
        raise click.ClickException(f"capture: {exc}") from None
    text = render(profile)
    if output:
        write_output(output, text)
        if output != "-":
            click.echo(f"wrote {output}: {len(profile['nics'])} NICs, {profile['gpus']['count']} GPUs",
                       err=True)
    else:
        click.echo(text, nl=False)
    for note in profile["capture"]["not_replayed"]:
        click.echo(f"not replayed: {note}", err=True)
