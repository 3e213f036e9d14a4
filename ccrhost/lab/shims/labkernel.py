"""What the emulated kernel does when a shimmed tool asks it something.

Shared by the shims in this folder; standard library only, because the
shims run inside lab nodes for every remote command that calls them.
"""

import json
import os
import sys

NODE_FILE = "/run/ccrhost-lab/node.json"


def node() -> dict:
    with open(NODE_FILE) as f:
        return json.load(f)


def die(message: str, code: int = 1):
    sys.stderr.write(message + "\n")
    sys.exit(code)


def module_loaded(name: str) -> bool:
    return os.path.exists(f"/sys/module/{name}/initstate")


def configfs_mounted() -> bool:
    with open("/proc/mounts") as f:
        return any(line.split()[1] == "/sys/kernel/config" for line in f if len(line.split()) > 1)


def register_rdma_cm() -> None:
    """rdma_cm adds its configfs subsystem when both it and configfs are there."""
    if module_loaded("rdma_cm") and configfs_mounted():
        os.makedirs("/sys/kernel/config/rdma_cm", exist_ok=True)
