"""``ccrhost check``'s output formats: text for a person, NHC's one line,
Node Problem Detector's line and exit code, a Prometheus textfile (JSON is
the verdict's own ``to_dict``).
"""

from __future__ import annotations

from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN, Reason
from ccrhost.model.verdict import Verdict, scope_detail, scope_text
from ccrhost.model.verdict_line import bounded_summary, cut, reason_codes

# Fixed sizes, whatever the log holds: a reason's message and the reasons
# of one code in the text report (the one-line forms: model/verdict_line.py)
MESSAGE_MAX = 400
PER_CODE_MAX = 20
REASONS_MAX = 100


def format_text(verdict: Verdict) -> str:
    lines = [f"ccrhost check: {verdict.status}"]
    if verdict.ccr:
        c = verdict.ccr
        lines.append(f"  CCR {c.ccr:.3e} (B {c.bandwidth_gbps:g} Gb/s {c.model}, F {c.tflops:.1f} TFLOPS, beta {c.beta:g})")
        if verdict.expected_ccr:
            lines.append(f"  expected {verdict.expected_ccr:.3e} from the declared hardware")
        if c.workload:
            lines.append(f"  workload model: {c.workload['statement']}")
    if verdict.measured_ccr:
        m = verdict.measured_ccr
        lines.append(f"  measured CCR {m.ccr:.3e} (B {m.bandwidth_gbps:g} Gb/s from the two-node all-reduce, "
                     f"F {m.tflops:.1f} TFLOPS {m.compute or 'nominal'} compute)")
    if verdict.status != OK:
        lines.append(f"  action: {verdict.action_text()}")
    shown: dict[str, int] = {}
    printed = 0
    for r in verdict.reasons:
        shown[r.code] = shown.get(r.code, 0) + 1
        if shown[r.code] <= PER_CODE_MAX and printed < REASONS_MAX:
            # `ccrhost explain` takes the code
            lines.append(f"  {r.level}: {r.code}: {cut(r.message, MESSAGE_MAX)}{_action_note(r, verdict)}")
            printed += 1
    left = len(verdict.reasons) - printed
    if left:
        more = ", ".join(f"{n - min(n, PER_CODE_MAX)} {code}" for code, n in shown.items() if n > PER_CODE_MAX)
        lines.append(f"  ... and {left} more reasons{f' ({more} among them)' if more else ''} "
                     "(--format json lists them all)")
    if verdict.evidence:
        lines.append(f"  evidence: {verdict.evidence}")
    history = verdict.readings.history
    if history is not None and history.error:
        lines.append(f"  note: {history.error}")
    fabric = verdict.readings.fabric
    if fabric is not None and fabric.window is not None and fabric.window.note:
        lines.append(f"  note: {cut(fabric.window.note, MESSAGE_MAX)}")
    health = verdict.readings.gpu_health
    if health is not None and health.window is not None and health.window.note:
        lines.append(f"  note: {cut(health.window.note, MESSAGE_MAX)}")
    return "\n".join(lines) + "\n"


def _action_note(reason: Reason, verdict: Verdict) -> str:
    """`` [reset_gpu: gpu 0 0000:18:00.0 GPU-...]``: a reason's action and the part it is about."""
    if reason.level == OK:
        return ""
    return f" [{scope_detail(reason, verdict.readings)['action']}: {scope_text(reason, verdict.readings)}]"


def format_nhc(verdict: Verdict) -> str:
    """NHC's convention: silence when healthy, one ``ERROR:`` line otherwise."""
    if verdict.status == OK:
        return ""
    codes = ",".join(reason_codes(verdict))
    if verdict.status in (FAIL, UNKNOWN):
        return f"ERROR: ccrhost: Health check failed: {verdict.status}: {codes}: {bounded_summary(verdict)} "\
               f"[action {verdict.action}]\n"
    return f"WARNING: ccrhost: {codes}: {bounded_summary(verdict)} [action {verdict.action}]\n"


