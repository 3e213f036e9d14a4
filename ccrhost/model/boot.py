"""The boot unit: a oneshot service and its script that re-apply, after every
boot or driver reload, the settings the kernel forgets (modules, rdma_cm
defaults, QoS, PCIe ACS and NIC Device Control, the RoCE MTU). Pure:
renders text from the wanted state."""

from __future__ import annotations

import shlex

from ccrhost.model import qos
from ccrhost.model.managed import BOOT_SCRIPT, UNIT, UNIT_PATH, UNIT_WANTS  # noqa: F401  (the boot unit's paths)
from ccrhost.model.ports import ethernet_ports
from ccrhost.probes.qos import QosInterface
from ccrhost.render import render


def render_boot(settings, rdma, netdevs: dict, qos_state: dict, datapath: list | None = None,
                peermem: str | None = None) -> tuple[str, str]:
    """``datapath``: argv lists that re-apply ACS, NIC Device Control and
    the MTU; ``peermem``: the peer-memory module to load with the others."""
    commands = []
    if settings.qos_enable:
        wanted = settings.qos_wanted()
        for iface in netdevs:
            current = qos_state.get(iface, QosInterface())
            cmds, _ = qos.plan_interface(iface, current.backend, wanted, current, force=True)
            commands += [qos.shell_line(c) for c in cmds]
    commands += [qos.shell_line(c) for c in datapath or []]
    modules = [*settings.rdma_modules, *([peermem] if peermem else [])]
    roce_ports = [(dev, num) for dev, num, _ in ethernet_ports(rdma)]
    all_ports = [f"{dev}/ports/{num}" for info in netdevs.values() for dev, num in info["ports"]]
    script = render("ccrhost-boot.sh.j2",
        modules=[shlex.quote(m) for m in modules], wait_seconds=120, ports=all_ports,
        roce_ports=roce_ports, roce_mode=settings.roce_mode, tos=settings.roce_tos, commands=commands)
    unit = render("ccrhost-boot.service.j2", script=BOOT_SCRIPT, wait_seconds=120)
    return script, unit
