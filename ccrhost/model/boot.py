"""The boot unit: a oneshot service and its script that re-apply, after every
boot or driver reload, the settings the kernel forgets (modules, rdma_cm
defaults, PCIe ACS and NIC Device Control, the RoCE MTU, QoS). Pure:
renders text from the wanted state."""

from __future__ import annotations

from ccrhost.model import qos
from ccrhost.model.managed import (  # noqa: F401  (the boot unit's paths)
    BOOT_SCRIPT,
    QOS_INTERFACES,
    UNIT,
    UNIT_PATH,
    UNIT_WANTS,
)
from ccrhost.model.ports import ethernet_ports
from ccrhost.model.qos import QosInterface
from ccrhost.render import render


def render_boot(settings, rdma, netdevs: dict, qos_state: dict, datapath: list | None = None,
                peermem: str | None = None, pause: dict | None = None) -> tuple[str, str]:
    """The boot script and its unit. QoS is planned for every netdev, and
    re-applied at boot to those the QoS stage lists in QOS_INTERFACES.
    ``datapath``: argv lists that re-apply ACS, NIC Device Control and the
    RoCE MTU (before QoS, whose buffers are sized for the MTU);
    ``peermem``: the peer-memory module to load with the other modules;
    ``pause``: netdev -> global pause setting (``ethtool -a``) where the
    driver has one: turned off again at boot where PFC is on."""
    per_iface = []
    if settings.qos_enable:
        wanted = settings.qos_wanted()
        for iface in netdevs:
            current = qos_state.get(iface, QosInterface())
            cmds, _ = qos.plan_interface(iface, current.backend, wanted, current, force=True,
                                         pause=(pause or {}).get(iface))
            per_iface.append((iface, [qos.shell_line(c) for c in cmds]))
    roce_ports = [(dev, num) for dev, num, _ in ethernet_ports(rdma)]
    all_ports = [f"{dev}/ports/{num}" for info in netdevs.values() for dev, num in info["ports"]]
    script = render("ccrhost-boot.sh.j2",
        modules=[*settings.rdma_modules, *([peermem] if peermem else [])], wait_seconds=120, ports=all_ports,
        roce_ports=roce_ports, roce_mode=settings.roce_mode, tos=settings.roce_tos,
        datapath=[list(argv) for argv in datapath or []], qos=per_iface, qos_list=QOS_INTERFACES)
    unit = render("ccrhost-boot.service.j2", script=BOOT_SCRIPT, wait_seconds=120)
    return script, unit


def qos_list(interfaces) -> str:
    """QOS_INTERFACES' content (after ccrhost's header): one interface a line."""
    return ("# Interfaces whose QoS the deploy finished; the boot unit re-applies QoS to these only.\n"
            + "".join(f"{i}\n" for i in interfaces))
