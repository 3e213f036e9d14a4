"""The host baseline's reads (model/baseline.py judges them): kernel files
printed verbatim under ``@@`` sections, one snippet for the deploy's node
snapshot and ``ccrhost check`` alike.

Fixed files, then what the settings ask for: the sysctls named (each under
/proc/sys) and statvfs of the mount points named (``stat -f``, bounded by
``timeout`` where the node has it: a hung NFS server never holds the
snapshot). A file that cannot be read prints nothing, and its value stays
None: UNKNOWN, never a pass.
"""

from __future__ import annotations

import json
import re
import shlex

from ccrhost.model.baseline import BaselineReading, CpuReading, MountReading
from ccrhost.probes.kernel import module_name
from ccrhost.probes.sections import split

WHAT = "the host baseline (/proc, /sys, ofed_info)"
_NCCL = r"s/^[[:space:]]*libnccl\.so\.2 (.*) => //p"

_FIXED = (
    "{ read -r K < /proc/sys/kernel/osrelease; } 2>/dev/null || K=$(uname -r); "
    "echo @@online; cat /sys/devices/system/cpu/online; "
    "echo @@possible; cat /sys/devices/system/cpu/possible; "
    # four fields of each processor, not the flags: /proc/cpuinfo of 192 CPUs is some 300 kB
    "echo @@cpuinfo; grep -E '^(processor|physical id|core id|model name)[[:space:]]*:' /proc/cpuinfo; "
    # Arm's cpuinfo names no socket or core: the online CPUs' sysfs topology does (one grep for all)
    "grep -q '^physical id' /proc/cpuinfo || { echo @@topology; "
    "grep -H . /sys/devices/system/cpu/cpu[0-9]*/topology/physical_package_id "
    "/sys/devices/system/cpu/cpu[0-9]*/topology/core_id; }; "
    "echo @@meminfo; grep -E '^(MemTotal|SwapTotal):' /proc/meminfo; "
    "echo @@swaps; cat /proc/swaps; "
    # a kernel without hugetlb has no folder: the section is then absent (not read), not empty
    "if [ -d /sys/kernel/mm/hugepages ]; then echo @@hugepages; "
    "for d in /sys/kernel/mm/hugepages/hugepages-*; do [ -r \"$d/nr_hugepages\" ] && "
    "echo \"${d##*/hugepages-} $(cat \"$d/nr_hugepages\")\"; done; fi; "
    "echo @@mounts; cat /proc/self/mounts; "
    "if [ -d /sys/module ]; then echo @@modules; ls -1 /sys/module; "
    "cat \"/lib/modules/$K/modules.builtin\"; fi; "
    "echo @@cmdline; cat /proc/cmdline; "
    "echo @@clocksource; cat /sys/devices/system/clocksource/clocksource0/current_clocksource; "
    "echo @@kernel; echo \"$K\"; "
    "echo @@cuda_json; cat /usr/local/cuda/version.json; "
    "echo @@cuda_txt; cat /usr/local/cuda/version.txt; "
    # the file libnccl.so.2 resolves to names the library's version: libnccl.so.2.21.5
    f"echo @@nccl; p=$(PATH=\"$PATH:/sbin:/usr/sbin\" ldconfig -p | sed -n '{_NCCL}' | head -n 1); "
    "[ -n \"$p\" ] && readlink -f \"$p\"; "
    "if command -v ofed_info >/dev/null; then echo @@ofed; ofed_info -s; else echo @@ofed_missing; fi; "
)


def command(sysctls: tuple[str, ...] = (), mounts: tuple[str, ...] = ()) -> str:
    """The snippet: the fixed files, the ``sysctls`` (``kernel.numa_balancing``)
    and statvfs of the ``mounts`` (settings/baseline.py validates both names)."""
    parts = [_FIXED]
    for name in sysctls:
        path = "/proc/sys/" + name.replace(".", "/")
        parts.append(f"echo {shlex.quote('@@sysctl ' + name)}; cat {shlex.quote(path)}; ")
    if mounts:
        points = " ".join(shlex.quote(m) for m in mounts)
        # %S block size, %b blocks, %a blocks free to users, %c inodes, %d free inodes, %n the name (last:
        # it may hold spaces); one process for all, killed after 5 s where timeout(1) is there
        parts.append("echo @@statfs; t=; command -v timeout >/dev/null && t='timeout 5'; "
                     f"$t stat -f -c '%S %b %a %c %d %n' -- {points}; ")
    return "{ " + "".join(parts) + "} 2>/dev/null; true"


