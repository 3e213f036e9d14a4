"""The ``ccrhost`` command."""

from __future__ import annotations

import importlib

import click

# Subcommands that live outside the core package are imported only when
# used, so production commands never load the lab.
_LAZY = {"lab": "ccrhost.lab.cli:lab"}


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
