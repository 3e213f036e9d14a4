"""A lab node's power-on: its hardware rendered from its profile and faults
(the /sys image, the /proc stand-ins, the shims it sees, its NICs' flash,
its kernel modules) and the node record every shim reads. Kept apart from
:mod:`ccrhost.lab.fleet`, which starts, stops and rewires the nodes."""

from __future__ import annotations

import json
import marshal
import os
import shutil
import sys
import uuid
from pathlib import Path

from ccrhost.lab import gemm as lab_gemm
from ccrhost.lab import rack as lab_rack
from ccrhost.lab.profile import (
    ProfileError,
    effective_driver,
    kernel_cmdline,
    module_table,
    nvidia_proc_version,
    parse_fault,
    render_sysfs,
)
from ccrhost.lab.state import LabError, Node

# tbf's bucket on each shaped link (KiB): after idle this much passes at once, so a timed transfer of
# a few MB must not start on a full bucket unawares (the all_reduce_perf shim sends it ahead, untimed)
LINK_BURST_KB = 256
MLX_TOOLS = ("mlxconfig", "mstconfig", "mlxlink", "mstlink")  # removed from a node by the mlx_tools_missing fault


def shim_python() -> str:
    """An interpreter the nodes can see: shims need only the standard
    library, and the controller's venv may sit under /tmp, which each node
    replaces with its own."""
    for candidate in ("/usr/bin/python3", os.path.realpath(getattr(sys, "_base_executable", sys.executable))):
        if os.access(candidate, os.X_OK) and not candidate.startswith(("/tmp/", "/run/")):
            return candidate
    raise LabError("no python3 outside /tmp and /run for the lab's shims (install python3)")


def write_node_record(folder: Path, info: dict) -> None:
    """A node's record as node.json, and as node.marshal for the shims:
    every shim run reads it, and importing json costs a run some 7 ms,
    half of what the shim takes, where marshal is built in."""
    text = json.dumps(info)
    # marshal of the JSON's own reading: both files hold the same plain values
    for name, data in (("node.json", text.encode()), ("node.marshal", marshal.dumps(json.loads(text)))):
        tmp = folder / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.replace(folder / name)  # the shims never read half a file


