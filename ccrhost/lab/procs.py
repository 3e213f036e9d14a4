"""The lab's processes: whether one lives, killing it, the ones below it
(by /proc), and the clock a node's processes share. Kept apart so that the fleet and the Slurm cluster on top of it
share them without importing each other."""

from __future__ import annotations

import os
import signal


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def kill(pid: int | None) -> None:
    if alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def descendants(pid: int | None) -> list[int]:
    """Every process below ``pid`` (by /proc parent links)."""
    if not pid:
        return []
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


# Each node's own boot clock (a time namespace): its /proc/uptime starts at
# zero when it powers on, so counters "since boot" (link_flap's link_downed
# and kernel log, pcie_replay's replays) are the node's, not the machine's.
# Its processes (sshd, slurmd) join the holder's clock; a kernel without
# time namespaces keeps the machine's.
TIME_NS = os.path.exists("/proc/self/ns/time")
NODE_CLOCK = ("-T",) if TIME_NS else ()


def boot_clock() -> tuple[str, ...]:
    """unshare's arguments for a clock whose uptime starts now."""
    if not TIME_NS:
        return ()
    with open("/proc/uptime") as f:
        up = int(float(f.read().split()[0]))
    return ("--time", "--boottime", str(-up))
