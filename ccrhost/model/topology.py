"""GPU <-> NIC distance from sysfs alone, in ``nvidia-smi topo -m``'s words. Pure.

An :class:`Endpoint` is a PCI function as sysfs places it: the resolved
path of ``/sys/bus/pci/devices/<bdf>`` (``/sys/devices/pciDDDD:BB/<root
port>/<bridge>.../<bdf>``) and its ``numa_node``. Two such paths give the
level (reference gdr.md section 4; the rule is derived and mirrors the
legend of ``nvidia-smi topo -m``):

- PIX: both hang under one bridge with at most one more bridge on each
  side (a GPU and a NIC on two downstream ports of one PCIe switch);
- PXB: they share a bridge but more bridges are crossed (nested switches);
- PHB: they share only the host bridge (``pciDDDD:BB``);
- NODE: different host bridges, same NUMA node;
- SYS: different NUMA nodes (the CPU interconnect is crossed).

NCCL's default ``NCCL_NET_GDR_LEVEL`` on x86 is PXB: GPUDirect RDMA is used
for PIX and PXB pairs only (gdr.md, "NCCL_NET_GDR_LEVEL").
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ccrhost.model.ports import natural_key

LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
RANK = {level: i for i, level in enumerate(LEVELS)}
# Levels at which NCCL uses GPUDirect RDMA by default (NCCL_NET_GDR_LEVEL=PXB).
GDR_LEVELS = ("PIX", "PXB")
LEGEND = {
    "SYS": "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "NODE": "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "PHB": "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "PXB": "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "PIX": "Connection traversing at most a single PCIe bridge",
}

BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HOST_RE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


class TopologyError(ValueError):
    """A device path that is not a resolved sysfs PCI path."""


@dataclass(frozen=True)
class Endpoint:
    name: str               # "GPU0" or the RDMA device ("mlx5_0")
    bdf: str                # "0000:18:00.0"
    path: str               # resolved /sys/bus/pci/devices/<bdf>
    numa_node: int | None   # None: the kernel printed -1 (no NUMA information)

    @property
    def host_bridge(self) -> str:
        return split_path(self.path, self.bdf)[0]

    @property
    def bridges(self) -> tuple[str, ...]:
        """Bridges from the root port down to (not including) this function."""
        return split_path(self.path, self.bdf)[1]


@functools.lru_cache(maxsize=4096)  # pure; the pairing asks for each path hundreds of times per host
def split_path(path: str, bdf: str) -> tuple[str, tuple[str, ...]]:
    """``/sys/devices/pci0000:14/0000:14:01.0/0000:15:00.0/0000:18:00.0`` ->
    ``("pci0000:14", ("0000:14:01.0", "0000:15:00.0"))``."""
    parts = [p for p in path.split("/") if p]
    if len(parts) < 4 or parts[:2] != ["sys", "devices"] or not _HOST_RE.match(parts[2]):
        raise TopologyError(f"{bdf}: {path!r} is not a resolved /sys/devices/pciDDDD:BB/... path")
    chain = parts[3:]
    if chain[-1] != bdf:
        raise TopologyError(f"{bdf}: path {path!r} does not end in the function itself")
    bad = [c for c in chain if not BDF_RE.match(c)]
    if bad:
        raise TopologyError(f"{bdf}: path {path!r} has a component that is no PCI address: {bad[0]!r}")
    return parts[2], tuple(chain[:-1])


def _common(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def classify(a: Endpoint, b: Endpoint) -> str:
    """The ``nvidia-smi topo -m`` level between two PCI functions."""
    host_a, chain_a = split_path(a.path, a.bdf)
    host_b, chain_b = split_path(b.path, b.bdf)
    if host_a == host_b:
        shared = _common(chain_a, chain_b)
        if shared == 0:
            return "PHB"
        if max(len(chain_a), len(chain_b)) - shared <= 1:
            return "PIX"
        return "PXB"
    # -1 on either side: no NUMA information, the crossing cannot be proven.
    if a.numa_node is None or b.numa_node is None or a.numa_node == b.numa_node:
        return "NODE"
    return "SYS"


def path_bridges(a: Endpoint, b: Endpoint) -> tuple[str, ...]:
    """Bridges that peer traffic between ``a`` and ``b`` passes: the bridges
    below their lowest shared bridge on both sides, plus that shared bridge
    itself (the switch's upstream port). Without a shared bridge the traffic
    goes up through the root complex, so every bridge of both chains counts."""
    host_a, chain_a = split_path(a.path, a.bdf)
    host_b, chain_b = split_path(b.path, b.bdf)
    shared = _common(chain_a, chain_b) if host_a == host_b else 0
    out = []
    if shared:
        out.append(chain_a[shared - 1])
    out += chain_a[shared:]
    out += [x for x in chain_b[shared:] if x not in out]
    return tuple(out)


@dataclass(frozen=True)
class Pair:
    gpu: Endpoint
    nic: Endpoint
    level: str
    shared: bool  # the NIC also serves another GPU (fewer NICs than GPUs)

    def to_dict(self) -> dict:
        return {"gpu": self.gpu.name, "gpu_bdf": self.gpu.bdf, "nic": self.nic.name,
                "nic_bdf": self.nic.bdf, "level": self.level, "shared": self.shared}


def _closeness(gpu: Endpoint, nic: Endpoint) -> tuple:
    level = classify(gpu, nic)
    depth = _common(gpu.bridges, nic.bridges) if gpu.host_bridge == nic.host_bridge else 0
    return RANK[level], -depth, natural_key(nic.name)


def pair(gpus: list[Endpoint], nics: list[Endpoint]) -> list[Pair]:
    """Each GPU with its rail NIC: the closest pairs are matched first, one
    NIC per GPU while NICs last, so a GPU whose own NIC moved away is paired
    with that far NIC rather than stealing a neighbour's. GPUs left over
    (fewer NICs than GPUs) share their nearest NIC."""
    if not nics:
        return []
    edges = sorted(((_closeness(g, n), gi, ni) for gi, g in enumerate(gpus) for ni, n in enumerate(nics)),
                   key=lambda e: (e[0][:2], e[1], e[0][2]))
    chosen: dict[int, int] = {}
    taken: set[int] = set()
    for _, gi, ni in edges:
        if gi not in chosen and ni not in taken:
            chosen[gi] = ni
            taken.add(ni)
    out = []
    for gi, g in enumerate(gpus):
        shared = gi not in chosen
        ni = chosen[gi] if not shared else min(range(len(nics)), key=lambda i: _closeness(g, nics[i]))
        out.append(Pair(g, nics[ni], classify(g, nics[ni]), shared))
    return out


def matrix(gpus: list[Endpoint], nics: list[Endpoint]) -> dict[str, dict[str, str]]:
    """``{gpu name: {nic name: level}}``, for JSON reports."""
    return {g.name: {n.name: classify(g, n) for n in nics} for g in gpus}


def render(gpus: list[Endpoint], nics: list[Endpoint]) -> str:
    """The GPU x NIC part of ``nvidia-smi topo -m``, with its legends."""
    header = [""] + [f"NIC{i}" for i in range(len(nics))] + ["NUMA Affinity"]
    rows = [header]
    for g in gpus:
        numa = "N/A" if g.numa_node is None else str(g.numa_node)
        rows.append([g.name] + [classify(g, n) for n in nics] + [numa])
    lines = ["".join(cell.ljust(8) for cell in row).rstrip() for row in rows]
    lines += ["", "Legend:", ""]
    lines += [f"  {level:<4} = {LEGEND[level]}" for level in reversed(LEVELS)]
    lines += ["", "NIC Legend:", ""]
    lines += [f"  NIC{i}: {n.name}" for i, n in enumerate(nics)]
    return "\n".join(lines) + "\n"
