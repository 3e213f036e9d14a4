"""Kernel-side behaviour of emulated sysfs attributes whose read format
differs from what is written to them.

Started by node-init in each node. It watches the attribute files with
inotify and rewrites each written value into what the kernel's show()
would print. Today that is MLNX_OFED's tc/<port>/traffic_class: writing
``106`` reads back ``Global tclass=106`` (main_ext.c).

It also answers the served shims (labtools.py).

It is also the link of the ``link_flap`` fault: every few seconds (the
fault's period) since boot the port's link training fails and the link goes
down and back up, so the kernel's link_downed counter rises by one (8 bits
wide: it stops at 255). The counter starts at the flaps since boot (lab
nodes share the host's boot), as a real node's holds them when first read;
the kernel log's lines of the same flaps come from labkernel.link_lines.
The port state stays ACTIVE between flaps, as a snapshot sees it.

And of the ``rnr_retry`` fault, live: once a second it reads the node
record's faults and raises each targeted port's
hw_counters/rnr_nak_retry_err by one.
"""

import ctypes
import glob
import json
import os
import re
import select
import struct
import time

import labkernel
import labtools

IN_CLOSE_WRITE = 0x00000008
libc = ctypes.CDLL(None, use_errno=True)


def traffic_class(text):
    value = text.strip()
    if re.fullmatch(r"\d+", value) and int(value) <= 255:
        return f"Global tclass={value}\n"
    if value.startswith("Global tclass=") or value == "" or "tclass=" in value:
        return None  # already in show() form, or a rule line
    return ""  # the kernel rejects the write: the old value stays, shown empty


RULES = {"/sys/class/infiniband/*/tc/*/traffic_class": traffic_class}
LINK_DOWNED_MAX = 0xff


def bump(path, maximum=None):
    """Raise one emulated counter file by one (the kernel's 8-bit ones stop at their maximum)."""
    try:
        with open(path) as f:
            value = int(f.read().strip() or 0) + 1
        with open(path, "w") as f:
            f.write(f"{value if maximum is None else min(value, maximum)}\n")
    except (OSError, ValueError):
        pass


def link_downed(dev):
    return f"/sys/class/infiniband/{dev}/ports/1/counters/link_downed"


def flap(dev):
    bump(link_downed(dev), LINK_DOWNED_MAX)


def flapped_since_boot(dev, period):
    """The counter as a link flapping every ``period`` s since boot left it;
    the monotonic time of its next flap."""
    up = labkernel.uptime()
    try:
        with open(link_downed(dev), "w") as f:
            f.write(f"{min(labkernel.flaps_since_boot(period, up), LINK_DOWNED_MAX)}\n")
    except OSError:
        pass
    return time.monotonic() + (labkernel.flaps_since_boot(period, up) + 1) * period - up


def rnr_targets():
    try:
        with open("/run/ccrhost-lab/node.json") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return []
    nics = record.get("nics") or []
    out = []
    for spec in record.get("faults", []):
        name, _, value = spec.partition("=")
        if name == "rnr_retry":
            out.append(value or (nics[0]["name"] if nics else ""))
    return out


def rnr_retry(dev):
    bump(f"/sys/class/infiniband/{dev}/ports/1/hw_counters/rnr_nak_retry_err")


def main():
    try:
        with open("/run/ccrhost-lab/node.json") as f:
            flapping = json.load(f).get("link_flap", [])
    except (OSError, ValueError):
        flapping = []
    fd = libc.inotify_init()
    watches = {}
    for pattern, rule in RULES.items():
        for path in glob.glob(pattern):
            wd = libc.inotify_add_watch(fd, os.fsencode(path), IN_CLOSE_WRITE)
            if wd >= 0:
                watches[wd] = (path, rule)
    start = time.monotonic()
    tick = start + 1.0
    due = {dev: flapped_since_boot(dev, seconds) for dev, seconds in flapping}
    period = dict(flapping)
    try:
        tools = labtools.ToolServer(os.path.dirname(os.path.abspath(__file__)))
    except OSError as exc:  # the shims then run their own interpreter: slower, the same answers
        print(f"labsysfsd: no tool server: {exc}", flush=True)
        tools = None
    while True:
        timeout = max(min([*due.values(), tick]) - time.monotonic(), 0)
        ready, _, _ = select.select([fd] + ([tools] if tools else []), [], [], timeout)
        if tools in ready:
            tools.accept()
            ready.remove(tools)
        now = time.monotonic()
        if now >= tick:
            tick = now + 1.0
            for dev in rnr_targets():
                rnr_retry(dev)
        for dev in due:
            if now >= due[dev]:
                flap(dev)
                due[dev] += period[dev]
        if not ready:
            continue
        data = os.read(fd, 65536)
        offset = 0
        while offset < len(data):
            wd, _mask, _cookie, length = struct.unpack_from("iIII", data, offset)
            offset += 16 + length
            if wd not in watches:
                continue
            path, rule = watches[wd]
            with open(path) as f:
                shown = rule(f.read())
            if shown is not None:
                with open(path, "w") as f:
                    f.write(shown)


main()
