"""The lab: emulated nodes, each in its own network and mount namespace,
reached over a real sshd.

Layout of a lab folder (default /var/lib/ccrhost/lab):

    lab.json            what is running: nodes, addresses, pids
    client_key[.pub]    the key pyinfra logs in with
    known_hosts         every node's host key, so checking stays strict
    shims/              tools that stand in for hardware tools, first on PATH
    nodes/<node>/       per node: sshd config and host key, boot/ flags,
                        image/sys (the rendered /sys), etc/, usrlib/ and
                        usrlocal/ overlay layers, varlib/ (its /var/lib/ccrhost)
                        (these survive a lab reboot)
"""

from __future__ import annotations

import ipaddress
import json
import marshal
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import asdict
from importlib import resources
from pathlib import Path

from ccrhost.lab import boot as lab_boot
from ccrhost.lab import slurm as lab_slurm
from ccrhost.lab.boot import LINK_BURST_KB, shim_python
from ccrhost.lab.boot import write_node_record as _write_node_record
from ccrhost.lab import rack as lab_rack
from ccrhost.lab import reach as lab_reach
from ccrhost.lab import switches as lab_switches
from ccrhost.lab.profile import (
    FABRIC_PREFIX,
    FAULT_KINDS,
    LIVE_KINDS,
    Fault,
    ProfileError,
    fabric_ipv4,
    link_files,
    load_profile,
    parse_fault,
    ssh_over,
    upper_name,
)
from ccrhost.lab.procs import NODE_CLOCK, boot_clock
from ccrhost.lab.procs import alive as _alive
from ccrhost.lab.procs import descendants as _descendants
from ccrhost.lab.procs import kill as _kill
from ccrhost.lab.state import LabError, LabState, Node, lab_dir, load_state

SSHD = "/usr/sbin/sshd"
SFTP_SERVERS = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server", "/usr/lib/ssh/sftp-server")
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,5}$")
MAX_NODES = 256
NODES_PER_24 = 245  # 198.18.<subnet>.11 to .255; more take the next /24 too


# Shims a check or deploy runs many times: served by each node's labsysfsd
# (shims/labtools.py) so that a call costs no interpreter start.
BOOT_CLEARS = ("xid", "gpu_fell_off")  # faults a power cycle ends (Lab.reboot)
SERVED_SHIMS = ("ethtool", "nvidia-smi", "journalctl", "dmesg", "setpci", "mlnx_qos", "dcb")


def _run(*cmd: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, input=input)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def preflight() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, mounts, sshd)")
    missing = [tool for tool in ("ip", "unshare", "nsenter", "ssh-keygen") if not shutil.which(tool)]
    if not os.path.exists(SSHD):
        missing.append(SSHD + " (package openssh-server)")
    if not any(os.path.exists(p) for p in SFTP_SERVERS):
        missing.append("sftp-server (package openssh-sftp-server)")
    if missing:
        raise LabError("missing: " + ", ".join(missing))



