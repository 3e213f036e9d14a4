"""The fabric's wiring as a node sees it (``probes.wiring``), as a fact,
for the deploy's verification."""

from __future__ import annotations

from pyinfra.api import FactBase

from ccrhost.model.wiring import WiringReading
from ccrhost.probes.wiring import WHAT, WiringFormatError, command, parse_command_output


class WiringQuery(FactBase):
    """LLDP neighbours, each InfiniBand port's first-hop switch and SM, and
    the sysfs keys (a :class:`WiringReading`; one whose ``error`` says why
    when the output is not the probe's). ``attempt`` makes each run a new read."""

    def default(self):
        return WiringReading(error="the wiring probe printed nothing")

    def command(self, devices=(), attempt=0):
        return command(tuple(devices))

    def process(self, output):
        try:
            return parse_command_output(list(output))
        except WiringFormatError as exc:
            return WiringReading(error=f"cannot read {WHAT}: {exc}")
