"""The lab's Slurm cluster: munged and slurmctld on this machine, and a
slurmd inside every lab node, registered under the node's lab name.

Each slurmd runs in its node's own network, mount and UTS namespaces, as
the node's sshd does, so the prolog, the health check and job steps see
that node's emulated hardware (its /sys, the shims on PATH, its /etc).
The node gets ccrhost's Slurm integration in its /etc, rendered by the
same function deploys/slurm.py uses; the controller reads the fragment
from the lab folder, since /etc/slurm on this machine is not the lab's.

Layout under ``<lab>/slurm/``: ``etc/`` (slurm.conf, ccrhost.conf,
munge.key), ``munge/``, ``ctld/`` (state, log) and ``nodes/<node>/``
(spool, pid, log). What was verified to work, and why each setting is
there: ../shared/reference/slurm-lab.md.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

from ccrhost.lab.inventory import LAB_PLATFORM
from ccrhost.lab.procs import NODE_CLOCK
from ccrhost.lab.procs import alive as _alive
from ccrhost.lab.procs import descendants as _descendants
from ccrhost.lab.procs import kill as _kill
from ccrhost.lab.state import LabError, LabState, Node


class Lab(Protocol):
    """What the cluster needs of the lab that starts it (ccrhost.lab.fleet.Lab):
    its folder, a node's filesystem, saving its state. A protocol, so this
    module never imports the fleet, which imports it."""

    dir: Path

    def root(self, node: Node | str) -> Path: ...

    def save(self, state: LabState) -> None: ...

# Not Slurm's defaults, so a site's own Slurm never answers; each lab
# subnet its own pair, so two labs' clusters (two test workers) run at once.
CTLD_PORT = 16817


def ports(state: LabState) -> tuple[int, int]:
    """(SlurmctldPort, SlurmdPort) of this lab's cluster."""
    ctld = CTLD_PORT + 2 * (state.subnet % 256)
    return ctld, ctld + 1


# seconds between a lab node's health checks: each costs ~0.3 CPU seconds (bench/suite-time.md)
HEALTHCHECK_INTERVAL = 5
TOOLS = ("munged", "slurmctld", "slurmd", "sinfo", "scontrol", "srun", "sbatch", "squeue", "scancel")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the node's /usr/local/sbin holds the shims


def preflight() -> None:
    missing = [tool for tool in TOOLS if not shutil.which(tool, path=os.environ.get("PATH", "") + ":" + PATH)]
    if missing:
        raise LabError(f"missing for --slurm: {', '.join(missing)} (packages slurmctld slurmd slurm-client munge)")


def folder(lab: Lab) -> Path:
    return lab.dir / "slurm"


def topology_path(lab: Lab) -> Path:
    """topology.conf, where slurmctld looks for it: beside slurm.conf."""
    return conf_path(lab).parent / "topology.conf"


def conf_path(lab: Lab) -> Path:
    return folder(lab) / "etc" / "slurm.conf"


def client_env(lab: Lab) -> dict:
    return {**os.environ, "SLURM_CONF": str(conf_path(lab))}


def run(lab: Lab, *args: str, timeout: float = 60, check: bool = False) -> subprocess.CompletedProcess:
    """A Slurm client command against the lab's cluster."""
    proc = subprocess.run(args, capture_output=True, text=True, env=client_env(lab), timeout=timeout)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def ccrhost_command() -> str:
    """The controller's own ccrhost, which the nodes can run (the lab parks an install under /tmp)."""
    path = os.path.join(os.path.dirname(sys.executable), "ccrhost")
    if not os.access(path, os.X_OK):
        raise LabError(f"no ccrhost command next to {sys.executable}: install ccrhost (pip install -e .)")
    return path


def integration_data(lab: Lab, interval: int) -> dict:
    """Inventory data for deploys/slurm.py that gives exactly the lab's install.

    The health check runs on idle nodes only, so a job that holds a node
    (the prolog tests, ``slurm verify`` in an allocation) sees a fault
    before the health check does.
    """
    from ccrhost.lab.host_health import lab_memlock_kib

    memlock = lab_memlock_kib()
    return {
        **({"host_health_memlock_kib": memlock} if memlock is not None else {}),  # what the machine can give
        "verify_profile": LAB_PLATFORM,
        "slurm_ccrhost": ccrhost_command(),
        "slurm_conf": str(conf_path(lab)),
        "slurm_healthcheck_interval": interval,
        "slurm_healthcheck_node_state": "IDLE",
    }


