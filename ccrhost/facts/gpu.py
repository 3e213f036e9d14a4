"""GPUs through ``nvidia-smi --query-gpu`` (nothing to install on the node)."""

from __future__ import annotations

from pyinfra.api import FactBase

from ccrhost.probes.gpu import COMMAND, parse_command_output


class NvidiaGpus(FactBase):
    """
    Returns ``{"gpus": [GpuReading dicts], "error": None}``, or
    ``{"gpus": [], "error": "<why>"}`` when nvidia-smi is absent or fails.
    """

    default = dict

    def command(self) -> str:
        return COMMAND

    def process(self, output):
        return parse_command_output(output)
