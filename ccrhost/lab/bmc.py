"""The lab's BMC: power-cycles a node that asked for it.

A node cannot power itself off, and from inside its namespaces it cannot
reach the machine's; slurmd's RebootProgram (``lab.slurm.reboot_program``)
leaves ``<lab>/slurm/nodes/<node>/reboot.request``, and this process, started
with the Slurm cluster and stopped with it by its recorded PID, reboots that
node (``Lab.reboot``, one at a time) as a BMC would.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(lab_dir: str) -> None:
    from ccrhost.lab.fleet import Lab

    lab = Lab(Path(lab_dir))
    nodes = Path(lab_dir) / "slurm" / "nodes"
    while True:
        for request in sorted(nodes.glob("*/reboot.request")):
            request.unlink(missing_ok=True)
            try:
                lab.reboot(request.parent.name)
                print(f"{time.time():.1f} rebooted {request.parent.name}", flush=True)
            except Exception as exc:  # one node's trouble: the others are still served
                print(f"{time.time():.1f} {request.parent.name}: {exc}", flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    main(sys.argv[1])
