"""Kernel modules for RDMA."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand

from ccrhost.model.managed import MODULES_FILE
from ccrhost.operations import cache as fact_cache
from ccrhost.operations import files
from ccrhost.operations.base import fail, operation
from ccrhost.probes.kernel import no_tree_message
from ccrhost.settings import DEFAULT_MODULES

# The RDMA core and its upper layers: loading them registers no RDMA device
# (a hardware driver does: mlx5_ib, irdma, bnxt_re, efa, ...), so the
# snapshot's devices, ports and netdevs stay valid after loading only these.
# rdma_cm's configfs folder appears, but the RoCE stage tests for it on the
# node when it writes there.
NO_DEVICE_MODULES = frozenset({"ib_core", "ib_uverbs", "ib_umad", "ib_cm", "iw_cm", "rdma_cm", "rdma_ucm"})


def brings_devices(module: str) -> bool:
    """Whether loading ``module`` can create RDMA devices (unknown ones: yes)."""
    return module.replace("-", "_") not in NO_DEVICE_MODULES


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
    if missing and present.no_tree:
        # modprobe would fail on the first; a container without the host's
        # modules must say so rather than look like a driver problem
        yield from fail(f"modules not loaded ({', '.join(missing)}): {no_tree_message(present.no_tree)}")
        return
    for module in missing:
        yield StringCommand("modprobe", QuoteString(module))
    yield from files.managed._inner(path, "".join(f"{m}\n" for m in modules))
    # Last, once this stage's own reads are done: a driver loaded now can
    # bring RDMA devices the snapshot lacks, so the next stage, planned after
    # these commands ran, reads the node again.
    if any(brings_devices(m) for m in missing):
        fact_cache.drop(host)
