"""The NIC firmware stage, opt-in: write the profile's settings with
``mlxconfig -y set`` for the next boot. Never reboots: it reports per host
that a reboot is owed (``ccrhost slurm rollout`` or an operator does it)."""

from __future__ import annotations

import time

from pyinfra import host
from pyinfra.api import StringCommand

from ccrhost.model import nicfw
from ccrhost.operations import cache as fact_cache
from ccrhost.operations.base import fail, operation


def plans(settings, nics, ethernet: dict[str, bool]) -> list[tuple[object, dict[str, int]]]:
    wants = settings.nic_fw_profile()
    return [(nic, nicfw.plan(nic, wants, ethernet.get(nic.device, True))) for nic in nics]


@operation
def firmware(settings):
    """
    Write each compute NIC's firmware settings that differ from the profile
    (their Next Boot value) with one ``mlxconfig -d <bdf> -y set NAME=VALUE
    ...`` per NIC; a NIC already set as the profile wants gets nothing. The
    values take effect at the next boot: the stage never reboots, it logs
    "reboot required" naming the parameters.

    **Example:**

    .. code:: python

        nicfw.firmware(name="NIC firmware", settings=settings)
    """
    from ccrhost.facts.nicfw import NicFirmwareQuery
    from ccrhost.model.ports import compute_ports

    snap = fact_cache.snapshot(host)
    ports = [p for p in compute_ports(snap.rdma, settings.rdma_exclude_devices) if not p.efa]
    ethernet = {}
    for p in ports:
        ethernet[p.device] = ethernet.get(p.device, False) or p.link_layer == "Ethernet"
    nics = fact_cache._real(host).get_fact(NicFirmwareQuery, devices=tuple(sorted(ethernet)), attempt=time.time())
    unreadable = [f"{n.device}: {n.error or 'neither mlxconfig nor mstconfig is installed'}"
                  for n in nics if n.missing or n.error]
    if unreadable:  # planned whole before anything is written: one unreadable NIC leaves all as they are
        yield from fail(f"NIC firmware: cannot read {'; '.join(unreadable)}")
        return
    owed = {}
    for nic, wanted in plans(settings, nics, ethernet):
        if wanted:
            sets = " ".join(f"{k}={v}" for k, v in wanted.items())
            yield StringCommand(nic.tool, "-d", nic.bdf, "-y", "set", sets)
        names = nicfw.reboot_owed(nic, wanted)
        if names:
            owed[nic.device] = names
    if owed:
        host.log("NIC firmware: reboot required (" + "; ".join(f"{d}: {', '.join(n)}" for d, n in owed.items())
                 + ")")
