"""The lab fault ``unreachable=NODE[+NODE...]``: the node cannot reach those
lab nodes, for real. A route ``unreachable ADDR/32`` per peer inside the
node's network namespace: its own connections to the peer fail at once
(EHOSTUNREACH), and its answers to a peer's connection go nowhere (the peer
waits until its own timeout), so ib_write_lat and ib_write_bw between the
two fail from either end. Only the peers' /32s are routed: the gateway
(the controller, slurmctld and srun, and every SSH client) stays reachable,
so Slurm and SSH to the node work as before; the lab's Slurm traffic goes
controller <-> node, never node <-> node.
"""

from __future__ import annotations

import subprocess

from ccrhost.lab.state import LabError

KIND = "unreachable"
DESCRIPTION = ("NODE[+NODE...]: the node cannot reach those lab nodes' addresses (a real unreachable route per "
               "peer in its network namespace; the controller and SSH still reach it): ib_write_lat and "
               "ib_write_bw with them fail")


class ReachError(LabError):
    pass


def targets(me: str, faults, addresses: dict[str, str]) -> set[str]:
    """The addresses ``me``'s unreachable faults cut (``addresses``: every lab node's)."""
    out = set()
    for fault in faults:
        if fault.kind != KIND:
            continue
        names = (fault.value or "").split("+")
        for name in names:
            if name not in addresses:
                raise ReachError(f"fault {fault}: no lab node {name!r} (the lab has {', '.join(addresses)})")
            if name == me:
                raise ReachError(f"fault {fault}: {me} cannot be cut off from itself")
            out.add(addresses[name])
    return out


def apply(netns: str, before: set[str], after: set[str]) -> None:
    """Routes for ``after``'s addresses, none left for ``before``'s others."""
    for addr, verb in [*((a, "del") for a in sorted(before - after)), *((a, "add") for a in sorted(after - before))]:
        proc = subprocess.run(["ip", "-n", netns, "route", verb, "unreachable", f"{addr}/32"], capture_output=True,
                              text=True)
        if proc.returncode != 0 and verb == "add":
            raise ReachError(f"ip route add unreachable {addr}/32 in {netns}: {proc.stderr.strip()}")
