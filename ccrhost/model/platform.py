"""Platform files: everything ccrhost expects of a node of one build, with
the source and date of each figure (ccrhost/platforms/<name>.yaml; the
format: docs/platforms.md).

``verify_profile`` names a built-in platform or a site file (a path); a file
may ``extends:`` a built-in or another file and override any part of it.
:func:`resolve` reads the chain, merges it and checks the result, raising
:class:`PlatformError` naming the file, the key, the value and what is
allowed; the deploy does so on the controller before any host is touched
and hands the resolved platform to the node with its settings
(``verify_platform`` in check.yaml), where :func:`from_resolved` reads it
back without the files.

Every ``ccrhost check`` may need a built-in, and parsing YAML would cost it
more than its reads: the built-ins are read from ``compiled.json`` (written
by ``python -m ccrhost.docs`` with each YAML file's checksum) unless a
file's bytes differ from those.
"""

from __future__ import annotations

import binascii
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

COMPILED = "compiled.json"
GPUS = "gpus"  # gpus.yaml: the per-GPU peak table (model/gpus.py), not a platform

# figure key -> its unit; the same keys in figures: and fleet:
FIGURE_UNITS = {
    "allreduce.nvlink": "GB/s", "allreduce.loopback": "GB/s", "allreduce.pair": "GB/s",
    "allreduce.rack": "GB/s",
    "nvbandwidth.host_to_device_memcpy_ce": "GB/s", "nvbandwidth.device_to_host_memcpy_ce": "GB/s",
    "nvbandwidth.device_to_device_memcpy_read_ce": "GB/s",
    "ib_write_bw.gpudirect": "Gb/s",
}
TOP_KEYS = ("name", "title", "extends", "gpu_default", "hardware", "figures", "fleet", "nic_firmware", "settings",
            "notes")
# hardware key -> (type(s), what is allowed)
_INT = (int,)
HARDWARE = {
    "gpu_model": ((str,), "an NVML GPU name"), "gpu_count": (_INT, "a whole number from 1 to 64"),
    "nic_count": (_INT, "a whole number from 0 to 64"), "nic_gbps": ((int, float), "a rate in Gb/s above 0"),
    "link_layer": ((str,), "InfiniBand, Ethernet or EFA"), "rail_local": ((bool,), "true or false"),
    "gpu_pcie": ((dict,), "a mapping of gen and width"), "nic_pcie": ((dict,), "a mapping of gen and width"),
    "numa_nodes": (_INT, "a whole number from 1 to 256"), "nvlinks_per_gpu": (_INT, "a whole number from 0 to 64"),
    "nvlink_gbs": ((int, float), "a rate in GB/s per NVLink above 0, as nvidia-smi nvlink -s prints it"),
    "source": ((str,), "text"), "date": ((str,), "text"),
}
LINK_LAYERS = ("InfiniBand", "Ethernet", "EFA")
FIGURE_FIELDS = ("value", "unit", "source", "date")
FLEET_FIELDS = (*FIGURE_FIELDS, "nodes", "measured_under", "note")
_FROM = "from"  # the file a resolved figure came from (written by resolve, not by hand)
NICFW_FIELDS = ("values", "level", "ethernet_only", "source", "date")
SETTING_FIELDS = ("value", "source", "date")


class PlatformError(ValueError):
    """A platform file that cannot be used: where (file), the key, its value and what is allowed."""

    def __init__(self, where: str, key: str, value, allowed: str):
        self.where, self.key, self.value, self.allowed = where, key, value, allowed
        super().__init__(f"{where}: {key} = {value!r}: {allowed}")


@dataclass(frozen=True)
class Figure:
    """A FAIL-below figure: published (``figures:``) or the fleet's (``fleet:``)."""
    key: str                    # "allreduce.nvlink"
    value: float
    unit: str
    source: str
    date: str | None = None
    fleet: bool = False
    platform: str = ""          # the platform (or site file) that gave it
    nodes: int | None = None    # fleet: how many nodes it was calibrated over

    def text(self) -> str:
        """What a reason says of it: which figure, and its source."""
        kind = "fleet figure" if self.fleet else "published figure"
        date = f", {self.date}" if self.date else ""
        return f"{kind} of {self.platform}: {self.source}{date}"