def read_local(sysctls: tuple[str, ...] = (), mounts: tuple[str, ...] = (), timeout: float = 20) -> BaselineReading:
    """The reading here (``ccrhost check``), bounded in time."""
    from ccrhost.probes import local

    try:
        out = local.run(command(sysctls, mounts), timeout, WHAT)
    except local.ProbeTimeout as exc:
        return BaselineReading(error=str(exc))
    try:
        return parse_baseline_dump(out.splitlines())
    except Exception as exc:  # any input: this probe's UNKNOWN, never the check's crash
        return BaselineReading(error=f"cannot read {WHAT}: {exc}")


# --- parsers, each of one file's verbatim format --------------------------------

def _first(lines: list[str]) -> str | None:
    text = next((x.strip() for x in lines if x.strip()), None)
    return text


def parse_cpuinfo(lines: list[str]) -> CpuReading:
    """``processor\\t: 0`` ... lines of /proc/cpuinfo (x86 prints ``physical
    id`` and ``core id`` per processor; Arm prints neither: sockets and
    cores are then None)."""
    processors = 0
    sockets, cores, models = set(), set(), []
    socket = None
    for line in lines:
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor":
            processors += 1
            socket = None
        elif key == "physical id":
            socket = value
            sockets.add(value)
        elif key == "core id":
            cores.add((socket, value))
        elif key == "model name" and value not in models:
            models.append(value)
    return CpuReading(processors=processors or None, sockets=len(sockets) or None, cores=len(cores) or None,
                      models=models)


def parse_topology(lines: list[str]) -> tuple[int | None, int | None]:
    """(sockets, cores) from ``/sys/devices/system/cpu/cpu3/topology/core_id:3`` lines (grep -H), each
    online CPU's physical_package_id and core_id; (None, None) when none was read."""
    cpus: dict[str, dict[str, str]] = {}
    for line in lines:
        match = re.match(r"/sys/devices/system/cpu/(cpu[0-9]+)/topology/(physical_package_id|core_id):(-?[0-9]+)$",
                         line.strip())
        if match:
            cpus.setdefault(match.group(1), {})[match.group(2)] = match.group(3)
    whole = [c for c in cpus.values() if len(c) == 2]
    if not whole:
        return None, None
    return (len({c["physical_package_id"] for c in whole}),
            len({(c["physical_package_id"], c["core_id"]) for c in whole}))


def parse_meminfo(lines: list[str]) -> dict[str, int]:
    """``MemTotal:       1915071000 kB`` -> {"MemTotal": 1915071000} (kB)."""
    out = {}
    for line in lines:
        key, sep, rest = line.partition(":")
        words = rest.split()
        if sep and words and words[0].isdigit():
            out[key.strip()] = int(words[0])
    return out


def parse_swaps(lines: list[str]) -> list[str]:
    """/proc/swaps' swap areas (its Filename column), header dropped."""
    return [line.split()[0] for line in lines if line.strip() and not line.startswith("Filename")]


def _unescape(field: str) -> str:
    # /proc/self/mounts writes space, tab, newline and backslash as \040 \011 \012 \134
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(lines: list[str]) -> list[MountReading]:
    """``/dev/nvme0n1p1 / ext4 rw,relatime 0 0`` lines of /proc/self/mounts, in order."""
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 4:
            out.append(MountReading(_unescape(fields[1]), _unescape(fields[0]), fields[2], fields[3]))
    return out