# Node Problem Detector's custom-plugin contract (kubernetes/node-problem-detector
# pkg/custompluginmonitor/types/types.go: OK 0, NonOK 1, Unknown 2;
# plugin/plugin.go: any other exit code is Unknown too, stdout is trimmed and
# cut at max_output_length bytes; types/config.go: that length defaults to 80;
# docs/custom_plugin_monitor.md).
NPD_OK, NPD_PROBLEM, NPD_UNKNOWN = 0, 1, 2
NPD_MAX_OUTPUT = 80


def format_npd(verdict: Verdict, warn_unhealthy: bool = False) -> tuple[str, int]:
    """One stdout line and NPD's exit code for ``verdict``: FAIL is a
    problem, WARN only with ``warn_unhealthy`` (verify_npd_warn_unhealthy),
    UNKNOWN is NPD's Unknown. The line names the status and the reason
    codes, worst first, within NPD's default output length, so the node
    condition's message is never cut mid-code."""
    status = verdict.status
    if status == FAIL or (status == WARN and warn_unhealthy):
        code = NPD_PROBLEM
    elif status == UNKNOWN:
        code = NPD_UNKNOWN
    else:
        code = NPD_OK
    codes = reason_codes(verdict)
    # the action closes the line and is never cut: a remediation controller acts on it
    action = f"; action {verdict.action}" if codes and status != OK else ""
    line = f"{status}: " + (",".join(codes) if codes else "all checks passed") + action
    shown = len(codes)
    while len(line.encode()) > NPD_MAX_OUTPUT and shown > 1:
        shown -= 1
        line = f"{status}: {','.join(codes[:shown])} +{len(codes) - shown} more{action}"
    return line.encode()[:NPD_MAX_OUTPUT].decode(errors="ignore") + "\n", code


def _label(value) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def format_prometheus(verdict: Verdict) -> str:
    out = [
        "# HELP ccrhost_check_status Verdict of ccrhost check: 0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN.",
        "# TYPE ccrhost_check_status gauge",
        f"ccrhost_check_status {verdict.exit_code}",
    ]
    if verdict.ccr:
        c = verdict.ccr
        labels = f'model="{c.model}"'
        out += [
            "# HELP ccrhost_ccr Connection-to-compute ratio B / (beta * F).",
            "# TYPE ccrhost_ccr gauge",
            f"ccrhost_ccr{{{labels}}} {c.ccr:.6e}",
            "# HELP ccrhost_bandwidth_gbps Node network bandwidth B used for the CCR.",
            "# TYPE ccrhost_bandwidth_gbps gauge",
            f"ccrhost_bandwidth_gbps{{{labels}}} {c.bandwidth_gbps:g}",
            "# HELP ccrhost_compute_tflops Node GPU compute F used for the CCR.",
            "# TYPE ccrhost_compute_tflops gauge",
            f"ccrhost_compute_tflops {c.tflops:g}",
        ]
    if verdict.measured_ccr:
        m = verdict.measured_ccr
        out += [
            "# HELP ccrhost_ccr_measured CCR from the measured bandwidth: two-node ring all-reduce busbw / (beta * F).",
            "# TYPE ccrhost_ccr_measured gauge",
            f"ccrhost_ccr_measured {m.ccr:.6e}",
            "# HELP ccrhost_bandwidth_measured_gbps Node bandwidth measured by the two-node all-reduce.",
            "# TYPE ccrhost_bandwidth_measured_gbps gauge",
            f"ccrhost_bandwidth_measured_gbps {m.bandwidth_gbps:g}",
        ]
    out += ["# HELP ccrhost_port_effective_gbps Effective rate of each compute port.",
            "# TYPE ccrhost_port_effective_gbps gauge"]
    for p in verdict.readings.ports:
        if p.efa:  # its rate file is a driver constant, not a reading (efa_rate_unknown): left out, never a number
            continue
        out.append(f'ccrhost_port_effective_gbps{{device="{_label(p.device)}",port="{p.port}",'
                   f'active="{int(p.active)}"}} {p.effective_gbps:g}')
    out += ["# HELP ccrhost_gpus GPUs found.", "# TYPE ccrhost_gpus gauge", f"ccrhost_gpus {len(verdict.readings.gpus)}",
            *gpu_health_metrics(verdict.readings.gpu_health),
            "# HELP ccrhost_check_reason A reason for a non-OK verdict (its code, with the code's action and "
            "scope; the message is in the check's text and JSON output, never a label: a number in it would "
            "make a new series).",
            "# TYPE ccrhost_check_reason gauge"]
    seen = set()
    for r in verdict.reasons:
        if (r.level, r.code) not in seen:
            seen.add((r.level, r.code))
            part = scope_detail(r, verdict.readings)
            out.append(f'ccrhost_check_reason{{level="{r.level}",code="{r.code}",action="{part["action"]}",'
                       f'scope="{part["scope"]}"}} 1')
    out += ["# HELP ccrhost_check_action What to do about the node (1 for its action; none when OK).",
            "# TYPE ccrhost_check_action gauge", f'ccrhost_check_action{{action="{verdict.action}"}} 1']
    out += _fabric_metrics(verdict.readings.fabric)
    out += active_metrics(verdict.readings)
    if verdict.readings.certificate is not None:
        from ccrhost.node.certificate import metrics

        out += metrics(verdict.readings.certificate)
    return "\n".join(out) + "\n"


