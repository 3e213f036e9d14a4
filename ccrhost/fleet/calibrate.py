"""Gathering for ``ccrhost baseline calibrate``: the nodes' exported results
(``ccrhost baseline results``, one JSON document per node, collected into
folders by deploys/baseline.py or by srun/pdsh) read into
:class:`~ccrhost.model.calibrate.NodeResults`, and the figures written into a
site platform file's ``fleet:`` section. The statistics are
ccrhost/model/calibrate.py's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from ccrhost.model.calibrate import (GPUDIRECT, VERSION_KEYS, CalibrateError, FleetFigure, NodeResults,
                                     gpudirect_figure, node_figures)
from ccrhost.model.certificate_view import nic_firmware_text  # one form: baseline results' and a certificate's

_MAX_BYTES = 4 << 20
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def node_results(doc, where: str) -> NodeResults:
    """One exported document as calibration input; one that is not raises :class:`CalibrateError`."""
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("node"), str) \
            or not isinstance(doc.get("results"), dict) or not isinstance(doc.get("versions"), dict) \
            or not isinstance(doc.get("read_at"), (int, float)):
        raise CalibrateError(f"{where}: not the output of `ccrhost baseline results` (version 1)")
    versions = {k: v if isinstance(v, str) and v else None for k, v in
                ((k, doc["versions"].get(k)) for k in VERSION_KEYS)}
    figures, notes = node_figures(doc["results"], float(doc["read_at"]))
    notes += [f"the node could not read a state file: {e}" for e in doc.get("errors") or [] if isinstance(e, str)]
    return NodeResults(doc["node"], figures, versions, tuple(notes))


def read_folders(folders: list[str]) -> list[NodeResults]:
    """Every ``*.json`` document in ``folders``; a node twice is refused."""
    fleet, seen = [], {}
    for folder in folders:
        if not Path(folder).is_dir():
            raise CalibrateError(f"{folder}: not a folder of `ccrhost baseline results` documents")
        for path in sorted(Path(folder).glob("*.json")):
            try:
                with open(path, "rb") as f:
                    raw = f.read(_MAX_BYTES + 1)
                if len(raw) > _MAX_BYTES:
                    raise ValueError(f"over {_MAX_BYTES} bytes")
                doc = json.loads(raw)
            except (OSError, ValueError, RecursionError) as exc:
                raise CalibrateError(f"{path}: cannot be read: {exc}") from None
            n = node_results(doc, str(path))
            if n.node in seen:
                raise CalibrateError(f"node {n.node} is in {seen[n.node]} and in {path}: keep one")
            seen[n.node] = str(path)
            fleet.append(n)
    return fleet


def _read_json(path: Path):
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_BYTES * 16 + 1)  # a fleet's report: some 20 kB a host
        if len(raw) > _MAX_BYTES * 16:
            raise ValueError(f"over {_MAX_BYTES * 16} bytes")
        return json.loads(raw)
    except (OSError, ValueError, RecursionError) as exc:
        raise CalibrateError(f"{path}: cannot be read: {exc}") from None


def read_reports(paths: list[str]) -> tuple[list[NodeResults], list[str]]:
    """The ``ib_write_bw.gpudirect`` figure of each host the deploy's
    verification measured (``verify_measure_gpudirect``), from its
    ccr-report.json (a path, or the report folder holding one), with the
    driver and NIC firmware its datapath read (NCCL: not in the report);
    and notes: each host left out, and why. A host twice is refused."""
    fleet, notes, seen = [], [], {}
    for given in paths:
        path = Path(given) / "ccr-report.json" if Path(given).is_dir() else Path(given)
        doc = _read_json(path)
        hosts = doc.get("hosts") if isinstance(doc, dict) else None
        if not isinstance(hosts, dict):
            raise CalibrateError(f"{path}: not the deploy's ccr-report.json (no hosts)")
        for host, entry in sorted(hosts.items()):
            datapath = (entry or {}).get("datapath") if isinstance(entry, dict) else None
            if not isinstance(datapath, dict) or datapath.get("gpudirect_bandwidth") is None:
                continue  # not measured in that run: nothing to say
            value, why = gpudirect_figure(datapath["gpudirect_bandwidth"])
            if value is None:
                notes.append(f"{host}: {GPUDIRECT} from {path}: {why}: left out")
                continue
            if host in seen:
                raise CalibrateError(f"host {host} is in {seen[host]} and in {path}: keep one report")
            seen[host] = str(path)
            versions = datapath.get("versions") if isinstance(datapath.get("versions"), dict) else {}
            fw = versions.get("nic_fw") if isinstance(versions.get("nic_fw"), dict) else {}
            driver = versions.get("nvidia")
            fleet.append(NodeResults(host, {GPUDIRECT: value}, {
                "driver": driver if isinstance(driver, str) and driver else None, "nccl": None,
                "nic_firmware": nic_firmware_text(fw)}))
    return fleet, notes


def merge(stored: list[NodeResults], measured: list[NodeResults]) -> list[NodeResults]:
    """The nodes' stored results joined with their reports' measurements, by node name: a node's
    versions are its stored results' (read as docs/baseline.md says), the report's where those are
    unknown; a driver the two read differently is refused (not the same measurement conditions)."""
    by = {n.node: n for n in stored}
    out = list(stored)
    for m in measured:
        n = by.get(m.node)
        if n is None:
            out.append(m)
            continue
        a, b = n.versions.get("driver"), m.versions.get("driver")
        if a and b and a != b:
            raise CalibrateError(f"node {m.node}: its report measured under driver {b}, its stored results "
                                 f"under {a}: calibrate them apart")
        clash = set(n.figures) & set(m.figures)
        if clash:
            raise CalibrateError(f"node {m.node}: {', '.join(sorted(clash))} is in its stored results and in "
                                 "a report: keep one")
        versions = {k: n.versions.get(k) or m.versions.get(k) for k in VERSION_KEYS}
        out[out.index(n)] = NodeResults(n.node, {**n.figures, **m.figures}, versions, n.notes + m.notes)
    return out


def pick(fleet: list[NodeResults], nodes: tuple[str, ...]) -> list[NodeResults]:
    if not nodes:
        return fleet
    have = {n.node for n in fleet}
    missing = [n for n in nodes if n not in have]
    if missing:
        raise CalibrateError(f"no results for --node {', '.join(missing)}")
    return [n for n in fleet if n.node in nodes]


def fleet_yaml(figures: list[FleetFigure]) -> str:
    """The ``fleet:`` section as YAML text (one flow mapping a figure)."""
    lines = ["fleet:   # written by `ccrhost baseline calibrate`: FAIL below these as well as below figures:"]
    for f in figures:
        entry = yaml.safe_dump({f.key: f.entry()}, default_flow_style=None, sort_keys=False, width=10_000)
        lines.append("  " + entry.strip().replace("\n", "\n  "))
    return "\n".join(lines) + "\n"


def _replace_section(text: str, key: str, section: str) -> str:
    """``text`` with its top-level ``key:`` block replaced by ``section``
    (appended where there is none): the rest of a human-edited file, its
    comments too, stays as written."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(rf"^{re.escape(key)}\s*:", line)), None)
    if start is None:
        return text + ("" if not text or text.endswith("\n") else "\n") + section
    end = start + 1
    # the block: its indented and blank lines (a comment in column 0 is the next key's)
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():  # the blank lines before the next key stay
        end -= 1
    return "".join(lines[:start]) + section + "".join(lines[end:])


def site_file_text(current: str | None, figures: list[FleetFigure], name: str, extends: str | None) -> str:
    """The site platform file with these fleet figures: a new one (``extends:`` a built-in), or
    ``current`` with only its ``fleet:`` section replaced."""
    section = fleet_yaml(figures)
    if current is None:
        if not extends:
            raise CalibrateError("a new site platform file extends a built-in platform: give --extends NAME")
        head = yaml.safe_dump({"name": name, "title": f"{name}: site figures calibrated from its fleet",
                               "extends": extends}, sort_keys=False)
        return head + section
    try:
        doc = yaml.safe_load(current)
    except yaml.YAMLError as exc:
        raise CalibrateError(f"the platform file is not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise CalibrateError("the platform file is not a mapping of platform keys")
    if extends and doc.get("extends") != extends:
        raise CalibrateError(f"the platform file extends {doc.get('extends')!r}, not {extends!r}: "
                             "leave --extends out to keep its own")
    return _replace_section(current, "fleet", section)


def platform_name(path: str) -> str:
    stem = Path(path).name.rsplit(".", 1)[0]
    return stem if _NAME.match(stem) else "site"