def parse_statfs(lines: list[str]) -> dict[str, tuple[int, int, int, int, int]]:
    """``4096 249788 150123 65536 60001 /`` (stat -f -c '%S %b %a %c %d %n') ->
    {"/": (block size, blocks, available, inodes, free inodes)}."""
    out = {}
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) == 6 and all(f.isdigit() for f in fields[:5]):
            out[fields[5]] = tuple(int(f) for f in fields[:5])
    return out


def parse_hugepages(lines: list[str]) -> dict[str, int]:
    """``2048kB 5128`` (the folder's size suffix, nr_hugepages) -> {"2048kB": 5128}."""
    out = {}
    for line in lines:
        words = line.split()
        if len(words) == 2 and words[1].isdigit():
            out[words[0]] = int(words[1])
    return out


def parse_cuda(json_lines: list[str], txt_lines: list[str]) -> str | None:
    """version.json's ``{"cuda": {"name": "CUDA SDK", "version": "12.4.1"}, ...}``
    (CUDA 11.1 on), else version.txt's ``CUDA Version 10.2.89``."""
    if any(x.strip() for x in json_lines):
        try:
            version = json.loads("\n".join(json_lines))["cuda"]["version"]
            return version if isinstance(version, str) else None
        except (ValueError, KeyError, TypeError):
            return None
    text = _first(txt_lines)
    match = re.match(r"CUDA Version ([0-9][0-9.]*)$", text or "")
    return match.group(1) if match else None


def parse_nccl(lines: list[str]) -> str | None:
    """``/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5`` -> ``2.21.5``."""
    match = re.search(r"/libnccl\.so\.([0-9]+(\.[0-9]+)+)$", _first(lines) or "")
    return match.group(1) if match else None


def parse_ofed(lines: list[str]) -> str | None:
    """``ofed_info -s``: ``MLNX_OFED_LINUX-23.10-5.1.4.0:`` -> ``23.10-5.1.4.0``
    (DOCA-OFED prints its own prefix the same way: the version after it)."""
    match = re.search(r"-([0-9]+(?:[.-][0-9]+)+):?$", _first(lines) or "")
    return match.group(1) if match else None


def parse_baseline_dump(lines: list[str]) -> BaselineReading:
    """The snippet's output as a reading; a section that is absent or empty leaves its value None."""
    sections: dict[str, list[str]] = {}
    sysctl: dict[str, str] = {}
    for s in split(lines):
        if s.tag == "sysctl":
            if any(x.strip() for x in s.lines):
                sysctl[s.arg] = " ".join(" ".join(s.lines).split())
        else:
            sections.setdefault(s.tag, []).extend(s.lines)
    cpu = parse_cpuinfo(sections.get("cpuinfo", []))
    if cpu.sockets is None and "topology" in sections:
        cpu.sockets, cpu.cores = parse_topology(sections["topology"])
    cpu.online, cpu.possible = _first(sections.get("online", [])), _first(sections.get("possible", []))
    mem = parse_meminfo(sections.get("meminfo", []))
    mounts = parse_mounts(sections["mounts"]) if sections.get("mounts") else None
    stats = parse_statfs(sections.get("statfs", []))
    for m in mounts or ():
        if m.path in stats:
            m.block_size, m.blocks, m.blocks_avail, m.inodes, m.inodes_free = stats[m.path]
    modules = None
    if sections.get("modules"):
        modules = sorted({module_name(x) for x in sections["modules"] if x.strip()})
    return BaselineReading(
        cpu=cpu, mem_total_kib=mem.get("MemTotal"), swap_total_kib=mem.get("SwapTotal"),
        swaps=parse_swaps(sections.get("swaps", [])),
        hugepages=parse_hugepages(sections["hugepages"]) if "hugepages" in sections else None,
        mounts=mounts, modules=modules, cmdline=_first(sections.get("cmdline", [])), sysctl=sysctl,
        clocksource=_first(sections.get("clocksource", [])), kernel=_first(sections.get("kernel", [])),
        cuda=parse_cuda(sections.get("cuda_json", []), sections.get("cuda_txt", [])),
        nccl=parse_nccl(sections.get("nccl", [])), ofed=parse_ofed(sections.get("ofed", [])),
        ofed_missing="ofed_missing" in sections)
