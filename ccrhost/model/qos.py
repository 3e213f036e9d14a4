"""Lossless RoCE: the wanted QoS state, mlx5's buffer arithmetic, and the
commands that move a port from its current state to the wanted one.

Pure: the operation hands in facts, this returns commands (as argv lists,
quoted by the caller) and problems. The same planner, given no current
state, writes the boot script that re-applies everything after a reboot.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field


# What the QoS probe reads of one interface and of the node (probes/qos.py fills these).
@dataclass
class QosInterface:
    backend: str = "none"                   # "ofed": mlnx_qos answers; "upstream": iproute2 dcb does
    mtu: int | None = None                  # /sys/class/net/<if>/mtu
    trust: str | None = None                # mlnx_qos "Priority trust state"; "dscp" when dcb has DSCP app entries
    dscp2prio: dict[int, int] = field(default_factory=dict)  # mlnx_qos dscp2prio / dcb app dscp-prio
    pfc: list[int] | None = None            # mlnx_qos "PFC configuration" enabled row / dcb pfc prio-pfc
    cable_len: int | None = None            # mlnx_qos "Cable len" / dcb pfc delay
    buffer_size: list[int] | None = None    # mlnx_qos "Receive buffer Size" / dcb buffer buffer-size
    prio2buffer: list[int] | None = None    # mlnx_qos prio2buffer / dcb buffer prio-buffer / qos/prio2buffer
    port_buffer: int | None = None          # mlnx_qos total / dcb buffer total-size / qos/buffer_size
    ecn: dict[str, int] | None = None       # /sys/class/net/<if>/ecn/roce_{rp,np}/* (MLNX_OFED), None: no tree
    ofed_buffers: list[dict] | None = None  # qos/buffer_size read-back: buffer, size, xoff, xon
    cc_params: dict[str, int] | None = None  # debugfs mlx5/<pci>/cc_params/* (upstream), None: no tree
    cc_params_dir: str | None = None        # ... and its folder
    errors: list[str] = field(default_factory=list)  # tools that failed for this interface


@dataclass
class QosReading:
    interfaces: dict[str, QosInterface] = field(default_factory=dict)
    systemd: bool = False        # /run/systemd/system exists
    unit_enabled: bool = False   # the boot unit's multi-user.target.wants link exists
    systemd_pid1: bool = False   # /proc/1/comm is systemd (seen from a container without /run/systemd too)


# OFED sysfs name (ecn/roce_rp|roce_np/<name>) -> upstream debugfs cc_params name.
DCQCN_RP = {
    "clamp_tgt_rate": "rp_clamp_tgt_rate", "clamp_tgt_rate_after_time_inc": "rp_clamp_tgt_rate_ati",
    "rpg_time_reset": "rp_time_reset", "rpg_byte_reset": "rp_byte_reset", "rpg_threshold": "rp_threshold",
    "rpg_max_rate": "rp_max_rate", "rpg_ai_rate": "rp_ai_rate", "rpg_hai_rate": "rp_hai_rate",
    "rpg_gd": "rp_gd", "rpg_min_dec_fac": "rp_min_dec_fac", "rpg_min_rate": "rp_min_rate",
    "rate_to_set_on_first_cnp": "rp_rate_to_set_on_first_cnp", "dce_tcp_g": "rp_dce_tcp_g",
    "dce_tcp_rtt": "rp_dce_tcp_rtt", "rate_reduce_monitor_period": "rp_rate_reduce_monitor_period",
    "initial_alpha_value": "rp_initial_alpha_value",
}
DCQCN_NP = {"min_time_between_cnps": "np_min_time_between_cnps"}
CNP_NP = {"cnp_dscp": "np_cnp_dscp", "cnp_802p_prio": "np_cnp_prio"}


def tos_byte(dscp: int, ecn_bits: int) -> int:
    """The IP ToS byte: DSCP in the upper six bits, ECN in the lower two
    (DSCP 26 with ECT(0) = 2 gives 106)."""
    return dscp << 2 | ecn_bits


@dataclass(frozen=True)
class Wanted:
    dscp_map: dict[int, int]           # DSCP -> priority (trust dscp)
    pfc: tuple[int, ...]               # 8 flags
    ecn_priorities: tuple[int, ...]
    ecn_rp: bool = True
    ecn_np: bool = True
    cnp_dscp: int = 48
    cnp_802p_prio: int = 6
    dcqcn: dict[str, int] = field(default_factory=dict)
    cable_len: int | None = None
    buffer_size: tuple[int, ...] | None = None
    prio2buffer: tuple[int, ...] | None = None


def xoff_bytes(cable_len_m: int, speed_gbps: float, mtu: int) -> int:
    """mlx5 port_buffer.c calculate_xoff(), in the driver's integer arithmetic."""
    speed = max(int(speed_gbps), 40)
    return (301 + 216 * cable_len_m // 100) * speed // 1000 + 272 * mtu // 100


def lossless_buffers(pfc: tuple[int, ...], prio2buffer: tuple[int, ...]) -> set[int]:
    return {prio2buffer[p] for p in range(8) if pfc[p]}


def buffer_problems(wanted: Wanted, current: QosInterface, speed_gbps: float, mtu: int) -> list[str]:
    """Why the wanted buffers cannot work, checked before anything is written."""
    sizes = wanted.buffer_size or current.buffer_size
    prio2buffer = wanted.prio2buffer or current.prio2buffer or (0,) * 8
    cable = wanted.cable_len if wanted.cable_len is not None else current.cable_len
    problems = []
    if sizes is None or cable is None:
        return problems  # the driver gives no buffer view (older OFED): nothing to check against
    xoff = xoff_bytes(cable, speed_gbps, mtu)
    for buf in sorted(lossless_buffers(wanted.pfc, tuple(prio2buffer))):
        need = xoff + mtu
        if sizes[buf] < need:
            problems.append(
                f"buffer {buf} is {sizes[buf]} bytes but carries PFC priorities and needs at least "
                f"xoff + MTU = {xoff} + {mtu} = {need} (cable {cable} m, {speed_gbps:g} Gb/s)")
    port_total = current.port_buffer
    if wanted.buffer_size and port_total and sum(wanted.buffer_size) > port_total:
        problems.append(f"buffers total {sum(wanted.buffer_size)} bytes, more than the port's {port_total}")
    return problems


def _pfc_list(flags) -> str:
    return ",".join(str(int(f)) for f in flags)


@dataclass(frozen=True)
class Write:
    """Write one value to a sysfs/debugfs attribute."""

    path: str
    value: str

    def shell(self) -> str:
        return f"printf '%s\\n' {shlex.quote(self.value)} > {shlex.quote(self.path)}"


def _write(path: str, value) -> Write:
    return Write(path, str(value))


def shell_line(command) -> str:
    """A planned command (argv list or Write) as one line of shell."""
    return command.shell() if isinstance(command, Write) else " ".join(shlex.quote(a) for a in command)


@dataclass(frozen=True)
class Step:
    """One setting of an interface: the command that sets it, the commands
    that put back the value read before, and how a message names it."""

    forward: object                 # argv list or Write
    restore: tuple = ()             # argv lists / Writes; empty when nothing was read to restore
    what: str = ""                  # "mlnx_qos -i ens1np0 --pfc 0,0,0,1,0,0,0,0", "write 1 to <path>"
    partial: bool = True            # a tool command may have half-applied; a single write has not
    unknown: str | None = None      # the setting whose previous value was not read


def plan_interface(iface: str, backend: str, wanted: Wanted, current: QosInterface,
                   force: bool = False, pause=None) -> tuple[list, list[str]]:
    """(commands, notes) that bring ``iface`` from ``current`` (its
    QosInterface reading) to ``wanted``. ``force`` plans every setting, changed or not: the
    boot script. Notes say what this driver cannot set on the interface."""
    steps, notes = plan_steps(iface, backend, wanted, current, force, pause)
    return [step.forward for step in steps], notes


def _step(forward, restore, unknown=None) -> Step:
    partial = not isinstance(forward, Write)
    what = f"write {forward.value} to {forward.path}" if not partial else shell_line(forward)
    return Step(forward, tuple(r for r in restore if r is not None), what, partial, unknown)


# The order one mlnx_qos run applies its options in (Mellanox/mlnx-tools
# python/mlnx_qos): cable length, PFC, each --dscp2prio in turn, trust,
# then the buffers.
_MLNX_QOS_ORDER = {"--cable_len": 0, "--pfc": 1, "--dscp2prio": 2, "--trust": 3, "--buffer_size": 4,
                   "--prio2buffer": 4}


def _mlnx_qos_runs(options: list) -> list[list]:
    """``options`` in as few mlnx_qos runs as keep them in their order.

    A run takes the next option only where the tool would apply it after
    the ones it already has; and never --trust with --dscp2prio (the tool
    refuses the pair) nor --buffer_size with --prio2buffer (on the OFED
    sysfs backend it then writes the sizes only). Every real round trip
    starts a Python tool on the node: trust, the DSCP map and PFC of a
    fresh port take two runs instead of four.
    """
    runs: list[list] = []
    for option in options:
        name = option[0]
        run = runs[-1] if runs else None
        names = {o[0] for o in run} if run else set()
        if run and all(_MLNX_QOS_ORDER[n] <= _MLNX_QOS_ORDER[name] for n in names) \
                and not ({name} | names) >= {"--trust", "--dscp2prio"} \
                and not ({name} | names) >= {"--buffer_size", "--prio2buffer"}:
            run.append(option)
        else:
            runs.append([option])
    return runs


def plan_steps(iface: str, backend: str, wanted: Wanted, current: QosInterface,
               force: bool = False, pause=None) -> tuple[list[Step], list[str]]:
    """:func:`plan_interface` as :class:`Step` s, each with the commands that
    restore what ``current`` read, in the order they are applied.
    ``pause``: the netdev's global pause (``ethtool -a``, a
    ``model.fabric.PauseSetting``; None where the driver has none): where
    PFC is wanted it goes off, as its last step (nic-configuration-operator
    manages pauseFrames beside PFC; global pause on beside PFC stalls every
    priority)."""
    steps, notes = _qos_steps(iface, backend, wanted, current, force)
    if pause is not None and any(wanted.pfc) and (force or pause.on):
        steps.append(_step(["ethtool", "-A", iface, "rx", "off", "tx", "off"],
                           [["ethtool", "-A", iface, "rx", "on" if pause.rx else "off",
                             "tx", "on" if pause.tx else "off"]]))
    return steps, notes


def _qos_steps(iface: str, backend: str, wanted: Wanted, current: QosInterface,
               force: bool = False) -> tuple[list[Step], list[str]]:
    steps: list[Step] = []
    notes: list[str] = []
    have_map = current.dscp2prio or {}

    def differs(have, want) -> bool:
        return force or have != want

    def known(value, name):
        return None if value is not None else name

    pfc_differs = differs(tuple(current.pfc or ()), wanted.pfc)
    cable_differs = wanted.cable_len is not None and differs(current.cable_len, wanted.cable_len)
    size_differs = bool(wanted.buffer_size) and differs(tuple(current.buffer_size or ()), wanted.buffer_size)
    map_differs = bool(wanted.prio2buffer) and differs(tuple(current.prio2buffer or ()), wanted.prio2buffer)
    dscp_todo = [(d, p) for d, p in sorted(wanted.dscp_map.items()) if differs(have_map.get(d), p)]

    if backend == "ofed":
        base = ["mlnx_qos", "-i", iface]
        options = []  # (option, value, previous value or None, what it is called), in the order applied

        def ofed(option, value, old, name):
            options.append((option, value, old, name))

        if differs(current.trust, "dscp"):
            ofed("--trust", "dscp", current.trust, "trust")
        if cable_differs:
            ofed("--cable_len", str(wanted.cable_len), None if current.cable_len is None else str(current.cable_len),
                 "cable length")
        # PFC goes after the buffers when they change: the driver refuses a
        # lossless buffer too small for its xoff at every single setting.
        pfc_last = size_differs or map_differs
        pfc = (["--pfc", _pfc_list(wanted.pfc), current.pfc and _pfc_list(current.pfc), "PFC"]
               if pfc_differs else None)
        if pfc and not pfc_last:
            ofed(*pfc)
        for d, p in dscp_todo:
            ofed("--dscp2prio", f"set,{d},{p}", f"set,{d},{have_map[d]}" if d in have_map else f"del,{d},{p}",
                 "dscp2prio")
        if size_differs:
            ofed("--buffer_size", _pfc_list(wanted.buffer_size),
                 current.buffer_size and _pfc_list(current.buffer_size), "buffer sizes")
        if map_differs:
            ofed("--prio2buffer", _pfc_list(wanted.prio2buffer),
                 current.prio2buffer and _pfc_list(current.prio2buffer), "prio2buffer")
        if pfc and pfc_last:
            ofed(*pfc)
        for group in _mlnx_qos_runs(options):
            restore = [base + [option, old] for option, _v, old, _n in reversed(group) if old is not None]
            unknown = ", ".join(name for _o, _v, old, name in group if old is None) or None
            steps.append(_step(base + [a for option, value, _o, _n in group for a in (option, value)], restore,
                               unknown))
    elif backend == "upstream":
        # On upstream mlx5, DSCP app entries are what switches trust to DSCP.
        if dscp_todo:
            app = ["dcb", "app", "replace", "dev", iface, "dscp-prio"]
            back = [f"{d}:{have_map[d]}" for d, _ in dscp_todo if d in have_map]
            drop = [f"{d}:{p}" for d, p in dscp_todo if d not in have_map]
            steps.append(_step(app + [f"{d}:{p}" for d, p in dscp_todo], [
                ["dcb", "app", "del", "dev", iface, "dscp-prio", *drop] if drop else None,
                app + back if back else None]))
        buf_args, buf_old, unknown = [], [], None
        if size_differs:
            buf_args += ["buffer-size", *[f"{b}:{s}" for b, s in enumerate(wanted.buffer_size)]]
            buf_old += ["buffer-size", *[f"{b}:{s}" for b, s in enumerate(current.buffer_size or ())]]
            unknown = known(current.buffer_size, "buffer sizes")
        if map_differs:
            buf_args += ["prio-buffer", *[f"{p}:{b}" for p, b in enumerate(wanted.prio2buffer)]]
            buf_old += ["prio-buffer", *[f"{p}:{b}" for p, b in enumerate(current.prio2buffer or ())]]
            unknown = unknown or known(current.prio2buffer, "prio-buffer")
        if buf_args:
            steps.append(_step(["dcb", "buffer", "set", "dev", iface, *buf_args],
                               [None if unknown else ["dcb", "buffer", "set", "dev", iface, *buf_old]], unknown))
        pfc_args, pfc_old, unknown = [], [], None
        if pfc_differs:
            pfc_args += ["prio-pfc", *[f"{p}:{'on' if wanted.pfc[p] else 'off'}" for p in range(8)]]
            pfc_old += ["prio-pfc", *[f"{p}:{'on' if f else 'off'}" for p, f in enumerate(current.pfc or ())]]
            unknown = known(current.pfc, "PFC")
        if cable_differs:
            pfc_args += ["delay", str(wanted.cable_len)]  # mlx5 reads the PFC delay as cable length (m)
            pfc_old += ["delay", str(current.cable_len)]
            unknown = unknown or known(current.cable_len, "PFC delay")
        if pfc_args:
            steps.append(_step(["dcb", "pfc", "set", "dev", iface, *pfc_args],
                               [None if unknown else ["dcb", "pfc", "set", "dev", iface, *pfc_old]], unknown))
    else:
        notes.append("neither mlnx_qos (MLNX_OFED) nor iproute2 dcb found; trust, PFC and buffers not set")

    def write(path, value, have, name):
        return _step(_write(path, value), [None if have is None else _write(path, have)], known(have, name))

    ecn = current.ecn
    if ecn is not None:
        ecn_dir = f"/sys/class/net/{iface}/ecn"
        for point, on in (("roce_rp", wanted.ecn_rp), ("roce_np", wanted.ecn_np)):
            for prio in range(8):
                want = int(on and prio in wanted.ecn_priorities)
                name = f"{point}/enable/{prio}"
                if differs(ecn.get(name), want):
                    steps.append(write(f"{ecn_dir}/{name}", want, ecn.get(name), f"ecn/{name}"))
        values = {f"roce_np/{k}": getattr(wanted, k) for k in CNP_NP}
        values.update({f"roce_rp/{k}": v for k, v in wanted.dcqcn.items() if k in DCQCN_RP})
        values.update({f"roce_np/{k}": v for k, v in wanted.dcqcn.items() if k in DCQCN_NP})
        for name, value in sorted(values.items()):
            if differs(ecn.get(name), value):
                steps.append(write(f"{ecn_dir}/{name}", value, ecn.get(name), f"ecn/{name}"))
        return steps, notes

    debug_values = {CNP_NP[k]: getattr(wanted, k) for k in CNP_NP}
    debug_values.update({DCQCN_RP.get(k) or DCQCN_NP[k]: v for k, v in wanted.dcqcn.items()})
    cc, cc_dir = current.cc_params, current.cc_params_dir
    if cc is not None and cc_dir:
        for name, value in sorted(debug_values.items()):
            if differs(cc.get(name), value):
                steps.append(write(f"{cc_dir}/{name}", value, cc.get(name), f"cc_params/{name}"))
    else:
        notes.append(f"no ecn/ tree and no debugfs cc_params: {', '.join(sorted(debug_values))} need "
                     "firmware (mlxconfig CNP_DSCP_P1, CNP_802P_PRIO_P1, ...); left alone")
    notes.append(f"per-priority ECN enable (priorities {list(wanted.ecn_priorities)}) is firmware "
                 "configuration on this driver (mlxconfig ROCE_CC_PRIO_MASK_P1); left alone")
    return steps, notes


def unit_script(iface: str, steps: list[Step], finished: list[str], on_failure: str = "") -> str:
    """One shell command that applies ``steps`` to ``iface`` as a unit.

    When a setting fails, every setting applied before it (and a tool
    command that may have half-applied) is put back in reverse order, then
    ``on_failure`` runs (it records ``finished``, the interfaces done before
    this one, for the boot unit) and the command fails with one line naming
    the setting. The message is printed with printf's arguments, so no name
    from the node is ever expanded by the shell.
    """
    q = shlex.quote
    out = ["f=0"]
    for i, step in enumerate(steps, 1):
        out.append(f'{"" if i == 1 else "[ $f -ne 0 ] || "}{{ {shell_line(step.forward)}; }} || f={i}')
    restore = ["r="]
    for i in range(len(steps), 0, -1):
        step = steps[i - 1]
        cond = f"[ $f -{'ge' if step.partial else 'gt'} {i} ]"
        for command in step.restore:
            restore.append(f'if {cond}; then {shell_line(command)} || r="$r${{r:+, }}"{q(shell_line(command))}; fi')
        if step.unknown:
            restore.append(f'if {cond}; then r="$r${{r:+, }}"{q(step.unknown + " (its previous value was not read)")}; fi')
    which = "case $f in " + " ".join(f"{i}) w={q(step.what)};;" for i, step in enumerate(steps, 1)) + " esac"
    done = (f"{', '.join(finished)} done and re-applied at boot" if finished
            else "no interface finished before it")
    fail = [which, *restore, *([on_failure] if on_failure else []),
            f'printf "ccrhost: %s: setting failed: %s; its previous QoS restored%s; %s\\n" {q(iface)} "$w" '
            f'"${{r:+ except: $r}}" {q(done)} >&2', "exit 1"]
    return "; ".join(out) + "; if [ $f -ne 0 ]; then " + "; ".join(fail) + "; fi"


def headroom_problems(buffers: list[dict], lossless: set[int], min_headroom: int) -> list[str]:
    """Read-back check of OFED's xoff thresholds: size - xoff is the headroom."""
    problems = []
    for b in buffers:
        if b["buffer"] in lossless and b["size"] and b["size"] - b["xoff"] < min_headroom:
            problems.append(f"buffer {b['buffer']}: headroom {b['size'] - b['xoff']} bytes "
                            f"(size {b['size']}, xoff {b['xoff']}) is below qos_min_headroom {min_headroom}")
    return problems
