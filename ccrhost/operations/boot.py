"""Install the boot unit (see :mod:`ccrhost.model.boot`) and enable it where
systemd runs."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand

from ccrhost.model.boot import BOOT_SCRIPT, UNIT, UNIT_PATH, render_boot
from ccrhost.model.managed import PEERMEM_FILE
from ccrhost.model.ports import roce_netdevs
from ccrhost.operations import cache as fact_cache
from ccrhost.operations.base import fail, operation
from ccrhost.operations.datapath import boot_plan, peermem_module
from ccrhost.operations.files import MANAGED_HEADER, converge


@operation
def persist(settings):
    """
    Install the boot-time oneshot unit and its script that re-apply the
    modules (with the peer-memory module the GPUDirect stage loads),
    rdma_cm defaults, QoS settings, PCIe ACS and NIC Device Control on the
    GPU-NIC paths and the RoCE MTU after every boot; enable it
    with systemctl where systemd runs.

    **Example:**

    .. code:: python

        boot.persist(name="Install the boot unit", settings=settings)
    """
    rdma = fact_cache.rdma(host)
    netdevs = roce_netdevs(rdma, settings.rdma_exclude_devices)
    qos_facts = fact_cache.qos_state(host, netdevs)
    pci = fact_cache.pci(host)
    files = fact_cache.files(host, [BOOT_SCRIPT, UNIT_PATH, PEERMEM_FILE])
    peermem = peermem_module(pci, files.get(PEERMEM_FILE)) if settings.rdma_gpudirect else None
    script, unit = render_boot(settings, rdma, netdevs, qos_facts.interfaces, boot_plan(settings, rdma, pci), peermem,
                               fact_cache.global_pause(host))
    # the script's first line must stay the shebang
    body = script.split("\n", 1)
    yield from converge(BOOT_SCRIPT, body[0] + "\n" + MANAGED_HEADER + body[1], files.get(BOOT_SCRIPT), mode="755")
    yield from converge(UNIT_PATH, MANAGED_HEADER + unit, files.get(UNIT_PATH))
    if qos_facts.systemd and not qos_facts.unit_enabled:
        yield StringCommand("systemctl daemon-reload && systemctl enable", UNIT)
    elif not qos_facts.systemd and qos_facts.systemd_pid1:
        # a container with the host's PIDs but not its /run/systemd: the unit
        # would never run at boot, so this stage fails rather than skip it
        yield from fail(f"boot unit: systemd runs this host (PID 1) but /run/systemd/system is not visible here, "
                        f"so {UNIT} cannot be enabled (in a container, mount the host's /run/systemd)")
    elif not qos_facts.systemd:
        host.log(f"systemd is not running: {UNIT} installed, not enabled; run {BOOT_SCRIPT} at boot")
