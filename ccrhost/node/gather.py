"""This node's three readings for ``ccrhost check``, started at once.

The RDMA snippet, the GPUs and the data path are separate read-only
processes; started before the command validates its settings (pydantic
and the models take longer to import than the probes take to run), they
overlap that work, and the check waits only for what is still running.
Kept apart from :mod:`ccrhost.node.check` so that starting them loads no
settings.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future


def _start(function, *args, **kwargs) -> Future:
    # daemon threads: a usage error exits at once even while a probe hangs
    future: Future = Future()

    def run():
        try:
            future.set_result(function(*args, **kwargs))
        except BaseException as exc:  # the caller sees the probe's own exception
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


class Started:
    """The three reads under way; each ``result()`` waits for its probe."""

    def __init__(self, timeout: float):
        from ccrhost.probes import gpu, pci, rdma

        self.rdma = _start(rdma.read_local, timeout)
        self.gpus = _start(gpu.read_local, timeout=timeout)
        self.pci = _start(pci.read_local, timeout)
