"""Site figures from a good fleet's stored active results (issue 47, item 4):
each figure is the fleet's median less k times its MAD, with the node count,
the versions the results were measured under and the date. Pure: gathering
(each node's stored results and versions) is ccrhost/fleet/calibrate.py.

The MAD is scaled (1.4826 x the median absolute deviation, the standard
deviation's estimate for normal data), so k reads as "standard deviations":
k = 3 is the usual outlier rule, and a site comparing with a mean +- 3 sigma
rule gets the same figure on well-behaved data. The source text says so.

The margin below the median is at least ``min_margin`` of it (default 2%):
a uniform fleet's MAD can be smaller than a tool's own run-to-run spread
(the lab's nodes agree to 0.02%), and a figure inside that spread fails
healthy nodes on noise. The source text says when the floor set the figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median

K = 3.0             # default k: FAIL below median - 3 x MAD
MIN_NODES = 8       # default: fewer nodes' results than this are no fleet
MIN_MARGIN = 0.02   # default: the figure is at least 2% below the median
MAD_SCALE = 1.4826  # 1 / Phi^-1(3/4): the MAD of normal data times this is its standard deviation
VERSION_KEYS = ("driver", "nccl", "nic_firmware")
# figure key prefix (the check) -> unit; a key is "<check>.<mode or testcase>", as the platform file's figures
UNITS = {"allreduce": "GB/s", "nvbandwidth": "GB/s", "ib_write_bw": "Gb/s"}


class CalibrateError(ValueError):
    """Calibration refused: the message says why (too few nodes, versions disagreeing)."""


@dataclass(frozen=True)
class NodeResults:
    """One node's calibration input: its measured figures and the versions
    they were measured under (None: that version could not be read)."""
    node: str
    figures: dict[str, float] = field(default_factory=dict)       # figure key -> the node's value
    versions: dict[str, str | None] = field(default_factory=dict)  # VERSION_KEYS -> version text
    notes: tuple[str, ...] = ()                                    # stored entries left out, and why


@dataclass(frozen=True)
class FleetFigure:
    key: str
    value: float
    unit: str
    median: float
    mad: float          # scaled
    k: float
    nodes: int
    date: str
    measured_under: dict
    source: str

    def entry(self) -> dict:
        """The platform file's ``fleet:`` entry (platform-spec.md's keys)."""
        return {"value": self.value, "unit": self.unit, "source": self.source, "date": self.date,
                "nodes": self.nodes, "measured_under": dict(self.measured_under)}


def mad(values: list[float]) -> float:
    """The scaled median absolute deviation (see the module's note)."""
    m = median(values)
    return MAD_SCALE * median(abs(v - m) for v in values)


def version_text(versions: dict) -> str:
    return ", ".join(f"{k} {versions.get(k) or 'unknown'}" for k in VERSION_KEYS)


def node_list(nodes: list[str]) -> str:
    return ", ".join(nodes) if len(nodes) <= 6 else f"{', '.join(nodes[:5])} and {len(nodes) - 5} more"


def agreed_versions(fleet: list[NodeResults]) -> dict:
    """The one set of versions every node measured under; nodes that
    disagree raise :class:`CalibrateError` naming each group (a version that
    could not be read is one of its own: it may be any)."""
    groups: dict[tuple, list[str]] = {}
    for n in fleet:
        groups.setdefault(tuple(n.versions.get(k) for k in VERSION_KEYS), []).append(n.node)
    if len(groups) == 1:
        return dict(zip(VERSION_KEYS, next(iter(groups))))
    differ = [i for i, k in enumerate(VERSION_KEYS) if len({g[i] for g in groups}) > 1]
    parts = []
    for versions, nodes in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1])):
        what = ", ".join(f"{VERSION_KEYS[i]} {versions[i] or 'unknown'}" for i in differ)
        parts.append(f"{what} on {len(nodes)} node(s) ({node_list(sorted(nodes))})")
    raise CalibrateError("the nodes' results were measured under different versions: " + "; ".join(parts)
                         + ": calibrate each group apart (--node), or bring the nodes to one version first")


