"""RoCE defaults for rdma_cm, set through configfs."""

from __future__ import annotations

import re

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand

from ccrhost.facts.rdma import CONFIGFS, IB_ROOT, RDMA_CM
from ccrhost.model.ports import ethernet_ports, natural_key
from ccrhost.operations import cache as fact_cache
from ccrhost.operations.base import fail, operation, write_sysfs

_GLOBAL_TCLASS = re.compile(r"\s*Global tclass=([0-9]{1,3})\s*")


def global_tclass(lines) -> int | None:
    """The global value in an OFED ``traffic_class`` file, if one is set."""
    for line in lines or []:
        match = _GLOBAL_TCLASS.fullmatch(line)
        if match and int(match.group(1)) <= 255:
            return int(match.group(1))
    return None


def _group_command(dev: str) -> StringCommand:
    # The kernel accepts the mkdir only for an existing RDMA device; it then
    # creates ports/<n>/ itself.
    group = f"{RDMA_CM}/{dev}"
    return StringCommand(
        "test -d", RDMA_CM,
        "|| { echo 'rdma_cm is not loaded or does not support configfs' >&2; exit 1; };",
        "test -d", QuoteString(group), "|| mkdir", QuoteString(group),
    )


@operation
def mode(roce_mode: str = "RoCE v2", tos: int = 106, force_traffic_class: bool = False,
         require_devices: bool = True):
    """
    Set rdma_cm's default RoCE mode and ToS on every Ethernet-link-layer port.

    + roce_mode: ``RoCE v2`` or ``IB/RoCE v1``
    + tos: the full ToS byte, DSCP << 2 | ECN bits (DSCP 26 with ECT(0) is 106)
    + force_traffic_class: also write the OFED-only
      ``/sys/class/infiniband/<dev>/tc/<port>/traffic_class``, which overrides
      the traffic class of every application on that port
    + require_devices: fail the host when it has no RDMA device

    InfiniBand-link-layer ports are skipped and logged. Mounts configfs on
    ``/sys/kernel/config`` first if nothing is mounted there.

    **Example:**

    .. code:: python

        roce.mode(name="RoCE v2, ToS 106", roce_mode="RoCE v2", tos=106)
    """
    rdma = fact_cache.rdma(host)
    devices = rdma.devices
    if not devices:
        if require_devices:
            yield from fail(f"no RDMA device under {IB_ROOT} (is the NIC driver loaded?)")
        return

    ethernet = ethernet_ports(rdma)
    efa = []
    for dev, data in sorted(devices.items(), key=lambda kv: natural_key(kv[0])):
        for num, port in sorted(data.ports.items()):
            if port.efa:
                efa.append(f"{dev}/{num}")
            elif port.link_layer != "Ethernet":
                host.log(f"{dev} port {num}: link layer {port.link_layer}, RoCE settings skipped")
    if efa:
        # EFA has no RoCE GIDs and no DCB, and NCCL reaches it through the
        # aws-ofi-nccl plugin (docs/efa.md): every such stage passes it by
        host.log(f"{', '.join(efa)}: EFA: QoS, RoCE and global pause not applicable; NCCL via aws-ofi-nccl")
    if not ethernet:
        return

    if not rdma.node.mounted:
        yield StringCommand("mount -t configfs none", CONFIGFS)

    grouped = set()
    for dev, num, port in ethernet:
        cm = port.cm
        base = f"{RDMA_CM}/{dev}/ports/{num}"
        if cm is None and dev not in grouped:
            grouped.add(dev)
            yield _group_command(dev)
        if cm is None or cm.default_roce_mode != roce_mode:
            yield write_sysfs(f"{base}/default_roce_mode", roce_mode)
        if cm is None or cm.default_roce_tos != tos:
            yield write_sysfs(f"{base}/default_roce_tos", str(tos))
        if force_traffic_class:
            if port.traffic_class is None and not devices[dev].ofed_tc:
                host.log(f"{dev} port {num}: no tc/{num}/traffic_class (needs MLNX_OFED), not forced")
            elif global_tclass(port.traffic_class) != tos:
                yield write_sysfs(f"{IB_ROOT}/{dev}/tc/{num}/traffic_class", str(tos))
