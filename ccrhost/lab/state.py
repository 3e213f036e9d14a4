"""The running lab's record (``lab.json``): which nodes, where, booted from
what. Kept apart from :mod:`ccrhost.lab.fleet`, which starts and stops
labs, so that reading it (a lab inventory, once per pyinfra run) does not
load the profile models."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_DIR = "/var/lib/ccrhost/lab"


class LabError(RuntimeError):
    pass


def lab_dir() -> Path:
    return Path(os.environ.get("CCRHOST_LAB_DIR", DEFAULT_DIR))


@dataclass
class Node:
    name: str
    index: int
    address: str
    netns: str
    profile: str
    faults: list[str] = field(default_factory=list)
    holder_pid: int | None = None
    sshd_pid: int | None = None
    slurmd_pid: int | None = None
    mgmt: str = "eth0"  # the node's end of its management veth


@dataclass
class LabState:
    name: str
    subnet: int
    nodes: list[Node]
    link_mbit: int = 200
    slurm: dict | None = None  # the lab's Slurm cluster (ccrhost.lab.slurm), when started
    prefix: int = 24  # 23 for a lab of more nodes than a /24 holds (198.18.<subnet>.0/23)
    wiring: dict | None = None  # the leaf switches and each node's cables (ccrhost.lab.switches), when started

    @property
    def bridge(self) -> str:
        return f"ccr{self.name}br"

    @property
    def gateway(self) -> str:
        return f"198.18.{self.subnet}.1"


def load_state(path: Path) -> LabState | None:
    """The lab recorded in ``path`` (a lab folder's lab.json); None when there is none."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return LabState(data["name"], data["subnet"], [Node(**n) for n in data["nodes"]], data.get("link_mbit", 200),
                    data.get("slurm"), data.get("prefix", 24), data.get("wiring"))
