"""Verdicts on a node's fitness: pure functions from readings to a verdict.

Gathering (pyinfra facts remotely, sysfs + NVML locally) builds a
:class:`Readings`; :func:`evaluate` decides. Nothing here reads hardware,
so every verdict is testable from fixtures.
"""

from __future__ import annotations

import fnmatch
import math
import statistics
from dataclasses import dataclass, field, replace

from ccrhost import ccr as ccrmod
from ccrhost import gpu_peaks
from ccrhost.gpu_readings import GpuReading
from ccrhost.model import workload as workload_model
from ccrhost.sysfs import natural_key, pcie_gbps

OK, WARN, FAIL, UNKNOWN = "OK", "WARN", "FAIL", "UNKNOWN"
EXIT_CODES = {OK: 0, WARN: 1, FAIL: 2, UNKNOWN: 3}
# An unmeasurable node outranks a warning: its CCR is not known at all.
_RANK = {OK: 0, WARN: 1, UNKNOWN: 2, FAIL: 3}


@dataclass(frozen=True)
class Reason:
    level: str
    code: str
    message: str

    def to_dict(self) -> dict:
        return {"level": self.level, "code": self.code, "message": self.message}


@dataclass(frozen=True)
class Port:
    device: str
    port: int
    link_layer: str | None
    state: str | None
    phys_state: str | None
    rate_gbps: float | None
    pcie_gts: float | None
    pcie_width: int | None
    pcie_gts_max: float | None
    pcie_width_max: int | None
    measured_gbps: float | None = None

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"

    @property
    def pcie_gbps(self) -> float | None:
        return pcie_gbps(self.pcie_gts, self.pcie_width)

    @property
    def link_gbps(self) -> float:
        """What the link and the NIC's PCIe allow, before any measurement."""
        return ccrmod.effective_gbps(self.rate_gbps or 0.0, self.pcie_gbps)

    @property
    def effective_gbps(self) -> float:
        return self.link_gbps if self.measured_gbps is None else min(self.link_gbps, self.measured_gbps)

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass
class Readings:
    ports: list[Port]
    gpus: list[GpuReading]
    gpu_error: str | None = None
    measure_errors: list[str] = field(default_factory=list)
    measure_note: str | None = None


@dataclass(frozen=True)
class Expectation:
    gpu_model: str | None = None
    gpu_count: int | None = None
    ports: int | None = None
    port_gbps: float | None = None


@dataclass(frozen=True)
class Policy:
    precision: str = "bf16"
    beta: float = ccrmod.SEED_BETA
    workload: workload_model.WorkloadSpec | None = None  # when set, the node CCR comes from its model
    bandwidth_model: str = "bottleneck"
    min_ccr: float | None = None
    min_ccr_fraction: float = 0.9
    gpu_tflops: dict | None = None  # {precision: TFLOPS} for a model the table lacks
    measure_min_fraction: float = 0.9


@dataclass
class Verdict:
    status: str
    reasons: list[Reason]
    ccr: ccrmod.CcrResult | None
    expected_ccr: float | None
    readings: Readings
    fail_below: float | None = None  # the CCR under which this host fails

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def summary(self) -> str:
        bad = [r.message for r in self.reasons if r.level != OK]
        return "; ".join(bad) if bad else "all checks passed"

    def to_dict(self) -> dict:
        r = self.readings
        return {
            "status": self.status,
            "reasons": [x.to_dict() for x in self.reasons],
            "ccr": self.ccr.to_dict() if self.ccr else None,
            "expected_ccr": self.expected_ccr,
            "fail_below": self.fail_below,
            "ports": [{**p.__dict__, "effective_gbps": p.effective_gbps, "active": p.active} for p in r.ports],
            "gpus": [g.to_dict() for g in r.gpus],
            "gpu_error": r.gpu_error,
            "measure_errors": r.measure_errors,
            "measure_note": r.measure_note,
        }


def worst(statuses) -> str:
    return max(statuses, key=_RANK.__getitem__, default=OK)


def compute_ports(devices: dict, exclude: tuple[str, ...] = ()) -> list[Port]:
    """Ports of the RdmaDevices fact that carry compute traffic."""
    ports = []
    for dev, data in sorted(devices.items(), key=lambda kv: natural_key(kv[0])):
        if any(fnmatch.fnmatchcase(dev, pattern) for pattern in exclude):
            continue
        pci = data.get("pci", {})
        for num, p in sorted(data["ports"].items()):
            ports.append(Port(
                device=dev, port=int(num), link_layer=p["link_layer"], state=p["state"],
                phys_state=p["phys_state"], rate_gbps=p["rate_gbps"],
                pcie_gts=pci.get("current_speed_gts"), pcie_width=pci.get("current_width"),
                pcie_gts_max=pci.get("max_speed_gts"), pcie_width_max=pci.get("max_width"),
            ))
    return ports