def active_metrics(readings) -> list[str]:
    """The stored active-check results' age and staleness (all-reduce, DCGM
    diag), labelled by check and mode only: an operator sees which nodes
    have not been proven lately. None when no result was read."""
    from ccrhost.model.active import ActiveResult

    rows = []
    for reading in (readings.allreduce, readings.dcgm):
        if reading is None or reading.error:
            continue
        for data in reading.results.values():
            try:
                r = ActiveResult.from_dict(data)
            except ValueError:
                continue  # an unreadable result is a reason of the verdict, not a number
            rows.append((r.check, r.mode, r.age(reading.read_at), int(r.stale(reading.read_at))))
    if not rows:
        return []
    out = ["# HELP ccrhost_active_result_age_seconds Age of the stored active-check result (all-reduce, DCGM diag).",
           "# TYPE ccrhost_active_result_age_seconds gauge"]
    out += [f'ccrhost_active_result_age_seconds{{check="{_label(c)}",mode="{_label(m)}"}} {a:.0f}'
            for c, m, a, _ in sorted(rows)]
    out += ["# HELP ccrhost_active_result_stale 1 when the stored result is past its validity (judged UNKNOWN).",
            "# TYPE ccrhost_active_result_stale gauge"]
    out += [f'ccrhost_active_result_stale{{check="{_label(c)}",mode="{_label(m)}"}} {s}' for c, m, _, s in sorted(rows)]
    return out


# (name, help, value of a GpuHealth): labels are the GPU index only, never a message
_GPU_METRICS = (
    ("ecc_uncorrectable", "Uncorrectable volatile ECC errors.", lambda g: g.ecc_uncorrectable),
    ("ecc_correctable", "Correctable volatile ECC errors.", lambda g: g.ecc_correctable),
    ("retired_pages_pending", "1 when retired pages wait for a reset.", lambda g: g.retired_pending),
    ("row_remap_pending", "1 when a row remapping waits for a reset.", lambda g: g.remap_pending),
    ("row_remap_failure", "1 when a row remapping failed.", lambda g: g.remap_failure),
    ("pcie_replays", "PCIe replays since reset.", lambda g: g.pcie_replays),
    ("nvlink_errors", "NVLink CRC, replay and recovery errors, all links.", lambda g: g.nvlink_errors),
    ("nvlinks_up", "NVLinks up.", lambda g: None if g.nvlinks is None else sum(1 for n in g.nvlinks if n.up)),
    ("fabric_ready", "1 when the fabric state is Completed with status Success (NVSwitch systems).",
     lambda g: None if g.fabric_state is None else (g.fabric_state, g.fabric_status) == ("Completed", "Success")),
)


