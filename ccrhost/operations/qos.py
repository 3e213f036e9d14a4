"""Lossless RoCE: trust/DSCP, PFC, buffers ("credit" thresholds), ECN/DCQCN,
and the boot unit that re-applies them."""

from __future__ import annotations

import shlex
from pyinfra import host

from ccrhost.facts import cache as fact_cache
from pyinfra.api import QuoteString, StringCommand

from ccrhost import qos
from ccrhost.checks import compute_ports
from ccrhost.facts.files import FileStates
from ccrhost.facts.qos import UNIT, QosState
from ccrhost.facts.rdma import IB_ROOT, RdmaDevices
from ccrhost.operations.files import MANAGED_HEADER, converge
from ccrhost.operations.util import fail, operation, write_sysfs
from ccrhost.render import render
from ccrhost.sysfs import natural_key

BOOT_SCRIPT = "/etc/ccrhost/boot-apply.sh"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"


def roce_netdevs(facts: dict, settings) -> dict[str, dict]:
    """Compute RoCE netdevs -> {"rate_gbps", "ports": [(dev, num)]}."""
    out: dict[str, dict] = {}
    devices = facts.get("devices", {})
    for p in compute_ports(devices, settings.rdma_exclude_devices):
        netdev = devices[p.device]["ports"][p.port].get("netdev")
        if p.link_layer == "Ethernet" and netdev:
            entry = out.setdefault(netdev, {"rate_gbps": 0.0, "ports": []})
            entry["rate_gbps"] = max(entry["rate_gbps"], p.rate_gbps or 0.0)
            entry["ports"].append((p.device, p.port))
    return dict(sorted(out.items(), key=lambda kv: natural_key(kv[0])))


def _guard(netdevs, node, settings) -> str | None:
    carrying = [(node.get("ssh_dev"), "this SSH connection"), (node.get("default_route_dev"), "the default route")]
    hits = [f"{dev} carries {what}" for dev, what in carrying if dev and dev in netdevs]
    if hits and not settings.qos_allow_ssh_interface:
        return ("refusing to change QoS: " + "; ".join(hits) + ". Changing PFC toggles the port link and would "
                "cut this node off. Set qos_allow_ssh_interface: true for this host to allow it.")
    return None


def _cmd(planned) -> StringCommand:
    if isinstance(planned, qos.Write):
        return write_sysfs(planned.path, planned.value)
    return StringCommand(*[QuoteString(a) for a in planned])


@operation
def lossless(settings):
    """
    Configure lossless RoCE on every compute RoCE netdev.

    + settings: the host's validated ``HostSettings`` (qos_*, ecn_*, dcqcn_params)

    Uses ``mlnx_qos`` and the ecn/ sysfs tree on MLNX_OFED, iproute2 ``dcb``
    and debugfs ``cc_params`` on upstream kernels; reads the state first
    and writes only what differs. Refuses the interface that carries SSH or
    the default route unless ``qos_allow_ssh_interface``. Buffers are checked
    against mlx5's xoff formula before anything is written.

    **Example:**

    .. code:: python

        qos.lossless(name="Configure lossless RoCE", settings=settings)
    """
    facts = fact_cache.get(host, RdmaDevices)
    netdevs = roce_netdevs(facts, settings)
    if not netdevs:
        host.log("no RoCE compute netdev: QoS skipped")
        return
    refused = _guard(netdevs, facts.get("node", {}), settings)
    if refused:
        yield from fail(refused)
        return
    state = fact_cache.get(host, QosState, interfaces=list(netdevs))["interfaces"]
    wanted = settings.qos_wanted()
    commands, problems, notes = [], [], {}
    for iface, info in netdevs.items():
        current = state.get(iface, {})
        problems += [f"{iface}: {e}" for e in current.get("errors", [])]
        problems += [f"{iface}: {p}" for p in qos.buffer_problems(wanted, current, info["rate_gbps"], current.get("mtu") or 4200)]
        cmds, iface_notes = qos.plan_interface(iface, current.get("backend", "none"), wanted, current)
        for note in iface_notes:
            notes.setdefault(note, []).append(iface)
        commands += cmds
    for note, ifaces in notes.items():
        host.log(f"{', '.join(ifaces)}: {note}")
    if problems:
        yield from fail("QoS not changed: " + "; ".join(problems))
        return
    for argv in commands:
        yield _cmd(argv)
    if settings.qos_credit_threshold is not None:
        devices = facts["devices"]
        for info in netdevs.values():
            for dev, num in info["ports"]:
                have = devices[dev]["ports"][num].get("credit_threshold")
                path = f"{IB_ROOT}/{dev}/ports/{num}/credit_threshold"
                if have is None:
                    host.log(f"{dev} port {num}: credit_threshold is unsupported on this driver "
                             f"(no {path}); not created")
                elif have != str(settings.qos_credit_threshold):
                    yield write_sysfs(path, str(settings.qos_credit_threshold))


