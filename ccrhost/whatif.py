"""``ccrhost calc``: one what-if row per option, sweeps, and their chart.

A row is a node (GPU model x count, NICs x rate) running a workload; its
figures come from the same workload model the verification uses
(ccrhost/model/step.py). Everything here but ``draw_chart`` is pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ccrhost.model import ccr as ccrmod
from ccrhost.model import gpus as gpu_peaks
from ccrhost.model import mfu as mfumod
from ccrhost.model.step import NOT_NETWORK_BOUND, node_model
from ccrhost.model.workload import WorkloadError, WorkloadSpec

# --sweep KEY: the node's hardware (Hardware fields) ...
HARDWARE_KEYS = {"gpu": ("gpu", str), "gpus": ("gpus", int), "nics": ("nics", int), "nic-gbps": ("nic_gbps", float)}
# ... within the ranges calc's own flags allow: (lowest, highest, whether the lowest is excluded)
HARDWARE_RANGES = {"gpus": (1, 1024, False), "nics": (1, 1024, False), "nic-gbps": (0, 1e6, True),
                   "tflops": (0, 1e6, True), "beta": (0, 1e6, True)}


def number_problem(key: str, value) -> str | None:
    """Why ``value`` cannot be calc's ``key`` (not finite, out of range), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    lo, hi, lo_open = HARDWARE_RANGES[key]
    if value < lo or (lo_open and value == lo) or value > hi:
        return f"{value!r} is out of range: allowed {'above' if lo_open else 'from'} {lo:g} to {hi:g}"
    return None
# ... or the workload (verify_workload keys).
WORKLOAD_KEYS = {
    "dp": ("dp_size", int), "tp": ("tp_size", int), "pp": ("pp_size", int), "cp": ("cp_size", int),
    "ep": ("ep_size", int), "tokens": ("tokens_per_gpu_step", float), "grad-bytes": ("grad_bytes_per_param", float),
    "param-bytes": ("param_bytes", float), "activation-bytes": ("activation_bytes", float),
    "compression": ("compression", float), "overlap": ("overlap", float), "mfu": ("mfu", float),
    "train-precision": ("precision", str), "sharded": ("sharding", str), "reduction": ("reduction", str),
    "preset": ("preset", str), "framework": ("framework", str), "recompute": ("recompute", str),
    "layers": ("layers", int), "seq-len": ("seq_len", int), "kv-size": ("kv_size", int),
    "hidden-size": ("hidden_size", int), "params": ("params", float),
    "experts": ("experts", int), "expert-params": ("expert_params", float), "top-k": ("top_k", int),
    "capacity-factor": ("capacity_factor", float), "moe-layers": ("moe_layers", int),
    "moe-max-nodes": ("moe_max_nodes", int), "virtual-stages": ("virtual_stages", int),
    "micro-batches": ("micro_batches", int),
    "kernel-share": ("kernel_share", float), "mfu-attention": ("mfu_attention", str),
    "param-overlap": ("param_overlap", float), "pipeline-overlap": ("pipeline_overlap", float),
    "a2a-overlap": ("a2a_overlap", float), "dispatch-bytes": ("dispatch_bytes", float),
    "combine-bytes": ("combine_bytes", float), "attention-width": ("attention_width", int),
    "cp-method": ("cp_method", str),
}
# calc's flag (its Python name) -> verify_workload key
FLAG_KEYS = {k.replace("-", "_"): v[0] for k, v in WORKLOAD_KEYS.items()}
SWEEP_KEYS = (*HARDWARE_KEYS, *WORKLOAD_KEYS)


class WhatIfError(ValueError):
    """A bad option or value, worded for the user."""


@dataclass(frozen=True)
class Hardware:
    gpu: str  # as given: an NVML name or a table model
    gpus: int
    nics: int
    nic_gbps: float
    precision: str  # of F, the peak compute
    tflops: float | None = None  # per GPU, overriding the table