@dataclass(frozen=True)
class Platform:
    name: str
    title: str
    origin: tuple[str, ...]               # the files it was resolved from, the base first
    hardware: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)       # key -> Figure
    fleet: dict = field(default_factory=dict)         # key -> Figure (fleet=True)
    nic_firmware: dict = field(default_factory=dict)  # parameter -> {values, level, ethernet_only, source, date}
    settings: dict = field(default_factory=dict)      # settings key -> {value, source, date}
    notes: tuple[str, ...] = ()
    gpu_default: bool = False

    def figure(self, key: str) -> Figure | None:
        return self.figures.get(key)

    def fleet_figure(self, key: str) -> Figure | None:
        return self.fleet.get(key)

    def to_data(self) -> dict:
        """The resolved platform as plain values (check.yaml's ``verify_platform``)."""
        def fig(f: Figure) -> dict:
            out = {"value": f.value, "unit": f.unit, "source": f.source, _FROM: f.platform}
            out.update({k: v for k, v in (("date", f.date), ("nodes", f.nodes)) if v is not None})
            return out
        return {"name": self.name, "title": self.title, "origin": list(self.origin), "hardware": self.hardware,
                "figures": {k: fig(f) for k, f in self.figures.items()},
                "fleet": {k: fig(f) for k, f in self.fleet.items()},
                "nic_firmware": self.nic_firmware, "settings": self.settings, "notes": list(self.notes)}


# -- the built-in files --------------------------------------------------------------

def _folder() -> Path:
    return Path(__file__).resolve().parent.parent / "platforms"


def _sources(folder: Path) -> dict[str, bytes]:
    return {p.stem: p.read_bytes() for p in sorted(folder.glob("*.yaml"))}


def _parse_yaml(data: bytes, where: str):
    import yaml

    try:
        return yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise PlatformError(where, "(file)", None, f"not valid YAML: {exc}") from None


def compiled_text(folder: Path | None = None) -> str:
    """``compiled.json`` for the built-in YAML files: each file's data and checksum."""
    folder = folder or _folder()
    sources = _sources(folder)
    files = {name: _parse_yaml(data, f"{name}.yaml") for name, data in sources.items()}
    out = {"generated": "by python -m ccrhost.docs from the YAML files beside it; edit those, not this",
           "checksums": {name: binascii.crc32(data) for name, data in sources.items()}, "files": files}
    return json.dumps(out, indent=1, ensure_ascii=False) + "\n"


_BUILTINS: dict | None = None


def builtin_data() -> dict[str, dict]:
    """Every built-in file's data by name (gpus included), from compiled.json when it is current."""
    global _BUILTINS
    if _BUILTINS is None:
        folder = _folder()
        sources = _sources(folder)
        try:
            compiled = json.loads((folder / COMPILED).read_bytes())
        except (OSError, ValueError):
            compiled = {}
        fresh = (isinstance(compiled, dict)
                 and compiled.get("checksums") == {n: binascii.crc32(d) for n, d in sources.items()})
        _BUILTINS = compiled["files"] if fresh else {n: _parse_yaml(d, f"{n}.yaml") for n, d in sources.items()}
    return _BUILTINS


def builtin_names() -> list[str]:
    return sorted(n for n in builtin_data() if n != GPUS)


def allowed_refs() -> str:
    return f"allowed: a built-in platform ({', '.join(builtin_names())}) or the path of a platform file (.yaml)"


def is_path(ref: str) -> bool:
    return "/" in ref or ref.endswith((".yaml", ".yml"))


# -- reading and checking one file ---------------------------------------------------

def _number(where, key, value, minimum=0.0):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > minimum or value != value \
            or value == float("inf"):
        raise PlatformError(where, key, value, f"allowed: a number above {minimum:g}")
    return float(value)


def _text(where, key, value, optional=False):
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise PlatformError(where, key, value, "allowed: non-empty text")
    return value


