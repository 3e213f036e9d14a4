"""Running GPU work on a node: what an active test (all-reduce, DCGM diag,
ib_write_bw, GPUDirect bandwidth) or a disruptive tuning step (MTU, PFC,
ACS, a module load) would disturb. Pure: the gather is
``ccrhost.facts.busy.GpuWork`` (over SSH) and ``ccrhost.node.busy`` (on the node).

The source is ``nvidia-smi --query-compute-apps=pid,process_name,used_memory
--format=csv,noheader``: one line per compute process holding a GPU, nothing
when none does. On a Slurm node also the jobs Slurm runs there (``squeue -h -w
NODE -t CONFIGURING,RUNNING,SUSPENDED,COMPLETING``, but the job asking): a job
between its GPU phases holds no GPU process and is still busy. A node whose
processes or jobs cannot be read is not known to be idle, so it is treated as
busy: a test skipped for nothing costs a rerun, one run under a job costs the job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.model.status import UNKNOWN, Reason

QUERY = ("nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader")
# reason codes (literals at their Reason, for tests/test_reasons.py's scan): node_busy, GPU work is
# running; node_busy_unreadable, whether it runs could not be read. Either way the test was not run.
BUSY, UNREADABLE = "node_busy", "node_busy_unreadable"


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    memory: str  # as nvidia-smi prints it ("1024 MiB", "[N/A]")


# The jobs Slurm runs on NODE (a suspended or completing one may still hold the GPUs' memory).
SLURM_STATES = "CONFIGURING,RUNNING,SUSPENDED,COMPLETING"


def slurm_query(node: str) -> tuple[str, ...]:
    return ("squeue", "-h", "-w", node, "-t", SLURM_STATES, "-o", "%i|%j|%u|%T")


@dataclass(frozen=True)
class SlurmJob:
    id: str
    name: str
    user: str
    state: str


@dataclass
class GpuWork:
    processes: list[GpuProcess] = field(default_factory=list)
    error: str | None = None  # the processes (or the node's Slurm jobs) could not be read
    jobs: list[SlurmJob] = field(default_factory=list)  # the Slurm jobs on the node (not the one asking)

    @property
    def idle(self) -> bool:
        return self.error is None and not self.processes and not self.jobs

    def describe(self) -> str:
        """``pid 4242 python3 (1024 MiB), ...; Slurm job 17 train (alice, RUNNING)``: the first few of
        each, and how many more."""
        def few(items: list[str]) -> str:
            return ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")

        procs = [f"pid {p.pid} {p.name} ({p.memory})" for p in self.processes]
        jobs = [f"Slurm job {j.id} {j.name} ({j.user}, {j.state})" for j in self.jobs]
        return "; ".join(few(x) for x in (procs, jobs) if x)

    def with_slurm(self, slurm: GpuWork) -> GpuWork:
        """This GPU reading joined with the node's Slurm jobs (``parse_squeue``)."""
        errors = [e for e in (self.error, slurm.error) if e]
        return GpuWork(self.processes, "; ".join(errors) or None, slurm.jobs)


def parse_compute_apps(rc: int | None, text: str) -> GpuWork:
    """The reading from the query's exit status and output. Any line that is
    not ``PID, NAME, MEMORY`` makes the whole reading unreadable: a half-read
    list would call a busy node idle."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if rc is None:
        return GpuWork(error="nvidia-smi did not answer before its deadline")
    if rc != 0:
        return GpuWork(error=f"nvidia-smi exit {rc}: {lines[0] if lines else 'no output'}")
    processes = []
    for line in lines:
        pid, _, rest = line.partition(",")
        name, _, memory = rest.strip().rpartition(",")
        if not pid.strip().isdigit() or not name.strip():
            return GpuWork(error=f"nvidia-smi printed {line[:120]!r}, not PID, NAME, MEMORY")
        processes.append(GpuProcess(int(pid), name.strip(), memory.strip()))
    return GpuWork(processes)


def parse_squeue(rc: int | None, text: str, own: frozenset[str] = frozenset()) -> GpuWork:
    """The node's Slurm jobs from :func:`slurm_query`'s exit status and output, but the ``own`` job ids
    (the job that asks: its step or prolog runs the test). A line that is not ``ID|NAME|USER|STATE``
    makes the reading unreadable, as for the GPU processes."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if rc is None:
        return GpuWork(error="squeue did not answer before its deadline")
    if rc != 0:
        return GpuWork(error=f"squeue exit {rc}: {lines[0] if lines else 'no output'}")
    jobs = []
    for line in lines:
        parts = line.split("|")  # a job's name may hold '|': the id first, the user and state last
        job = SlurmJob(parts[0].strip(), "|".join(parts[1:-2]), parts[-2].strip(), parts[-1].strip()) \
            if len(parts) >= 4 else None
        if job is None or not job.id or not job.state.isalpha():
            return GpuWork(error=f"squeue printed {line[:120]!r}, not ID|NAME|USER|STATE")
        if job.id not in own:
            jobs.append(job)
    return GpuWork(jobs=jobs)


@dataclass
class SkippedTests:
    """The active tests not run on a node for its GPU work: judged as a proof-missing UNKNOWN."""
    work: GpuWork
    tests: list[str]


def check_skipped(skipped: SkippedTests | None) -> list[Reason]:
    """The verdict's reason for tests skipped on a busy node (none when nothing was skipped)."""
    if skipped is None:
        return []
    reason = busy_reason(skipped.work, " and ".join(skipped.tests) or "the active tests", "verify_active_when_busy")
    return [reason] if reason is not None else []


def busy_reason(work: GpuWork, what: str, setting: str) -> Reason | None:
    """The proof-missing UNKNOWN for ``what`` (the tests not run) on a node
    that is not idle, naming the ``setting`` that runs them anyway; None
    when the node is idle."""
    if work.idle:
        return None
    if work.error is not None and not (work.processes or work.jobs):
        return Reason(UNKNOWN, "node_busy_unreadable", f"{what} not run: cannot tell whether GPU work is running "
                                           f"({work.error}); set {setting}: true to run it anyway")
    return Reason(UNKNOWN, "node_busy", f"{what} not run: {_running(work)} ({work.describe()}); "
                                 f"drain the node first, or set {setting}: true to run it anyway")


def _running(work: GpuWork) -> str:
    return "GPU work is running" if work.processes else "a Slurm job is running on the node"



def skip_message(work: GpuWork, stages: list[str], setting: str) -> str | None:
    """The tuning deploy's line for a host whose disruptive ``stages`` it
    skips (None: idle, or nothing disruptive planned)."""
    if work.idle or not stages:
        return None
    why = f"cannot tell whether GPU work is running ({work.error})" if work.error and not (
        work.processes or work.jobs) else \
        f"{_running(work)} ({work.describe()})"
    return (f"skipped the disruptive stages {', '.join(stages)}: {why}; drain the node and rerun, "
            f"or set {setting}: true")
