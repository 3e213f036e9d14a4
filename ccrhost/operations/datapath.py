"""The GPU-to-NIC data path: peer memory, PCIe ACS, NIC Device Control and
the RoCE MTU.

Each stage reads the node snapshot's PCI probe, plans with the pure
planners of :mod:`ccrhost.model.datapath` and yields only what differs.
What a reboot loses (ACS, Device Control, MTU, a module loaded by hand) the
boot unit re-applies: :func:`boot_plan` gives it the same plans, forced.
"""

from __future__ import annotations

import fnmatch

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand

from ccrhost.model import datapath as dp
from ccrhost.model.managed import PEERMEM_FILE
from ccrhost.model.ports import management_hits, roce_netdevs
from ccrhost.model.topology import path_bridges
from ccrhost.operations import cache as fact_cache
from ccrhost.operations.base import fail, operation
from ccrhost.probes.kernel import no_tree_message
from ccrhost.operations.files import MANAGED_HEADER, converge


def _argv(argv: list[str]) -> StringCommand:
    return StringCommand(*[QuoteString(a) for a in argv])


def persisted_module(state) -> str | None:
    """The peer-memory module ccrhost's modules-load file names, if any."""
    if state is None or state.content is None or MANAGED_HEADER not in state.content:
        return None
    names = [line.strip() for line in state.content.splitlines() if line.strip() and not line.startswith("#")]
    return names[0] if len(names) == 1 and names[0] in dp.PEERMEM_MODULES else None


def peermem_module(pci, file_state) -> str | None:
    """The module the boot unit loads: the one this deploy loads now, or the
    one an earlier deploy persisted."""
    return dp.plan_peermem(pci.peer).module or persisted_module(file_state)


@operation
def gpudirect(settings):
    """
    GPUDirect RDMA: load the peer-memory module the driver ships
    (``nvidia_peermem``, or the older ``nv_peer_mem``) and persist it in
    ``/etc/modules-load.d/ccrhost-peermem.conf``, unless a peer-memory
    client is registered already or dma-buf serves (open GPU module on
    Linux 5.12 or later), which is said in the log. Never both.

    **Example:**

    .. code:: python

        datapath.gpudirect(name="GPUDirect RDMA", settings=settings)
    """
    pci = fact_cache.pci(host)
    if not pci.gpus():
        return
    plan = dp.plan_peermem(pci.peer)
    no_tree = fact_cache.modules(host).no_tree
    if not plan.possible and no_tree:
        # what the driver ships is read from modules.dep, absent here: not known
        yield from fail(f"GPUDirect: cannot tell which peer-memory module the driver ships: "
                        f"{no_tree_message(no_tree)}")
        return
    if plan.module is None:
        if not pci.peer.loaded:
            host.log(f"GPUDirect: {plan.note}")
        return
    yield StringCommand("modprobe", QuoteString(plan.module))
    state = fact_cache.files(host, [PEERMEM_FILE]).get(PEERMEM_FILE)
    yield from converge(PEERMEM_FILE, MANAGED_HEADER + plan.module + "\n", state)


@operation
def acs(settings):
    """
    Clear ACS redirect, source validation and upstream forwarding on every
    PCIe bridge between a GPU and its NIC (``setpci ECAP_ACS+0x6.w``, a
    masked write that leaves the other ACS bits), as DGX systems do at
    boot. Bridges on no GPU-NIC path keep their ACS.

    **Example:**

    .. code:: python

        datapath.acs(name="PCIe ACS", settings=settings)
    """
    pci = fact_cache.pci(host)
    pairs = pci.pairs(settings.rdma_exclude_devices)
    ctl = pci.acs_ctl()
    unread = sorted({b for p in pairs for b in path_bridges(p.gpu, p.nic) if b in ctl and ctl[b] is None})
    if unread:
        host.log(f"PCIe ACS: cannot read ACS of {', '.join(unread)} (setpci and root needed); not changed now")
    for argv in dp.plan_acs(pairs, ctl):
        yield _argv(argv)


def _nic_functions(pci, exclude):
    return [f for f in pci.functions.values() if f.role == "nic"
            and not any(fnmatch.fnmatchcase(f.ibdev or "", p) for p in exclude)]


def devctl_plans(settings, pci, force: bool = False) -> list[list[str]]:
    """Device Control writes for every compute NIC function, each with the
    fields wanted on its vendor."""
    out = []
    for f in sorted(_nic_functions(pci, settings.rdma_exclude_devices), key=lambda f: f.bdf):
        read_req, relaxed = settings.nic_devctl(f.vendor)
        word = f.devctl.word if f.devctl and f.devctl.error is None else None
        out += dp.plan_devctl({f.bdf: word}, read_req, relaxed, force=force)
    return out


