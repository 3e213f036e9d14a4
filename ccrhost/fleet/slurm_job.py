"""The fleet job's allocation: its options, submitting it and waiting for
it to start, and :class:`Batches`: allocations of at most a cap of idle
nodes, one held at a time (``--nccl-max-nodes``, ``ccrhost slurm sweep``).

Below the commands that hold nodes (ccrhost.fleet.slurm_verify,
slurm_nccl, slurm_dcgm); it imports none of them.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

import click

from ccrhost.fleet.slurm_client import SlurmNode, list_nodes, run_slurm
from ccrhost.model.managed import CHECK_CONFIG


class VerifyError(click.ClickException):
    exit_code = 3  # the fleet could not be checked: UNKNOWN, never FAIL

    def show(self, file=None):
        click.echo(f"ccrhost slurm verify: {self.message}", err=True)


@dataclass
class VerifyOptions:
    partition: str | None = None
    nodelist: str | None = None
    measure: bool = False
    ccrhost: str = "/usr/local/bin/ccrhost"
    config: str = CHECK_CONFIG
    report_dir: str = "ccrhost-report"
    drain: bool = True
    fleet_tolerance: float | None = None
    measure_seconds: int = 10
    measure_retries: int = 2
    measure_timeout: int = 60
    measure_port: int = 18515
    measure_ports: int | None = None   # at most this many ports per node
    wait: float = 600                  # for the allocation
    check_timeout: float = 300
    sbatch_options: tuple[str, ...] = ()
    nccl: object = None                # a ccrhost.fleet.slurm_nccl.NcclOptions: run the all-reduce gate
    refresh_nic: bool = False  # --refresh-nic: the checks query the NICs' tools and store their readings
    dcgm: object = None                # a ccrhost.fleet.slurm_dcgm.DcgmOptions: run DCGM's diagnostics
    idle_only: bool = False            # ccrhost slurm sweep: only idle nodes, in capped batches, even without a gate
    max_nodes: int | None = None       # ccrhost slurm sweep: the cap on nodes held at once (else the gates' own)
    evidence_max_bytes: int = 32 << 20  # --evidence-max-mb: the cap on each evidence bundle fetched; 0: none fetched
    dry_run: bool = False              # --dry-run: the drains and resumes are said, not done
    include_busy: bool = False         # --include-busy: also ask for nodes running a job (wait for them)
    topology_conf: str | None = None   # --topology-conf: also write the fleet's topology.conf here (wiring on)
    topology_block: str | None = None  # --topology-block: also write the racks' topology/block file here (imex on)
    rack_nvlink: object = None         # --rack-nvlink: a slurm_nccl.NcclOptions: each NVLink rack's all-reduce


class Progress:
    """One line per event on stderr, each with the seconds since the start."""

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        self.stream.write(f"[{time.monotonic() - self.start:6.1f}s] {message}\n")
        self.stream.flush()


class NodesLost(Exception):
    """Nodes of the job drained or went down while it waited: most often its
    own prolog (``ccrhost check``) failed there, and Slurm would keep the job
    pending until ``--wait`` ran out."""

    def __init__(self, nodes: dict[str, SlurmNode]):
        super().__init__(", ".join(nodes))
        self.nodes = nodes


def sbatch_args(nodes: list[str], opts: VerifyOptions) -> list[str]:
    """The fleet job's sbatch: an exclusive job on exactly ``nodes`` that holds them until cancelled."""
    args = ["sbatch", "--parsable", "-J", "ccrhost-verify", "-N", str(len(nodes)), "-w", ",".join(nodes),
            "--exclusive", "-o", "/dev/null", "-e", "/dev/null", *opts.sbatch_options]
    if opts.partition:
        args += ["-p", opts.partition]
    return [*args, "--wrap", "exec sleep 86400"]


def submit(nodes: list[str], opts: VerifyOptions, say) -> str:
    job = run_slurm(*sbatch_args(nodes, opts)).stdout.strip().split(";")[0]
    say(f"submitted job {job} for {len(nodes)} nodes")
    deadline, last, next_look = time.monotonic() + opts.wait, None, time.monotonic()
    while True:
        out = run_slurm("squeue", "-h", "-j", job, "-o", "%T|%r", check=False).stdout.strip()
        if out != last:
            say(f"job {job}: {out.replace('|', ', reason ') or 'gone'}")
            last = out
        if out == "RUNNING|None":  # and every node's prolog has passed (PrologFlags=Alloc)
            return job
        if not out or out.split("|")[0] in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "COMPLETED"):
            raise VerifyError(f"job {job} ended before it started: {out or 'no longer in the queue'}")
        if out.startswith("PENDING") and time.monotonic() >= next_look:
            next_look = time.monotonic() + 1.0
            lost = {n: v for n, v in list_nodes(nodelist=",".join(nodes)).items() if n in nodes and not v.usable}
            if lost:
                run_slurm("scancel", job, check=False)
                say(f"job {job}: {', '.join(f'{n} {v.state} ({v.reason})' for n, v in sorted(lost.items()))}; "
                    "cancelled, the other nodes go on")
                raise NodesLost(lost)
        if time.monotonic() > deadline:
            run_slurm("scancel", job, check=False)
            raise VerifyError(f"job {job} did not start within {opts.wait:g} s ({out}); cancelled")
        time.sleep(0.3)


_ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "STOPPED")


def _release(job: str, nodes: list[str], say, timeout: float = 120) -> None:
    """Cancel the job and wait until Slurm has given its nodes back (no
    longer the job's, none completing), so the next batch never overlaps it."""
    run_slurm("scancel", job, check=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = run_slurm("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()
        if state not in _ACTIVE:
            now = list_nodes(nodelist=",".join(nodes)) if nodes else {}
            if not any("comp" in v.state for v in now.values()):
                return
        time.sleep(0.2)
    say(f"job {job}: still not released after {timeout:g} s")


class Batches:
    """Allocations of at most ``cap`` nodes, one at a time: each batch is
    its own exclusive job on the batch's nodes that are idle when it starts,
    released before the next (``--nccl-max-nodes``: the rest of the
    partition stays free for jobs). A node running another job is never
    allocated; inside an existing allocation (``job``) nothing new is held."""

    def __init__(self, opts: VerifyOptions, say, cap: int, job: str | None = None):
        self.opts, self.say, self.cap, self.job = opts, say, cap, job
        self.free_states = ("idle",)            # states a node may be taken in (acceptance: also reserved)
        self.lost: dict[str, SlurmNode] = {}   # drained or down while their job waited
        self.busy: dict[str, SlurmNode] = {}   # running another job when their batch came

    def chunks(self, names: list[str]) -> list[list[str]]:
        return [names[i:i + self.cap] for i in range(0, len(names), self.cap)]

    @contextmanager
    def hold(self, nodes: list[str]):
        """Yields ``(job, taken)``: the job and the nodes it holds (maybe fewer than asked, maybe none)."""
        if self.job:
            yield self.job, list(nodes)
            return
        now = list_nodes(nodelist=",".join(nodes)) if nodes else {}
        taken = [n for n in nodes if n in now and now[n].state in self.free_states]
        for n in nodes:
            if n not in taken and n in now:
                self.busy[n] = now[n]
        job = None
        try:
            while taken and not job:
                try:
                    job = submit(taken, self.opts, self.say)
                except NodesLost as lost:
                    self.lost.update(lost.nodes)
                    taken = [n for n in taken if n not in lost.nodes]
            yield job, taken
        finally:
            if job:
                _release(job, taken, self.say)


def batch_pairs(batches: Batches, pairs: list[tuple[str, str]]):
    """Each group of pairs that fits the cap, with its allocation held while the caller uses it."""
    per = max(1, batches.cap // 2)
    for i in range(0, len(pairs), per):
        group = pairs[i:i + per]
        with batches.hold(list(dict.fromkeys(n for p in group for n in p))) as (held, taken):
            yield group, (held, taken)


def run_pair_batches(batches: Batches, pairs: list[tuple[str, str]], run, not_run) -> list:
    """``pairs`` through the allocation's batches: in each, ``run(held job, [(k, pair)])`` takes the pairs
    (k: the pair's place in its group) whose two nodes the batch holds, and ``not_run(a, b, why)`` stands
    for each other pair (a node busy or lost). The results in the order returned."""
    out = []
    for group, (held, taken) in batch_pairs(batches, pairs):
        ok = [(k, p) for k, p in enumerate(group) if p[0] in taken and p[1] in taken]
        ran = {k for k, _ in ok}
        out += run(held, ok) if ok else []
        out += [not_run(a, b, busy_note(batches, a, b)) for k, (a, b) in enumerate(group) if k not in ran]
    return out


def round_line(what: str, number: int, pairs: list[tuple[str, str]], joiner: str) -> str:
    """A round's progress line: its number, how many pairs, the first few."""
    return (f"{what} round {number}: {len(pairs)} pair(s): " + ", ".join(f"{a}{joiner}{b}" for a, b in pairs[:4])
            + (" ..." if len(pairs) > 4 else ""))


def busy_note(batches: Batches, *nodes: str) -> str:
    why = [f"{n} {(batches.busy.get(n) or batches.lost.get(n)).state}" for n in nodes
           if n in batches.busy or n in batches.lost]
    return ", ".join(why) or "not allocated"
