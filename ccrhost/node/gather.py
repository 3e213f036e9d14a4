"""This node's readings for ``ccrhost check``, started at once.

The RDMA snippet, the GPUs, the data path and the fabric counters are
separate read-only processes; started before the command validates its settings (pydantic
and the models take longer to import than the probes take to run), they
overlap that work, and the check waits only for what is still running.
Kept apart from :mod:`ccrhost.node.check` so that starting them loads no
settings.
"""

from __future__ import annotations

import threading

# Loaded before any read starts: the reads' threads define dataclasses, and
# dataclasses looks typing up in sys.modules without the import lock, so
# a typing half-imported by the main thread (click imports it) fails them
# with "partially initialized module 'typing' has no attribute 'ClassVar'".
import typing  # noqa: F401

# --probe-timeout's default, seconds
DEFAULT_TIMEOUT = 20


class Pending:
    """A read's outcome, set once by its thread: concurrent.futures.Future's
    ``result`` without that package's imports (logging, traceback: some
    3 ms of every check)."""

    def __init__(self):
        self._done = threading.Event()
        self._value, self._error = None, None

    def result(self, timeout: float | None = None):
        """The value, or the read's own exception; TimeoutError when it is
        still running after ``timeout`` seconds."""
        if not self._done.wait(timeout):
            raise TimeoutError
        if self._error is not None:
            raise self._error
        return self._value


def _start(function, *args, **kwargs) -> Pending:
    # daemon threads: a usage error exits at once even while a probe hangs
    pending = Pending()

    def run():
        try:
            pending._value = function(*args, **kwargs)
        except BaseException as exc:  # the caller sees the probe's own exception
            pending._error = exc
        pending._done.set()

    threading.Thread(target=run, daemon=True).start()
    return pending


class Started:
    """The reads under way. Each may take ``timeout`` seconds from the
    start: the RDMA and PCI snippets kill their process group then, and an
    in-process NVML call that blocks (a wedged driver) is abandoned in its
    daemon thread: :meth:`gpus_result` gives the GPU probe's error instead."""

    def __init__(self, timeout: float, nvml=None):
        import time

        self.timeout, self.deadline = timeout, time.monotonic() + timeout
        # each started as soon as its module is loaded: the shell snippets
        # run while the next module (and the settings) load
        from ccrhost.probes import fabric, local

        # the fabric counters now: joined with the stored reading once the
        # settings say where it is (probes.fabric.read_local)
        self.fabric_now = _start(local.run, fabric.reading_command(), timeout, fabric.WHAT)
        from ccrhost.probes import pci

        self.pci = _start(pci.read_local, timeout)
        from ccrhost.probes import rdma

        self.rdma = _start(rdma.read_local, timeout, management=False)
        from ccrhost.probes import gpu, gpu_health

        # the kernel log before anything that touches the driver, in a read
        # of its own: a wedged NVML (in this process, not killable) or
        # nvidia-smi never costs the XIDs that explain it
        self.gpu_log = _start(gpu_health.read_log, timeout)
        self.gpus = _start(gpu.read_local, nvml, timeout=timeout)
        self.gpu_health = _start(gpu_health.read_gpus, nvml, timeout=timeout)

    def host_health(self, settings, policy=None):
        """Start the host health probe (probes/host_health.py) with the units
        and state ``settings`` name; returns its result's getter, bounded
        like the others (the probe's own process group is killed at the timeout)."""
        import time

        from ccrhost.probes import host_health

        pending = _start(host_health.read_local, host_health.args(settings, policy=policy), self.timeout)
        deadline = time.monotonic() + self.timeout

        def result():
            from ccrhost.model.host_health import HostHealthReading

            try:
                return pending.result(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
            except TimeoutError:
                return HostHealthReading(error=f"the host health probe did not answer within {self.timeout:g} s")
        return result

    def gpu_health_result(self):
        """The GPU health probe's reading, or its error once the deadline
        (plus a second) has passed, as :meth:`gpus_result`."""
        import time

        from ccrhost.model.gpu_health import GpuHealthReading
        from ccrhost.probes import gpu_health

        try:
            gpus = self.gpu_health.result(timeout=max(0.0, self.deadline - time.monotonic()) + 1.0)
        except TimeoutError:
            gpus = GpuHealthReading(error=f"the GPU health probe did not answer within {self.timeout:g} s (abandoned)")
        try:  # bounded by its own process group's kill
            log = self.gpu_log.result(timeout=max(0.0, self.deadline - time.monotonic()) + 1.0)
        except TimeoutError:
            log = None
        return gpu_health.join(gpus, log)

    def gpus_result(self):
        """The GPU probe's reading, or its error once the deadline (plus a
        second for the probe's own kill to land) has passed."""
        import time

        from ccrhost.model.gpus import GpuProbe

        try:
            return self.gpus.result(timeout=max(0.0, self.deadline - time.monotonic()) + 1.0)
        except TimeoutError:
            return GpuProbe(error=f"the GPU probe (NVML) did not answer within {self.timeout:g} s (abandoned)")


_early: Started | None = None


def _timeout_given(args: list[str]) -> float:
    """``--probe-timeout``'s value in the check's arguments when it reads as
    one click would accept, else the default. A guess only: the command
    takes the reads over when click parses the same value (take_early)."""
    value = None
    for i, arg in enumerate(args):
        if arg == "--probe-timeout" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--probe-timeout="):
            value = arg.partition("=")[2]
    try:
        timeout = float(value) if value is not None else DEFAULT_TIMEOUT
    except ValueError:
        return DEFAULT_TIMEOUT
    return timeout if 1 <= timeout <= 600 else DEFAULT_TIMEOUT


def start_early(args: list[str]) -> None:
    """Start the reads from the check's raw arguments, before the command
    line is parsed (ccrhost.console)."""
    global _early
    _early = Started(_timeout_given(args))


def take_early(timeout: float) -> Started | None:
    """The reads :func:`start_early` started, when they run under the
    timeout the command line gives; None otherwise (start them anew)."""
    global _early
    early, _early = _early, None
    return early if early is not None and early.timeout == timeout else None
