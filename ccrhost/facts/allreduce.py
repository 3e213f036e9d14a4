"""One all_reduce_perf run on a host, as a fact, so the deploy's
verification can run each single-node mode on every host at once."""

from __future__ import annotations


from pyinfra.api import FactBase

from ccrhost.probes.nccl_tests import mpirun_script, parse_run_script, run_script


class AllReduceRun(FactBase):
    """Runs all_reduce_perf in ``mode`` with the host's ``gpus`` GPUs in one
    process, killed (its process group) after ``timeout`` s; returns
    ``(output, rc, timed_out, missing)``. ``attempt`` makes each retry a new read."""

    def default(self):
        return ("", None, False, None)

    def command(self, binary, mode, gpus, max_bytes, iters, timeout, attempt=0):
        return run_script(binary, mode, gpus, max_bytes, iters, timeout)

    def process(self, output):
        return parse_run_script(list(output))


class AllReducePairRun(FactBase):
    """Runs the pair mode from this host, the pair's first: ``argv`` is the
    launcher's command line (``probes.nccl_tests.mpirun_argv``), killed after
    ``timeout`` s; returns ``(output, rc, timed_out, missing)`` as
    :class:`AllReduceRun`. ``attempt`` makes each run a new read."""

    def default(self):
        return ("", None, False, None)

    def command(self, argv, timeout, attempt=0):
        return mpirun_script(list(argv), timeout)

    def process(self, output):
        return parse_run_script(list(output))


class DcgmDiagRun(FactBase):
    """Asks the host's DCGM host engine (``engine_timeout`` s), then runs
    ``dcgmi diag -r level -j`` killed after ``timeout`` s; returns
    ``(engine, gpus, diag)`` as ``probes.dcgmi.parse_run_script``."""

    def default(self):
        return (None, {}, None)

    def command(self, binary, level, engine_timeout, timeout):
        from ccrhost.probes.dcgmi import run_script as dcgm_script

        return dcgm_script(binary, level, engine_timeout, timeout)

    def process(self, output):
        from ccrhost.probes.dcgmi import parse_run_script as parse_dcgm

        return parse_dcgm(list(output))