@operation
def nic_pcie(settings):
    """
    NIC PCIe Device Control, opt-in: MaxReadReq (4096 on ConnectX with
    ``rdma_nic_pcie_optimize``, or ``rdma_nic_max_read_req``) and relaxed
    ordering (``rdma_nic_relaxed_ordering``), one masked ``setpci
    CAP_EXP+0x8.w`` write per NIC that differs.

    **Example:**

    .. code:: python

        datapath.nic_pcie(name="NIC PCIe", settings=settings)
    """
    pci = fact_cache.pci(host)
    unread = [f.ibdev or f.bdf for f in _nic_functions(pci, settings.rdma_exclude_devices)
              if any(settings.nic_devctl(f.vendor)) and (f.devctl is None or f.devctl.word is None)]
    if unread:
        host.log(f"NIC PCIe: cannot read Device Control of {', '.join(unread)} (setpci and root needed); "
                 "not changed now")
    for argv in devctl_plans(settings, pci):
        yield _argv(argv)


def carriers(node, netdevs) -> tuple[dict[str, str], str | None]:
    """The guard's notion (``model.ports.management_hits``): ``{netdev: why
    it is left alone}`` for each of ``netdevs`` under this SSH connection or
    a default route (through VLANs, bridges, bonds), and why the SSH
    connection's interface could not be told, if it could not."""
    hits, unknown = management_hits(node, netdevs)
    return {hit.split(" ", 1)[0]: hit for hit in hits}, unknown


def planned_mtu(settings, node, netdev: str, current: int | None) -> int | None:
    """The MTU ``netdev`` has once the MTU stage ran (the QoS buffer check
    sizes for it)."""
    if settings.roce_mtu is None:
        return current
    carrying, unknown = carriers(node, [netdev])
    return current if unknown or netdev in carrying else settings.roce_mtu


def mtu_plan(settings, rdma, current: dict[str, int | None]) -> dp.MtuPlan:
    """``current``: compute RoCE netdev -> its MTU now (None: unknown, set).
    Nothing is planned while the SSH connection's interface is unknown."""
    carrying, unknown = carriers(rdma.node, current)
    if unknown:
        return dp.MtuPlan([], [f"MTU not changed: cannot tell which interface carries this SSH connection: "
                               f"{unknown}"])
    plan = dp.plan_mtu({n: m for n, m in current.items() if n not in carrying}, settings.roce_mtu, None)
    plan.skipped += [f"{why}: MTU left at {current[n]}" for n, why in carrying.items()]
    return plan


@operation
def mtu(settings):
    """
    Set every compute RoCE netdev to ``roce_mtu`` (4200: RDMA active_mtu
    4096), never one under this SSH connection or a default route (the QoS
    guard's notion, with no opt-out: an MTU the switch port does not carry
    would cut the node off).

    **Example:**

    .. code:: python

        datapath.mtu(name="RoCE MTU", settings=settings)
    """
    if settings.roce_mtu is None:
        return
    rdma = fact_cache.rdma(host)
    netdevs = roce_netdevs(rdma, settings.rdma_exclude_devices)
    if not netdevs:
        return
    interfaces = fact_cache.qos_state(host, netdevs).interfaces
    current = {n: getattr(interfaces.get(n), "mtu", None) for n in netdevs}
    plan = mtu_plan(settings, rdma, current)
    # say so only while the netdev left alone is not at the MTU wanted
    odd = {n: m for n, m in current.items() if m != settings.roce_mtu}
    for note in mtu_plan(settings, rdma, odd).skipped:
        host.log(f"MTU: {note}")
    for argv in plan.commands:
        yield _argv(argv)


def boot_plan(settings, rdma, pci) -> list[list[str]]:
    """What the boot unit re-applies, every time: ACS on the GPU-NIC paths,
    NIC Device Control, the RoCE MTU. The same list on every deploy, so the
    boot script stays byte-identical while nothing changes."""
    out = []
    if settings.rdma_acs_clear:
        out += dp.plan_acs(pci.pairs(settings.rdma_exclude_devices), pci.acs_ctl(), force=True)
    out += devctl_plans(settings, pci, force=True)
    if settings.roce_mtu is not None:
        netdevs = roce_netdevs(rdma, settings.rdma_exclude_devices)
        out += mtu_plan(settings, rdma, dict.fromkeys(netdevs)).commands
    return out