def gpu_health_metrics(health) -> list[str]:
    """Prometheus lines for the GPU health readings (none when not read);
    a value not read is left out, never 0."""
    if health is None:
        return []
    out = []
    for name, text, value in _GPU_METRICS:
        rows = [(g.index, value(g)) for g in health.gpus]
        rows = [(i, int(v)) for i, v in rows if v is not None]
        if rows:
            out += [f"# HELP ccrhost_gpu_{name} {text}", f"# TYPE ccrhost_gpu_{name} gauge"]
            out += [f'ccrhost_gpu_{name}{{gpu="{i}"}} {v}' for i, v in rows]
    from ccrhost.model.gpu_health import pci_key

    index = {pci_key(g.pci): g.index for g in health.gpus}
    counts: dict[tuple[str, int], int] = {}
    for x in health.xids:  # one record per device, instance and code: its count is the lines'
        if x.sxid:
            continue
        gpu = str(index.get(pci_key(x.pci), x.pci))
        counts[(gpu, x.code)] = counts.get((gpu, x.code), 0) + x.count
    out += ["# HELP ccrhost_gpu_xids XID lines in the kernel log since boot, per GPU and code.",
            "# TYPE ccrhost_gpu_xids gauge"]
    out += [f'ccrhost_gpu_xids{{gpu="{_label(g)}",code="{c}"}} {n}' for (g, c), n in sorted(counts.items())]
    return out


def _fabric_metrics(fabric) -> list[str]:
    """The lossless-fabric readings, labelled only by device, counter,
    direction and priority (bounded sets): the raw counters (for rate()),
    the pause share per priority over the check's window, global pause."""
    from ccrhost.model.fabric import PRIO_PAUSE, RATE_COUNTERS, pause_shares

    if fabric is None or fabric.window is None:
        return []
    out = ["# HELP ccrhost_fabric_counter Lossless-fabric error counters as read (ethtool -S per netdev, "
           "hw_counters per RDMA port): storm events, drops, physical and transport errors.",
           "# TYPE ccrhost_fabric_counter counter"]
    for device, values in sorted(fabric.window.after.items()):
        for name in RATE_COUNTERS:
            if name in values:
                out.append(f'ccrhost_fabric_counter{{device="{_label(device)}",counter="{name}"}} {values[name]}')
    out += ["# HELP ccrhost_fabric_pause_seconds_total PFC pause per priority (<dir>_prio<N>_pause_duration, "
            "microseconds in ethtool), in seconds.", "# TYPE ccrhost_fabric_pause_seconds_total counter"]
    for device, values in sorted(fabric.window.after.items()):
        for name, value in sorted(values.items()):
            m = PRIO_PAUSE.match(name)
            if m and m.group(3) == "_duration":
                out.append(f'ccrhost_fabric_pause_seconds_total{{device="{_label(device)}",direction="{m.group(1)}",'
                           f'priority="{m.group(2)}"}} {value / 1e6:g}')
    out += ["# HELP ccrhost_fabric_pause_share Share of the window since the last check a priority was paused.",
            "# TYPE ccrhost_fabric_pause_share gauge"]
    for (device, way, prio), share in pause_shares(fabric.window).items():
        out.append(f'ccrhost_fabric_pause_share{{device="{_label(device)}",direction="{way}",priority="{prio}"}} '
                   f'{share:.6g}')
    out += ["# HELP ccrhost_fabric_global_pause Global 802.3x pause (ethtool -a): 1 on, 0 off.",
            "# TYPE ccrhost_fabric_global_pause gauge"]
    for device, p in sorted(fabric.pause.items()):
        for way, on in (("rx", p.rx), ("tx", p.tx)):
            out.append(f'ccrhost_fabric_global_pause{{device="{_label(device)}",direction="{way}"}} {int(bool(on))}')
    return out
