"""What ``ccrhost baseline calibrate`` takes from one node: its stored
active results (the all-reduce and DCGM/nvbandwidth state files) and the
versions they ran under (driver, NCCL library, NIC firmware), as one JSON
document that ``ccrhost baseline results`` prints. A fleet collects one per
node into a folder (pyinfra's deploys/baseline.py, or srun/pdsh), and the
controller calibrates from the folder (ccrhost/fleet/calibrate.py).

The versions are read when the results are exported: only results still
valid then are taken (model/calibrate.py ``node_figures``), so they ran
under what the node runs now unless it was upgraded within their validity.
"""

from __future__ import annotations

import re
import subprocess
import time

from ccrhost.node.active import read_stored

VERSION = 1
CHECKS = ("allreduce", "nvbandwidth", "ib_write_bw")
_NCCL_LIB = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)")


# one shell script reads the versions, on the node itself (subprocess) and through pyinfra (a fact)
VERSIONS_SCRIPT = r"""head -n 1 /proc/driver/nvidia/version 2>/dev/null | sed 's/^/driver: /'
for f in /sys/class/infiniband/*/fw_ver; do [ -r "$f" ] && d=${f%/fw_ver} && echo "fw: ${d##*/} $(head -c 64 "$f")"; done
ldconfig -p 2>/dev/null | awk '/libnccl\.so/ && /=>/ {print $NF}' | while read -r p; do echo "nccl: $(readlink -f "$p")"; done
true"""


def parse_versions(text: str, exclude=()) -> dict[str, str | None]:
    """The script's lines as {driver, nccl, nic_firmware} (None: not read).
    NIC firmware: one version, or "28.39.3560 (mlx5_0, ...), 28.39.1002
    (mlx5_7)" where the compute NICs differ. NCCL: the library the dynamic
    linker finds (libnccl.so.2.21.5); a job's own copy (a container's,
    PyTorch's wheel) may differ and is pinned apart."""
    from fnmatch import fnmatch

    from ccrhost.probes.pci import PciFormatError, parse_nvidia_version

    driver = nccl = None
    fw: dict[str, list[str]] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(": ")
        if kind == "driver" and driver is None:
            try:
                found = parse_nvidia_version(rest)
            except PciFormatError:
                found = None
            driver = found.version if found else None
        elif kind == "fw" and len(rest.split()) == 2:
            device, version = rest.split()
            if not any(fnmatch(device, p) for p in exclude):
                fw.setdefault(version, []).append(device)
        elif kind == "nccl" and nccl is None and (m := _NCCL_LIB.search(rest)):
            nccl = m.group(1)
    nic = (next(iter(fw)) if len(fw) == 1 else
           ", ".join(f"{v} ({', '.join(sorted(d))})" for v, d in sorted(fw.items())) if fw else None)
    return {"driver": driver, "nccl": nccl, "nic_firmware": nic}


def read_versions(exclude=()) -> dict[str, str | None]:
    try:
        out = subprocess.run(["sh", "-c", VERSIONS_SCRIPT], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    return parse_versions(out, exclude)


def document(node: str, read_at: float, versions: dict, results: dict, errors: list[str]) -> dict:
    """The exported document (``ccrhost baseline results``; deploys/baseline.py writes the same)."""
    return {"version": VERSION, "node": node, "read_at": read_at, "versions": versions,
            "results": {k: v for k, v in results.items()}, "errors": errors}


def results_of_text(path: str, text: str) -> tuple[dict, str | None]:
    """A state file's text (pyinfra's ActiveStateText) as read_stored gives it."""
    import json

    if not text.strip():
        return {}, None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return {}, f"{path}: {exc}"
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), dict):
        return {}, f"{path}: not an active-check state file"
    return {k: v for k, v in doc["results"].items() if isinstance(v, dict) and v.get("check") in CHECKS}, None


def export(settings, node: str, now=time.time, versions=None) -> dict:
    """This node's calibration input (``versions``: for tests)."""
    results, errors = {}, []
    for path in dict.fromkeys((settings.verify_allreduce_state, settings.verify_dcgm_state)):
        stored, error = read_stored(path, CHECKS, now())
        if error:
            errors.append(error)
        results.update(stored)
    if versions is None:
        versions = read_versions(tuple(settings.rdma_exclude_devices))
    return document(node, now(), versions, results, errors)