def _override(policy: Policy) -> float | None:
    """The inventory's own peak figure for the policy's precision, if given."""
    return (policy.gpu_tflops or {}).get(policy.precision)


def gpu_tflops(gpus: list[GpuReading], policy: Policy) -> tuple[float | None, list[Reason]]:
    """Node compute at the policy's precision, scaled for throttled clocks."""
    reasons, total = [], 0.0
    for gpu in gpus:
        peak = _override(policy)
        if peak is None:
            row = gpu_peaks.lookup(gpu.name)
            if row is None:
                reasons.append(Reason(UNKNOWN, "gpu_unknown_model",
                                      f"GPU {gpu.index} model {gpu.name!r} is not in the peak-TFLOPS table; "
                                      "set verify_gpu_tflops to its datasheet figures"))
                return None, reasons
            peak = row.tflops.get(policy.precision)
            if peak is None:
                reasons.append(Reason(UNKNOWN, "gpu_no_precision",
                                      f"{row.model} has no dense {policy.precision} figure"))
                return None, reasons
        total += peak * gpu.clock_fraction
    return total, reasons


def node_ccr(port_gbps: list[float], tflops: float, gpu_count: int,
             policy: Policy) -> tuple[ccrmod.CcrResult | None, list[Reason]]:
    """The node's CCR: from the workload model when the policy has one
    (bands apply), else B / (beta x F) with the policy's beta."""
    if policy.workload is None:
        return ccrmod.compute(port_gbps, tflops, policy.beta, policy.bandwidth_model), []
    bandwidth = ccrmod.node_bandwidth_gbps(port_gbps, policy.bandwidth_model)
    try:
        node = workload_model.node_model(policy.workload, gpu_count, bandwidth, tflops)
    except workload_model.WorkloadError as exc:
        return None, [Reason(UNKNOWN, "workload_invalid",
                             f"verify_workload does not fit this node's {gpu_count} GPUs: {exc}")]
    return ccrmod.from_workload(node, policy.bandwidth_model), []


def _expected_ccr(expect: Expectation, policy: Policy) -> float | None:
    if None in (expect.gpu_model, expect.gpu_count, expect.ports, expect.port_gbps) or not expect.gpu_count:
        return None
    peak = _override(policy)
    if peak is None:
        row = gpu_peaks.lookup(expect.gpu_model)
        peak = row.tflops.get(policy.precision) if row else None
    if not peak:
        return None
    result, _ = node_ccr([expect.port_gbps] * expect.ports, peak * expect.gpu_count, expect.gpu_count, policy)
    # a job without inter-node traffic has no CCR to fall short of
    return result.ccr if result and math.isfinite(result.ccr) else None


