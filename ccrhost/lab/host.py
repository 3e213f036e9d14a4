"""The emulated node's host: what the host baseline reads (probes/baseline.py),
rendered at boot in the kernel's own formats, and the host faults that
change it.

/proc/cpuinfo, /proc/meminfo and /proc/swaps are files of the node's boot
folder bound over the machine's (as /proc/cmdline is); the CPU lists,
hugepages and clocksource are written into the node's /sys image; a real
tmpfs is mounted at /mnt/scratch (read-only under mount_readonly). The
node's CPUs are the machine's own count: its processes read these files too
(glibc's get_nprocs reads /sys/devices/system/cpu/online, slurmd's hwloc
/proc/cpuinfo), and a CPU the machine lacks would be scheduled on.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ccrhost.lab.profile import ProfileError as HostFaultError

CPU_MODEL = "Lab Emulated CPU @ 2.00GHz"
MEM_TOTAL_KIB = 1961032704  # Azure's H100 figure, 1915071 MB (host-baseline.md)
SWAP_KIB = 8388604          # a swap file's usual 8 GiB less its header page
CLOCKSOURCE = "tsc"
HUGEPAGE_SIZES = ("1048576kB", "2048kB")
SCRATCH = "/mnt/scratch"    # the node's data mount (node-init.sh)
WRONG_CMDLINE = "iommu=nopt"
CUDA_VERSION = "12.4.1"     # the toolkit under /usr/local/cuda (the lab's nvidia-smi says CUDA 12.4)

# the host faults (their FAULT_KINDS entries are in lab/profile.py)
KINDS = ("cpu_offline", "memory_short", "swap_on", "mount_readonly", "cmdline_wrong")


def cpus() -> int:
    return os.cpu_count() or 1


def _values(faults, kind: str) -> list[str | None]:
    return [f.value for f in faults if f.kind == kind]


def offline_cpus(faults) -> set[int]:
    """The CPUs the cpu_offline faults take offline (default: the last); CPU 0 never goes (as on x86)."""
    out = set()
    for value in _values(faults, "cpu_offline"):
        cpu = cpus() - 1 if value is None else int(value) if value.isdigit() else -1
        if not 1 <= cpu < cpus():
            raise HostFaultError(f"fault cpu_offline={value}: need a CPU 1..{cpus() - 1} (CPU 0 cannot go offline)")
        out.add(cpu)
    return out


def cpu_list(cpus_: set[int]) -> str:
    """The kernel's list format: ``0-2,5``."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus_):
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def cpuinfo(online: set[int]) -> str:
    """x86 /proc/cpuinfo for the online CPUs: one socket, one thread per core
    (the fields the baseline reads, and those around them)."""
    return "".join(
        f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\nmodel name\t: {CPU_MODEL}\nphysical id\t: 0\n"
        f"siblings\t: {len(online)}\ncore id\t\t: {cpu}\ncpu cores\t: {len(online)}\n\n" for cpu in sorted(online))


def _kb(label: str, value: int) -> str:
    # fs/proc/meminfo.c show_val_kb: the label padded to 16, the value to 8, then " kB"
    return f"{label + ':':<16}{value:>8} kB\n"


def meminfo(total: int, swap: int) -> str:
    free = total * 9 // 10
    return (_kb("MemTotal", total) + _kb("MemFree", free) + _kb("MemAvailable", free) + _kb("Buffers", 0)
            + _kb("Cached", total // 50) + _kb("SwapCached", 0) + _kb("SwapTotal", swap) + _kb("SwapFree", swap)
            + "HugePages_Total:       0\nHugePages_Free:        0\nHugePages_Rsvd:        0\n"
            "HugePages_Surp:        0\n" + _kb("Hugepagesize", 2048) + _kb("Hugetlb", 0))


def swaps(swap: int) -> str:
    # mm/swapfile.c swap_show: the header, then each area: its path padded to 40, "file\t", sizes in KiB
    head = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
    if not swap:
        return head
    path = "/swapfile"
    return head + f"{path}{' ' * (40 - len(path))}file\t\t{swap}\t\t0\t\t-2\n"


def memory_total(faults) -> int:
    """MemTotal: memory_short=KIB, else an eighth less (a DIMM gone) for a bare memory_short."""
    total = MEM_TOTAL_KIB
    for value in _values(faults, "memory_short"):
        if value is None:
            total = MEM_TOTAL_KIB * 7 // 8
        elif value.isdigit() and 0 < int(value) < MEM_TOTAL_KIB:
            total = int(value)
        else:
            raise HostFaultError(f"fault memory_short={value}: need kB below {MEM_TOTAL_KIB}")
    return total


def swap_total(faults) -> int:
    total = 0
    for value in _values(faults, "swap_on"):
        if value is not None and not (value.isdigit() and 0 < int(value) < 2**40):
            raise HostFaultError(f"fault swap_on={value}: need a size in kB")
        total = int(value) if value else SWAP_KIB
    return total


def cmdline(base: str, faults) -> str:
    """The kernel command line with cmdline_wrong's word last (a later word overrides an earlier one)."""
    words = []
    for value in _values(faults, "cmdline_wrong"):
        word = value or WRONG_CMDLINE
        if not re.fullmatch(r"[A-Za-z0-9_.,:/=+-]{1,200}", word):
            raise HostFaultError(f"fault cmdline_wrong={value}: need one kernel parameter word")
        words.append(word)
    return " ".join([base.rstrip("\n"), *words]) + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def render(ndir: Path, faults, hugepages: dict[str, int] | None = None) -> None:
    """The node's host files for this boot: /sys image entries and the /proc stand-ins node-init.sh binds.
    Every fault value is checked before anything is written."""
    sysfs, boot = ndir / "image" / "sys", ndir / "boot"
    possible = set(range(cpus()))
    online = possible - offline_cpus(faults)
    swap, total = swap_total(faults), memory_total(faults)
    for value in _values(faults, "mount_readonly"):
        if value not in (None, SCRATCH):
            raise HostFaultError(f"fault mount_readonly={value}: the node's data mount is {SCRATCH}")
    line = cmdline((boot / "cmdline").read_text(), faults)
    cpu = sysfs / "devices/system/cpu"
    _write(cpu / "possible", cpu_list(possible) + "\n")
    _write(cpu / "present", cpu_list(possible) + "\n")
    _write(cpu / "online", cpu_list(online) + "\n")
    for n in sorted(possible - {0}):  # CPU 0 has no online file on x86: it cannot go offline
        _write(cpu / f"cpu{n}/online", "1\n" if n in online else "0\n")
    for size in HUGEPAGE_SIZES:
        _write(sysfs / f"kernel/mm/hugepages/hugepages-{size}/nr_hugepages", f"{(hugepages or {}).get(size, 0)}\n")
    _write(sysfs / "devices/system/clocksource/clocksource0/current_clocksource", CLOCKSOURCE + "\n")
    _write(sysfs / "devices/system/clocksource/clocksource0/available_clocksource", "tsc hpet acpi_pm \n")
    _write(boot / "cpuinfo", cpuinfo(online))
    _write(boot / "meminfo", meminfo(total, swap))
    _write(boot / "swaps", swaps(swap))
    if _values(faults, "mount_readonly"):
        _write(boot / "scratch_readonly", "")
    (boot / "cmdline").write_text(line)
    # the node's own /usr/local layer (node-init.sh), as the toolkit's installer writes it
    _write(ndir / "usrlocal" / "upper" / "cuda" / "version.json",
           '{\n   "cuda" : {\n      "name" : "CUDA SDK",\n      "version" : "%s"\n   }\n}\n' % CUDA_VERSION)
