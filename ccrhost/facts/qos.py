"""QoS state of a node's compute netdevs, all of them in one command
(see :mod:`ccrhost.probes.qos`)."""

from __future__ import annotations

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError

from ccrhost import failures
from ccrhost.probes import qos


class QosState(FactBase):
    """
    Returns a :class:`~ccrhost.probes.qos.QosReading` of the interfaces
    asked for: each a :class:`~ccrhost.probes.qos.QosInterface`.
    """

    default = qos.QosReading

    def command(self, interfaces, wants) -> str:
        return qos.command(interfaces, wants)

    def process(self, output):
        try:
            return qos.parse_qos_dump(output)
        except qos.QosFormatError as exc:
            failures.record_current(f"unexpected QoS tool output: {exc}")
            raise FactProcessError(f"unexpected QoS tool output: {exc}") from exc
