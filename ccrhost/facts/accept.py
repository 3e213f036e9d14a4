"""The acceptance stages' runs on one host, as facts, so a deploy's
acceptance (ccrhost.fleet.accept_deploy) drives many hosts at once: an
ib_write_lat end of a mesh pair, the GEMM load, the stored certificate."""

from __future__ import annotations

from pyinfra.api import FactBase


class ScriptLines(FactBase):
    """A script's output lines (one ib_write_lat end of a mesh pair: fleet/slurm_mesh's server or client
    script, which ends in ``@@rc N``). ``attempt`` makes each run a new read."""

    def default(self):
        return []

    def command(self, script, attempt=0):
        return script

    def process(self, output):
        return list(output)


class GemmRun(FactBase):
    """dcgmproftester's GEMM on ``gpu_ids`` for ``seconds`` (probes/gemm.run_script, the tool ``ccrhost
    dcgm --gemm-only`` runs), read as a ``GemmReading``. ``attempt`` makes each run a new read."""

    def default(self):
        return None

    def command(self, seconds, gpu_ids, attempt=0):
        from ccrhost.probes.gemm import run_script

        return run_script(int(seconds), list(gpu_ids) or None)

    def process(self, output):
        from ccrhost.probes.gemm import parse_run_script

        return parse_run_script(list(output))
