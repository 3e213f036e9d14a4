"""QoS state of a node's compute netdevs, all of them in one command
(see :mod:`ccrhost.probes.qos`)."""

from __future__ import annotations

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError

from ccrhost.probes import qos


class QosState(FactBase):
    """
    Returns ``{"interfaces": {ifname: {...}}, "systemd": bool, "unit_enabled": bool}``
    where each interface has ``backend`` (``ofed`` | ``upstream`` | ``none``),
    ``mtu``, ``trust``, ``dscp2prio``, ``pfc``, ``cable_len``, ``buffer_size``,
    ``prio2buffer``, ``port_buffer``, ``ecn`` ({"roce_rp/enable/3": 1, ...} or
    None), ``ofed_buffers`` (xoff/xon read-back or None), ``cc_params`` and
    ``errors``.
    """

    default = dict

    def command(self, interfaces, wants) -> str:
        return qos.command(interfaces, wants)

    def process(self, output):
        try:
            return qos.parse_qos_dump(output)
        except (qos.QosFormatError, ValueError) as exc:
            raise FactProcessError(f"unexpected QoS tool output: {exc}") from exc
