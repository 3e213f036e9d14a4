"""Build a pyinfra inventory from the running lab."""

from __future__ import annotations

from pathlib import Path

from ccrhost.lab.state import lab_dir, load_state

# the lab's site platform file (docs/platforms.md), installed with ccrhost
LAB_PLATFORM = str(Path(__file__).resolve().parent / "platforms" / "lab-hgx-h100-8x400.yaml")


def lab_hosts(directory=None) -> list[tuple[str, dict]]:
    folder = Path(directory) if directory else lab_dir()
    state = load_state(folder / "lab.json")
    if state is None:
        raise SystemExit(f"ccrhost: no lab is running in {folder}; start one with `ccrhost lab up`")
    if not state.nodes:
        raise SystemExit(f"ccrhost: the lab in {folder} has no nodes")
    return [
        (node.address, {
            "lab_node": node.name,
            "lab_profile": node.profile,
            "ssh_user": "root",
            "ssh_key": str(folder / "client_key"),
            "ssh_known_hosts_file": str(folder / "known_hosts"),
            "ssh_strict_host_key_checking": "yes",
            # every lab profile is an HGX H100 with eight 400 Gb/s ports: the lab's platform file extends
            # the built-in one with a loopback figure of its own
            "verify_profile": LAB_PLATFORM,
            # with --slurm: the data that makes deploys/slurm.py install what the lab did
            **(state.slurm or {}).get("data", {}),
        })
        for node in state.nodes
    ]
