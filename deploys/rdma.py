"""Tune a node's RDMA stack.

    pyinfra -y INVENTORY deploys/rdma.py

Stages, in order: kernel modules, RoCE defaults for rdma_cm, lossless
QoS (trust/DSCP, PFC, buffers, ECN/DCQCN), the NCCL environment
(/etc/nccl.conf and /etc/profile.d/ccrhost-nccl.sh), the boot unit that
re-applies the volatile settings, then the
verification of each node's CCR (hosts below threshold fail). Every host's
inventory data is validated before any host is touched; the keys are in
the README.
"""

from pyinfra import host, inventory

from ccrhost.inventory import host_settings
from ccrhost.operations import nccl, qos, rdma, roce, verify
from ccrhost.report import fleet_report

settings = host_settings(host, inventory)

rdma.modules(
    name="Load RDMA kernel modules",
    modules=list(settings.rdma_modules),
)

roce.mode(
    name="Set rdma_cm RoCE mode and ToS",
    roce_mode=settings.roce_mode,
    tos=settings.roce_tos,
    force_traffic_class=settings.roce_force_traffic_class,
    require_devices=settings.rdma_require_devices,
)

if settings.qos_enable:
    qos.lossless(
        name="Configure lossless RoCE (trust, PFC, buffers, ECN)",
        settings=settings,
    )
    if settings.qos_min_headroom is not None:
        # pyinfra spends its bookkeeping on every operation of every host,
        # so a check nobody asked for is not queued at all
        qos.headroom(
            name="Check PFC headroom",
            settings=settings,
        )

nccl.environment(
    name="Write NCCL environment",
    settings=settings,
)

qos.persist(
    name="Install the boot unit that re-applies these settings",
    settings=settings,
)

verify.ccr(
    name="Verify CCR",
    settings=settings,
    report=fleet_report(settings.verify_report_dir, settings.verify_fleet_tolerance),
)
