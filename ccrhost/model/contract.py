"""A node's contract as a platform file (issue 47, item 3): what a
known-good node reads, section by section, as ``ccrhost baseline capture``
writes it (as nhc-genconf does), and what another node differs from it by
(``ccrhost baseline diff``). Pure: the readings come from the probes that
``ccrhost check`` uses (node/baseline_capture.py on a node, the deploy's
snapshot through pyinfra).

One reader per section (:data:`SECTIONS`): ``hardware`` from the GPU, RDMA
and PCI probes; ``settings`` from the host baseline reading (CPUs, memory,
swap, hugepages, mounts, modules, command line, clocksource, versions:
model/contract_settings.py), with the same :class:`Observed` shape.

A value that cannot be read is left out of a capture, never guessed, and is
UNKNOWN in a diff.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccrhost.model.contract_settings import baseline_keys
from ccrhost.model.observed import Observed, hashable as _hashable
from ccrhost.model.status import FAIL, OK, UNKNOWN

__all__ = ["Observed", "SECTIONS", "capture", "diff", "status"]


def _gpu_name(i: int) -> str:
    return f"GPU {i}"


# PCIe GT/s per lane -> generation (the NIC's link speed as sysfs gives it)
PCIE_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
LINK_LAYER = {"InfiniBand": "InfiniBand", "Ethernet": "Ethernet", "Unknown": "EFA"}  # EFA reads "Unknown"


def hardware(readings) -> dict[str, Observed]:
    """The platform file's hardware keys (model/platform.py HARDWARE): GPU
    model and count, active compute NIC ports and their rate and link
    layer, each GPU's and NIC's PCIe generation and width (a dotted key is
    nested: gpu_pcie.width is gpu_pcie: {width: ...}), the NUMA nodes the
    GPUs and NICs sit on."""
    out: dict[str, Observed] = {}
    gpu_src = "nvidia-smi (NVML)"
    if readings.gpu_error:
        for key in ("gpu_model", "gpu_count", "gpu_pcie.gen", "gpu_pcie.width"):
            out[key] = Observed(gpu_src, error=readings.gpu_error)
    else:
        gpus = readings.gpus
        out["gpu_count"] = Observed(gpu_src, {"": len(gpus)})
        out["gpu_model"] = Observed(gpu_src, {_gpu_name(g.index): g.name for g in gpus})
        out["gpu_pcie.gen"] = Observed(gpu_src, {_gpu_name(g.index): g.pcie_gen for g in gpus
                                                 if g.pcie_gen is not None})
        out["gpu_pcie.width"] = Observed(gpu_src, {_gpu_name(g.index): g.pcie_width for g in gpus
                                                   if g.pcie_width is not None})
    ports = readings.ports
    active = [p for p in ports if p.active]
    nic_src = "/sys/class/infiniband/*/ports/*"
    out["nic_count"] = Observed(f"{nic_src}/state (ACTIVE compute ports)", {"": len(active)})
    out["nic_gbps"] = Observed(f"{nic_src}/rate", {p.name: p.rate_gbps for p in active
                                                   if p.rate_gbps is not None and not p.efa})
    out["link_layer"] = Observed(f"{nic_src}/link_layer", {p.name: LINK_LAYER.get(p.link_layer, p.link_layer)
                                                           for p in ports if p.link_layer})
    pci_src = "/sys/bus/pci/devices/*/current_link_{speed,width}"
    out["nic_pcie.gen"] = Observed(pci_src, {p.name: PCIE_GEN.get(p.pcie_gts, p.pcie_gts) for p in ports
                                             if p.pcie_gts is not None})
    out["nic_pcie.width"] = Observed(pci_src, {p.name: p.pcie_width for p in ports if p.pcie_width is not None})
    dp = readings.datapath
    numa_src = "/sys/bus/pci/devices/*/numa_node (GPUs and compute NICs)"
    if dp is None or dp.error:
        out["numa_nodes"] = Observed(numa_src, error=dp.error if dp else "the data path was not read")
    else:
        nodes = {e.numa_node for e in [*dp.gpus, *dp.nics] if e.numa_node is not None}
        out["numa_nodes"] = Observed(numa_src, {"": len(nodes)} if nodes else {},
                                     None if nodes else "no GPU or NIC has NUMA information")
    return out


def settings(readings) -> dict[str, Observed]:
    """The host baseline keys (baseline_*): model/contract_settings.py."""
    return baseline_keys(readings.baseline)


SECTIONS = {"hardware": hardware, "settings": settings}


def capture(readings, name: str, title: str, extends: str | None = None) -> tuple[dict, list[str]]:
    """The platform file (a dict, in the spec's key order) a known-good node
    gives, and notes: keys not read (left out), parts that differ from the
    rest (the most common value is taken: check that node)."""
    doc: dict = {"name": name, "title": title, "extends": extends}
    notes: list[str] = []
    for section, read in SECTIONS.items():
        values = {}
        for key, obs in read(readings).items():
            if obs.error or not obs.parts:
                notes.append(f"{section}.{key}: not read ({obs.error or 'nothing to read'}): left out")
                continue
            value = obs.value()
            odd = sorted(part for part, v in obs.parts.items() if _hashable(v) != _hashable(value))
            if odd:
                notes.append(f"{section}.{key}: {', '.join(odd)} read otherwise than the rest ({value!r})")
            value = list(value) if isinstance(value, tuple) else value
            outer, _, inner = key.partition(".")
            if inner:
                values.setdefault(outer, {})[inner] = value
            else:
                values[key] = value
        doc[section] = values
    return doc, notes


@dataclass(frozen=True)
class Difference:
    key: str            # "hardware.gpu_count"
    expected: object
    read: object        # None: could not be read
    where: str          # the platform file that set the expected value
    source: str         # where the node's value was read
    level: str = FAIL   # FAIL: differs; UNKNOWN: could not be read

    def text(self) -> str:
        read = "not read" if self.read is None else repr(self.read)
        return f"{self.key}: expected {self.expected!r} ({self.where}), read {read} ({self.source})"


def _matches(expected, read) -> bool:
    spec = expected.get("value") if isinstance(expected, dict) else expected
    if isinstance(expected, dict) and "tolerance" in expected and isinstance(read, (int, float)):
        tol = str(expected["tolerance"])
        margin = float(tol.rstrip("%")) / 100 * spec if tol.endswith("%") else float(tol)
        return abs(read - spec) <= margin
    if isinstance(spec, float) or isinstance(read, float):
        try:
            return abs(float(spec) - float(read)) < 1e-6
        except (TypeError, ValueError):
            return False
    return _hashable(spec) == _hashable(read)


def diff(platform: dict, where: dict[str, str], readings) -> list[Difference]:
    """Each key of the platform's sections the node differs from (FAIL) or
    cannot be read for (UNKNOWN), naming the parts (GPU, NIC port) that
    differ. ``where``: "section.key" -> the file that set it. A key the
    platform sets but no reader knows is not judged here (the other checks'
    own, figures are the active checks')."""
    out = []
    for section, read in SECTIONS.items():
        expected_section = platform.get(section) or {}
        observed = read(readings)
        for key in sorted(observed):
            outer, _, inner = key.partition(".")
            expected = expected_section.get(outer)
            if inner:
                expected = expected.get(inner) if isinstance(expected, dict) else None
            if expected is None:
                continue  # the platform does not say
            obs, full = observed[key], f"{section}.{key}"
            source = where.get(f"{section}.{outer}", "the platform file")
            if obs.error or (not obs.parts and obs.compare is None):
                out.append(Difference(full, _plain(expected), None, source, f"{obs.source}: "
                                      f"{obs.error or 'nothing read'}", UNKNOWN))
                continue
            if obs.compare is not None:
                shown = obs.compare(_plain(expected), {k: _plain(v) for k, v in expected_section.items()})
                if shown is not None:
                    out.append(Difference(full, _plain(expected), shown, source, obs.source))
                continue
            wrong = {part: v for part, v in obs.parts.items() if not _matches(expected, v)}
            if wrong:
                read_value = (next(iter(wrong.values())) if list(wrong) == [""] else
                              {part: v for part, v in sorted(wrong.items())})
                out.append(Difference(full, _plain(expected), read_value, source, obs.source))
    return out


def _plain(expected):
    return expected.get("value") if isinstance(expected, dict) and "value" in expected else expected


def status(differences: list[Difference]) -> str:
    if any(d.level == FAIL for d in differences):
        return FAIL
    return UNKNOWN if differences else OK
