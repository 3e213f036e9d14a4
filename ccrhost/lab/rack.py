"""The lab's NVLink rack (issue 49): the nodes booted from a profile with
``nvlink_rack`` are the trays of one rack-scale NVLink domain (GB200 NVL72
shaped). Their GPUs share a cluster UUID and a clique (nvidia-smi -q's
Fabric section), their IMEX daemons form one domain (nvidia-imex-ctl -N,
shims/nvidia-imex-ctl), the nvidia-imex unit runs (shims/systemctl) and the
IMEX channel device exists in each tray's /run. A fault is state the shims
read: a tray's own record (its node.json) and the rack's (``rack.json``,
which names every tray's folder, so one tray's IMEX view shows another's
fault as the real daemons would)."""

from __future__ import annotations

import json
import uuid

FAULTS = {
    "imex_peer_lost": "this tray's IMEX daemon lost its peers: every other tray shows it Disconnected (D), and it "
                      "shows them so",
    "imex_nodemap": "this tray's IMEX nodes_config.cfg differs from the rack's: its links show !M! (node map "
                    "mismatch) both ways",
    "imex_version": "[VERSION]: this tray runs another IMEX version (default 565.57.01): its links show !V!",
    "gpu_clique": "[INDEX:]ID: GPU INDEX (default 0) registered with clique ID, not the rack's (nvidia-smi -q "
                  "Fabric/CliqueId)",
    "fabric_degraded": "[INDEX]: GPU INDEX's (default 0) NVLink fabric bandwidth is degraded (Fabric/Health "
                       "Bandwidth: Degraded)",
    "imex_channel_missing": "the IMEX channel device was not created at boot (set at lab up)",
    "rack_slow": "this tray's NVLinks across the rack carry half their rate: an all_reduce_perf over several of "
                 "the rack's trays is slow, its own single-node runs are not",
}
LIVE = tuple(k for k in FAULTS if k != "imex_channel_missing")
CHANNEL = "/run/nvidia-caps-imex-channels/channel0"  # the lab's imex_channel: a device in the tray's own /run
VERSION = "570.172"  # the IMEX daemons' version (the AWS PCS guide's sample)
CLIQUE = 32766       # the rack's clique ID


def refused(faults) -> str | None:
    for f in faults:
        if f.kind == "gpu_clique" and not all(x.isdigit() for x in (f.value or "").split(":", 1)):
            return f"fault gpu_clique={f.value}: need a clique ID, or GPU:ID (whole numbers)"
        if f.kind == "fabric_degraded" and f.value is not None and not f.value.isdigit():
            return f"fault fabric_degraded={f.value}: need a GPU index"
        if f.kind == "imex_version" and f.value is not None and not f.value.replace(".", "").isdigit():
            return f"fault imex_version={f.value}: need a version like 565.57.01"
    return None


def cluster_uuid(lab_name: str, subnet: int) -> str:
    """The rack's NVLink cluster UUID: fixed per lab, so every tray reads the same."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"ccrhost-lab-{lab_name}-{subnet}-nvl72"))


def record(lab, state, profile) -> dict | None:
    """What the tray's shims read of the rack (its node.json's ``rack``); None for a node of no rack."""
    if not getattr(profile, "nvlink_rack", False):
        return None
    return {"cluster_uuid": cluster_uuid(state.name, state.subnet), "clique": CLIQUE,
            "file": str(lab.dir / "rack.json"), "version": VERSION}


def write(lab, state) -> None:
    """rack.json: the trays in node order (their IMEX node numbers), their addresses and folders."""
    trays = [n for n in state.nodes if _is_tray(lab, n)]
    if not trays:
        return
    (lab.dir / "rack.json").write_text(json.dumps({"trays": [
        {"name": n.name, "address": n.address, "dir": str(lab.node_dir(n))} for n in trays]}))


def _is_tray(lab, node) -> bool:
    try:
        saved = json.loads((lab.node_dir(node) / "profile.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(saved["profile"].get("nvlink_rack"))
