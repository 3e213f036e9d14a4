"""This node's readings for ``ccrhost check``, started at once.

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
    """The three reads under way. Each may take ``timeout`` seconds from the
    start: the RDMA and PCI snippets kill their process group then, and an
    in-process NVML call that blocks (a wedged driver) is abandoned in its
    daemon thread: :meth:`gpus_result` gives the GPU probe's error instead."""

    def __init__(self, timeout: float, nvml=None):
        import time

        from ccrhost.probes import gpu, gpu_health, pci, rdma

        self.timeout, self.deadline = timeout, time.monotonic() + timeout
        self.rdma = _start(rdma.read_local, timeout)
        self.gpus = _start(gpu.read_local, nvml, timeout=timeout)
        self.pci = _start(pci.read_local, timeout)
        self.gpu_health = _start(gpu_health.read_local, nvml, timeout=timeout)

    def gpu_health_result(self):
        """The GPU health probe's reading, or its error once the deadline
        (plus a second) has passed, as :meth:`gpus_result`."""
        import time
        from concurrent.futures import TimeoutError as FutureTimeout

        from ccrhost.model.gpu_health import GpuHealthReading

        try:
            return self.gpu_health.result(timeout=max(0.0, self.deadline - time.monotonic()) + 1.0)
        except FutureTimeout:
            return GpuHealthReading(error=f"the GPU health probe did not answer within {self.timeout:g} s (abandoned)")

    def gpus_result(self):
        """The GPU probe's reading, or its error once the deadline (plus a
        second for the probe's own kill to land) has passed."""
        import time
        from concurrent.futures import TimeoutError as FutureTimeout

        from ccrhost.model.gpus import GpuProbe

        try:
            return self.gpus.result(timeout=max(0.0, self.deadline - time.monotonic()) + 1.0)
        except FutureTimeout:
            return GpuProbe(error=f"the GPU probe (NVML) did not answer within {self.timeout:g} s (abandoned)")
