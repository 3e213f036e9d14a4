"""Host health on this node, in one shell snippet (the deploy's snapshot and
``ccrhost check`` run the same): systemd units, time sync, EDAC counters,
the locked-memory limit, and GPU memory and processes where the node is
known idle. The kernel log is the GPU health probe's read (gpu_health.py).

Formats (verbatim samples in tests/fixtures/host_health/):
- ``systemctl show -p Id,LoadState,... -- UNIT...``: one ``KEY=VALUE`` block per unit, in the order asked,
  blocks apart by an empty line; a unit systemd does not know still prints ``LoadState=not-found``.
  ``LimitMEMLOCK=`` is bytes or ``infinity`` (systemd.exec(5)). NRestarts: systemd 235 on.
- ``chronyc -n tracking``: ``Key : value`` lines; ``Leap status`` is ``Normal``, ``Insert second``,
  ``Delete second`` or ``Not synchronised`` (chronyc(1)).
- ``timedatectl show``: ``KEY=VALUE`` lines, ``NTPSynchronized=yes|no`` (timedatectl(1)).
- EDAC: /sys/devices/system/edac/mc/mc*/ce_count, ue_count (Documentation/admin-guide/ras.rst): one count each.
- ``ulimit -l``: KiB, or ``unlimited``.
- ``nvidia-smi --query-gpu=index,pci.bus_id,memory.used --format=csv,noheader,nounits`` and
  ``--query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv,noheader`` (``1024 MiB``).
"""

from __future__ import annotations

import re
import shlex

from ccrhost.model.host_health import (Edac, GpuProcess, GpuUse, HostHealthReading, Memlock, TimeSync, Unit,
                                       UnitsReading)
from ccrhost.probes.sections import split

PROPERTIES = "Id,LoadState,ActiveState,SubState,NRestarts,LimitMEMLOCK"
PREVIOUS = "="  # prefix of the stored reading's lines, as the fabric probe's
WHAT = "systemctl, chronyc/timedatectl, EDAC, ulimit -l"
_SMI = "timeout -k 2 10 nvidia-smi"


class HostHealthFormatError(ValueError):
    """Output the tools never print; the message quotes it."""


DEFAULT_STATE = "/run/ccrhost/host-health.json"  # host_health_state's default
DEFAULT_UNITS = ("slurmd", "nvidia-persistenced", "nvidia-dcgm", "nvidia-fabricmanager")


OFF = "@@off"  # the deploy's snapshot where host_health_enable is off: nothing read, nothing written


def args(settings, keep: bool = True, policy=None) -> tuple | None:
    """:func:`command`'s arguments from a host's settings (or a check's
    kept ones): every unit judged (Fabric Manager unless off, whether the
    GPUs need it is known only from their reading) and slurmd, whose
    LimitMEMLOCK its jobs inherit. None where the checks are off: nothing
    would judge the reading. ``policy``: the settings' policy, if built."""
    policy = (policy or settings.policy()).host_health
    if not policy.enabled:
        return None
    units = tuple(dict.fromkeys(("slurmd", *policy.watched(policy.fabricmanager != "off"))))
    return units, getattr(settings, "host_health_state", DEFAULT_STATE), getattr(settings, "slurm_conf", None), keep


