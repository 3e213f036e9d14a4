"""The lab's fabric: one leaf switch per rail, each a network namespace
running a real ``lldpd`` (Debian's package) that announces the switch's
name and each port's name, as Cumulus Linux and SONiC do (``configure lldp
portidsubtype ifname``). Every compute NIC of a node is a veth named like
its netdev, cabled to port ``swp<node index>`` of its rail's leaf, and the
node runs its own ``lldpd``, so ``lldpctl -f json`` on the node reads real
neighbours (issue 48).

Faults change the cabling as a technician would: :func:`swap` moves two
cables between leaves, :func:`silence` stops a leaf port's LLDP (the
neighbour is gone; the link stays up), :func:`stop_lldpd` ends the node's
daemon. A reboot starts the node's lldpd again, as an enabled service.

An InfiniBand port's neighbour comes from subnet management packets,
which no namespace can carry: its cable is kept in the lab's state, and the
node's ``smpquery`` and ``sminfo`` (shims/smpquery) answer from it, the
subnet manager's programming of each port (its P_Key table, ``sm_lid``)
written into the node's /sys. :func:`drop_pkey` and :func:`second_sm` are
the InfiniBand faults.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from ccrhost.lab.procs import NODE_CLOCK
from ccrhost.lab.state import LabError, LabState, Node

LLDPD = "/usr/sbin/lldpd"
LLDPCLI = "/usr/sbin/lldpcli"
TX_INTERVAL = 1  # seconds between a leaf's LLDP frames: a rebooted node learns its neighbours at once
TX_HOLD = 2  # a frame holds TX_INTERVAL * TX_HOLD + 1 s: a swapped cable's old neighbour is gone in 3 s
DESCRIPTION = "ccrhost lab leaf switch"


def leaf_name(rail: int) -> str:
    """The switch's LLDP SysName: ``leaf-r<rail>`` (a plan's ``leaf: leaf-r0``)."""
    return f"leaf-r{rail}"


def leaf_netns(state: LabState, rail: int) -> str:
    # the lab's prefix, so `Lab.down` removes it with the nodes' namespaces
    return f"ccr{state.name}-leaf{rail}"


def port_name(node: Node) -> str:
    return f"swp{node.index}"


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise LabError(f"{' '.join(cmd)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def preflight() -> None:
    for tool in (LLDPD, LLDPCLI):
        if not Path(tool).exists():
            raise LabError(f"{tool} is missing: the lab's switches run Debian's lldpd (apt-get install lldpd)")


SITE_PKEY = "0x8001"  # the lab site's partition, full member (pkeys/1; pkeys/0 is the default 0xffff)
SM_LID = 1            # the lab subnet manager's LID, and a second one's (second_sm)
SM_GUID = "0x0002c90300a00001"
SM_PRIORITY = 14
FABRIC_FILE = "run/ccrhost-lab/fabric.json"  # under the node's root: what its smpquery and sminfo answer from


def nics(lab, node: Node) -> list[tuple[str, str, str]]:
    """The node's compute NICs in rail order (its profile's): (RDMA device, netdev, link layer)."""
    import json

    from ccrhost.lab.profile import Profile

    profile = Profile(**json.loads((lab.node_dir(node) / "profile.json").read_text())["profile"])
    return [(n.name, n.netdev, profile.nic_settings(n).link_layer) for n in profile.nics if n.netdev]


def netdevs(lab, node: Node) -> list[str]:
    """The node's compute NICs' netdevs, in rail order (its profile's order)."""
    return [netdev for _, netdev, _ in nics(lab, node)]


def leaf_mac(state: LabState, rail: int) -> str:
    """The leaf's LLDP chassis id, fixed as a switch's base MAC is (not its first port's, which a recabling moves)."""
    return f"02:1f:{state.subnet:02x}:{rail:02x}:00:00"


def leaf_guid(state: LabState, rail: int) -> str:
    """The leaf's node GUID (an InfiniBand plan's ``leaf_guids``)."""
    return f"0x0002c903{state.subnet:02x}{rail:02x}0000"


def start(lab, state: LabState) -> None:
    """Boot the leaves, cable every node's NICs to them and start each node's lldpd."""
    preflight()
    state.wiring = {"cables": {}, "ib": {}}
    # a leaf namespace (and its lldpd) for each rail an Ethernet NIC is on
    for rail in sorted({r for n in state.nodes for r, (_, _, layer) in enumerate(nics(lab, n))
                        if layer != "InfiniBand"}):
        _start_leaf(lab, state, rail)
    for node in state.nodes:
        taken = _run("ip", "-n", node.netns, "-o", "link", "show").stdout
        cables = {}
        for rail, (device, dev, layer) in enumerate(nics(lab, node)):
            if layer == "InfiniBand":  # no frame crosses: the cable is the lab's record (leaf, port number)
                cables[dev] = [rail, str(node.index)]
                state.wiring["ib"].setdefault(node.name, {})[dev] = {"device": device, "pkey": SITE_PKEY,
                                                                     "sm_lid": SM_LID}
                continue
            if f": {dev}:" in taken or f": {dev}@" in taken:
                raise LabError(f"{node.name}: {dev} is already a link (a fault that runs SSH or a route over it); "
                               "the lab's switches cable every compute NIC")
            cables[dev] = _plug(state, node, dev, rail, rail)
        state.wiring["cables"][node.name] = cables
        node_up(lab, state, node)
    lab.save(state)


def _plug(state: LabState, node: Node, dev: str, nic: int, rail: int) -> list:
    """A cable from the node's NIC ``dev`` (its ``nic``-th) to port swp<node index> of ``rail``'s leaf."""
    ns = leaf_netns(state, rail)
    _run("ip", "link", "add", dev, "netns", node.netns, "address", _mac(2, state, node, nic),
         "type", "veth", "peer", "name", port_name(node), "netns", ns, "address", _mac(3, state, node, nic))
    _run("ip", "-n", node.netns, "link", "set", dev, "up")
    _run("ip", "-n", ns, "link", "set", port_name(node), "up")
    return [rail, port_name(node)]


def _mac(kind: int, state: LabState, node: Node, rail: int) -> str:
    # fixed per lab, node and rail: a leaf's chassis id (its first port's MAC) is the same on every run
    return f"02:{kind:02x}:{state.subnet:02x}:{rail:02x}:{node.index >> 8:02x}:{node.index & 0xff:02x}"


def _start_leaf(lab, state: LabState, rail: int) -> None:
    ns = leaf_netns(state, rail)
    folder = lab.dir / "switches" / ns
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "lldpd.conf"
    # read by lldpd through lldpcli before its first frame (lldpd waits for the configuration)
    conf.write_text(f"configure system hostname {leaf_name(rail)}\n"
                    f"configure system chassisid {leaf_mac(state, rail)}\n"
                    f"configure system description \"{DESCRIPTION}\"\n"
                    "configure lldp portidsubtype ifname\n"
                    f"configure lldp tx-interval {TX_INTERVAL}\n"
                    f"configure lldp tx-hold {TX_HOLD}\n")
    _run("ip", "netns", "add", ns)
    _run("ip", "-n", ns, "link", "set", "lo", "up")
    script = ("mount -t tmpfs -o mode=0755 lab-run /run && mkdir -p /run/lldpd && "
              f"{LLDPD} -O {conf} -I 'swp*' && exec sleep infinity")
    subprocess.Popen(["ip", "netns", "exec", ns, "unshare", "--mount", "--uts", "--propagation", "private",
                      "/bin/sh", "-c", f"hostname {leaf_name(rail)} && {script}"],
                     stdin=subprocess.DEVNULL, stdout=open(folder / "lldpd.log", "w"), stderr=subprocess.STDOUT,
                     start_new_session=True)


def _on_node(node: Node, script: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run("nsenter", "-t", str(node.holder_pid), "-m", "-n", "-u", *NODE_CLOCK, "--", "/bin/sh", "-c", script,
                check=check)


def node_up(lab, state: LabState, node: Node) -> None:
    """At the node's boot: what the subnet manager programs into its InfiniBand
    ports, and its lldpd."""
    write_ib(lab, state, node)
    start_node_lldpd(lab, node)


def start_node_lldpd(lab, node: Node) -> None:
    """The node's lldpd, as its enabled service starts at boot (the Debian package's defaults)."""
    _on_node(node, f"lldpctl >/dev/null 2>&1 || {{ mkdir -p /run/lldpd && {LLDPD}; }}")


def write_ib(lab, state: LabState, node: Node) -> None:
    """The node's InfiniBand cables (its smpquery's and sminfo's answers) and
    each port's P_Key table and SM LID, as the subnet manager set them."""
    import json

    ports = {}
    for dev, port in (state.wiring["ib"].get(node.name) or {}).items():
        rail, number = state.wiring["cables"][node.name][dev]
        ports[f"{port['device']}/1"] = {
            "leaf": leaf_name(rail), "guid": leaf_guid(state, rail), "port": int(number),
            "sm": {"lid": port["sm_lid"], "priority": SM_PRIORITY,
                   "guid": SM_GUID if port["sm_lid"] == SM_LID else f"0x0002c90300a0{port['sm_lid']:04x}"}}
        folder = lab.root(node) / "sys" / "class" / "infiniband" / port["device"] / "ports" / "1"
        (folder / "pkeys").mkdir(exist_ok=True)
        (folder / "pkeys" / "0").write_text("0xffff\n")
        (folder / "pkeys" / "1").write_text(f"{port['pkey'] or '0x0000'}\n")
        (folder / "sm_lid").write_text(f"0x{port['sm_lid']:x}\n")
    path = lab.root(node) / FABRIC_FILE
    path.write_text(json.dumps({"ports": ports}))


def _ib_port(state: LabState, name: str, dev: str) -> dict:
    try:
        return state.wiring["ib"][name][dev]
    except (TypeError, KeyError):
        raise LabError(f"{name} has no InfiniBand NIC {dev!r} cabled (lab up --wiring with an InfiniBand profile?)") \
            from None


def drop_pkey(lab, name: str, dev: str) -> None:
    """The subnet manager leaves the site's P_Key out of the port's table (a partition config without the node)."""
    state = lab.load()
    _ib_port(state, name, dev)["pkey"] = None
    lab.save(state)
    write_ib(lab, state, lab.node(name))


def second_sm(lab, name: str, dev: str, lid: int = SM_LID + 1) -> None:
    """The port is swept by another master subnet manager (a second SM on the fabric, at ``lid``)."""
    state = lab.load()
    _ib_port(state, name, dev)["sm_lid"] = lid
    lab.save(state)
    write_ib(lab, state, lab.node(name))


def stop_lldpd(lab, name: str) -> None:
    """End the node's lldpd (``systemctl stop lldpd``): lldpctl then fails to reach it."""
    node = lab.node(name)
    _on_node(node, "kill $(cat /run/lldpd.pid) 2>/dev/null; while [ -S /run/lldpd.socket ]; do sleep 0.05; done")


def _leaf_of(state: LabState, node: Node, dev: str) -> tuple[int, str]:
    try:
        rail, port = state.wiring["cables"][node.name][dev]
    except (TypeError, KeyError):
        raise LabError(f"{node.name} has no cabled NIC {dev!r} (lab up with the switches?)") from None
    return rail, port


def swap(lab, name: str, dev_a: str, dev_b: str) -> None:
    """Swap two of the node's cables at the leaves: ``dev_a`` now reaches
    ``dev_b``'s leaf and port, and the other way round."""
    state = lab.load()
    node = lab.node(name)
    (rail_a, _), (rail_b, _) = _leaf_of(state, node, dev_a), _leaf_of(state, node, dev_b)
    ib = state.wiring["ib"].get(name) or {}
    if dev_a in ib or dev_b in ib:
        if not (dev_a in ib and dev_b in ib):
            raise LabError(f"{name}: {dev_a} and {dev_b} are not both InfiniBand (or both Ethernet)")
        cables = state.wiring["cables"][name]
        cables[dev_a], cables[dev_b] = cables[dev_b], cables[dev_a]
        lab.save(state)
        write_ib(lab, state, node)
        return
    # unplugged and plugged again (a veth's end moved between namespaces and renamed
    # keeps a leaf's lldpd sending on the link it knew before)
    for dev in (dev_a, dev_b):
        _run("ip", "-n", node.netns, "link", "del", dev)
    devs = netdevs(lab, node)
    cables = state.wiring["cables"][name]
    cables[dev_a] = _plug(state, node, dev_a, devs.index(dev_a), rail_b)
    cables[dev_b] = _plug(state, node, dev_b, devs.index(dev_b), rail_a)
    lab.save(state)


def silence(lab, name: str, dev: str) -> None:
    """The leaf port of the node's ``dev`` stops sending LLDP (rx-only): the
    node's lldpd forgets that neighbour when its last frame's TTL runs out."""
    state = lab.load()
    node = lab.node(name)
    rail, port = _leaf_of(state, node, dev)
    _leaf_cli(state, rail, f"configure ports {port} lldp status rx-only")
    state.wiring.setdefault("silenced", []).append([rail, port])
    lab.save(state)


def unsilence(lab, name: str, dev: str) -> None:
    """The leaf port of the node's ``dev`` sends LLDP again."""
    state = lab.load()
    rail, port = _leaf_of(state, lab.node(name), dev)
    _leaf_cli(state, rail, f"configure ports {port} lldp status rx-and-tx")
    state.wiring["silenced"] = [x for x in state.wiring.get("silenced", []) if x != [rail, port]]
    lab.save(state)


def _leaf_cli(state: LabState, rail: int, command: str) -> None:
    pid = _leaf_holder(state, rail)
    _run("nsenter", "-t", str(pid), "-m", "-n", "-u", "--", LLDPCLI, *command.split())


def _leaf_holder(state: LabState, rail: int) -> int:
    """The leaf's ``sleep infinity`` (its mount namespace holds lldpd's socket)."""
    for pid in _run("ip", "netns", "pids", leaf_netns(state, rail)).stdout.split():
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "sleep":
                return int(pid)
        except OSError:
            continue
    raise LabError(f"leaf {leaf_name(rail)} is not running")


def neighbours(lab, name: str) -> str:
    """``lldpctl -f json`` as the node's root sees it (for waiting in tests)."""
    return _on_node(lab.node(name), "lldpctl -f json", check=False).stdout


def wait_learned(lab, names: list[str], timeout: float = 20) -> None:
    """Until every named node's lldpd knows, on each cabled NIC, the one
    neighbour its cable reaches (none behind a silenced port), as the wiring
    probe's own parser reads ``lldpctl -f json``."""
    from ccrhost.probes.wiring import WiringFormatError, parse_lldp_json

    state = lab.load()
    deadline = time.monotonic() + timeout
    while True:
        missing = []
        for name in names:
            try:
                seen = parse_lldp_json(neighbours(lab, name))
            except WiringFormatError:  # lldpd not answering yet
                seen = {}
            for dev, (rail, port) in state.wiring["cables"][name].items():
                if dev in (state.wiring.get("ib") or {}).get(name, {}):
                    continue  # no LLDP on InfiniBand
                wanted = [] if _silenced(state, rail, port) else [(leaf_name(rail), port)]
                if [(n.name, n.port) for n in seen.get(dev, [])] != wanted:
                    missing.append(f"{name}:{dev}")
        if not missing:
            return
        if time.monotonic() > deadline:
            raise LabError(f"LLDP neighbours not learned within {timeout:g} s: {', '.join(missing)}")
        time.sleep(0.2)


def _silenced(state: LabState, rail: int, port: str) -> bool:
    return [rail, port] in (state.wiring or {}).get("silenced", [])
