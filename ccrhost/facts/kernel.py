"""Kernel modules present on a node: loaded ones and built-ins."""

from __future__ import annotations

from pyinfra.api import FactBase

from ccrhost.probes.kernel import COMMAND, Modules, module_name, parse_modules

__all__ = ["KernelModules", "module_name"]


class KernelModules(FactBase):
    """
    Returns the modules present in the running kernel as a
    :class:`~ccrhost.probes.kernel.Modules`:

    .. code:: python

        modules.present("mlx5_ib")   # loaded or built in

    ``/sys/module`` also lists built-ins that have parameters, so a module
    counts as present when it is in either list. ``/proc/modules`` alone
    would miss every built-in.
    """

    default = Modules

    def command(self) -> str:
        return COMMAND

    def process(self, output):
        return parse_modules(output)