def render_conf(lab: Lab, state: LabState) -> str:
    s = folder(lab)
    cpus = 2 if (os.cpu_count() or 1) >= 2 else 1  # at most the machine's: more would drain every node
    nodes = "".join(f"NodeName={n.name} NodeAddr={n.address} CPUs={cpus} RealMemory=100 State=UNKNOWN\n"
                    for n in state.nodes)
    ctld_port, slurmd_port = ports(state)
    # a lab with leaf switches (lab/switches.py) schedules by topology/tree: topology.conf beside
    # slurm.conf (topology.conf(5)), re-read on `scontrol reconfigure`
    topology = "TopologyPlugin=topology/tree\n" if state.wiring else ""
    return f"""\
ClusterName=ccr{state.name}
SlurmctldHost=localhost({state.gateway})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={s}/munge/munge.sock,cred_expire=10
StateSaveLocation={s}/ctld/state
SlurmctldPidFile={s}/ctld/slurmctld.pid
SlurmctldLogFile={s}/ctld/slurmctld.log
SlurmctldDebug=info
SlurmdSpoolDir={s}/nodes/%n/spool
SlurmdPidFile={s}/nodes/%n/slurmd.pid
SlurmdLogFile={s}/nodes/%n/slurmd.log
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=nohold_on_prolog_fail,bf_interval=1
# the prolog runs on every node when the job is allocated, not at its first step there
PrologFlags=Alloc
ReturnToService=2
SlurmdTimeout=30
SlurmctldTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=60
RebootProgram={s}/etc/reboot.sh
{topology}Include {s}/etc/ccrhost.conf
{nodes}PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def reboot_program(lab: Lab) -> str:
    """slurmd's RebootProgram: the node cannot power itself off, so it asks
    the lab's BMC (``ccrhost.lab.bmc``) to power-cycle it."""
    nodes = folder(lab) / "nodes"
    return ("#!/bin/sh\n# the lab's RebootProgram (ccrhost/lab/slurm.py reboot_program): ask the lab's BMC\n"
            f": > {nodes}/\"$(/bin/hostname)\"/reboot.request\n")


def install_integration(lab: Lab, node: Node, files: list[tuple[str, str, str]]) -> None:
    """Write the integration into the node's /etc, as the deploy would."""
    root = lab.root(node)
    for path, content, mode in files:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        os.chown(target, 0, 0)
        target.chmod(int(mode, 8))


def start(lab: Lab, state: LabState, interval: int = HEALTHCHECK_INTERVAL, timeout: float = 30) -> None:
    from ccrhost.model.slurm import integration_files
    from ccrhost.settings import validate_host

    s = folder(lab)
    for sub in ("etc", "munge", "ctld/state"):
        (s / sub).mkdir(parents=True, exist_ok=True)
    data = integration_data(lab, interval)
    files = integration_files(validate_host("lab", data))
    fragment = next(content for path, content, _ in files if path.endswith(".conf"))
    (s / "etc" / "ccrhost.conf").write_text(fragment)
    conf_path(lab).write_text(render_conf(lab, state))
    if state.wiring:  # the hand-kept file a site starts from: every node under one switch
        topology_path(lab).write_text(f"SwitchName=lab Nodes={','.join(n.name for n in state.nodes)}\n")
    reboot = s / "etc" / "reboot.sh"
    reboot.write_text(reboot_program(lab))
    reboot.chmod(0o755)
    key = s / "etc" / "munge.key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(1024))
    state.slurm = {"interval": interval, "data": data, "munged_pid": None, "slurmctld_pid": None}
    lab.save(state)

    m = s / "munge"
    munged = subprocess.run(["munged", f"--key-file={key}", f"--socket={m}/munge.sock", f"--pid-file={m}/munged.pid",
                             f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"],
                            capture_output=True, text=True)  # daemonises once its socket is ready
    if munged.returncode != 0:  # e.g. a folder above the lab that others cannot enter
        raise LabError(f"munged: {munged.stderr.strip() or munged.stdout.strip()}")
    state.slurm["munged_pid"] = int((m / "munged.pid").read_text().split()[0])
    lab.save(state)
    log = open(s / "ctld" / "stdout", "w")
    ctld = subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf_path(lab))], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=log, env=client_env(lab), start_new_session=True)
    state.slurm["slurmctld_pid"] = ctld.pid
    lab.save(state)
    bmc_log = open(s / "ctld" / "bmc.log", "a")
    bmc = subprocess.Popen([sys.executable, "-m", "ccrhost.lab.bmc", str(lab.dir)], stdin=subprocess.DEVNULL,
                           stdout=bmc_log, stderr=bmc_log, start_new_session=True)
    state.slurm["bmc_pid"] = bmc.pid
    lab.save(state)
    for node in state.nodes:
        install_integration(lab, node, files)
        start_slurmd(lab, state, node)
    lab.save(state)
    wait_idle(lab, state, [n.name for n in state.nodes], timeout)


