"""``ccrhost baseline capture`` and ``diff`` on a node: its readings (the
probes ``ccrhost check`` uses) as a platform file, and what it differs from
one by. The sections and the comparison are model/contract.py's; the
platform file's ``extends:`` chain is read here for each key's file.
"""

from __future__ import annotations

import os

import yaml

from ccrhost.model import contract


class BaselineError(Exception):
    """The node or the platform file could not be read: the message says which and why."""


def read_local(settings, timeout: float = 20):
    """This node's readings: RDMA ports, GPUs, the data path (PCI), the host baseline."""
    from ccrhost.model.verdict import readings_from_facts
    from ccrhost.node.check import local_datapath
    from ccrhost.probes import baseline, gpu, local, pci, rdma

    try:
        rdma_state = rdma.read_local(timeout, management=False)
    except (local.ProbeTimeout, rdma.RdmaFormatError) as exc:
        raise BaselineError(f"cannot read {rdma.SOURCE}: {exc}") from None
    gpus = gpu.read_local(timeout=timeout)
    datapath = local_datapath(settings, lambda: pci.read_local(timeout))
    readings = readings_from_facts(rdma_state, gpus, settings.rdma_exclude_devices, datapath=datapath)
    readings.baseline = baseline.read_local(timeout=timeout)  # its fixed files: no sysctl, no statvfs
    return readings


def platform_text(doc: dict, notes: list[str], node: str) -> str:
    """The captured platform file: a header naming the node, the notes as comments."""
    head = [f"# captured from {node} by `ccrhost baseline capture` (docs/baseline.md): what a known-good",
            "# node reads; review it, then name it in verify_profile or extend it from a site file."]
    head += [f"# note: {n}" for n in notes]
    return "\n".join(head) + "\n" + yaml.safe_dump(doc, sort_keys=False, width=10_000)


def capture_text(readings, node: str, name: str, date: str, extends: str | None = None) -> tuple[str, list[str]]:
    doc, notes = contract.capture(readings, name, f"{name}: captured from {node} on {date}", extends)
    if doc.get("hardware"):
        doc["hardware"]["source"] = f"captured from {node} by `ccrhost baseline capture`"
        doc["hardware"]["date"] = date
    if not doc.get("settings"):
        doc.pop("settings")  # the host baseline not read
    return platform_text(doc, notes, node), notes


# -- a platform file's extends: chain, with the file that sets each key -----------------

def _is_path(ref: str) -> bool:
    return "/" in ref or ref.endswith((".yaml", ".yml"))


def _builtin(ref: str, where: str) -> dict:
    try:  # the platform loader (ccrhost/model/platform.py) holds the built-ins
        from ccrhost.model.platform import builtin_data
    except ImportError:
        raise BaselineError(f"{where}: extends {ref!r}: no built-in platforms in this ccrhost") from None
    data = builtin_data()
    if ref not in data:
        raise BaselineError(f"{where}: extends {ref!r}: no such built-in platform")
    return data[ref]


def read_platform(ref: str) -> tuple[dict, dict[str, str]]:
    """The platform ``ref`` (a file, or a built-in name) names, its
    ``extends:`` chain merged section by section (an entry replaced whole,
    null removing it), and "section.key" -> the file that set it."""
    chain, seen, base = [], set(), None
    while ref is not None:
        if not isinstance(ref, str) or not ref:
            raise BaselineError(f"{base}: extends {ref!r}: a built-in platform's name or a file's path")
        if _is_path(ref):
            path = ref if os.path.isabs(ref) or base is None else os.path.join(os.path.dirname(base), ref)
            try:
                with open(path, "rb") as f:
                    data = yaml.safe_load(f.read(1 << 20))
            except OSError as exc:
                raise BaselineError(f"cannot read the platform file {path}: {exc.strerror or exc}") from None
            except yaml.YAMLError as exc:
                raise BaselineError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
            where = path
        else:
            data, where = _builtin(ref, base or "verify_profile"), f"{ref} (built-in)"
        if not isinstance(data, dict):
            raise BaselineError(f"{where}: not a platform file (a mapping of name, hardware, figures...)")
        key = os.path.realpath(where) if _is_path(ref) else ref
        if key in seen:
            raise BaselineError(f"{where}: extends itself (a cycle)")
        seen.add(key)
        chain.append((data, where))
        ref, base = data.get("extends"), where if _is_path(where) else base
    merged: dict = {}
    wheres: dict[str, str] = {}
    for data, where in reversed(chain):
        for section in contract.SECTIONS:
            entries = data.get(section)
            if not isinstance(entries, dict):
                continue
            target = merged.setdefault(section, {})
            for k, v in entries.items():
                if v is None:
                    target.pop(k, None)
                    wheres.pop(f"{section}.{k}", None)
                else:
                    target[k] = v
                    wheres[f"{section}.{k}"] = where
    return merged, wheres
