"""Verdicts on a node's fitness: pure functions from readings to a verdict.

Gathering (pyinfra facts remotely, sysfs + NVML locally) builds a
:class:`Readings`; :func:`evaluate` decides. Nothing here reads hardware,
so every verdict is testable from fixtures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ccrhost.model import allreduce as ar
from ccrhost.model import baseline as hb
from ccrhost.model import busy as gpu_work
from ccrhost.model import dcgm
from ccrhost.model.active import ActiveReading
from ccrhost.model import ccr as ccrmod
from ccrhost.model import certificate_view as cv
from ccrhost.model import datapath as dp
from ccrhost.model import gpu_health as gh
from ccrhost.model import history as hist
from ccrhost.model import host_health as hh
from ccrhost.model import imex as nvl
from ccrhost.model import fabric as fab
from ccrhost.model import gpus as gpu_peaks
from ccrhost.model import wiring as wr
from ccrhost.model.gpus import GpuReading
from ccrhost.model.plain import plain
from ccrhost.model.ports import Port, compute_ports
from ccrhost.model.status import (
    EXIT_CODES,
    FAIL,
    OK,
    UNKNOWN,
    WARN,
    Reason,
    below_median,
    worst,
)

if TYPE_CHECKING:
    from ccrhost.model import nicfw
    from ccrhost.model.workload import WorkloadSpec


@dataclass
class Readings:
    ports: list[Port]
    gpus: list[GpuReading]
    gpu_error: str | None = None
    measure_errors: list[str] = field(default_factory=list)
    measure_note: str | None = None
    datapath: dp.DatapathReading | None = None  # None: the data path was not read (not judged)
    gpu_health: gh.GpuHealthReading | None = None  # None: GPU health was not read (not judged)
    fabric: fab.FabricReading | None = None      # None: the lossless-fabric counters were not read
    allreduce: ar.AllReduceReading | None = None  # None: no all-reduce result was read (not judged)
    nic_fw: nicfw.NicFwReading | None = None      # None: no NIC firmware reading was read (not judged)
    dcgm: ActiveReading | None = None             # None: no DCGM diag result was read (not judged)
    history: hist.History | None = None          # None: the node's failure history is not kept (or not here)
    busy: gpu_work.SkippedTests | None = None       # None: no active test was skipped for running GPU work
    baseline: hb.BaselineReading | None = None    # None: the host baseline was not read (not judged)
    host_health: hh.HostHealthReading | None = None  # None: the host's health was not read (not judged)
    wiring: wr.StoredWiring | None = None         # None: no wiring reading was read back (not judged)
    imex: nvl.ImexReading | None = None           # None: the IMEX probe was not run (UNKNOWN where imex_enable)
    certificate: cv.StoredCertificate | None = None  # None: not read back; shown beside the verdict, never judged

    def to_dict(self) -> dict:
        """Every reading, lossless: :func:`readings_from_dict` gives them back."""
        return plain(self)


_READINGS = None


def readings_from_dict(data: dict) -> Readings:
    """The readings a :meth:`Readings.to_dict` wrote (a node's ``ccrhost
    check --format json``), typed again; a document that is not one raises
    ``ValueError``."""
    global _READINGS
    if _READINGS is None:  # built once, when first needed: only the fleet side reads documents
        from pydantic import TypeAdapter

        from ccrhost.model import nicfw  # the annotation Readings.nic_fw names, imported only where judged

        globals()["nicfw"] = nicfw

        _READINGS = TypeAdapter(Readings)
    return _READINGS.validate_python(data)


@dataclass(frozen=True)
class Expectation:
    gpu_model: str | None = None
    gpu_count: int | None = None
    ports: int | None = None
    port_gbps: float | None = None
    rail_local: bool = False  # one compute NIC per GPU on the GPU's PCIe switch


@dataclass(frozen=True)
class Policy:
    precision: str = "bf16"
    beta: float = ccrmod.SEED_BETA
    workload: WorkloadSpec | None = None  # when set, the node CCR comes from its model
    bandwidth_model: str = "bottleneck"
    min_ccr: float | None = None
    min_ccr_fraction: float = 0.9
    gpu_tflops: dict | None = None  # {precision: TFLOPS} for a model the table lacks
    measure_min_fraction: float = 0.9
    link_thresholds: dp.LinkThresholds = dp.LinkThresholds()
    required_versions: dp.RequiredVersions = dp.RequiredVersions()
    gpu_health: gh.GpuHealthPolicy = gh.GpuHealthPolicy()
    fabric: fab.FabricPolicy = fab.FabricPolicy()
    window_max_age: float | None = 3600  # verify_window_max_age: the oldest stored reading a rate starts from
    nic_fw: nicfw.NicFwPolicy | None = None  # None: neither the NIC firmware audit nor the optics is on
    baseline: hb.BaselinePolicy | None = None  # None: no baseline_* key is set (the host baseline is not judged)
    history: hist.HistoryPolicy = hist.HistoryPolicy()
    gpudirect_figures: tuple[dp.GdrFigure, ...] = ()  # the platform's ib_write_bw.gpudirect, published and fleet
    host_health: hh.HostHealthPolicy = hh.HostHealthPolicy()
    wiring: wr.WiringPolicy = wr.WiringPolicy()  # wiring_*: off unless wiring_enable
    imex: nvl.ImexPolicy = nvl.ImexPolicy()      # imex_*: an NVLink rack's tray (GB200/GB300 NVL72) when enabled
    nvlinks: nvl.NvlinkFigures = nvl.NvlinkFigures()  # the platform's hardware.nvlinks_per_gpu and nvlink_gbs


@dataclass
class Verdict:
    status: str
    reasons: list[Reason]
    ccr: ccrmod.CcrResult | None
    expected_ccr: float | None
    readings: Readings
    fail_below: float | None = None  # the CCR under which this host fails
    evaluated: bool = True  # False: no readings were judged (a probe that hung, a check that never answered)
    measured_ccr: ccrmod.CcrResult | None = None  # B from the two-node all-reduce (ring busbw), beside the nominal
    evidence: str | None = None  # the diagnostics bundle of this failure (ccrhost.node.evidence), where kept

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def summary(self) -> str:
        bad = [r.message for r in self.reasons if r.level != OK]
        return "; ".join(bad) if bad else "all checks passed"

    @property
    def action(self) -> str:
        """What to do about the node: the most disruptive action of its
        worst-level reasons (a warning's advice does not outrank a
        failure's), ``none`` when OK."""
        if self.status == OK:
            return "none"  # a healthy check never loads the catalogue (about 5 ms)
        from ccrhost.model.actions import worst_action
        return worst_action(reason_action(r) for r in self.reasons if r.level == self.status and r.level != OK)

    def action_text(self) -> str:
        """``reset_gpu (gpu 0 0000:18:00.0 GPU-...)``: the node's action and
        the parts its reasons with that action are about."""
        action = self.action
        parts = []
        for r in self.reasons:
            if r.level == self.status and reason_action(r) == action:
                where = scope_text(r, self.readings)
                if where != "node" and where not in parts:
                    parts.append(where)
        return f"{action} ({', '.join(parts)})" if parts else action

    def to_dict(self) -> dict:
        r = self.readings
        readings = r.to_dict() if self.evaluated else None
        return {
            "status": self.status,
            "action": self.action,
            "evidence": self.evidence,
            "reasons": [{**x.to_dict(), **scope_detail(x, r)} for x in self.reasons],
            "ccr": self.ccr.to_dict() if self.ccr else None,
            "measured_ccr": self.measured_ccr.to_dict() if self.measured_ccr else None,
            "expected_ccr": self.expected_ccr,
            "fail_below": self.fail_below,
            "ports": [{**p.__dict__, "effective_gbps": p.effective_gbps, "active": p.active, "efa": p.efa}
                      for p in r.ports],
            "gpus": [g.to_dict() for g in r.gpus],
            "gpu_error": r.gpu_error,
            "measure_errors": r.measure_errors,
            "measure_note": r.measure_note,
            "datapath": r.datapath.to_dict() if r.datapath is not None else None,
            "gpu_health": (readings["gpu_health"] if readings else plain(r.gpu_health))
            if r.gpu_health is not None else None,
            "certificate": cv.summary(r.certificate) if r.certificate is not None else None,
            "readings": readings,
        }

    @classmethod
    def from_dict(cls, doc: dict) -> Verdict:
        """The verdict a node printed (``to_dict``), as it printed it: status
        and reasons are taken, never judged again."""
        def ccr_of(ccr):
            if ccr is None:
                return None
            value = ccr["ccr"] if ccr["ccr"] is not None else math.inf
            return ccrmod.CcrResult(value, ccr["bandwidth_gbps"], ccr["tflops"], ccr["beta"],
                                    ccr["bandwidth_model"], ccr["band"], ccr.get("workload"), ccr.get("compute"))

        readings = doc.get("readings")
        return cls(
            status=doc["status"],
            reasons=[Reason.from_dict(r) for r in doc["reasons"]],
            ccr=ccr_of(doc.get("ccr")),
            measured_ccr=ccr_of(doc.get("measured_ccr")),
            expected_ccr=doc.get("expected_ccr"),
            readings=readings_from_dict(readings) if readings is not None else Readings([], []),
            fail_below=doc.get("fail_below"),
            evaluated=readings is not None,
            evidence=doc.get("evidence"),
        )


def gpu_serials(readings: Readings) -> dict[int, str]:
    """GPU index -> its board serial, where GPU health read one."""
    health = readings.gpu_health.gpus if readings.gpu_health is not None else []
    return {g.index: g.serial for g in health if g.serial}


def reason_action(reason: Reason) -> str:
    """What to do about ``reason``: its own action (an XID's catalogue row),
    else its code's (model/reasons.py)."""
    if reason.action:
        return reason.action
    from ccrhost.model.reasons import action_of

    return action_of(reason.code)


def scope_detail(reason: Reason, readings: Readings) -> dict:
    """The reason's action and scope, with what the readings know of the
    part it names: a GPU's PCI address and UUID, a NIC's port."""
    from ccrhost.model.reasons import scope_of

    out: dict = {"action": reason_action(reason), "scope": scope_of(reason.code)}
    if reason.gpu is not None:
        uuid = next((g.uuid for g in readings.gpus if g.index == reason.gpu), None)
        health = readings.gpu_health.gpus if readings.gpu_health is not None else []
        pci = next((g.pci for g in health if g.index == reason.gpu), None)
        serial = gpu_serials(readings).get(reason.gpu)
        out.update((k, v) for k, v in (("pci", pci), ("uuid", uuid), ("serial", serial)) if v)
    return out


def scope_text(reason: Reason, readings: Readings) -> str:
    """``gpu 0 0000:18:00.0 GPU-...``, ``port mlx5_0/1``, ``nic mlx5_0`` or ``node``."""
    detail = scope_detail(reason, readings)
    if reason.gpu is not None:
        serial = f"serial {detail['serial']}" if detail.get("serial") else None
        return " ".join(str(x) for x in ("gpu", reason.gpu, detail.get("pci"), detail.get("uuid"), serial)
                        if x is not None)
    if reason.nic is not None:
        return f"port {reason.nic}/{reason.port}" if reason.port is not None else f"nic {reason.nic}"
    return detail["scope"]


def only_unproven(verdict: Verdict) -> bool:
    """True when the verdict is UNKNOWN only because an active check's proof
    is missing, old or could not be got (every UNKNOWN reason's code is in
    ``reasons.PROOF_CODES``): nothing is said against the node, so no path
    drains it for that and the prolog lets the job start."""
    from ccrhost.model.reasons import is_proof

    unknown = [r for r in verdict.reasons if r.level == UNKNOWN]
    return verdict.status == UNKNOWN and bool(unknown) and all(is_proof(r.code) for r in unknown)


def unjudged(status: str, code: str, message: str) -> Verdict:
    """The verdict of a node whose readings were never judged (a probe that
    could not be read or hung, a host never reached): ``message`` is its one
    reason."""
    return Verdict(status, [Reason(status, code, message)], None, None, Readings([], []), evaluated=False)


def gpu_tflops(gpus: list[GpuReading], policy: Policy) -> tuple[float | None, list[Reason]]:
    """Node compute at the policy's precision, scaled for throttled clocks."""
    total = 0.0
    for gpu in gpus:
        try:
            peak, _ = gpu_peaks.peak_tflops(gpu.name, policy.precision, policy.gpu_tflops)
        except gpu_peaks.PeakUnknown as exc:
            hint = "; set verify_gpu_tflops to its datasheet figures" if exc.code == "gpu_unknown_model" else ""
            return None, [Reason(UNKNOWN, exc.code, f"GPU {gpu.index} {exc}{hint}")]
        total += peak * gpu.clock_fraction
    return total, []


def node_ccr(port_gbps: list[float], tflops: float, gpu_count: int,
             policy: Policy) -> tuple[ccrmod.CcrResult | None, list[Reason]]:
    """The node's CCR: from the workload model when the policy has one
    (bands apply), else B / (beta x F) with the policy's beta."""
    if policy.workload is None:
        return ccrmod.compute(port_gbps, tflops, policy.beta, policy.bandwidth_model), []
    from ccrhost.model.step import node_model  # only with a workload: its import is a check's 5 ms
    from ccrhost.model.workload import WorkloadError

    bandwidth = ccrmod.node_bandwidth_gbps(port_gbps, policy.bandwidth_model)
    try:
        node = node_model(policy.workload, gpu_count, bandwidth, tflops)
    except WorkloadError as exc:
        return None, [Reason(UNKNOWN, "workload_invalid",
                             f"verify_workload does not fit this node's {gpu_count} GPUs: {exc}")]
    return ccrmod.from_workload(node, policy.bandwidth_model), []


def _expected_ccr(expect: Expectation, policy: Policy) -> float | None:
    if None in (expect.gpu_model, expect.gpu_count, expect.ports, expect.port_gbps) or not expect.gpu_count:
        return None
    try:
        peak, _ = gpu_peaks.peak_tflops(expect.gpu_model, policy.precision, policy.gpu_tflops)
    except gpu_peaks.PeakUnknown:
        return None
    result, _ = node_ccr([expect.port_gbps] * expect.ports, peak * expect.gpu_count, expect.gpu_count, policy)
    # a job without inter-node traffic has no CCR to fall short of
    return result.ccr if result and math.isfinite(result.ccr) else None


def _degraded_links(level: str, what: str, checks, **part) -> list[Reason]:
    """A reason for each ``(code, have, capable, message format)`` whose link
    trained below what it is capable of; an unknown figure is not judged.
    ``part``: the GPU or NIC it is about (Reason's fields)."""
    return [Reason(level, code, f"{what} {text.format(have, capable)}", **part)
            for code, have, capable, text in checks if have and capable and have < capable]


def tray_reasons(readings: Readings, policy: Policy) -> list[Reason]:
    """An NVLink rack's tray (imex_enable): the IMEX domain as this tray
    sees it, and, where GPU health was read, its GPUs' clique, cluster UUID,
    fabric health and NVLinks against the platform's figures."""
    if readings.imex is None:
        reasons = [Reason(UNKNOWN, "imex_unreadable", "the IMEX probe was not run on this path")]
    else:
        reasons = nvl.check_imex(readings.imex, policy.imex)
    health = readings.gpu_health
    if health is None:  # never read on this path: not a pass
        reasons.append(Reason(UNKNOWN, "gpu_fabric_unreadable", "GPU health was not read: the GPUs' NVLink domain "
                              "and fabric health are not known"))
    elif not health.error:  # a GPU read that failed is GPU health's UNKNOWN
        reasons += nvl.check_gpu_fabric(health.gpus)
        reasons += nvl.check_nvlinks(health.gpus, policy.nvlinks)
    return reasons


def evaluate(readings: Readings, expect: Expectation = Expectation(), policy: Policy = Policy()) -> Verdict:
    reasons: list[Reason] = []
    ports = readings.ports
    if not ports:
        reasons.append(Reason(FAIL, "no_rdma", "no RDMA compute port found"))

    # EFA ports (Port.efa) are the compute network of an AWS node, so they
    # count as its ports (dropping them would read as a node without one),
    # but their state and rate files are driver constants: the link is the
    # netdev's, and the rate file is the device's maximum or a fixed 100 Gb/s
    # (efa_verbs.c efa_query_port), never what the link trained at. So no
    # rate comparison with them, and B is UNKNOWN while one is up.
    top_rate = expect.port_gbps or max((p.rate_gbps or 0 for p in ports if not p.efa), default=0)
    for p in ports:
        if p.efa:
            if not p.link_known:
                reasons.append(Reason(UNKNOWN, "efa_link_unreadable",
                                      f"EFA port {p.name} has no readable netdev operstate "
                                      f"({p.netdev or 'no netdev under its device/net/'}): its own state file "
                                      "always reads ACTIVE, so its link is not known", nic=p.device, port=p.port))
            elif not p.active:
                reasons.append(Reason(FAIL, "efa_link_down", f"EFA port {p.name} is down: {p.link_text} "
                                      "(its RDMA port state reads ACTIVE whatever the link does)",
                                      nic=p.device, port=p.port))
        elif not p.active:
            reasons.append(Reason(FAIL, "port_down", f"port {p.name} is {p.state}/{p.phys_state}",
                                  nic=p.device, port=p.port))
        elif p.rate_gbps is not None and p.rate_gbps < top_rate:
            reasons.append(Reason(FAIL, "port_rate", f"port {p.name} runs at {p.rate_gbps:g} Gb/s, expected {top_rate:g}",
                                  nic=p.device, port=p.port))
        reasons += _degraded_links(FAIL, f"NIC {p.device} PCIe", (
            ("nic_pcie_width", p.pcie_width, p.pcie_width_max, "x{}, capable of x{}"),
            ("nic_pcie_speed", p.pcie_gts, p.pcie_gts_max, "{:g} GT/s, capable of {:g} GT/s")), nic=p.device)
    active = [p for p in ports if p.active]
    up_efa = [p for p in active if p.efa]
    if up_efa:
        names = [p.name for p in up_efa]
        named = ", ".join(names) if len(names) <= 4 else f"{names[0]} to {names[-1]} ({len(names)})"
        reasons.append(Reason(UNKNOWN, "efa_rate_unknown",
                              f"EFA ports {named} carry the compute traffic, but the "
                              "efa driver's rate file is the device's maximum or a fixed 100 Gb/s, not the "
                              "link's: the node's bandwidth is not known"))
    # an ACTIVE port with no rate read is not a 0 Gb/s port: its share of B is not known
    unread = [p for p in active if p.rate_gbps is None and not p.efa]
    for p in unread:
        reasons.append(Reason(UNKNOWN, "port_rate_unreadable",
                              f"port {p.name} is ACTIVE but its rate was not read "
                              f"(/sys/class/infiniband/{p.device}/ports/{p.port}/rate gave no value): "
                              "the node's bandwidth is not known", nic=p.device, port=p.port))
    if expect.ports is not None and len(active) < expect.ports:
        reasons.append(Reason(FAIL, "port_count", f"{len(active)} active compute ports, expected {expect.ports}"))

    for error in readings.measure_errors:
        reasons.append(Reason(UNKNOWN, "measure_failed", error))
    # an EFA's link_gbps is its driver's constant: no reference to be slow against
    slow = [p for p in active if not p.efa
            and p.measured_gbps is not None and p.measured_gbps < policy.measure_min_fraction * p.link_gbps]
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
            reasons.append(Reason(FAIL, "gpu_model", f"GPU {g.index} is {g.name!r}, expected {expect.gpu_model!r}",
                                  gpu=g.index))
        if g.throttle_reasons:
            reasons.append(Reason(WARN, "gpu_throttled",
                                  f"GPU {g.index} SM clock {g.sm_clock_mhz}/{g.max_sm_clock_mhz} MHz "
                                  f"({', '.join(g.throttle_reasons)})", gpu=g.index))
        reasons += _degraded_links(WARN, f"GPU {g.index} PCIe", (
            ("gpu_pcie_gen", g.pcie_gen, g.pcie_gen_max, "gen {} < max {} (normal while idle)"),
            ("gpu_pcie_width", g.pcie_width, g.pcie_width_max, "x{} < max x{}")), gpu=g.index)

    if readings.datapath is not None:
        reasons += dp.check_datapath(readings.datapath, dp.DatapathPolicy(
            rail_local=expect.rail_local, thresholds=policy.link_thresholds, required=policy.required_versions,
            measure_min_fraction=policy.measure_min_fraction, gpudirect_figures=policy.gpudirect_figures))
    # the kernel log's link-down lines come with the XIDs: one read of the log
    downs = readings.gpu_health.link_downs if readings.gpu_health is not None else None
    reasons += fab.check_fabric(readings.fabric, policy.fabric, policy.link_thresholds, downs)
    if readings.gpu_health is not None and readings.gpu_health.nic_events:
        # mlx5_core's fatal lines, from the same read; named by the data path's NICs
        from ccrhost.model.nic_log import check_nic_log

        dpr = readings.datapath
        names = {e.bdf.lower(): e.name for e in dpr.nics} if dpr is not None and not dpr.error else {}
        reasons += check_nic_log(readings.gpu_health.nic_events, names)
    reasons += ar.check_allreduce(readings.allreduce)
    # the compute NICs (RDMA devices with a non-EFA port) and whether RoCE congestion settings apply to them
    ethernet: dict[str, bool] = {}
    for p in ports if readings.nic_fw is not None else ():
        if not p.efa:
            ethernet[p.device] = ethernet.get(p.device, False) or p.link_layer == "Ethernet"
    if readings.nic_fw is not None and policy.nic_fw is not None:  # imported only where the audit is on
        from ccrhost.model.nicfw import check_nic_firmware

        reasons += check_nic_firmware(readings.nic_fw, policy.nic_fw, ethernet)
    reasons += dcgm.check_dcgm(readings.dcgm)
    # rail i is the i-th compute NIC port in name order (model/wiring.py compute_nics)
    reasons += wr.check_stored_wiring(readings.wiring, policy.wiring,
                                      wr.compute_nics([(p.device, p.port) for p in ports if not p.efa]))
    reasons += hb.check_baseline(readings.baseline, policy.baseline)
    reasons += gpu_work.check_skipped(readings.busy)

    if readings.gpu_health is not None:
        reasons += gh.check_gpu_health(readings.gpu_health, gpus, policy.gpu_health, bool(readings.gpu_error))
    if policy.imex.enabled:  # a rack's tray: its IMEX domain, its GPUs' fabric membership and NVLinks
        reasons += tray_reasons(readings, policy)
    if readings.host_health is not None:  # its kernel-log lines come from the GPU health probe's one read
        health = readings.gpu_health
        fabric_gpus = health is not None and any(g.fabric_state is not None for g in health.gpus)
        reasons += hh.check_host_health(readings.host_health, policy.host_health,
                                        health.host_events if health is not None else None,
                                        health.log_error if health is not None else None, fabric_gpus)

    result = None
    tflops, gpu_reasons = (None, []) if readings.gpu_error or not gpus else gpu_tflops(gpus, policy)
    reasons.extend(gpu_reasons)
    if tflops and not unread and not up_efa:
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
    measured, measured_reasons = _measured_ccr(readings, tflops, expect.gpu_count or len(gpus), policy,
                                               max(floors) if floors else None)
    reasons.extend(measured_reasons)
    status = worst(r.level for r in reasons)
    if readings.history is not None:  # last: it counts this verdict's failure with the node's earlier ones
        reasons += hist.check_history(readings.history, status, reasons, gpu_serials(readings), policy.history)
    return Verdict(status, reasons, result, expected, readings, max(floors) if floors else None, measured_ccr=measured)


def _measured_ccr(readings: Readings, tflops: float | None, gpu_count: int, policy: Policy,
                  floor: float | None) -> tuple[ccrmod.CcrResult | None, list[Reason]]:
    """CCR_measured = B_measured / (beta x F), B_measured the fresh two-node
    ring busbw (GB/s, x 8 for Gb/s: a ring's busbw is what each node's NICs
    carry), judged against the same floor as the nominal CCR. F is the
    measured compute where a fresh GEMM result holds one
    (:func:`measured_f`), else the nominal; the result says which."""
    busbw = ar.pair_busbw(readings.allreduce)
    measured = measured_f(readings.dcgm, policy.precision)
    compute = measured or tflops
    if busbw is None or not compute:
        return None, []
    result, model_reasons = node_ccr([busbw * 8], compute, gpu_count, policy)
    if result is None:
        return None, model_reasons
    result = replace(result, compute="measured" if measured else "nominal")
    if floor is not None and result.ccr < floor:
        return result, [*model_reasons, Reason(FAIL, "ccr_measured_low",
                                               f"measured CCR {result.ccr:.3g} (B {busbw * 8:g} Gb/s from the "
                                               f"two-node all-reduce, F {compute:.1f} TFLOPS {result.compute}) "
                                               f"below {floor:.3g}")]
    return result, model_reasons


def measured_f(dcgm_reading, precision: str) -> float | None:
    """The node's measured compute (TFLOP/s, the sum of its GPUs') from the
    fresh stored GEMM result, where it measures the CCR's precision: the
    GEMM runs FP16, whose dense peak is BF16's on every GPU of the table;
    None otherwise (no result, stale, UNKNOWN, another precision)."""
    from ccrhost.model.gemm import measured_compute

    return measured_compute(dcgm_reading) if precision in ("fp16", "bf16") else None


def host_versions(verdicts: dict[str, Verdict]) -> dict[str, dp.HostVersions]:
    """Each host's firmware and driver versions, where its data path was read."""
    return {h: v.readings.datapath.versions for h, v in verdicts.items()
            if v.readings.datapath is not None and not v.readings.datapath.error}


def apply_fleet_rules(verdicts: dict[str, Verdict], tolerance: float | None = None) -> None:
    """The rules that need the whole fleet, on top of each node's own
    verdict: CCR against the fleet median (with ``tolerance``) and versions
    against the fleet majority. The deploy's report and ``ccrhost slurm
    verify`` both call this; a node's own reasons are never judged again."""
    extra: dict[str, list[Reason]] = {h: [] for h in verdicts}
    if tolerance:
        for host, reason in fleet_outliers(verdicts, tolerance).items():
            extra[host].append(reason)
    for host, found in dp.check_fleet_versions(host_versions(verdicts)).items():
        extra[host].extend(found)
    for host, found in fleet_lemons(verdicts).items():
        extra[host].extend(found)
    for host, found in extra.items():
        add_findings(verdicts[host], found)


def add_findings(verdict: Verdict, found: list[Reason]) -> None:
    """Findings that need more than the node (the fleet's rules, an acceptance stage's mesh or group runs) on
    top of its own verdict: its own reasons are never judged again, its status is the worst of all."""
    if found:
        verdict.reasons.extend(found)
        verdict.status = worst([verdict.status, *(r.level for r in found)])


def fleet_lemons(verdicts: dict[str, Verdict]) -> dict[str, list[Reason]]:
    """A GPU whose serial failed on another node too (the node histories
    each check keeps): ``gpu_lemon`` on the node that holds it now."""
    histories = {h: v.readings.history for h, v in verdicts.items() if v.readings.history is not None}
    out: dict[str, list[Reason]] = {}
    for serial, nodes in sorted(hist.lemons(histories).items()):
        for host, v in verdicts.items():
            for index, held in gpu_serials(v.readings).items():
                if held == serial:
                    others = ", ".join(sorted(nodes - {host}))
                    out.setdefault(host, []).append(Reason(
                        FAIL, "gpu_lemon", f"GPU {index} serial {serial} failed on {others} before it failed here: "
                        "the board is the fault, replace it", gpu=index))
    return out


def fleet_outliers(verdicts: dict[str, Verdict], tolerance: float) -> dict[str, Reason]:
    """Hosts whose CCR is more than ``tolerance`` (0.1 = 10%) below the fleet median."""
    # a host with no inter-node traffic has an infinite CCR: no figure to set a median by
    values = {h: v.ccr.ccr for h, v in verdicts.items() if v.ccr is not None and math.isfinite(v.ccr.ccr)}
    return {
        h: Reason(FAIL, "fleet_outlier", f"CCR {c:.3g} is {1 - c / median:.0%} below the fleet median {median:.3g}")
        for h, (c, median) in below_median(values, tolerance).items()
    }


def readings_from_facts(rdma, gpus, exclude: tuple[str, ...] = (), measured=None,
                        datapath: dp.DatapathReading | None = None,
                        gpu_health: gh.GpuHealthReading | None = None) -> Readings:
    """Readings from the RDMA probe's ``RdmaReading`` and the GPU probe's
    ``GpuProbe`` (remote or local), plus a ``HostMeasurement`` when
    bandwidth was measured and the data path when it was read."""
    readings = Readings(ports=compute_ports(rdma, exclude), gpus=list(gpus.gpus), gpu_error=gpus.error,
                        datapath=datapath, gpu_health=gpu_health)
    return with_measurement(readings, measured) if measured is not None else readings


def with_measurement(readings: Readings, measured) -> Readings:
    """``readings`` with a ``HostMeasurement`` (ib_write_bw between nodes) joined to its ports."""
    return replace(readings, ports=[replace(p, measured_gbps=measured.gbps.get(p.device)) for p in readings.ports],
                   measure_errors=list(measured.errors), measure_note=measured.note)