def prepare(lab, node: Node) -> None:
    """Render the node's hardware as it looks right after power-on."""
    from ccrhost.lab.profile import Profile

    ndir = lab.node_dir(node)
    saved = json.loads((ndir / "profile.json").read_text())
    profile = Profile(**saved["profile"]).for_node(saved.get("identity_offset", 0))
    faults = [parse_fault(f"{node.name}:{f}")[1] for f in saved["faults"]]
    for sub in ("image", "boot", "shims", "kernel", "share"):
        if (ndir / sub).exists():
            shutil.rmtree(ndir / sub)
    (ndir / "boot").mkdir()
    built = render_sysfs(profile, faults, ndir / "image" / "sys", node.index)
    kinds = {f.kind for f in faults}
    if profile.configfs_mounted and "configfs_unmounted" not in kinds:
        (ndir / "boot" / "configfs_mounted").write_text("")
    readonly = []
    for value in [f.value for f in faults if f.kind == "ecn_readonly"]:
        readonly += [f"/sys/class/net/{nd}/ecn" for nd, nic in built["netdevs"].items()
                     if profile.ofed and value in (None, nic)]
    for value in [f.value for f in faults if f.kind == "garble"]:
        _garble_file(ndir, value or "")
    (ndir / "boot" / "readonly").write_text("\n".join(readonly))
    for kind in ("etc_readonly", "etc_full"):
        if kind in kinds:
            (ndir / "boot" / kind).write_text("")
    (ndir / "boot" / "python").write_text(shim_python())
    # /proc files the node shows instead of the machine's
    (ndir / "boot" / "cmdline").write_text(kernel_cmdline(profile))
    from ccrhost.lab import host  # CPUs, memory, swap, mounts, clocksource: the host baseline's files

    host.render(ndir, faults, profile.hugepages)
    driver = effective_driver(profile, faults)
    if driver is not None:
        (ndir / "boot" / "nvidia_version").write_text(nvidia_proc_version(driver))
    shims = lab.dir / "shims"
    gone = (["ib_write_bw", "ib_write_lat"] if "perftest_missing" in kinds else []) + \
        (list(MLX_TOOLS) if "mlx_tools_missing" in kinds else []) + \
        ([] if profile.ofed else ["ofed_info"])  # the upstream stack has no ofed_info
    if gone:
        shims = ndir / "shims"
        shutil.copytree(lab.dir / "shims", shims, dirs_exist_ok=True)
        for tool in gone:
            (shims / tool).unlink()
    # the NICs' flash: first power-on writes it, each later one loads Next Boot (lab/nicfw.py)
    from ccrhost.lab import nicfw

    nicfw.prepare(ndir, built["nics"], faults)
    (ndir / "boot" / "shims").write_text(str(shims))
    import ccrhost

    install = {os.path.realpath(sys.prefix), os.path.dirname(os.path.dirname(os.path.realpath(ccrhost.__file__)))}
    hidden = sorted(p for p in install if p.startswith(("/tmp/", "/run/")))
    outermost = [p for p in hidden if not any(p.startswith(q + "/") for q in hidden)]
    (ndir / "boot" / "share").write_text("\n".join(outermost))

    kver = os.uname().release
    moddir = ndir / "usrlib" / "upper" / "modules" / kver
    moddir.mkdir(parents=True, exist_ok=True)

    def ko(name: str) -> str:
        return f"kernel/drivers/infiniband/{name}.ko"

    dep_table, _, versions = module_table(profile, faults)
    (moddir / "modules.dep").write_text("".join(
        f"{ko(name)}: {' '.join(ko(d) for d in deps)}".rstrip() + "\n"
        for name, deps in dep_table.items()))
    (moddir / "modules.builtin").write_text("".join(
        f"kernel/fs/{name}/{name}.ko\n" for name in profile.modules.builtin))
    write_node_record(ndir, {
        "name": node.name, "dir": str(ndir), "profile": profile.name,
        "link_mbit": lab.load().link_mbit,  # nominal: a link_slow node measures slow
        "link_burst_bytes": LINK_BURST_KB * 1024,  # what the shaper lets through at once after idle
        "broken_modules": [f.value for f in faults if f.kind == "modprobe_fails"],
        "nics": built["nics"],
        "gpus": profile.gpus.model_dump(),
        "gpu_fp16_tflops": lab_gemm.peak(profile.gpus.model),  # the GEMM shim's full speed (lab/gemm.py)
        # the profile's (a capture's), else one per node and GPU; made here
        # so that nvidia-smi, run by every probe, needs no uuid and hashlib
        "gpu_uuids": list(profile.gpus.uuids) or [
            "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node.name}-gpu{i}")) for i in range(profile.gpus.count)],
        "gpu_bdfs": [g["bdf"] for g in built["gpus"]],
        # the profile's, else 13 digits per node and GPU, as NVIDIA prints a board's serial
        "gpu_serials": list(profile.gpus.serials) or [
            str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node.name}-gpu{i}-serial").int % 10**13).rjust(13, "1")
            for i in range(profile.gpus.count)],
        "faults": [str(f) for f in faults],
        "ofed": profile.ofed,
        "module_versions": versions,
        "link_flap": built["flap"],
        "qos_boot": built["qos"],  # each netdev's DCB state at power-on
        "rack": lab_rack.record(lab, lab.load(), profile),  # an NVLink rack's tray, else None
    })
    if profile.nvlink_rack and "imex_channel_missing" not in kinds:  # node-init.sh makes the device
        (ndir / "boot" / "imex_channel").write_text(lab_rack.CHANNEL)

def _garble_file(ndir: Path, value: str) -> None:
    """The garble fault at boot: PATH holds TEXT (in the rendered /sys, or
    in the node's /etc layer, which survives reboots as a disk does)."""
    path, sep, text = value.partition(":")
    parts = Path(path).parts
    if not sep or len(parts) < 3 or parts[:2] not in (("/", "sys"), ("/", "etc")) or ".." in parts:
        raise ProfileError(f"fault garble={value}: expected /sys/...:TEXT or /etc/...:TEXT")
    base = ndir / "image" / "sys" if parts[1] == "sys" else ndir / "etc" / "upper"
    target = base.joinpath(*parts[2:])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text + "\n")
