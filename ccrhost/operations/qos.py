"""Lossless RoCE: trust/DSCP, PFC, buffers ("credit" thresholds), ECN/DCQCN.
The boot unit that re-applies them is :mod:`ccrhost.operations.boot`."""

from __future__ import annotations

import shlex
import time

from pyinfra import host

from ccrhost.facts.rdma import IB_ROOT
from ccrhost.model import qos
from ccrhost.model.boot import QOS_INTERFACES, qos_list
from ccrhost.model.ports import management_hits, roce_netdevs
from ccrhost.operations import cache as fact_cache
from ccrhost.operations.base import (
    PlannedCommand,
    fail,
    operation,
    upload_text,
    write_sysfs,
)
from ccrhost.operations.datapath import planned_mtu
from ccrhost.operations.files import MANAGED_HEADER, converge
from ccrhost.probes.qos import QosInterface


def _guard(netdevs, node, settings) -> str | None:
    """Why QoS must not be changed here: it toggles the link of a port that
    carries this SSH connection or a default route, or the SSH path is unknown."""
    if settings.qos_allow_ssh_interface:
        return None
    hits, unknown = management_hits(node, netdevs)
    if unknown:
        return (f"refusing to change QoS: cannot tell which interface carries this SSH connection: {unknown}. "
                "Set qos_allow_ssh_interface: true for this host to allow it.")
    if hits:
        return ("refusing to change QoS: " + "; ".join(hits) + ". Changing PFC toggles the port link and would "
                "cut this node off. Set qos_allow_ssh_interface: true for this host to allow it.")
    return None


@operation
def lossless(settings):
    """
    Configure lossless RoCE on every compute RoCE netdev.

    + settings: the host's validated ``HostSettings`` (qos_*, ecn_*, dcqcn_params)

    Uses ``mlnx_qos`` and the ecn/ sysfs tree on MLNX_OFED, iproute2 ``dcb``
    and debugfs ``cc_params`` on upstream kernels, and turns global 802.3x
    pause off (``ethtool -A``) where PFC is on; reads the state first
    and writes only what differs, one interface at a time as a unit (a
    failed setting restores the interface and stops there). Refuses a
    netdev under the SSH connection or a default route (through VLANs,
    bridges, bonds, macvlans) unless ``qos_allow_ssh_interface``. Buffers
    are checked against mlx5's xoff formula before anything is written.

    **Example:**

    .. code:: python

        qos.lossless(name="Configure lossless RoCE", settings=settings)
    """
    rdma = fact_cache.rdma(host)
    netdevs = roce_netdevs(rdma, settings.rdma_exclude_devices)
    if not netdevs:
        host.log("no RoCE compute netdev: QoS skipped")
        return
    refused = _guard(netdevs, rdma.node, settings)
    if refused:
        yield from fail(refused)
        return
    state = fact_cache.qos_state(host, netdevs).interfaces
    pause = fact_cache.global_pause(host)
    wanted = settings.qos_wanted()
    plans, problems, notes = [], [], {}
    for iface, info in netdevs.items():
        current = state.get(iface, QosInterface())
        problems += [f"{iface}: {e}" for e in current.errors]
        mtu = planned_mtu(settings, rdma.node, iface, current.mtu) or 4200  # as the MTU stage leaves it
        problems += [f"{iface}: {p}" for p in qos.buffer_problems(wanted, current, info["rate_gbps"], mtu)]
        steps, iface_notes = qos.plan_steps(iface, current.backend, wanted, current, pause=pause.get(iface))
        for note in iface_notes:
            notes.setdefault(note, []).append(iface)
        plans.append((iface, steps))
    for note, ifaces in notes.items():
        host.log(f"{', '.join(ifaces)}: {note}")
    if problems:
        yield from fail("QoS not changed: " + "; ".join(problems))
        return
    # Each interface as a unit: a failed setting restores what the interface
    # had, records the interfaces finished before it for the boot unit, and
    # stops there.
    names = list(netdevs)
    listed = fact_cache.files(host, [QOS_INTERFACES]).get(QOS_INTERFACES)
    if listed is not None and listed.error:
        yield from fail(f"QoS not changed: {QOS_INTERFACES} left untouched: {listed.error}")
        return
    backup = ""
    if listed is not None and MANAGED_HEADER not in listed.content[:512]:  # someone else's file
        backup = (f"cp -p {shlex.quote(QOS_INTERFACES)} "
                  f"{shlex.quote(f'{QOS_INTERFACES}.ccrhost-bak.{int(time.time())}')} && ")
    for i, (iface, steps) in enumerate(plans):
        if steps:
            record = backup + upload_text(MANAGED_HEADER + qos_list(names[:i]), QOS_INTERFACES)[0].get_raw_value()
            script = qos.unit_script(iface, steps, names[:i], on_failure=record)
            yield PlannedCommand([qos.shell_line(step.forward) for step in steps], script)
    yield from converge(QOS_INTERFACES, MANAGED_HEADER + qos_list(names), listed)
    if settings.qos_credit_threshold is not None:
        for info in netdevs.values():
            for dev, num in info["ports"]:
                have = rdma.devices[dev].ports[num].credit_threshold
                path = f"{IB_ROOT}/{dev}/ports/{num}/credit_threshold"
                if have is None:
                    host.log(f"{dev} port {num}: credit_threshold is unsupported on this driver "
                             f"(no {path}); not created")
                elif have != str(settings.qos_credit_threshold):
                    yield write_sysfs(path, str(settings.qos_credit_threshold))


@operation
def headroom(settings):
    """
    Read OFED's xoff/xon thresholds back and check each lossless buffer's
    headroom (size - xoff) against ``qos_min_headroom``. Read-only.

    **Example:**

    .. code:: python

        qos.headroom(name="Check PFC headroom", settings=settings)
    """
    if settings.qos_min_headroom is None:
        return
    netdevs = roce_netdevs(fact_cache.rdma(host), settings.rdma_exclude_devices)
    if not netdevs:
        return
    state = fact_cache.qos_state(host, netdevs).interfaces
    problems = []
    for iface in netdevs:
        current = state.get(iface, QosInterface())
        if current.ofed_buffers is None:
            host.log(f"{iface}: the driver does not expose xoff/xon (OFED qos/buffer_size); headroom not checked")
            continue
        lossless_set = qos.lossless_buffers(tuple(current.pfc or (0,) * 8), tuple(current.prio2buffer or (0,) * 8))
        problems += [f"{iface}: {p}" for p in
                     qos.headroom_problems(current.ofed_buffers, lossless_set, settings.qos_min_headroom)]
    if problems:
        yield from fail("PFC headroom: " + "; ".join(problems))