def start_slurmd(lab: Lab, state: LabState, node: Node) -> None:
    """slurmd in the node's namespaces. The node's /sys is a tmpfs of its
    emulated hardware; slurmd 22.05 always initialises its cgroup plugin
    and needs a v1 layout there (no cgroup is ever created, with
    proctrack/linuxproc and task/none)."""
    ndir = folder(lab) / "nodes" / node.name
    (ndir / "spool").mkdir(parents=True, exist_ok=True)  # slurmd does not create it
    from ccrhost.lab.host_health import slurmd_memlock_kib

    # the emulated unit's LimitMEMLOCK (lab systemctl), which the prolog and jobs inherit; unlimited
    # only where the machine allows it (lab_memlock_kib)
    kib = slurmd_memlock_kib(node.faults)
    script = (
        f"ulimit -l {'unlimited' if kib is None else kib} 2>/dev/null; "
        "/bin/mountpoint -q /sys/fs/cgroup/systemd || { /bin/mkdir -p /sys/fs/cgroup && "
        "/bin/mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup && /bin/mkdir -p /sys/fs/cgroup/systemd && "
        "/bin/mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd; } && "
        'exec slurmd -D -f "$1" -N "$2"'
    )
    log = open(ndir / "stdout", "a")
    proc = subprocess.Popen(
        ["nsenter", "-t", str(node.holder_pid), "-m", "-n", "-u", *NODE_CLOCK, "--", "/bin/sh", "-c", script, "slurmd",
         str(conf_path(lab)), node.name],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, env={"PATH": PATH, "SLURM_CONF": str(conf_path(lab))},
        start_new_session=True,
    )
    node.slurmd_pid = proc.pid  # nsenter and sh exec, so this is slurmd


def node_states(lab: Lab) -> dict[str, tuple[str, str]]:
    """{node: (sinfo state, reason)}."""
    out = run(lab, "sinfo", "-h", "-N", "-o", "%N|%T|%E").stdout
    states = {}
    for line in out.splitlines():
        name, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        states[name] = (state, reason)
    return states


def wait_idle(lab: Lab, state: LabState, names: list[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        states = node_states(lab)
        if all(states.get(n, ("",))[0] == "idle" for n in names):
            return
        dead = [n.name for n in state.nodes if n.name in names and not _alive(n.slurmd_pid)]
        if dead or time.monotonic() > deadline:
            logs = []
            for name in dead or names:
                path = folder(lab) / "nodes" / name / "stdout"
                tail = path.read_text().strip().splitlines()[-3:] if path.exists() else []
                logs.append(f"{name}: {states.get(name)}: {' / '.join(tail)}")
            raise LabError("Slurm nodes not idle: " + "; ".join(logs))
        time.sleep(0.1)


def _terminate(pids: list[int | None], grace: float) -> None:
    """SIGTERM to all at once, then SIGKILL whatever outlives the grace:
    one after another, nine slurmd waited up to 18 s on a busy machine."""
    alive = [pid for pid in pids if _alive(pid)]
    children = [c for pid in alive for c in _descendants(pid)]  # slurmctld's slurmscriptd, before they are orphaned
    for pid in alive:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while any(_alive(pid) for pid in alive) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in [*alive, *children]:
        _kill(p)


def stop(lab: Lab, state: LabState) -> None:
    """Stop slurmd, slurmctld and munged by their recorded PIDs."""
    _terminate([node.slurmd_pid for node in state.nodes], 2)
    for node in state.nodes:
        node.slurmd_pid = None
    slurm = state.slurm or {}
    _terminate([slurm.get("bmc_pid")], 2)
    _terminate([slurm.get("slurmctld_pid")], 10)  # it saves its state first: more than 2 s
    _terminate([slurm.get("munged_pid")], 5)
    lab.save(state)
