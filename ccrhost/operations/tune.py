"""Every tuning stage of ``deploys/rdma.py`` as one pyinfra operation.

pyinfra spends its own bookkeeping on each operation of each host (the
operation order is taken from ``inspect.stack()``), several milliseconds
apiece; at fleet scale that, not the nodes, bounds the controller. One
operation that runs the stages in turn costs it once. The stages stay
separate functions (each module's own operation, usable alone), planned
one after the other from the node's one snapshot. The writes of every
stage planned from one read go to the node in one command, sent before
any stage plans from a fresh read (after the modules stage loaded a
driver); the last one also reads the tuned node back for the verification.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand
from pyinfra.api import operation as pyinfra_operation

from ccrhost.operations import boot, datapath, nccl, qos, roce
from ccrhost.operations import cache as fact_cache
from ccrhost.operations import modules as rdma_modules
from ccrhost.operations.base import DRY, ReadBackCommand, batched, planned

# what each stage's log line is headed with ("[host] QoS: 1 command"); the
# bench counts changed stages from these lines
STAGE_LABELS = ("modules", "RoCE", "boot unit", "MTU", "QoS", "PFC headroom", "GPUDirect", "PCIe ACS",
                "NIC PCIe", "NCCL")
# The stages whose writes change what the PCI probe reads (peer memory, ACS,
# Device Control). No stage changes the GPUs.
PCI_STAGES = {"GPUDirect", "PCIe ACS", "NIC PCIe"}
# The stages whose writes can disturb running GPU work: a link toggle (MTU,
# PFC, trust, buffers), PCIe routing or Device Control changed under live
# DMA. The rest apply on a busy node too: the modules and GPUDirect stages
# only load a module that is missing (never unload or reload one, so nothing
# a running process uses changes), the rdma_cm defaults count for new
# connections, and the boot unit, the headroom read and NCCL's files change
# nothing that runs.
DISRUPTIVE = {"MTU", "QoS", "PCIe ACS", "NIC PCIe"}


class BusyHold:
    """Whether a disruptive stage's planned commands are held back: read the
    node's GPU work once, at the first disruptive stage that would change
    something (a node already tuned costs no extra read), unless
    ``rdma_tune_when_busy``. ``skipped``: the stages held."""

    def __init__(self, settings):
        self.allowed, self.work, self.skipped = settings.rdma_tune_when_busy, None, []
        self.slurm_conf = getattr(settings, "slurm_conf", None)  # where squeue finds Slurm (facts.busy)

    def __call__(self, label: str):
        def hold(_commands) -> bool:
            if label not in DISRUPTIVE or self.allowed:
                return False
            if self.work is None:
                import time

                from ccrhost.facts.busy import GpuWorkFact
                from ccrhost.model.busy import GpuWork

                # a read that failed (pyinfra gives None) is not an idle node
                self.work = fact_cache._real(host).get_fact(GpuWorkFact, attempt=time.time(),
                                                            slurm_conf=self.slurm_conf) or \
                    GpuWork(error="the read failed")
            if self.work.idle:
                return False
            self.skipped.append(label)
            return True
        return hold

    def message(self) -> str | None:
        from ccrhost.model.busy import skip_message

        return skip_message(self.work, self.skipped, "rdma_tune_when_busy") if self.skipped else None


def read_back(written: set[str]) -> tuple[str, ...]:
    """The probes the read-back after ``written`` stages reads again: every
    one a write can change, and the fabric counters (the node's stored
    reading then starts after the tuning, so the next window does not span
    it). The GPUs, and the PCI tree unless a data-path stage wrote to it,
    stay as the run's first read saw them (GPU and host health too), which is all a no-op run judges
    by: on a real node nvidia-smi alone can take longer than the rest."""
    from ccrhost.probes.node import PROBES

    skip = {"gpus", "gpu_health", "host_health"} | (set() if written & PCI_STAGES else {"pci"})
    return tuple(p for p in PROBES if p not in skip)


def _stages(settings):
    """(label, generator) per stage, in order; generators are lazy, so each
    is planned only when its turn comes."""
    yield "modules", lambda: rdma_modules.modules._inner(modules=list(settings.rdma_modules))
    yield "RoCE", lambda: roce.mode._inner(
        roce_mode=settings.roce_mode, tos=settings.roce_tos,
        force_traffic_class=settings.roce_force_traffic_class, require_devices=settings.rdma_require_devices)
    # The boot unit goes in before QoS: when an interface's QoS fails, the
    # ones finished before it are already persisted (the unit re-applies the
    # interfaces the QoS stage lists). It re-applies the data path too, from
    # the node's PCI topology, which the stages below do not change.
    yield "boot unit", lambda: boot.persist._inner(settings)
    if settings.roce_mtu is not None:
        yield "MTU", lambda: datapath.mtu._inner(settings)
    if settings.qos_enable:
        yield "QoS", lambda: qos.lossless._inner(settings)
        if settings.qos_min_headroom is not None:
            yield "PFC headroom", lambda: qos.headroom._inner(settings)
    if settings.rdma_gpudirect:
        yield "GPUDirect", lambda: datapath.gpudirect._inner(settings)
    if settings.rdma_acs_clear:
        yield "PCIe ACS", lambda: datapath.acs._inner(settings)
    yield "NIC PCIe", lambda: datapath.nic_pcie._inner(settings)
    yield "NCCL", lambda: nccl.environment._inner(settings)


@pyinfra_operation()
def rdma(settings):
    """
    Tune a node for RDMA: kernel modules, rdma_cm RoCE defaults, the boot
    unit, the RoCE MTU, lossless QoS (and the PFC headroom check when
    ``qos_min_headroom`` is set), the GPU-to-NIC data path (peer memory,
    PCIe ACS, NIC Device Control) and the NCCL environment, in that order.
    A stage that fails
    fails the host and stops it there; each stage that changes something
    says so in one line. The writes of all stages planned from one read
    of the node go to it as one command. On a node whose GPUs hold compute
    processes the disruptive stages (``DISRUPTIVE``) are skipped, and the
    host says which, unless ``rdma_tune_when_busy``.

    + settings: the host's validated ``HostSettings``

    **Example:**

    .. code:: python

        tune.rdma(name="Tune RDMA", settings=settings)
    """
    held = BusyHold(settings)
    if DRY:
        # nothing runs, and pyinfra's change detection stops at the first
        # command: list every stage, and what is held back, now
        every = [list(planned(stage(), held(label))) for label, stage in _stages(settings)]
        if held.skipped:
            host.log(f"would have {held.message()}")
        for commands in every:
            yield from commands
        return
    # The stages plan from the node's one snapshot, which no stage's writes
    # change, so their writes go to the node together: one round trip, in
    # stage order, stopping at the first that fails as separate commands
    # would. A stage that dropped the snapshot (the modules stage after
    # loading a driver) has what is planned sent before the next stage reads
    # the node again. The host's last write also reads the tuned node back
    # for the verification.
    pending: list[tuple[str, list]] = []

    def send() -> list:
        """The pending stages' writes as one command (a failure stays its
        own), each stage announced in one log line."""
        for label, commands in pending:
            host.log(f"{label}: {len(commands)} command{'s' if len(commands) != 1 else ''}")
        out = batched([command for _label, commands in pending for command in commands])
        pending.clear()
        return out

    for label, stage in _stages(settings):
        if not fact_cache.cached(host):
            yield from send()
        commands = list(planned(stage(), held(label)))
        if commands:
            pending.append((label, commands))
    if held.skipped:
        host.log(held.message())
    written = {label for label, _commands in pending}
    # what is sent last was planned from the snapshot held now (a dropped
    # one was read again before), so the read-back can complete it
    probes = read_back(written) if fact_cache.cached(host) else None
    last = send()
    if last and isinstance(last[-1], StringCommand):
        last[-1] = ReadBackCommand(last[-1], host, probes)
    yield from last