def command(units=DEFAULT_UNITS, state: str | None = DEFAULT_STATE, slurm_conf: str | None = None,
            keep: bool = False) -> str:
    """The snippet. ``units``: the units to show; ``state``: where the units'
    reading is kept for the next (its restart counts), replaced by this one
    with ``keep``; ``slurm_conf``: Slurm's configuration, for scontrol
    (whether the node is idle)."""
    names = " ".join(shlex.quote(u) for u in units)
    show = f"timeout -k 2 5 systemctl show -p {PROPERTIES} -- {names} 2>&1"
    parts = [f"if command -v systemctl >/dev/null 2>&1; then r=$({show}); rc=$?; else r=; rc=none; fi",
             "b=; { read -r b < /proc/sys/kernel/random/boot_id; } 2>/dev/null"]
    if state is not None:
        from ccrhost.output import write_state_command

        path = shlex.quote(state)
        parts.append(f"echo @@previous; sed 's/^/{PREVIOUS}/' {path} 2>/dev/null")
        if keep:
            write = write_state_command(state, '"boot $b" "$r"')
            parts.append(f"[ \"$rc\" = 0 ] && {{ {write} 2>/dev/null"
                         f" || echo \"@@unkept cannot write {state}\"; }}")
    parts += [
        f"echo \"@@boot $b\"; echo \"@@units $rc {names}\"; printf '%s\\n' \"$r\"",
        "if command -v chronyc >/dev/null 2>&1; then echo @@chrony; timeout -k 1 3 chronyc -n tracking 2>&1;"
        " echo \"@@chronyrc $?\"; fi",
        "if command -v timedatectl >/dev/null 2>&1; then echo @@timedatectl; timeout -k 1 3 timedatectl show 2>&1;"
        " echo \"@@timedatectlrc $?\"; fi",
        "echo @@edac; for d in /sys/devices/system/edac/mc/mc*; do [ -d \"$d\" ] || continue; c=; u=;"
        " read -r c < \"$d/ce_count\"; read -r u < \"$d/ue_count\"; echo \"${d##*/} ${c:-?} ${u:-?}\"; done 2>/dev/null",
        "echo \"@@memlock ${SLURM_SCRIPT_CONTEXT:-}\"; ulimit -l 2>&1",
        _idle(slurm_conf),
    ]
    return "; ".join(parts)


def _idle(slurm_conf: str | None) -> str:
    """Whether the node is known idle: slurmd's prolog (the job's processes
    not started yet), or Slurm's node state IDLE; then its GPUs' memory and
    processes (nvidia-smi costs seconds: only then)."""
    conf = f"SLURM_CONF={shlex.quote(slurm_conf)} " if slurm_conf else ""
    return (
        "i=; if [ \"${SLURM_SCRIPT_CONTEXT:-}\" = prolog_slurmd ]; then i=prolog; echo \"@@idle prolog ${SLURM_JOB_GPUS:-}\";"
        " elif command -v scontrol >/dev/null 2>&1; then n=${SLURMD_NODENAME:-$(hostname -s 2>/dev/null)};"
        f" s=$({conf}timeout -k 1 5 scontrol show node \"$n\" 2>/dev/null | grep -o 'State=[^ ]*' | head -n 1);"
        " echo \"@@idle slurm $s\"; case $s in *COMPLETING*) ;; State=IDLE|State=IDLE+*) i=slurm;; esac; fi;"
        " if [ -n \"$i\" ]; then if command -v nvidia-smi >/dev/null 2>&1; then"
        f" echo @@gpumem; {_SMI} --query-gpu=index,pci.bus_id,memory.used --format=csv,noheader,nounits 2>&1;"
        " echo \"@@gpumemrc $?\";"
        f" echo @@gpuprocs; {_SMI} --query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv,noheader"
        " 2>&1; echo \"@@gpuprocsrc $?\"; else echo @@gpumemrc none; fi; fi"
    )


def parse_units(text_lines: list[str], names) -> dict[str, Unit]:
    """``systemctl show``'s blocks, by the names asked (in order)."""
    blocks: list[dict[str, str]] = [{}]
    for line in text_lines:
        if not line.strip():
            if blocks[-1]:
                blocks.append({})
            continue
        key, eq, value = line.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z]+", key):
            raise HostHealthFormatError(f"systemctl show printed {line.strip()[:120]!r}")
        blocks[-1][key] = value.strip()
    blocks = [b for b in blocks if b]
    names = list(names)
    if len(blocks) != len(names):
        raise HostHealthFormatError(f"systemctl show printed {len(blocks)} units for the {len(names)} asked")
    units = {}
    for name, b in zip(names, blocks):
        restarts = b.get("NRestarts")
        if restarts is not None and not restarts.isdigit():
            raise HostHealthFormatError(f"NRestarts={restarts[:40]!r} is no count")
        memlock = b.get("LimitMEMLOCK")
        if memlock is not None and memlock != "infinity" and not memlock.isdigit():
            raise HostHealthFormatError(f"LimitMEMLOCK={memlock[:40]!r} is neither bytes nor infinity")
        units[name] = Unit(name, b.get("LoadState"), b.get("ActiveState"), b.get("SubState"),
                           int(restarts) if restarts is not None else None, memlock)
    return units