def _mapping(where, key, value) -> dict:
    """A section's entries; a null entry (it removes what a file extended had) is left out."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PlatformError(where, key, value, "allowed: a mapping")
    return {k: v for k, v in value.items() if v is not None}


def _only(where, key, entry: dict, allowed: tuple):
    for k in entry:
        if k not in allowed:
            raise PlatformError(where, f"{key}.{k}", entry[k], f"unknown key; allowed: {', '.join(allowed)}")


def _figure(where, section, key, entry, platform) -> Figure:
    fleet = section == "fleet"
    if key not in FIGURE_UNITS:
        raise PlatformError(where, f"{section}.{key}", entry, f"unknown figure; allowed: {', '.join(FIGURE_UNITS)}")
    path = f"{section}.{key}"
    if not isinstance(entry, dict):
        raise PlatformError(where, path, entry, "allowed: a mapping of value, unit, source and date")
    _only(where, path, entry, (*(FLEET_FIELDS if fleet else FIGURE_FIELDS), _FROM))
    value = _number(where, f"{path}.value", entry.get("value"))
    unit = entry.get("unit", FIGURE_UNITS[key])
    if unit != FIGURE_UNITS[key]:
        raise PlatformError(where, f"{path}.unit", unit, f"allowed: {FIGURE_UNITS[key]}")
    source = _text(where, f"{path}.source", entry.get("source"))
    date = entry.get("date")
    date = None if date is None else str(date)  # YAML reads 2026-12-06 as a date
    nodes = entry.get("nodes")
    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1):
        raise PlatformError(where, f"{path}.nodes", nodes, "allowed: a whole number of nodes from 1")
    return Figure(key, value, unit, source, date, fleet, str(entry.get(_FROM) or platform), nodes)


def _hardware(where, hw: dict) -> dict:
    out = {}
    for key, value in hw.items():
        if key not in HARDWARE:
            raise PlatformError(where, f"hardware.{key}", value, f"unknown key; allowed: {', '.join(HARDWARE)}")
        types, allowed = HARDWARE[key]
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if ok and key in ("gpu_count", "numa_nodes"):
            ok = 1 <= value <= (64 if key == "gpu_count" else 256)
        elif ok and key in ("nic_count", "nvlinks_per_gpu"):
            ok = 0 <= value <= 64
        elif ok and key == "nic_gbps":
            ok = 0 < value <= 3200
        elif ok and key == "nvlink_gbs":
            ok = 0 < value <= 1000 and value == value
        elif ok and key == "link_layer":
            ok = value in LINK_LAYERS
        elif ok and key in ("gpu_pcie", "nic_pcie"):
            ok = set(value) <= {"gen", "width"} and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                                          for v in value.values())
        if not ok:
            raise PlatformError(where, f"hardware.{key}", value, f"allowed: {allowed}")
        out[key] = value
    return out


def _nic_firmware(where, params: dict) -> dict:
    out = {}
    for name, entry in params.items():
        path = f"nic_firmware.{name}"
        if not isinstance(name, str) or not name.replace("_", "").isalnum() or not name.isupper():
            raise PlatformError(where, path, entry, "allowed: an mlxconfig parameter name (CAPITALS)")
        if not isinstance(entry, dict):
            raise PlatformError(where, path, entry, "allowed: a mapping of values, level, source")
        _only(where, path, entry, NICFW_FIELDS)
        values = entry.get("values")
        if not isinstance(values, list) or not values or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise PlatformError(where, f"{path}.values", values, "allowed: a list of whole numbers from 0")
        level = entry.get("level", "FAIL")
        if level not in ("FAIL", "WARN"):
            raise PlatformError(where, f"{path}.level", level, "allowed: FAIL or WARN")
        if not isinstance(entry.get("ethernet_only", False), bool):
            raise PlatformError(where, f"{path}.ethernet_only", entry["ethernet_only"], "allowed: true or false")
        out[name] = {"values": list(values), "level": level, "ethernet_only": entry.get("ethernet_only", False),
                     "source": _text(where, f"{path}.source", entry.get("source")),
                     **({"date": str(entry["date"])} if entry.get("date") is not None else {})}
    return out


def _settings(where, values: dict) -> dict:
    """Each default as {value, source?, date?}; whether the key exists and its value is allowed is the
    settings model's to say (settings/validate.py), which names this file."""
    out = {}
    for key, entry in values.items():
        if isinstance(entry, dict) and "value" in entry and set(entry) <= set(SETTING_FIELDS):
            out[key] = {k: (str(v) if k == "date" else v) for k, v in entry.items() if v is not None}
        else:
            out[key] = {"value": entry}
    return out


def check(data, where: str, name: str, origin: tuple[str, ...] = ()) -> Platform:
    """A merged platform's data (no ``extends:`` left) as a :class:`Platform`; raises PlatformError."""
    if not isinstance(data, dict):
        raise PlatformError(where, "(file)", data, "allowed: a mapping of " + ", ".join(TOP_KEYS))
    for key in data:
        if key not in (*TOP_KEYS, "origin"):
            raise PlatformError(where, str(key), data[key], f"unknown key; allowed: {', '.join(TOP_KEYS)}")
    name = _text(where, "name", data.get("name") or name)
    title = _text(where, "title", data.get("title") or name)
    gpu_default = data.get("gpu_default", False)
    if not isinstance(gpu_default, bool):
        raise PlatformError(where, "gpu_default", gpu_default, "allowed: true or false")
    notes = data.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise PlatformError(where, "notes", notes, "allowed: a list of text")
    figures = {k: _figure(where, "figures", k, v, name)
               for k, v in _mapping(where, "figures", data.get("figures")).items()}
    fleet = {k: _figure(where, "fleet", k, v, name) for k, v in _mapping(where, "fleet", data.get("fleet")).items()}
    return Platform(name, title, tuple(data.get("origin") or origin),
                    _hardware(where, _mapping(where, "hardware", data.get("hardware"))), figures, fleet,
                    _nic_firmware(where, _mapping(where, "nic_firmware", data.get("nic_firmware"))),
                    _settings(where, _mapping(where, "settings", data.get("settings"))), tuple(notes), gpu_default)


# -- extends and overrides ---------------------------------------------------------------