@operation
def headroom(settings):
    """
    Read OFED's xoff/xon thresholds back and check each lossless buffer's
    headroom (size - xoff) against ``qos_min_headroom``. Read-only.

    **Example:**

    .. code:: python

        qos.headroom(name="Check PFC headroom", settings=settings)
    """
    if settings.qos_min_headroom is None:
        return
    netdevs = roce_netdevs(fact_cache.get(host, RdmaDevices), settings)
    if not netdevs:
        return
    state = fact_cache.get(host, QosState, interfaces=list(netdevs))["interfaces"]
    problems = []
    for iface in netdevs:
        current = state.get(iface, {})
        if current.get("ofed_buffers") is None:
            host.log(f"{iface}: the driver does not expose xoff/xon (OFED qos/buffer_size); headroom not checked")
            continue
        lossless_set = qos.lossless_buffers(tuple(current.get("pfc") or (0,) * 8),
                                            tuple(current.get("prio2buffer") or (0,) * 8))
        problems += [f"{iface}: {p}" for p in
                     qos.headroom_problems(current["ofed_buffers"], lossless_set, settings.qos_min_headroom)]
    if problems:
        yield from fail("PFC headroom: " + "; ".join(problems))


def render_boot(settings, facts: dict, netdevs: dict, qos_state: dict) -> tuple[str, str]:
    commands = []
    if settings.qos_enable:
        wanted = settings.qos_wanted()
        for iface in netdevs:
            current = qos_state.get(iface, {})
            cmds, _ = qos.plan_interface(iface, current.get("backend", "none"), wanted, current, force=True)
            commands += [qos.shell_line(c) for c in cmds]
    roce_ports = [(dev, num) for dev, data in facts.get("devices", {}).items()
                  for num, p in sorted(data["ports"].items()) if p["link_layer"] == "Ethernet"]
    all_ports = [f"{dev}/ports/{num}" for info in netdevs.values() for dev, num in info["ports"]]
    script = render("ccrhost-boot.sh.j2",
        modules=[shlex.quote(m) for m in settings.rdma_modules], wait_seconds=120, ports=all_ports,
        roce_ports=roce_ports, roce_mode=settings.roce_mode, tos=settings.roce_tos, commands=commands)
    unit = render("ccrhost-boot.service.j2", script=BOOT_SCRIPT, wait_seconds=120)
    return script, unit


@operation
def persist(settings):
    """
    Install the boot-time oneshot unit and its script that re-apply the
    modules, rdma_cm defaults and QoS settings after every boot; enable it
    with systemctl where systemd runs.

    **Example:**

    .. code:: python

        qos.persist(name="Install the boot unit", settings=settings)
    """
    facts = fact_cache.get(host, RdmaDevices)
    netdevs = roce_netdevs(facts, settings)
    qos_facts = fact_cache.get(host, QosState, interfaces=list(netdevs))
    script, unit = render_boot(settings, facts, netdevs, qos_facts["interfaces"])
    files = fact_cache.get(host, FileStates, paths=[BOOT_SCRIPT, UNIT_PATH])
    # the script's first line must stay the shebang
    body = script.split("\n", 1)
    yield from converge(BOOT_SCRIPT, body[0] + "\n" + MANAGED_HEADER + body[1], files.get(BOOT_SCRIPT), mode="755")
    yield from converge(UNIT_PATH, MANAGED_HEADER + unit, files.get(UNIT_PATH))
    if qos_facts["systemd"] and not qos_facts["unit_enabled"]:
        yield StringCommand("systemctl daemon-reload && systemctl enable", UNIT)
    elif not qos_facts["systemd"]:
        host.log(f"systemd is not running: {UNIT} installed, not enabled; run {BOOT_SCRIPT} at boot")