class Lab:
    def __init__(self, directory: Path | str | None = None):
        self.dir = Path(directory) if directory else lab_dir()

    # -- state -----------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.dir / "lab.json"

    def load(self) -> LabState | None:
        return load_state(self.state_file)

    def save(self, state: LabState) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2))
        tmp.replace(self.state_file)

    def node_dir(self, node: Node | str) -> Path:
        return self.dir / "nodes" / (node if isinstance(node, str) else node.name)

    def _locate(self, name: str) -> tuple[LabState, Node]:
        """The lab's state and the named node in it (to change and save)."""
        state = self.load()
        if state is None:
            raise LabError(f"no lab is running in {self.dir}")
        for node in state.nodes:
            if node.name == name:
                return state, node
        raise LabError(f"no node {name!r} in the lab; nodes: {', '.join(n.name for n in state.nodes)}")

    def node(self, name: str) -> Node:
        return self._locate(name)[1]

    def root(self, node: Node | str) -> Path:
        """The node's filesystem as the node sees it (its mount namespace)."""
        if isinstance(node, str):
            node = self.node(node)
        if not _alive(node.holder_pid):
            raise LabError(f"node {node.name} is not running")
        return Path(f"/proc/{node.holder_pid}/root")

    # -- lifecycle -------------------------------------------------------
    def up(self, nodes: int, profile: str, faults: dict[str, list[Fault]] | None = None,
           name: str = "lab", subnet: int = 0, profiles: dict[str, str] | None = None,
           link_mbit: int = 200, slurm: bool = False,
           healthcheck_interval: int = lab_slurm.HEALTHCHECK_INTERVAL, wiring: bool = False) -> LabState:
        """Start ``nodes`` emulated nodes, with ``wiring`` their leaf switches
        (ccrhost.lab.switches), and with ``slurm`` a Slurm cluster over them.
        A running lab of the same shape is reused."""
        preflight()
        if slurm:
            lab_slurm.preflight()
        if wiring:
            lab_switches.preflight()
        faults = faults or {}
        profiles = profiles or {}
        if not NAME_RE.match(name):
            raise LabError(f"lab name {name!r}: use 1-6 lowercase letters or digits, starting with a letter")
        if not 1 <= nodes <= MAX_NODES:
            raise LabError(f"--nodes {nodes}: allowed 1..{MAX_NODES}")
        if not 10 <= link_mbit <= 10000:
            raise LabError(f"link rate {link_mbit} Mbit/s: allowed 10..10000")
        if not 0 <= subnet <= 255:
            raise LabError(f"subnet {subnet}: allowed 0..255 (198.18.<subnet>.0/24)")
        prefix = 24 if nodes <= NODES_PER_24 else 23
        if prefix == 23 and subnet % 2:
            raise LabError(f"--nodes {nodes} with subnet {subnet}: more than {NODES_PER_24} nodes take "
                           f"198.18.<subnet>.0/23, so the subnet must be even")
        names = [f"node{i}" for i in range(1, nodes + 1)]
        for node_name in list(faults) + list(profiles):
            if node_name not in names:
                raise LabError(f"fault or profile for {node_name!r}: the lab has nodes node1..node{nodes}")
        addresses = {n: str(ipaddress.IPv4Address(f"198.18.{subnet}.0") + 10 + i) for i, n in enumerate(names, 1)}
        cut = {n: lab_reach.targets(n, faults.get(n, []), addresses) for n in names}  # refused before anything
        # Load every profile before touching anything, so a bad one changes nothing.
        loaded = {p: load_profile(p) for p in {profile, *profiles.values()}}

        existing = self.load()
        if existing is not None:
            wanted = [(n, profiles.get(n, profile), [str(f) for f in faults.get(n, [])]) for n in names]
            have = [(n.name, n.profile, n.faults) for n in existing.nodes]
            if (have == wanted and all(_alive(n.sshd_pid) for n in existing.nodes)
                    and bool(existing.slurm) == slurm and bool(existing.wiring) == wiring):
                return existing
            raise LabError(
                f"a lab is already running in {self.dir} ({len(existing.nodes)} nodes); "
                "run `ccrhost lab down` first"
            )

        self.dir.mkdir(parents=True, exist_ok=True)
        self._install_shims()
        key = self.dir / "client_key"
        if not key.exists():
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ccrhost-lab", "-f", str(key))
        state = LabState(name, subnet, [], link_mbit, prefix=prefix)
        self.save(state)
        # A profile that names its GUIDs, GIDs or GPU UUIDs (a capture) gives
        # them as is to the first node booted from it, shifted to each later one.
        offsets = identity_offsets([profiles.get(n, profile) for n in names])
        try:
            self._bridge(state)
            for i, node_name in enumerate(names, start=1):
                node = Node(
                    name=node_name, index=i, address=str(ipaddress.IPv4Address(f"198.18.{subnet}.0") + 10 + i),
                    netns=f"ccr{name}-{node_name}", profile=profiles.get(node_name, profile),
                    faults=[str(f) for f in faults.get(node_name, [])],
                )
                state.nodes.append(node)
                self.save(state)
                self._create_node(state, node, loaded[node.profile], faults.get(node_name, []), offsets[i - 1])
                self.save(state)
            for node in state.nodes:
                lab_reach.apply(node.netns, set(), cut[node.name])
            self._write_known_hosts(state)
            lab_rack.write(self, state)  # the NVLink rack's trays, for their IMEX daemons' view
            for node in state.nodes:
                self._wait_ssh(node)
            if wiring:
                lab_switches.start(self, state)
            if slurm:
                lab_slurm.start(self, state, interval=healthcheck_interval)
        except BaseException:
            self.down()
            raise
        return state

    def _install_shims(self) -> None:
        target = self.dir / "shims"
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        source = resources.files("ccrhost.lab") / "shims"
        client = (source / "labtool-client").read_text()
        for entry in source.iterdir():
            if entry.name.startswith((".", "__")) or entry.name == "labtool-client":
                continue
            text = entry.read_text()
            if text.startswith("#!/usr/bin/env python3"):
                # -I -S: standard library only, no site-packages scan and no
                # environment, about 1.5 ms of every shim run
                text = f"#!{shim_python()} -IS" + text[len("#!/usr/bin/env python3"):]
            name = entry.name
            if name in SERVED_SHIMS:  # the Python shim beside its client, which takes the tool's name
                (target / f"{name}.py").write_text(text)
                (target / f"{name}.py").chmod(0o755)
                text = client
            text = text.replace("@SHIM_PYTHON@", shim_python())  # shell shims that hand over to Python
            path = target / name
            path.write_text(text)
            path.chmod(0o755 if text.startswith("#!") else 0o644)
        # Byte-compiled now: the nodes see the shims read-only, and a shim
        # that recompiled its helper modules on every run (the PCI probe runs
        # setpci some fifty times) would cost the lab more than the tool does.
        _run(shim_python(), "-m", "compileall", "-q", str(target))
        init = self.dir / "node-init.sh"
        init.write_text((resources.files("ccrhost.lab") / "node-init.sh").read_text())
        init.chmod(0o755)

    def _bridge(self, state: LabState) -> None:
        br = state.bridge
        if _run("ip", "link", "show", br, check=False).returncode != 0:
            _run("ip", "link", "add", br, "type", "bridge")
        _run("ip", "addr", "replace", f"{state.gateway}/{state.prefix}", "dev", br)
        _run("ip", "link", "set", br, "up")

    def _create_node(self, state: LabState, node: Node, profile, faults: list[Fault], offset: int = 0) -> None:
        ndir = self.node_dir(node)
        if ndir.exists():
            shutil.rmtree(ndir)
        for sub in ("etc/upper", "etc/work", "usrlib/upper", "usrlib/work", "usrlocal/upper", "usrlocal/work",
                    "varlib", "boot", "ssh"):
            (ndir / sub).mkdir(parents=True)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", node.name,
             "-f", str(ndir / "ssh" / "ssh_host_ed25519_key"))
        sftp = next(p for p in SFTP_SERVERS if os.path.exists(p))
        (ndir / "sshd_config").write_text(
            f"ListenAddress {node.address}\n"
            f"HostKey {ndir}/ssh/ssh_host_ed25519_key\n"
            f"AuthorizedKeysFile {self.dir}/client_key.pub\n"
            "PidFile /run/sshd.pid\n"
            "PermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\nUseDNS no\nStrictModes no\n"
            "MaxStartups 200\nMaxSessions 64\n"
            "LogLevel ERROR\n"
            f"Subsystem sftp {sftp}\n"
            # every remote command is logged in the node's /run/ccrhost-lab/commands.log
            f"ForceCommand {self.dir / 'shims' / 'count-command'}\n"
        )
        (ndir / "profile.json").write_text(json.dumps(
            {"profile": profile.model_dump(), "faults": [str(f) for f in faults], "index": node.index,
             "identity_offset": offset}))

        host_if = f"ccr{state.name}{node.index}h"
        mgmt = profile.nics[0].netdev if any(f.kind == "ssh_on_fabric" for f in faults) else "eth0"
        stacked = ssh_over(faults, profile)
        if stacked and stacked[0] in ("vlan", "bond"):
            # this kernel may lack 8021q and bonding: the link carries the
            # stacked device's name, and the node's /sys its lower_/upper_ links
            mgmt = upper_name(*stacked)
        elif stacked:
            mgmt = stacked[1]  # a real bridge or macvlan on a link named like the RoCE netdev
        _run("ip", "netns", "add", node.netns)
        node.mgmt = mgmt
        # A fixed MAC per lab and node: the node's link-local address is the
        # same on every boot, so two runs of a lab read the same.
        mac = f"02:cc:{state.subnet:02x}:{len(state.name):02x}:{node.index >> 8:02x}:{node.index & 0xff:02x}"
        _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", mgmt, "address", mac, "netns", node.netns)
        _run("ip", "link", "set", host_if, "master", state.bridge, "up")
        _run("ip", "-n", node.netns, "link", "set", "lo", "up")
        _run("ip", "-n", node.netns, "link", "set", mgmt, "up")
        carrier = mgmt
        if stacked and stacked[0] == "bridge":
            carrier = upper_name(*stacked)
            _run("ip", "-n", node.netns, "link", "add", carrier, "type", "bridge")
            _run("ip", "-n", node.netns, "link", "set", mgmt, "master", carrier)
            _run("ip", "-n", node.netns, "link", "set", carrier, "up")
        elif stacked and stacked[0] == "macvlan":
            carrier = upper_name(*stacked)
            _run("ip", "-n", node.netns, "link", "add", "link", mgmt, "name", carrier, "type", "macvlan",
                 "mode", "bridge")
            _run("ip", "-n", node.netns, "link", "set", carrier, "up")
        _run("ip", "-n", node.netns, "addr", "add", f"{node.address}/{state.prefix}", "dev", carrier)
        _run("ip", "-n", node.netns, "route", "add", "default", "via", state.gateway)
        for value in [f.value for f in faults if f.kind == "route_multipath"]:
            self._multipath(state, node, profile, value, carrier)
        self._shape(state, node, self.link_mbit(state, faults), mgmt)
        self.boot(node)

    @staticmethod
    def _shape(state: LabState, node: Node, rate: int, mgmt: str | None = None) -> None:
        """Both directions shaped, so bandwidth tests move real traffic at a known rate."""
        if mgmt is None:
            mgmt = node.mgmt
        for prefix, dev in (((), f"ccr{state.name}{node.index}h"), (("ip", "netns", "exec", node.netns), mgmt)):
            _run(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{rate}mbit",
                 "burst", f"{LINK_BURST_KB}kb", "latency", "100ms")

    @staticmethod
    def _multipath(state: LabState, node: Node, profile, dev: str | None, carrier: str) -> None:
        """The route_multipath fault: a real link named like a RoCE netdev, on
        the fabric subnet, and a default route with a nexthop through it."""
        netdevs = [n.netdev for n in profile.nics]
        dev = dev or netdevs[1]
        if dev not in netdevs:
            raise ProfileError(f"fault route_multipath={dev}: no netdev {dev!r} in {profile.name}")
        nic = netdevs.index(dev)
        ns = ("ip", "-n", node.netns)
        _run(*ns, "link", "add", dev, "type", "veth", "peer", "name", f"ccrmp{nic}")
        for link in (dev, f"ccrmp{nic}"):
            _run(*ns, "link", "set", link, "up")
        _run(*ns, "addr", "add", f"{fabric_ipv4(node.index, nic)}/{FABRIC_PREFIX}", "dev", dev)
        gateway = str(ipaddress.IPv4Address(fabric_ipv4(0, nic)) + (1 << (32 - FABRIC_PREFIX)) - 2)
        _run(*ns, "route", "replace", "default", "nexthop", "via", state.gateway, "dev", carrier,
             "nexthop", "via", gateway, "dev", dev)

    @staticmethod
    def link_mbit(state: LabState, faults: list[Fault]) -> int:
        slow = [f.value for f in faults if f.kind == "link_slow"]
        if slow and not (slow[0] or "").isdigit():
            raise ProfileError(f"fault link_slow={slow[0]}: give a rate in Mbit/s")
        return int(slow[0]) if slow else state.link_mbit

    def _prepare_boot(self, node: Node) -> None:
        """Render the node's hardware as it looks right after power-on (lab/boot.py)."""
        lab_boot.prepare(self, node)

    def garble(self, name: str, tool: str, find: str, replace: str) -> None:
        """Corrupt a running node's tool output from now until its next boot:
        ``find`` in TOOL's output (mlnx_qos, dcb-app, dcb-pfc, dcb-buffer,
        nvidia-smi) becomes ``replace``; an empty ``find`` replaces it all."""
        path = self.root(name) / "run/ccrhost-lab/garble.json"
        rules = json.loads(path.read_text()) if path.exists() else []
        path.write_text(json.dumps(rules + [{"tool": tool, "find": find, "replace": replace}]))

    def boot(self, node: Node) -> None:
        """Power the node on: fresh /sys from its profile, then sshd."""
        self._prepare_boot(node)
        ndir = self.node_dir(node)
        log = open(ndir / "init.log", "w")
        holder = subprocess.Popen(
            ["ip", "netns", "exec", node.netns, "unshare", "--mount", "--uts", *boot_clock(), "--propagation",
             "private", "/bin/sh", str(self.dir / "node-init.sh"), str(ndir), (ndir / "boot" / "shims").read_text()],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )
        node.holder_pid = holder.pid
        deadline = time.monotonic() + 20
        while not (ndir / "boot" / "ready").exists():
            if holder.poll() is not None or time.monotonic() > deadline:
                raise LabError(f"{node.name} did not boot: {(ndir / 'init.log').read_text().strip()}")
            time.sleep(0.02)
        self.start_sshd(node)

    def start_sshd(self, node: Node) -> None:
        ndir = self.node_dir(node)
        log = open(ndir / "sshd.log", "a")
        sshd = subprocess.Popen(
            ["nsenter", "-t", str(node.holder_pid), "-m", "-n", "-u", *NODE_CLOCK, "--", SSHD, "-D", "-e",
             "-f", str(ndir / "sshd_config")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )
        node.sshd_pid = sshd.pid

    def _wait_ssh(self, node: Node, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((node.address, 22), timeout=1) as sock:
                    if sock.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            if not _alive(node.sshd_pid) or time.monotonic() > deadline:
                log = (self.node_dir(node) / "sshd.log").read_text().strip()
                raise LabError(f"{node.name}: sshd did not come up on {node.address}:22: {log}")
            time.sleep(0.05)

    def _write_known_hosts(self, state: LabState) -> None:
        lines = []
        for node in state.nodes:
            key = (self.node_dir(node) / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
            lines.append(f"{node.address} {key[0]} {key[1]}\n")
        (self.dir / "known_hosts").write_text("".join(lines))

    def _stop_node(self, node: Node) -> None:
        """Kill every process of the node: sshd, slurmd, their sessions and jobs, the holder."""
        pids = _run("ip", "netns", "pids", node.netns, check=False).stdout.split()
        for pid in [*map(int, pids), node.sshd_pid, node.slurmd_pid, node.holder_pid]:
            _kill(pid)
        deadline = time.monotonic() + 5
        while (any(_alive(p) for p in (node.sshd_pid, node.slurmd_pid, node.holder_pid))
               and time.monotonic() < deadline):
            time.sleep(0.02)
        node.sshd_pid = node.slurmd_pid = node.holder_pid = None

    def reboot(self, name: str) -> Node:
        """Power-cycle one node: volatile settings (/sys, configfs) go back to
        the profile's defaults; its disk (/etc) keeps what was written. One
        reboot at a time (the lab slurmd's RebootProgram may ask for several
        at once): each rewrites the lab's state."""
        import fcntl

        with open(self.dir / "reboot.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._reboot(name)

    def _reboot(self, name: str) -> Node:
        state, node = self._locate(name)
        # what a power cycle clears: the kernel log starts again (journalctl -k is this boot's), so
        # the XIDs logged before are gone, and a GPU that fell off the bus is found again at boot
        ndir = self.node_dir(node)
        saved = json.loads((ndir / "profile.json").read_text())  # what boot renders the hardware from
        saved["faults"] = [f for f in saved["faults"] if f.partition("=")[0] not in BOOT_CLEARS]
        (ndir / "profile.json").write_text(json.dumps(saved))
        node.faults = saved["faults"]
        self._stop_node(node)
        self.boot(node)
        self.save(state)
        self._wait_ssh(node)
        if state.wiring:  # the SM programs its ports again, and lldpd (an enabled service) starts
            lab_switches.node_up(self, state, node)
        if state.slurm:
            lab_slurm.start_slurmd(self, state, node)
            self.save(state)
        return node

    def kill_sshd(self, name: str) -> None:
        """Cut a node off: its sshd and every SSH session die (a test fault)."""
        state, node = self._locate(name)
        for pid in [node.sshd_pid, *_descendants(node.sshd_pid)]:
            _kill(pid)
        node.sshd_pid = None
        self.save(state)

    def restart_sshd(self, name: str) -> None:
        state, node = self._locate(name)
        self.start_sshd(node)
        self.save(state)
        self._wait_ssh(node)

    def down(self, name: str | None = None) -> list[str]:
        """Remove everything the lab created. Safe to run twice and after a crash.
        ``name``: also the namespaces and links of a lab of that name whose
        state file is gone (a lab started elsewhere under the same name, or
        one whose folder was removed before it was taken down)."""
        removed = []
        state = self.load()
        if state is not None and state.slurm:
            lab_slurm.stop(self, state)
        nodes = state.nodes if state else []
        names = {n.netns for n in nodes}
        lab_names = {state.name} if state else set()
        if name:
            lab_names.add(name)
        listed = _run("ip", "netns", "list", check=False).stdout.split("\n") if lab_names else []
        for lab_name in lab_names:
            names |= {line.split()[0] for line in listed if line.startswith(f"ccr{lab_name}-")}
        for node in nodes:
            self._stop_node(node)
        for netns in sorted(names):
            for pid in _run("ip", "netns", "pids", netns, check=False).stdout.split():
                _kill(int(pid))
            if _run("ip", "netns", "del", netns, check=False).returncode == 0:
                removed.append(netns)
        if state:
            for node in nodes:
                _run("ip", "link", "del", f"ccr{state.name}{node.index}h", check=False)
        if lab_names:
            links = _run("ip", "-o", "link", "show", check=False).stdout.split("\n")
            for lab_name in sorted(lab_names):
                # host ends of the node links (ccr<name><i>h) first, then the bridge
                for line in links:
                    dev = line.split(":")[1].strip().split("@")[0] if line.count(":") >= 2 else ""
                    if re.fullmatch(f"ccr{lab_name}[0-9]+h", dev):
                        _run("ip", "link", "del", dev, check=False)
                bridge = f"ccr{lab_name}br"
                if _run("ip", "link", "del", bridge, check=False).returncode == 0:
                    removed.append(bridge)
        if self.dir.exists() and (self.state_file.exists() or (self.dir / "shims").exists()):
            shutil.rmtree(self.dir)
            removed.append(str(self.dir))
        return removed

    def dcb_state(self, name: str, netdev: str) -> dict | None:
        """The emulated driver's DCB state of a node's netdev (trust is "dscp"
        while DSCP app entries exist), as the lab's mlnx_qos and dcb keep it
        (shims/labkernel.py ``dcb_path``); None until a tool first set it,
        or when it cannot be read."""
        try:
            return marshal.loads((self.node_dir(name) / "kernel" / "dcb" / f"{netdev}.marshal").read_bytes())
        except (OSError, ValueError, EOFError):
            return None

    def remote_commands(self, name: str) -> int:
        """How many commands the node's sshd has run since boot."""
        try:
            text = (self.root(name) / "run/ccrhost-lab/commands.log").read_text()
        except FileNotFoundError:
            return 0
        return sum(1 for line in text.splitlines() if line.strip())

    def sshd_cpu_seconds(self, name: str) -> float:
        """CPU used by the node's sshd and the sessions it has reaped."""
        node = self.node(name)
        try:
            with open(f"/proc/{node.sshd_pid}/stat") as f:
                fields = f.read().rsplit(") ", 1)[1].split()
        except (OSError, TypeError):
            return 0.0
        utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
        return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")

    def status(self) -> list[dict]:
        state = self.load()
        if state is None:
            return []
        return [
            {"node": n.name, "address": n.address, "profile": n.profile, "faults": n.faults,
             "sshd": "up" if _alive(n.sshd_pid) else "down",
             **({"slurmd": "up" if _alive(n.slurmd_pid) else "down"} if state.slurm else {})}
            for n in state.nodes
        ]

    # -- live faults -----------------------------------------------------
    def fault(self, name: str, spec: str) -> list[str]:
        """Inject ``KIND[=VALUE]`` into the running node; return its faults."""
        _, fault = parse_fault(f"{name}:{spec}")
        state, node = self._locate(name)
        kept = [f for f in self._faults(node) if not _same_target(f, fault)]
        faults = self._set_faults(state, node, kept + [fault])
        # the fault is back, even one a GPU reset cleared before (nvidia-smi -r): it failed again
        reset = self.root(node) / "run/ccrhost-lab/gpu_reset"
        if reset.exists():
            reset.write_text("".join(f"{line}\n" for line in reset.read_text().split() if line != str(fault)))
        return faults

    def clear(self, name: str, spec: str) -> list[str]:
        """Remove ``KIND`` (every value) or exactly ``KIND=VALUE`` from the running node."""
        kind, eq, value = spec.partition("=")
        if kind not in FAULT_KINDS:
            raise ProfileError(f"unknown fault {kind!r}; known: {', '.join(FAULT_KINDS)}")
        state, node = self._locate(name)
        current = self._faults(node)
        kept = [f for f in current if f.kind != kind or (eq and f.value != value)]
        if len(kept) == len(current):
            raise LabError(f"{name} has no fault {spec}; its faults: {', '.join(map(str, current)) or 'none'}")
        return self._set_faults(state, node, kept)

    def _faults(self, node: Node) -> list[Fault]:
        return [parse_fault(f"{node.name}:{f}")[1] for f in node.faults]

    def _set_faults(self, state: LabState, node: Node, faults: list[Fault]) -> list[str]:
        """Rewrite the running node's emulated hardware for ``faults``, the
        way boot renders it: link files in its /sys, the GPU and link faults
        nvidia-smi and ib_write_bw read, its lab link's shaping, its unreachable routes."""
        from ccrhost.lab.profile import Profile

        for f in faults:
            if f.kind not in LIVE_KINDS and str(f) not in node.faults:
                raise LabError(f"fault {f} can only be set at `ccrhost lab up`; live: {', '.join(LIVE_KINDS)}")
        addresses = {n.name: n.address for n in state.nodes}
        cut = lab_reach.targets(node.name, faults, addresses)  # validated before anything changes
        ndir = self.node_dir(node)
        saved = json.loads((ndir / "profile.json").read_text())
        profile = Profile(**saved["profile"])
        files = link_files(profile, faults)  # validates every value before anything changes
        rate = self.link_mbit(state, faults)
        root = self.root(node)
        for rel, content in files.items():
            path = root / "sys" / rel
            if path.exists() and path.read_text() != content:
                path.write_text(content)
        names = [str(f) for f in faults]
        if {str(f) for f in faults if f.kind == "global_pause"} != {f for f in node.faults
                                                                   if f.split("=")[0] == "global_pause"}:
            # as if the port were reset: the netdevs' pause goes back to its power-on state
            shutil.rmtree(ndir / "kernel" / "ethtool", ignore_errors=True)
        info = json.loads((ndir / "node.json").read_text())
        info["faults"] = names
        for folder in (ndir, root / "run/ccrhost-lab"):
            _write_node_record(folder, info)
        if rate != self.link_mbit(state, self._faults(node)):
            self._shape(state, node, rate)
        lab_reach.apply(node.netns, lab_reach.targets(node.name, self._faults(node), addresses), cut)
        saved["faults"] = names
        (ndir / "profile.json").write_text(json.dumps(saved))  # a reboot keeps them, as hardware would
        node.faults = names
        self.save(state)
        return names


def _same_target(a: Fault, b: Fault) -> bool:
    """Whether fault ``b`` replaces ``a``: the same kind on the same device."""
    if a.kind != b.kind:
        return False
    if a.kind in ("port_rate", "pcie_width", "gid_index", "gemm_throttle"):
        return (a.value or "").split(":")[0] == (b.value or "").split(":")[0]
    return a.kind in ("link_slow", "group_slow") or a.value == b.value  # one rate, one K per node


def identity_offsets(profiles: list[str]) -> list[int]:
    """Each node's position among the nodes booted from the same profile."""
    seen: dict[str, int] = {}
    out = []
    for name in profiles:
        out.append(seen.get(name, 0))
        seen[name] = out[-1] + 1
    return out


def parse_faults(specs: list[str]) -> dict[str, list[Fault]]:
    faults: dict[str, list[Fault]] = {}
    for spec in specs:
        node, fault = parse_fault(spec)
        faults.setdefault(node, []).append(fault)
    return faults


__all__ = ["Lab", "LabError", "ProfileError", "parse_faults", "lab_dir"]
