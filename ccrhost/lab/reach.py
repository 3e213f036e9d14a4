"""The lab fault ``unreachable=NODE[+NODE...]``: the node cannot reach those
lab nodes over the fabric, for real. The lab has one link per node, which
carries Slurm's traffic too (slurmstepd reports a step's end to a parent on
another node of the step), so the cut is the fabric's traffic alone, as a
broken spine cuts RDMA and leaves the management network up: policy routing
in the node's network namespace sends every TCP packet to a cut peer whose
port (either end) is one the lab's RDMA tools and NCCL use (FABRIC_PORTS:
perftest's -p and its iperf data port, the mesh's, NCCL_COMM_ID's) to an
``unreachable`` route. The node's own connections fail at once
(EHOSTUNREACH), its answers to a peer's connection go nowhere (the peer waits
until its own timeout), so ib_write_lat, ib_write_bw and the all-reduce
between the two fail from either end; Slurm (its ports, and the kernel's
ephemeral ones from 32768) and SSH are untouched.
"""

from __future__ import annotations

import subprocess

from ccrhost.lab.state import LabError

KIND = "unreachable"
DESCRIPTION = ("NODE[+NODE...]: the node cannot reach those lab nodes over the fabric (policy routing to an "
               "unreachable route for the RDMA tools' and NCCL's ports, 18000-32767, in its network namespace; "
               "Slurm and SSH still work): ib_write_lat, ib_write_bw and the all-reduce with them fail")
FABRIC_PORTS = "18000-32767"   # below the kernel's ephemeral range (32768-60999): Slurm's own never fall in
TABLE = "18000"                # the routing table the rules send those packets to: unreachable, whatever the address


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


def _rules(addr: str) -> list[list[str]]:
    return [["to", f"{addr}/32", "ipproto", "tcp", end, FABRIC_PORTS, "table", TABLE] for end in ("dport", "sport")]


def apply(netns: str, before: set[str], after: set[str]) -> None:
    """Rules for ``after``'s addresses, none left for ``before``'s others."""
    if after:
        subprocess.run(["ip", "-n", netns, "route", "replace", "unreachable", "default", "table", TABLE],
                       capture_output=True, text=True, check=False)
    for addr, verb in [*((a, "del") for a in sorted(before - after)), *((a, "add") for a in sorted(after - before))]:
        for rule in _rules(addr):
            proc = subprocess.run(["ip", "-n", netns, "rule", verb, *rule], capture_output=True, text=True)
            if proc.returncode != 0 and verb == "add":
                raise ReachError(f"ip rule add {' '.join(rule)} in {netns}: {proc.stderr.strip()}")