def parse_time(chrony: list[str] | None, chrony_rc: str, timedatectl: list[str] | None, tdc_rc: str) -> TimeSync:
    """chrony's Leap status first (it is the daemon's own word), else timedatectl's NTPSynchronized."""
    why = []
    if chrony is not None:
        leap = next((x.split(":", 1)[1].strip() for x in chrony if x.split(":", 1)[0].strip() == "Leap status"),
                    None)
        if leap is not None and chrony_rc == "0":
            return TimeSync("chrony", leap != "Not synchronised", f"Leap status : {leap}")
        why.append(f"chronyc tracking: {' '.join(x.strip() for x in chrony if x.strip())[:160] or 'no output'}")
    if timedatectl is not None:
        value = next((x.split("=", 1)[1].strip() for x in timedatectl if x.startswith("NTPSynchronized=")), None)
        if value in ("yes", "no") and tdc_rc == "0":
            return TimeSync("timesyncd", value == "yes", f"NTPSynchronized={value}")
        why.append(f"timedatectl show: {' '.join(x.strip() for x in timedatectl if x.strip())[:160] or 'no output'}")
    return TimeSync(error="; ".join(why) or "neither chronyc nor timedatectl is installed")


def parse_edac(lines: list[str]) -> Edac:
    controllers = {}
    for line in lines:
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3 or not re.fullmatch(r"mc\d+", parts[0]):
            raise HostHealthFormatError(f"EDAC line {line.strip()[:80]!r}")
        if not (parts[1].isdigit() and parts[2].isdigit()):
            return Edac(error=f"{parts[0]}: ce_count {parts[1]}, ue_count {parts[2]} (? = unreadable)")
        controllers[parts[0]] = (int(parts[1]), int(parts[2]))
    if not controllers:
        return Edac(error="no EDAC memory controller under /sys/devices/system/edac/mc (EDAC driver not loaded)")
    return Edac(controllers)


def parse_memlock(arg: str, lines: list[str]) -> Memlock:
    value = next((x.strip() for x in lines if x.strip()), "")
    prolog = arg.strip() == "prolog_slurmd"
    if value == "unlimited":
        return Memlock(prolog, None)
    if value.isdigit():
        return Memlock(prolog, int(value))
    return Memlock(prolog, None, f"ulimit -l printed {value[:80]!r}")


def parse_gpu_use(parts: dict, idle_arg: str | None) -> GpuUse:
    if idle_arg is None:
        return GpuUse()
    how, _, rest = idle_arg.partition(" ")
    use = GpuUse()
    if how == "prolog":
        use.idle = "the prolog, before the job's processes"
        gpus = rest.strip()
        if gpus:
            if not re.fullmatch(r"\d+(,\d+)*", gpus):
                raise HostHealthFormatError(f"SLURM_JOB_GPUS={gpus[:40]!r}")
            use.job_gpus = tuple(int(x) for x in gpus.split(","))
    elif how == "slurm":
        state = rest.strip()
        if "COMPLETING" in state or not (state == "State=IDLE" or state.startswith("State=IDLE+")):
            return GpuUse()
        use.idle = f"Slurm: {state}"
    else:
        raise HostHealthFormatError(f"@@idle {idle_arg[:40]!r}")
    rc = parts.get("gpumemrc")
    if rc is None or rc.arg != "0":
        text = " ".join(x.strip() for x in parts["gpumem"].lines) if "gpumem" in parts else ""
        use.error = "nvidia-smi not found" if rc is not None and rc.arg == "none" else \
            f"nvidia-smi --query-gpu: {text[:160] or 'no output'}"
        return use
    for line in parts["gpumem"].lines:
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 3 or not cells[0].isdigit() or not cells[2].isdigit():
            use.error = f"nvidia-smi --query-gpu printed {line.strip()[:120]!r}"
            return use
        use.memory_mib[int(cells[0])] = (cells[1], int(cells[2]))
    prc = parts.get("gpuprocsrc")
    if prc is None or prc.arg != "0":
        use.error = "nvidia-smi --query-compute-apps: " + (
            " ".join(x.strip() for x in parts["gpuprocs"].lines)[:160] if "gpuprocs" in parts else "no output")
        return use
    for line in parts["gpuprocs"].lines:
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 4 or not cells[1].isdigit():
            use.error = f"nvidia-smi --query-compute-apps printed {line.strip()[:120]!r}"
            return use
        use.processes.append(GpuProcess(cells[0], int(cells[1]), ",".join(cells[2:-1]), cells[-1]))
    return use


