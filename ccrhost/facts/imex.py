"""An NVLink rack tray's IMEX domain (``probes.imex``), as a fact, for the
deploy's verification."""

from __future__ import annotations

from pyinfra.api import FactBase

from ccrhost.model.imex import ImexPolicy, ImexReading
from ccrhost.probes.imex import CONFIG, command, parse_command_output


class ImexQuery(FactBase):
    """The IMEX unit, the channel device and ``nvidia-imex-ctl -N`` (an
    :class:`ImexReading`). ``attempt`` makes each run a new read."""

    def default(self):
        return ImexReading(error="the IMEX probe printed nothing")

    def command(self, unit="nvidia-imex", channel=ImexPolicy().channel, config=CONFIG, attempt=0):
        return command(ImexPolicy(True, unit, channel), config)

    def process(self, output):
        return parse_command_output(list(output))
