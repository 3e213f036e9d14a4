"""Measured GPUDirect RDMA bandwidth, per node (``verify_measure_gpudirect``).

Each GPU-NIC pair is measured through GPU memory with a loopback
ib_write_bw on its NIC, pinned to the NIC's NUMA node, where ib_write_bw
was built with CUDA. Runs from deploy code, in the host's own greenlet, so
every node measures at once.
"""

from __future__ import annotations

from ccrhost.facts.perftest import GpuDirectRuns
from ccrhost.model import datapath as dp
from ccrhost.model.ports import compute_ports
from ccrhost.operations import cache as fact_cache
from ccrhost.probes.perftest import GdrPair

# Above the host-pair tests' ports, whose servers may still be winding down.
PORT_OFFSET = 500


def gdr_pairs(pci, exclude) -> list[GdrPair]:
    return [GdrPair(f"{p.gpu.name}-{p.nic.name}", int(p.gpu.name.removeprefix("GPU")), p.nic.name,
                    p.nic.numa_node) for p in pci.pairs(exclude)]


def measure_host(host, settings) -> dp.GpuDirectBandwidth | None:
    """This host's pairs measured, or why they cannot be; None where the
    node has no GPU-NIC pair."""
    try:
        pci, rdma = fact_cache.pci(host), fact_cache.rdma(host)
    except fact_cache.NodeReadError as exc:
        return dp.GpuDirectBandwidth(False, why=f"the node could not be read: {exc}")
    pairs = gdr_pairs(pci, settings.rdma_exclude_devices)
    if not pairs:
        return None
    rate = {}
    for p in compute_ports(rdma, settings.rdma_exclude_devices):
        if p.active:
            rate.setdefault(p.device, p.link_gbps)
    # the path NCCL takes: a peer-memory client where one is registered, else dma-buf
    dmabuf = not pci.peer.loaded and dp.dmabuf_ready(pci.peer)[0]
    why, gbps, errors = fact_cache._real(host).get_fact(
        GpuDirectRuns, pairs=pairs, port=settings.verify_measure_port + PORT_OFFSET,
        seconds=settings.verify_measure_seconds, timeout=settings.verify_measure_timeout, dmabuf=dmabuf)
    if why:
        return dp.GpuDirectBandwidth(False, why=why)
    expected = {p.name: rate[p.device] for p in pairs if p.device in rate}
    return dp.GpuDirectBandwidth(True, gbps=gbps, expected=expected, errors=errors)