def gpu_peak(hw: Hardware) -> tuple[str, float]:
    """(label, peak TFLOPS per GPU) from --tflops or the table."""
    if hw.tflops is not None:
        return hw.gpu, hw.tflops
    try:
        peak, row = gpu_peaks.peak_tflops(hw.gpu, hw.precision)
    except gpu_peaks.PeakUnknown as exc:
        models = ", ".join(r.model for r in gpu_peaks.table())
        hint = f"known: {models} (or pass --tflops)" if exc.code == "gpu_unknown_model" else "pass --tflops"
        raise WhatIfError(f"{exc}; {hint}") from None
    return f"{row.model} ({row.source})", peak


def row(hw: Hardware, spec: WorkloadSpec | None, beta: float | None = None) -> dict:
    """The figures for one option. Without a workload, beta is --beta or
    the CCR guide's 4 and the bands are not applied (they mean nothing then)."""
    label, peak = gpu_peak(hw)
    tflops = peak * hw.gpus
    bandwidth = ccrmod.node_bandwidth_gbps([hw.nic_gbps] * hw.nics)
    out = {
        "gpu": label, "gpus": hw.gpus, "precision": hw.precision, "tflops_per_gpu": peak, "tflops": tflops,
        "nics": hw.nics, "nic_gbps": hw.nic_gbps, "bandwidth_gbps": bandwidth,
        "guide_ccr": ccrmod.guide_ccr(bandwidth, tflops),
    }
    if spec is None:
        b = beta or ccrmod.SEED_BETA
        return {**out, "beta": b, "beta_source": "given" if beta else "guide", "ccr": ccrmod.ccr(bandwidth, tflops, b),
                "band": None, "exposed_comm_fraction": None, "slowdown": None, "workload": None}
    try:
        node = node_model(spec, hw.gpus, bandwidth, tflops, strict_mfu=True)
    except WorkloadError as exc:
        raise WhatIfError(f"the workload does not fit {hw.gpus} GPUs per node: {exc}") from None
    model = node.to_dict()
    return {**out, "beta": node.beta, "beta_source": "workload", "ccr": model["ccr"], "band": node.band,
            "exposed_comm_fraction": node.exposed_comm_fraction, "slowdown": node.slowdown,
            "kernel_share": node.kernel_share, "mfu_end_to_end": model["mfu_end_to_end"], "workload": model}