def evaluate(readings: Readings, expect: Expectation = Expectation(), policy: Policy = Policy()) -> Verdict:
    reasons: list[Reason] = []
    ports = readings.ports
    if not ports:
        reasons.append(Reason(FAIL, "no_rdma", "no RDMA compute port found"))

    top_rate = expect.port_gbps or max((p.rate_gbps or 0 for p in ports), default=0)
    for p in ports:
        if not p.active:
            reasons.append(Reason(FAIL, "port_down", f"port {p.name} is {p.state}/{p.phys_state}"))
        elif p.rate_gbps is not None and p.rate_gbps < top_rate:
            reasons.append(Reason(FAIL, "port_rate", f"port {p.name} runs at {p.rate_gbps:g} Gb/s, expected {top_rate:g}"))
        if p.pcie_width and p.pcie_width_max and p.pcie_width < p.pcie_width_max:
            reasons.append(Reason(FAIL, "nic_pcie_width",
                                  f"NIC {p.device} PCIe x{p.pcie_width}, capable of x{p.pcie_width_max}"))
        if p.pcie_gts and p.pcie_gts_max and p.pcie_gts < p.pcie_gts_max:
            reasons.append(Reason(FAIL, "nic_pcie_speed",
                                  f"NIC {p.device} PCIe {p.pcie_gts:g} GT/s, capable of {p.pcie_gts_max:g} GT/s"))
    active = [p for p in ports if p.active]
    if expect.ports is not None and len(active) < expect.ports:
        reasons.append(Reason(FAIL, "port_count", f"{len(active)} active compute ports, expected {expect.ports}"))

    for error in readings.measure_errors:
        reasons.append(Reason(UNKNOWN, "measure_failed", error))
    slow = [p for p in active
            if p.measured_gbps is not None and p.measured_gbps < policy.measure_min_fraction * p.link_gbps]
    if slow:
        note = f" ({readings.measure_note})" if readings.measure_note else ""
        worst_port = min(slow, key=lambda p: p.measured_gbps)
        names = ", ".join(p.name for p in slow)
        reasons.append(Reason(FAIL, "measured_slow",
                              f"ports {names} measured below {policy.measure_min_fraction:.0%} of their rate "
                              f"(slowest {worst_port.name}: {worst_port.measured_gbps:.0f} of "
                              f"{worst_port.link_gbps:.0f} Gb/s){note}"))

    gpus = readings.gpus
    if readings.gpu_error:
        reasons.append(Reason(UNKNOWN, "gpu_unreadable", f"cannot read GPUs: {readings.gpu_error}"))
    elif expect.gpu_count is not None and len(gpus) < expect.gpu_count:
        reasons.append(Reason(FAIL, "gpu_count", f"{len(gpus)} GPUs, expected {expect.gpu_count}"))
    elif not gpus:
        reasons.append(Reason(UNKNOWN, "gpu_none", "no GPU found"))
    for g in gpus:
        if expect.gpu_model and g.name != expect.gpu_model:
            reasons.append(Reason(FAIL, "gpu_model", f"GPU {g.index} is {g.name!r}, expected {expect.gpu_model!r}"))
        if g.throttle_reasons:
            reasons.append(Reason(WARN, "gpu_throttled",
                                  f"GPU {g.index} SM clock {g.sm_clock_mhz}/{g.max_sm_clock_mhz} MHz "
                                  f"({', '.join(g.throttle_reasons)})"))
        if g.pcie_gen and g.pcie_gen_max and g.pcie_gen < g.pcie_gen_max:
            reasons.append(Reason(WARN, "gpu_pcie_gen",
                                  f"GPU {g.index} PCIe gen {g.pcie_gen} < max {g.pcie_gen_max} (normal while idle)"))
        if g.pcie_width and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
            reasons.append(Reason(WARN, "gpu_pcie_width",
                                  f"GPU {g.index} PCIe x{g.pcie_width} < max x{g.pcie_width_max}"))

    result = None
    tflops, gpu_reasons = (None, []) if readings.gpu_error or not gpus else gpu_tflops(gpus, policy)
    reasons.extend(gpu_reasons)
    if tflops:
        # the job's GPUs per node: the declared count, else the GPUs found
        result, model_reasons = node_ccr([p.effective_gbps for p in active], tflops,
                                         expect.gpu_count or len(gpus), policy)
        reasons.extend(model_reasons)
    expected = _expected_ccr(expect, policy)
    if result is not None:
        if policy.min_ccr is not None and result.ccr < policy.min_ccr:
            reasons.append(Reason(FAIL, "ccr_low", f"CCR {result.ccr:.3g} below min_ccr {policy.min_ccr:.3g}"))
        if expected and result.ccr < policy.min_ccr_fraction * expected:
            reasons.append(Reason(FAIL, "ccr_below_expected",
                                  f"CCR {result.ccr:.3g} is {result.ccr / expected:.0%} of the {expected:.3g} "
                                  f"its hardware should give (minimum {policy.min_ccr_fraction:.0%})"))
        if result.band == "compute-underused":
            reasons.append(Reason(WARN, "ccr_high", f"CCR {result.ccr:.3g} above {ccrmod.HIGH_BAND}: compute under-used"))
        elif result.band == "bandwidth-bound":
            w = result.workload
            reasons.append(Reason(WARN, "ccr_bandwidth_bound",
                                  f"CCR {result.ccr:.3g} below {ccrmod.LOW_BAND}: this workload is bandwidth-bound "
                                  f"here (exposed communication {w['exposed_comm_fraction']:.0%} of the step)"))
    floors = [f for f in (policy.min_ccr, expected and policy.min_ccr_fraction * expected) if f]
    status = worst(r.level for r in reasons)
    return Verdict(status, reasons, result, expected, readings, max(floors) if floors else None)


def fleet_outliers(verdicts: dict[str, Verdict], tolerance: float) -> dict[str, Reason]:
    """Hosts whose CCR is more than ``tolerance`` (0.1 = 10%) below the fleet median."""
    values = {h: v.ccr.ccr for h, v in verdicts.items() if v.ccr is not None}
    if len(values) < 3:
        return {}
    median = statistics.median(values.values())
    return {
        h: Reason(FAIL, "fleet_outlier", f"CCR {c:.3g} is {1 - c / median:.0%} below the fleet median {median:.3g}")
        for h, c in values.items() if c < (1 - tolerance) * median
    }


def readings_from_facts(rdma: dict, gpus: dict, exclude: tuple[str, ...] = (), measured=None) -> Readings:
    """Readings from the RdmaDevices and NvidiaGpus facts (remote or local),
    plus a ``HostMeasurement`` when bandwidth was measured."""
    ports = compute_ports(rdma.get("devices", {}), exclude)
    if measured is not None:
        ports = [replace(p, measured_gbps=measured.gbps.get(p.device)) for p in ports]
    return Readings(
        ports=ports,
        gpus=[GpuReading(**{k: v for k, v in g.items() if k in GpuReading.__dataclass_fields__})
              for g in gpus.get("gpus", [])],
        gpu_error=gpus.get("error"),
        measure_errors=list(measured.errors) if measured is not None else [],
        measure_note=measured.note if measured is not None else None,
    )
