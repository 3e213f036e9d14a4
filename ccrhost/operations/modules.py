"""Kernel modules for RDMA."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand

from ccrhost.model.managed import MODULES_FILE
from ccrhost.operations import cache as fact_cache
from ccrhost.operations import files
from ccrhost.operations.base import operation
from ccrhost.settings import DEFAULT_MODULES


@operation
def modules(modules=DEFAULT_MODULES, path: str = MODULES_FILE):
    """
    Load RDMA kernel modules now and list them for systemd-modules-load.

    + modules: module names, loaded in this order with ``modprobe``
    + path: the modules-load.d file that loads them at boot

    A module counts as present when ``/sys/module/<name>`` exists or it is
    built into the kernel (``modules.builtin``).

    **Example:**

    .. code:: python

        rdma.modules(
            name="Load RDMA modules",
            modules=["ib_uverbs", "mlx5_core", "mlx5_ib", "rdma_ucm"],
        )
    """
    present = fact_cache.modules(host)
    missing = [m for m in modules if not present.present(m)]
    for module in missing:
        yield StringCommand("modprobe", QuoteString(module))
    if missing:
        fact_cache.drop(host)  # a driver just loaded can bring RDMA devices the snapshot lacks
    yield from files.managed._inner(path, "".join(f"{m}\n" for m in modules))
