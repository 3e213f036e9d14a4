"""GPUs through ``nvidia-smi --query-gpu`` (nothing to install on the node)."""

from __future__ import annotations

from pyinfra.api import FactBase

from ccrhost.probes.gpu import COMMAND, GpuProbe, parse_command_output


class NvidiaGpus(FactBase):
    """
    Returns a :class:`~ccrhost.probes.gpu.GpuProbe`: the GPUs, or the
    reason none could be read (nvidia-smi absent or failing).
    """

    def default(self):
        return GpuProbe(error="GPUs not read")

    def command(self) -> str:
        return COMMAND

    def process(self, output):
        return parse_command_output(output)
