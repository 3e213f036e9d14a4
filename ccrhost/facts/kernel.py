"""Kernel modules present on a node: loaded ones and built-ins."""

from __future__ import annotations

from pyinfra.api import FactBase


def module_name(entry: str) -> str:
    """``kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko`` -> ``mlx5_ib``.

    The kernel treats ``-`` and ``_`` in module names as the same character
    and shows ``_`` under /sys/module.
    """
    base = entry.strip().rsplit("/", 1)[-1]
    for suffix in (".ko.zst", ".ko.xz", ".ko.gz", ".ko"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base.replace("-", "_")


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
        return (
            "echo @@loaded; ls -1 /sys/module 2>/dev/null; "
            'echo @@builtin; cat "/lib/modules/$(uname -r)/modules.builtin" 2>/dev/null; true'
        )

    def process(self, output):
        section = None
        result: dict[str, list[str]] = {"loaded": [], "builtin": []}
        for line in output:
            if line.startswith("@@"):
                section = line[2:].strip()
            elif section in result and line.strip():
                result[section].append(module_name(line))
        return {key: sorted(set(values)) for key, values in result.items()}