def calibrate(fleet: list[NodeResults], date: str, k: float = K, min_nodes: int = MIN_NODES,
              only: tuple[str, ...] = (), origin: str = "", min_margin: float = MIN_MARGIN) -> list[FleetFigure]:
    """Each figure the fleet measured (``only``: just those), as median -
    k x MAD over the nodes that measured it. Refused (:class:`CalibrateError`):
    fewer than ``min_nodes`` nodes in all or for any figure, nodes measured
    under different versions, a figure in ``only`` that no node measured."""
    if k < 0 or min_nodes < 1 or not 0 <= min_margin < 1:
        raise CalibrateError(f"k must be >= 0, the least node count >= 1 and the least margin in [0, 1) "
                             f"(k {k:g}, nodes {min_nodes}, margin {min_margin:g})")
    if len(fleet) < min_nodes:
        raise CalibrateError(f"calibration needs the results of at least {min_nodes} nodes; it has "
                             f"{len(fleet)}" + (f" ({node_list(sorted(n.node for n in fleet))})" if fleet else ""))
    measured_under = agreed_versions(fleet)
    by_key: dict[str, list[float]] = {}
    for n in fleet:
        for key, value in n.figures.items():
            by_key.setdefault(key, []).append(value)
    keys = list(only) if only else sorted(by_key)
    unknown = [key for key in keys if key not in by_key]
    if unknown:
        raise CalibrateError(f"no node has a result for {', '.join(unknown)}; measured: "
                             f"{', '.join(sorted(by_key)) or 'nothing'}")
    if not keys:
        raise CalibrateError("none of the nodes has a stored result with a figure (all-reduce busbw, "
                             "nvbandwidth copy bandwidth): run the active checks first")
    few = [f"{key} has {len(by_key[key])}" for key in keys if len(by_key[key]) < min_nodes]
    if few:
        raise CalibrateError(f"calibration needs the results of at least {min_nodes} nodes per figure: "
                             + "; ".join(few) + " (choose figures with --figure)")
    out = []
    for key in keys:
        values = by_key[key]
        m, spread = median(values), mad(values)
        floor = k * spread < min_margin * m
        value = round(max(0.0, m * (1 - min_margin) if floor else m - k * spread), 2)
        source = (f"calibrated: median {m:.2f} - {k:g} x MAD {spread:.2f} (scaled: 1.4826 x median absolute "
                  f"deviation) over {len(values)} nodes"
                  + (f", at least {min_margin:.0%} below the median" if floor else "")
                  + (f", from {origin}" if origin else ""))
        out.append(FleetFigure(key, value, UNITS.get(key.split(".", 1)[0], "GB/s"), round(m, 2), round(spread, 2),
                               k, len(values), date, measured_under, source))
    return out


def node_figures(results: dict, read_at: float) -> tuple[dict[str, float], list[str]]:
    """A node's stored active results ("check/mode" -> the stored entry) as
    figure values: an all-reduce mode's busbw, each nvbandwidth testcase's
    slowest GPU (or pair; the figure is judged per GPU, so the node's own
    figure is its slowest), an ``ib_write_bw`` mode's Gb/s. Left out, with a
    note: an entry that is not a result, one without a figure (UNKNOWN: it
    never measured), one stale when the node was read (the versions read
    then may not be the ones it ran under)."""
    from ccrhost.model.active import ActiveResult

    figures, notes = {}, []
    for key, entry in sorted(results.items()):
        try:
            r = ActiveResult.from_dict(entry)
        except ValueError as exc:
            notes.append(f"{key}: {exc}")
            continue
        if r.check not in UNITS:
            continue
        if r.stale(read_at):
            notes.append(f"{key}: stale ({r.age(read_at):.0f} s old, valid for {r.valid_for:g} s): left out")
            continue
        if r.check == "nvbandwidth":
            mins = (r.data or {}).get("min_gbs")
            if not isinstance(mins, dict):
                notes.append(f"{key}: no per-testcase figures stored (stored before calibration existed): left out")
                continue
            figures.update((f"nvbandwidth.{tc}", float(v)) for tc, v in mins.items()
                           if isinstance(v, (int, float)) and not isinstance(v, bool))
        elif isinstance(r.value, (int, float)) and r.status != "UNKNOWN":
            figures[f"{r.check}.{r.mode}"] = float(r.value)
        else:
            notes.append(f"{key}: {r.status}, no figure: left out")
    return figures, notes


GPUDIRECT = "ib_write_bw.gpudirect"  # the platform file's figure (model/platform.py): Gb/s, per GPU-NIC pair


def gpudirect_figure(bw) -> tuple[float | None, str | None]:
    """A node's ``ib_write_bw.gpudirect`` value from its verification's
    ``gpudirect_bandwidth`` (ccr-report.json: measured Gb/s per GPU-NIC pair):
    its slowest pair, since the figure is judged per pair and the slowest
    decides the node (as nvbandwidth's slowest GPU); one value per node, so
    the MAD and the node count are the nodes', not eight correlated NICs'.
    (None, why) where it is no figure: not measured, a pair failed (its
    slowest is then unknown), a value that is no number."""
    if not isinstance(bw, dict):
        return None, "no GPUDirect measurement in the report"
    if not bw.get("measurable"):
        return None, f"GPUDirect not measurable ({bw.get('why') or 'no reason given'})"
    if bw.get("errors"):
        return None, f"a GPUDirect run failed ({'; '.join(map(str, bw['errors']))[:200]}): its slowest pair is unknown"
    gbps = bw.get("gbps")
    if not isinstance(gbps, dict) or not gbps:
        return None, "GPUDirect measured no pair"
    values = [v for v in gbps.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(values) != len(gbps) or any(v != v or v < 0 for v in values):
        return None, f"GPUDirect values that are no bandwidth: {gbps}"
    return float(min(values)), None
