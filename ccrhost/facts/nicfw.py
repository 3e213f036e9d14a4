"""The compute NICs' firmware settings (``mlxconfig -e q``) and the node's
active-check state file, as facts, for the deploy's verification."""

from __future__ import annotations

from pyinfra.api import FactBase

from ccrhost.probes.nicfw import command, parse_dump


class NicFirmwareQuery(FactBase):
    """Each RDMA device's firmware settings (``probes.nicfw.parse_dump``):
    a list of ``NicFirmware``. ``attempt`` makes each run a new read."""

    def default(self):
        return []

    def command(self, devices, firmware=True, optics=False, attempt=0):
        return command(list(devices), firmware, optics)

    def process(self, output):
        return parse_dump(list(output))


class ActiveStateText(FactBase):
    """The node's active-check state file as text ("" when there is none),
    so a deploy that stores some checks keeps the others' results."""

    def default(self):
        return ""

    def command(self, path, attempt=0):
        return f"head -c 1048576 {path} 2>/dev/null; true"

    def process(self, output):
        return "\n".join(output)
