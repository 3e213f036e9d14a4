"""Kernel-side behaviour of emulated sysfs attributes whose read format
differs from what is written to them.

Started by node-init in each node. It watches the attribute files with
inotify and rewrites each written value into what the kernel's show()
would print. Today that is MLNX_OFED's tc/<port>/traffic_class: writing
``106`` reads back ``Global tclass=106`` (main_ext.c).
"""

import ctypes
import glob
import os
import re
import struct

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


def main():
    fd = libc.inotify_init()
    watches = {}
    for pattern, rule in RULES.items():
        for path in glob.glob(pattern):
            wd = libc.inotify_add_watch(fd, os.fsencode(path), IN_CLOSE_WRITE)
            if wd >= 0:
                watches[wd] = (path, rule)
    if not watches:
        return
    while True:
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
