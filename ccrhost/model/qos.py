"""Lossless RoCE: the wanted QoS state, mlx5's buffer arithmetic, and the
commands that move a port from its current state to the wanted one.

Pure: the operation hands in facts, this returns commands (as argv lists,
quoted by the caller) and problems. The same planner, given no current
state, writes the boot script that re-applies everything after a reboot.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from ccrhost.probes.qos import QosInterface

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


def plan_interface(iface: str, backend: str, wanted: Wanted, current: QosInterface,
                   force: bool = False) -> tuple[list, list[str]]:
    """(commands, notes) that bring ``iface`` from ``current`` (its
    QosInterface reading) to ``wanted``. ``force`` plans every setting, changed or not: the
    boot script. Notes say what this driver cannot set on the interface."""
    cmds: list = []
    notes: list[str] = []
    have_map = current.dscp2prio or {}

    def differs(have, want) -> bool:
        return force or have != want

    pfc_differs = differs(tuple(current.pfc or ()), wanted.pfc)
    cable_differs = wanted.cable_len is not None and differs(current.cable_len, wanted.cable_len)
    size_differs = bool(wanted.buffer_size) and differs(tuple(current.buffer_size or ()), wanted.buffer_size)
    map_differs = bool(wanted.prio2buffer) and differs(tuple(current.prio2buffer or ()), wanted.prio2buffer)
    dscp_todo = [(d, p) for d, p in sorted(wanted.dscp_map.items()) if differs(have_map.get(d), p)]

    if backend == "ofed":
        base = ["mlnx_qos", "-i", iface]
        if differs(current.trust, "dscp"):
            cmds.append(base + ["--trust", "dscp"])
        cmds += [base + ["--dscp2prio", f"set,{d},{p}"] for d, p in dscp_todo]
        if cable_differs:
            cmds.append(base + ["--cable_len", str(wanted.cable_len)])
        if size_differs:
            cmds.append(base + ["--buffer_size", _pfc_list(wanted.buffer_size)])
        if map_differs:
            cmds.append(base + ["--prio2buffer", _pfc_list(wanted.prio2buffer)])
        if pfc_differs:
            cmds.append(base + ["--pfc", _pfc_list(wanted.pfc)])
    elif backend == "upstream":
        # On upstream mlx5, DSCP app entries are what switches trust to DSCP.
        if dscp_todo:
            cmds.append(["dcb", "app", "replace", "dev", iface, "dscp-prio", *[f"{d}:{p}" for d, p in dscp_todo]])
        buf_args = []
        if size_differs:
            buf_args += ["buffer-size", *[f"{b}:{s}" for b, s in enumerate(wanted.buffer_size)]]
        if map_differs:
            buf_args += ["prio-buffer", *[f"{p}:{b}" for p, b in enumerate(wanted.prio2buffer)]]
        if buf_args:
            cmds.append(["dcb", "buffer", "set", "dev", iface, *buf_args])
        pfc_args = []
        if pfc_differs:
            pfc_args += ["prio-pfc", *[f"{p}:{'on' if wanted.pfc[p] else 'off'}" for p in range(8)]]
        if cable_differs:
            pfc_args += ["delay", str(wanted.cable_len)]  # mlx5 reads the PFC delay as cable length (m)
        if pfc_args:
            cmds.append(["dcb", "pfc", "set", "dev", iface, *pfc_args])
    else:
        notes.append("neither mlnx_qos (MLNX_OFED) nor iproute2 dcb found; trust, PFC and buffers not set")

    ecn = current.ecn
    if ecn is not None:
        ecn_dir = f"/sys/class/net/{iface}/ecn"
        for point, on in (("roce_rp", wanted.ecn_rp), ("roce_np", wanted.ecn_np)):
            for prio in range(8):
                want = int(on and prio in wanted.ecn_priorities)
                if differs(ecn.get(f"{point}/enable/{prio}"), want):
                    cmds.append(_write(f"{ecn_dir}/{point}/enable/{prio}", want))
        values = {f"roce_np/{k}": getattr(wanted, k) for k in CNP_NP}
        values.update({f"roce_rp/{k}": v for k, v in wanted.dcqcn.items() if k in DCQCN_RP})
        values.update({f"roce_np/{k}": v for k, v in wanted.dcqcn.items() if k in DCQCN_NP})
        for name, value in sorted(values.items()):
            if differs(ecn.get(name), value):
                cmds.append(_write(f"{ecn_dir}/{name}", value))
        return cmds, notes

    debug_values = {CNP_NP[k]: getattr(wanted, k) for k in CNP_NP}
    debug_values.update({DCQCN_RP.get(k) or DCQCN_NP[k]: v for k, v in wanted.dcqcn.items()})
    cc, cc_dir = current.cc_params, current.cc_params_dir
    if cc is not None and cc_dir:
        for name, value in sorted(debug_values.items()):
            if differs(cc.get(name), value):
                cmds.append(_write(f"{cc_dir}/{name}", value))
    else:
        notes.append(f"no ecn/ tree and no debugfs cc_params: {', '.join(sorted(debug_values))} need "
                     "firmware (mlxconfig CNP_DSCP_P1, CNP_802P_PRIO_P1, ...); left alone")
    notes.append(f"per-priority ECN enable (priorities {list(wanted.ecn_priorities)}) is firmware "
                 "configuration on this driver (mlxconfig ROCE_CC_PRIO_MASK_P1); left alone")
    return cmds, notes


def headroom_problems(buffers: list[dict], lossless: set[int], min_headroom: int) -> list[str]:
    """Read-back check of OFED's xoff thresholds: size - xoff is the headroom."""
    problems = []
    for b in buffers:
        if b["buffer"] in lossless and b["size"] and b["size"] - b["xoff"] < min_headroom:
            problems.append(f"buffer {b['buffer']}: headroom {b['size'] - b['xoff']} bytes "
                            f"(size {b['size']}, xoff {b['xoff']}) is below qos_min_headroom {min_headroom}")
    return problems
