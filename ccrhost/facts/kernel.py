"""Kernel modules present on a node: loaded ones and built-ins."""

from __future__ import annotations

from pyinfra.api import FactBase

from ccrhost.probes.kernel import COMMAND, module_name, parse_modules

__all__ = ["KernelModules", "module_name"]


class KernelModules(FactBase):
    """
    Returns the modules present in the running kernel:

    .. code:: python

        {"loaded": ["ib_core", "mlx5_core", ...],   # /sys/module/<name>
         "builtin": ["configfs", ...]}             # modules.builtin

    ``/sys/module`` also lists built-ins that have parameters, so a module
    counts as present when it is in either list. ``/proc/modules`` alone
    would miss every built-in.
    """

    default = dict

    def command(self) -> str:
        return COMMAND

    def process(self, output):
        return parse_modules(output)
