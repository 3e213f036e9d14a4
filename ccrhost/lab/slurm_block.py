"""A real Slurm 24.11 slurmctld that loads a ``topology/block`` file (issue 49).

Debian bookworm's Slurm (22.05, the lab's cluster: lab/slurm.py) has no
``topology/block``; it came with 23.11. ``scripts/bootstrap`` builds, once, a
minimal Debian trixie root filesystem with ``slurmctld`` and ``slurm-client``
24.11 in :data:`ROOT`. :func:`load` starts that slurmctld in the chroot with
the given nodes and topology.conf, asks ``scontrol show topology`` what it
loaded, and stops it.

Everything runs inside one ``unshare`` of its own: a PID namespace (so
slurmctld dies with the script, even on a timeout: the script is its init and
``--kill-child`` kills it with unshare), a mount namespace (/proc, a tmpfs
/run and the run's /etc/slurm are mounted over the chroot's
there only, so the chroot itself is never written) and a network namespace
(nothing reaches a site's Slurm; one veth pair, since slurmctld's
``getaddrinfo(AI_ADDRCONFIG)`` finds no address with loopback alone and
retries for minutes). The nodes are ``State=FUTURE``: no slurmd is needed.
Authentication is ``auth/slurm`` with a fresh slurm.key: no munged.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ccrhost.fleet.slurm_client import hostlist
from ccrhost.lab.state import LabError

ROOT = Path("/var/lib/ccrhost-lab/slurm-trixie")  # scripts/bootstrap builds it
PORT = 16899  # in the run's own network namespace: never a site's
EXITED = "ccrhost-slurm-block: slurmctld exited"
TOPOLOGY = "ccrhost-slurm-block: topology"


@dataclass(frozen=True)
class Block:
    """One line of ``scontrol show topology`` (topology/block's print, 24.11):
    ``BlockName=b1 BlockIndex=0 Nodes=n[1-2] BlockSize=2`` (``AggregatedBlock=``
    for the blocks slurmctld builds from several)."""
    name: str
    index: int
    nodes: tuple[str, ...]
    size: int
    aggregated: bool = False


class Refused(LabError):
    """slurmctld would not start with the topology: its log says why."""


def unavailable() -> str | None:
    """Why the 24.11 slurmctld cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "needs root (namespaces, chroot)"
    for tool in ("usr/sbin/slurmctld", "usr/bin/scontrol"):
        if not (ROOT / tool).is_file():
            return f"no {ROOT / tool}: scripts/bootstrap builds the trixie Slurm 24.11 root filesystem"
    if not shutil.which("unshare"):
        return "no unshare (util-linux)"
    return None


def parse_topology(text: str) -> list[Block]:
    """The blocks of ``scontrol show topology``'s output."""
    out = []
    for line in text.splitlines():
        m = re.match(r"(BlockName|AggregatedBlock)=(\S+) BlockIndex=(\d+)(?: Nodes=(\S+))? BlockSize=(\d+)$",
                     line.strip())
        if m:
            kind, name, index, nodes, size = m.groups()
            out.append(Block(name, int(index), tuple(expand(nodes)) if nodes else (), int(size),
                             kind == "AggregatedBlock"))
    return out


def expand(expression: str) -> list[str]:
    """The names of a hostlist as slurmctld prints one (``node[1-2,6],gb07``): each name with at
    most one bracket group of numbers and ranges, zero-padded as written."""
    names = []
    for m in re.finditer(r"([^,\[\]]+)(?:\[([^\]]*)\])?([^,\[\]]*)", expression):
        prefix, ranges, suffix = m.groups()
        if ranges is None:
            names.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            first, _, last = part.partition("-")
            for n in range(int(first), int(last or first) + 1):
                names.append(f"{prefix}{n:0{len(first)}d}{suffix}")
    return names


def slurm_conf(nodes: list[str]) -> str:
    return f"""\
ClusterName=ccrblock
SlurmctldHost=ctld(10.254.0.1)
SlurmctldPort={PORT}
SlurmUser=root
AuthType=auth/slurm
CredType=cred/slurm
StateSaveLocation=/run/ccrhost/state
SlurmctldPidFile=/run/ccrhost/slurmctld.pid
SlurmctldLogFile=/run/ccrhost/slurmctld.log
SlurmctldDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SchedulerType=sched/builtin
TopologyPlugin=topology/block
NodeName={hostlist(nodes)} NodeAddr=10.254.0.2 CPUs=1 RealMemory=100 State=FUTURE
PartitionName=lab Nodes=ALL Default=YES State=UP
"""


# $1: the run's folder (etc/, stdout). Each scontrol is bounded: one that cannot reach
# slurmctld retries for seconds.
SCRIPT = f"""\
set -u
R={ROOT}
mount -t proc proc "$R/proc" && mount -t tmpfs -o mode=755 tmpfs "$R/run" && mkdir -p "$R/run/ccrhost/state" &&
mount --bind "$1/etc" "$R/etc/slurm" || exit 2
hostname ctld
ip link set lo up && ip link add ccr0 type veth peer name ccr1 && ip addr add 10.254.0.1/24 dev ccr0 &&
ip link set ccr1 up && ip link set ccr0 up || exit 2
chroot "$R" /usr/sbin/slurmctld -D -i >"$1/stdout" 2>&1 &
ctld=$!
while ! chroot "$R" timeout 3 scontrol ping >/dev/null 2>&1; do
    if ! kill -0 $ctld 2>/dev/null; then
        wait $ctld; echo "{EXITED} $?"; exit 3
    fi
    sleep 0.1
done
echo "{TOPOLOGY}"
chroot "$R" timeout 10 scontrol show topology
"""


def load(nodes: list[str], topology: str, timeout: float = 60) -> list[Block]:
    """The blocks slurmctld 24.11 loaded from ``topology`` (topology.conf's
    text) on a cluster of ``nodes``; :class:`Refused` (with its log) where
    it would not start; LabError where it cannot run here."""
    why = unavailable()
    if why:
        raise LabError(f"Slurm 24.11: {why}")
    work = Path(tempfile.mkdtemp(prefix="ccrhost-slurm-block-"))
    try:
        etc = work / "etc"
        etc.mkdir()
        (etc / "slurm.conf").write_text(slurm_conf(nodes))
        (etc / "topology.conf").write_text(topology)
        fd = os.open(etc / "slurm.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
        (work / "stdout").touch()
        try:  # a timeout kills unshare with SIGKILL, and --kill-child the namespace's init with it
            run = subprocess.run(["unshare", "--mount", "--net", "--pid", "--uts", "--propagation", "private",
                                  "--kill-child", "--", "/bin/sh", "-c", SCRIPT, "slurm-block", str(work)],
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise LabError(f"Slurm 24.11: no answer in {timeout:g} s: {_tail(work)}") from exc
        if EXITED in run.stdout:
            raise Refused(f"slurmctld 24.11 refused the topology: {_why(work)}")
        if run.returncode != 0 or TOPOLOGY not in run.stdout:
            raise LabError(f"Slurm 24.11: exit {run.returncode}: {run.stderr.strip()} {_tail(work)}")
        return parse_topology(run.stdout.split(TOPOLOGY, 1)[1])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _why(work: Path) -> str:
    """Its fatal line and the errors before it, without the first start's missing state files."""
    try:
        lines = (work / "stdout").read_text().splitlines()
    except OSError:
        return "(no log)"
    said = [line for line in lines if "fatal:" in line or ("error:" in line and "state" not in line)]
    return " / ".join(said[-3:]) or _tail(work)


def _tail(work: Path, lines: int = 6) -> str:
    try:
        text = (work / "stdout").read_text()
    except OSError:
        return "(no log)"
    return " / ".join(text.strip().splitlines()[-lines:]) or "(empty log)"