def parse_sweep(text: str) -> tuple[str, list]:
    """``KEY=v1,v2,...`` -> (KEY, typed values)."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not values.strip():
        raise WhatIfError(f"--sweep {text!r}: expected KEY=v1,v2,... with KEY one of {', '.join(SWEEP_KEYS)}")
    if key not in SWEEP_KEYS:
        raise WhatIfError(f"--sweep {text!r}: unknown key {key!r}; allowed: {', '.join(SWEEP_KEYS)}")
    kind = (HARDWARE_KEYS.get(key) or WORKLOAD_KEYS[key])[1]
    out = []
    for item in values.split(","):
        try:
            value = kind(item.strip())
        except ValueError:
            raise WhatIfError(f"--sweep {key}: {item.strip()!r} is not {'an integer' if kind is int else 'a number'}") from None
        problem = number_problem(key, value) if key in HARDWARE_RANGES else None
        if problem:  # workload values go through the inventory's schema, row by row
            raise WhatIfError(f"--sweep {key}: {problem}")
        out.append(value)
    return key, out


def sweep(hw: Hardware, workload: dict, sweeps: list[tuple[str, list]], validate) -> list[dict]:
    """One row per combination of the sweeps' values (the first varies
    fastest). ``validate`` turns workload keys into a WorkloadSpec (the
    inventory's own schema)."""
    combos = [{}]
    for key, values in sweeps:
        combos = [{**c, key: v} for v in values for c in combos]
    rows = []
    for combo in combos:
        hw_row, data = hw, dict(workload)
        for key, value in combo.items():
            if key in HARDWARE_KEYS:
                hw_row = replace(hw_row, **{HARDWARE_KEYS[key][0]: value})
            else:
                data[WORKLOAD_KEYS[key][0]] = value
        where = ", ".join(f"{k}={v}" for k, v in combo.items())
        try:
            rows.append({"sweep": combo, **row(hw_row, validate(data))})
        except WhatIfError as exc:
            raise WhatIfError(f"{where}: {exc}") from None
    return rows


def _fmt_ccr(value) -> str:
    return "none" if value is None else f"{value:.4g}"


def text_single(r: dict) -> str:
    lines = [f"GPU: {r['gpus']} x {r['gpu']}: {r['tflops']:g} TFLOPS {r['precision']}",
             f"Network: {r['nics']} x {r['nic_gbps']:g} Gb/s = {r['bandwidth_gbps']:g} Gb/s "
             f"= {r['bandwidth_gbps'] / 8:g} GB/s",
             f"beta: {r['beta']:.4g} bytes/FLOP" + (" (the node's, from the workload model)"
                                                    if r["workload"] else "")]
    w = r["workload"]
    if w and w["ccr"] is None:
        lines.append("CCR: no inter-node traffic: not network-bound")
    else:
        share = w["kernel_share"] if w else 1
        lines.append(f"CCR = B / (beta x F) = {r['ccr']:.4g}" if share == 1 else
                     f"CCR = B / (beta x F x kernel share) = {r['ccr']:.4g} (kernel share {share:.4g})")
    lines.append(f"(the CCR guide's calculate_ccr(), without the 1000 from TFLOPS: {r['guide_ccr']:.4g})")
    if r["band"] and r["band"] != NOT_NETWORK_BOUND:
        lines.append(f"band: {r['band']} (below {ccrmod.LOW_BAND}: bandwidth-bound; "
                     f"above {ccrmod.HIGH_BAND}: compute under-used)")
    elif r["band"]:
        lines.append(f"band: {r['band']} (no inter-node traffic)")
    else:
        lines.append("band: not classified: with the literal beta = 4 the 0.5/2 bands mean nothing; give a workload")
    if w:
        lines.append(f"exposed communication: {w['exposed_comm_fraction']:.1%} of the step; step time "
                     f"x{w['slowdown']:.3f} against a network that is never the bottleneck")
        lines.append(f"kernel share: {w['kernel_share']:.1%} of peak F while computing "
                     f"({w['kernel_share_source']})")
        mfu = w["mfu_end_to_end"]
        lines.append(f"end-to-end MFU, {w['mfu_kind']}: {mfumod.shown(mfu['causal'])} counting causal attention "
                     f"(6 x layers x seq_len x attention width per token), {mfumod.shown(mfu['full'])} counting it "
                     "full (12 x ..., as PaLM, Megatron-LM and torchtitan publish); after the pipeline bubble "
                     f"({w['bubble_fraction']:.1%}) and exposed communication"
                     + ("" if w["mfu_kind"] == mfumod.PREDICTION else
                        "; kernels at peak F: a ceiling, not a prediction (give kernel_share or mfu)"))
        lines.append(f"workload model: {w['statement']}")
        lines += [f"note: {n}" for n in w["notes"]]
        lines.append("assumptions:")
        lines += [f"  - {a}" for a in w["assumptions"]]
    return "\n".join(lines) + "\n"


def _label(key: str, value) -> str:
    if key == "gpu":
        row = gpu_peaks.lookup(value) or next((r for r in gpu_peaks.table() if r.model.lower() == str(value).lower()), None)
        return row.model if row else str(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def text_table(rows: list[dict], sweeps: list[tuple[str, list]]) -> str:
    keys = [k for k, _ in sweeps]
    head = "".join(f"{k:>12}" for k in keys)
    lines = [f"{head}{'nodes':>7}{'B Gb/s':>8}{'F TFLOPS':>10}{'beta':>11}{'CCR':>9}  {'band':<18}"
             f"{'exposed':>8}{'slowdown':>9}{'MFU':>9}"]
    for r in rows:
        w = r["workload"]
        lines.append("".join(f"{_label(k, r['sweep'][k]):>12}" for k in keys)
                     + f"{w['nodes']:>7}{r['bandwidth_gbps']:>8g}{r['tflops']:>10.1f}{r['beta']:>11.4g}"
                     f"{_fmt_ccr(r['ccr']):>9}  {r['band']:<18}{w['exposed_comm_fraction']:>8.1%}"
                     f"{w['slowdown']:>9.3f}{mfumod.cell(w['mfu_end_to_end']['causal'], w['mfu_kind']):>9}")
    lines += crossings(rows, sweeps)
    lines.append("MFU: the end-to-end MFU (model FLOPs / step time / peak F), attention counted causal "
                 "(6 x layers x seq_len x attention width per token), a prediction where the kernel share is "
                 "calibrated (a preset's source, kernel_share or mfu given); '<=' marks a ceiling (kernels at peak), "
                 "not a prediction; --format json gives the full count (12 x ..., as PaLM and Megatron-LM "
                 "publish) too")
    notes = dict.fromkeys(n for r in rows for n in r["workload"]["notes"])  # once each, in order
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _series(rows: list[dict], sweeps: list[tuple[str, list]]) -> dict[str, list[dict]]:
    """Rows grouped by the second sweep's value (one series without one)."""
    if len(sweeps) < 2:
        return {"": rows}
    key = sweeps[1][0]
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(f"{key}={_label(key, r['sweep'][key])}", []).append(r)
    return out


def _numeric(sweeps) -> bool:
    key = sweeps[0][0]
    return (HARDWARE_KEYS.get(key) or WORKLOAD_KEYS.get(key))[1] is not str


def crossing_points(points: list[tuple[float, float | None]]) -> list[tuple[float, float, float, float, bool]]:
    """Where a CCR curve crosses each band edge: (threshold, x, x_before,
    x_after, interpolated). Between two finite points the crossing is interpolated on log
    x and log CCR (both scale by powers); an x <= 0 (overlap 0) is linear.
    From no inter-node traffic (CCR none) to a CCR below an edge, the
    crossing lies somewhere between: x is then the later point."""
    out = []
    for (x0, c0), (x1, c1) in zip(points, points[1:]):
        for t in (ccrmod.HIGH_BAND, ccrmod.LOW_BAND):
            if c0 is None or c1 is None:
                finite = c1 if c0 is None else c0
                if finite is not None and finite < t:
                    out.append((t, x1 if c0 is None else x0, x0, x1, False))
                continue
            if (c0 - t) * (c1 - t) >= 0 or c0 == c1:
                continue
            share = (math.log(t) - math.log(c0)) / (math.log(c1) - math.log(c0))
            if x0 > 0 and x1 > 0:
                x = math.exp(math.log(x0) + share * (math.log(x1) - math.log(x0)))
            else:
                x = x0 + share * (x1 - x0)
            out.append((t, x, x0, x1, True))
    return out


def crossings(rows: list[dict], sweeps: list[tuple[str, list]]) -> list[str]:
    """A line per series saying where it crosses the 0.5 and 2 bands."""
    key = sweeps[0][0]
    lines = []
    for name, series in _series(rows, sweeps).items():
        prefix = f"{name}: " if name else ""
        if not _numeric(sweeps):
            bands = ", ".join(f"{_label(key, r['sweep'][key])} {r['band']}" for r in series)
            lines.append(f"{prefix}bands: {bands}")
            continue
        found = crossing_points([(r["sweep"][key], r["ccr"]) for r in series])
        for t, x, x0, x1, interpolated in found:
            if interpolated:
                lines.append(f"{prefix}CCR crosses {t:g} at {key} ~ {x:.4g} (between {x0:g} and {x1:g})")
            else:
                lines.append(f"{prefix}CCR crosses {t:g} between {key} {x0:g} and {x1:g} "
                             "(one side has no inter-node traffic)")
        if not found:
            bands = sorted({r["band"] for r in series})
            lines.append(f"{prefix}CCR crosses neither 0.5 nor 2 over the sweep ({', '.join(bands)})")
    return lines


def chart_title(hw: Hardware, workload: dict, sweeps: list[tuple[str, list]]) -> str:
    """What stays fixed over the sweep."""
    swept = {k for k, _ in sweeps}
    gpus = "" if "gpus" in swept else f"{hw.gpus} x "
    gpu = "GPU" if "gpu" in swept else _label("gpu", hw.gpu)
    nics = "" if "nics" in swept else f"{hw.nics} x "
    rate = "NIC" if "nic-gbps" in swept else f"{hw.nic_gbps:g} Gb/s"
    fixed = ", ".join(f"{k} {_label(k, v)}" for k, v in workload.items())
    return f"{gpus}{gpu} ({hw.precision}), {nics}{rate}; {fixed}"


# matplotlib is an optional extra: a node agent never draws
CHART_INSTALL = "pip install 'ccrhost[chart]'"


def chart_missing() -> str | None:
    """Why --chart cannot draw here, or None when it can."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"--chart draws with matplotlib, which is not installed here: {CHART_INSTALL}"
    return None


def draw_chart(rows: list[dict], sweeps: list[tuple[str, list]], path: str, title: str) -> None:
    """CCR against the first sweep, a line per value of the second, with
    the 0.5 and 2 band edges as horizontal lines, written as a PNG.
    matplotlib (Agg, no display) does the axes, log scales and legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    key = sweeps[0][0]
    numeric = _numeric(sweeps)
    values = sweeps[0][1]
    finite = [r["ccr"] for r in rows if r["ccr"] is not None]
    top = max(finite + [ccrmod.HIGH_BAND]) * 2
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    try:
        no_traffic_labelled = False
        for name, series in _series(rows, sweeps).items():
            xs = [r["sweep"][key] if numeric else values.index(r["sweep"][key]) for r in series]
            points = [(x, r["ccr"]) for x, r in zip(xs, series) if r["ccr"] is not None]
            line = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name or "CCR")[0]
            none = [x for x, r in zip(xs, series) if r["ccr"] is None]
            if none:
                ax.plot(none, [top] * len(none), marker="^", linestyle="none", color=line.get_color(),
                        label=None if no_traffic_labelled else "no inter-node traffic (not network-bound)")
                no_traffic_labelled = True
            if numeric:
                for t, x, _, _, interpolated in crossing_points([(x, r["ccr"]) for x, r in zip(xs, series)]):
                    if not interpolated:
                        continue
                    ax.plot([x], [t], marker="x", color="black", markersize=9)
                    ax.annotate(f"{x:.3g}", (x, t), textcoords="offset points", xytext=(4, 6), fontsize=8)
        ax.axhline(ccrmod.HIGH_BAND, color="tab:green", linestyle="--",
                   label=f"CCR {ccrmod.HIGH_BAND:g}: above, compute under-used")
        ax.axhline(ccrmod.LOW_BAND, color="tab:red", linestyle="--",
                   label=f"CCR {ccrmod.LOW_BAND:g}: below, bandwidth-bound")
        ax.set_yscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
        if numeric and min(values) > 0 and max(values) / min(values) >= 8:
            ax.set_xscale("log")
        if not numeric:
            ax.set_xticks(range(len(values)), [_label(key, v) for v in values])
        ax.set_xlabel(key)
        ax.set_ylabel("node CCR = B / (beta x F)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