def parse_command_output(lines: list[str]) -> HostHealthReading | None:
    """:func:`command`'s output (``@@units RC NAME...``: the units it asked
    for); None for :data:`OFF` (not read)."""
    if [x.strip() for x in lines if x.strip()] == [OFF]:
        return None
    sections = split(lines)
    parts = {s.tag: s for s in sections}
    reading = HostHealthReading()
    units = parts.get("units")
    rc, _, names = units.arg.partition(" ") if units is not None else ("", "", "")
    names = names.split()
    if units is None:
        reading.units.error = "no systemctl output"
    elif rc == "none":
        reading.units.error = "systemctl not found"
    elif rc != "0":
        text = " ".join(x.strip() for x in units.lines if x.strip())
        reading.units.error = f"systemctl show exit {rc}: {text[:200] or 'no output'}"
    else:
        reading.units.units = parse_units(units.lines, names)
        boot = parts["boot"].arg if "boot" in parts else ""
        reading.units.previous, reading.units.note = _previous(parts.get("previous"), boot, names)
    if "unkept" in parts:
        reading.units.note = f"{parts['unkept'].arg}: restarts are not compared at the next reading"
    chrony, tdc = parts.get("chrony"), parts.get("timedatectl")
    reading.time = parse_time(chrony.lines if chrony else None, parts["chronyrc"].arg if "chronyrc" in parts else "",
                              tdc.lines if tdc else None,
                              parts["timedatectlrc"].arg if "timedatectlrc" in parts else "")
    reading.edac = parse_edac(parts["edac"].lines) if "edac" in parts else Edac(error="no EDAC output")
    memlock = parts.get("memlock")
    reading.memlock = parse_memlock(memlock.arg, memlock.lines) if memlock else Memlock(error="no ulimit output")
    idle = parts.get("idle")
    reading.gpu_use = parse_gpu_use(parts, idle.arg if idle is not None else None)
    return reading


def _previous(section, boot: str, names) -> tuple[dict[str, int] | None, str | None]:
    """The restart counts of the stored reading when it is of this boot and
    of the same units; else None and why (a first reading says nothing)."""
    lines = [x[len(PREVIOUS):] for x in section.lines if x.startswith(PREVIOUS)] if section is not None else []
    if not lines:
        return None, None
    if lines[0] != f"boot {boot}" or not boot:
        return None, None  # another boot's counts: NRestarts starts afresh with systemd
    try:
        units = parse_units(lines[1:], names)
    except HostHealthFormatError as exc:
        return None, f"the stored units' reading is discarded ({exc})"
    return {n: u.restarts for n, u in units.items() if u.restarts is not None}, None


def read_local(arguments: tuple, timeout: float = 20) -> HostHealthReading:
    """:func:`command` here, bounded (``ccrhost check``)."""
    from ccrhost.probes import local

    try:
        lines = local.run(command(*arguments), timeout, f"the host health probe ({WHAT})").splitlines()
    except local.ProbeTimeout as exc:
        return HostHealthReading(error=str(exc))
    try:
        return parse_command_output(lines)
    except HostHealthFormatError as exc:
        return HostHealthReading(error=f"cannot read {WHAT}: {exc}")