_PER_ENTRY = ("hardware", "figures", "fleet", "nic_firmware", "settings")


def merge(base: dict, over: dict) -> dict:
    """``over`` on ``base``: a section's entries one by one (an entry replaced whole, so a figure never
    keeps another's source; null removes it), other keys replaced; notes and gpu_default are each file's own."""
    out = {k: v for k, v in base.items() if k not in ("gpu_default", "extends", "notes")}
    for key, value in over.items():
        if key == "extends":
            continue
        if key in _PER_ENTRY and isinstance(value, dict) and isinstance(out.get(key) or {}, dict):
            section = dict(out.get(key) or {})
            for k, v in value.items():
                if v is None:
                    section.pop(k, None)
                else:
                    section[k] = v
            out[key] = section
        else:
            out[key] = value
    return out


def _read(ref: str, relative_to: str | None) -> tuple[dict, str, str]:
    """(data, where, default name) of a built-in name or a file path."""
    if not isinstance(ref, str) or not ref.strip():
        raise PlatformError(relative_to or "verify_profile", "extends" if relative_to else "verify_profile", ref,
                            allowed_refs())
    if not is_path(ref):
        data = builtin_data()
        if ref not in data or ref == GPUS:
            raise PlatformError(relative_to or "verify_profile", "extends" if relative_to else "verify_profile", ref,
                                allowed_refs())
        return data[ref], f"{ref} (built-in)", ref
    path = ref if os.path.isabs(ref) or relative_to is None else os.path.join(os.path.dirname(relative_to), ref)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise PlatformError(relative_to or "verify_profile", "extends" if relative_to else "verify_profile", ref,
                            f"the platform file cannot be read: {exc.strerror}") from None
    return _parse_yaml(raw, path), path, Path(path).stem


def resolve(ref: str) -> Platform:
    """The platform ``ref`` (a built-in name or a path) names, its ``extends:`` chain merged and checked."""
    chain: list[tuple[dict, str, str]] = []
    seen: list[str] = []
    where_from = None
    while ref is not None:
        data, where, default = _read(ref, where_from)
        key = os.path.realpath(where) if is_path(ref) else ref
        if key in seen:
            raise PlatformError(where, "extends", ref, "a platform cannot extend itself (a cycle: "
                                + " -> ".join([*seen, key]) + ")")
        seen.append(key)
        if not isinstance(data, dict):
            raise PlatformError(where, "(file)", data, "allowed: a mapping of " + ", ".join(TOP_KEYS))
        chain.append((data, where, default))
        ref = data.get("extends")
        where_from = where if is_path(where) else None
        if ref is not None and not isinstance(ref, str):
            raise PlatformError(where, "extends", ref, allowed_refs())
    merged: dict = {}
    for data, where, default in reversed(chain):
        check(data, where, chain[0][2])  # each file on its own, so an error names the file that has it
        marked = {s: {k: (v if v is None else {**v, _FROM: data.get("name") or default}) for k, v in data[s].items()}
                  for s in ("figures", "fleet") if isinstance(data.get(s), dict)}
        merged = merge(merged, {**data, **marked})
    top_where, top_name = chain[0][1], chain[0][2]
    merged["name"] = chain[0][0].get("name") or top_name
    merged["gpu_default"] = bool(chain[0][0].get("gpu_default", False))
    return check({k: v for k, v in merged.items() if k != "extends"}, top_where, top_name,
                 tuple(w for _, w, _ in reversed(chain)))


def from_resolved(data) -> Platform:
    """A platform as :meth:`Platform.to_data` wrote it (check.yaml's ``verify_platform``)."""
    if isinstance(data, dict) and data.get("extends") is not None:
        raise PlatformError("verify_platform", "extends", data["extends"], "allowed: a resolved platform has none")
    return check(data, "verify_platform", (data or {}).get("name", "") if isinstance(data, dict) else "")


_BY_GPU: dict = {}


def for_gpu(gpu_name: str | None) -> Platform | None:
    """The built-in platform marked ``gpu_default`` for an NVML GPU name: the figures a node gets when
    ``verify_profile`` names none. None when no built-in is for that GPU."""
    if not gpu_name:
        return None
    if gpu_name not in _BY_GPU:
        # the NVML names of the GPU's row in gpus.yaml (model/gpus.py reads the same rows)
        row = next((r for r in builtin_data()[GPUS] if gpu_name.strip() in r["names"]), None)
        names = set(row["names"]) if row else {gpu_name.strip()}
        found = None
        for name in builtin_names():
            data = builtin_data()[name]
            if data.get("gpu_default") and (data.get("hardware") or {}).get("gpu_model") in names:
                found = resolve(name)
                break
        _BY_GPU[gpu_name] = found
    return _BY_GPU[gpu_name]
