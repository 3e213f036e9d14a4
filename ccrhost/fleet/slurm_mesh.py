"""Acceptance S2 as Slurm job steps: a full mesh of ib_write_lat pairs in
groups (fleet/mesh.py's rounds), each pair judged against the latency gate
(model/latency.py), then the nodes that failed too many pairs pruned.

Each round runs as two steps, as ib_write_bw's pairs do
(fleet/slurm_verify.slurm_round): every server of the round, then a second
later every client, one ib_write_lat per pair on the two nodes' first
compute RDMA devices. A pair passes when it connected and its p99 is within
the limit; it fails when it could not connect or gave no report (the
tool's own last words) or its p99 is high. A pair that could not run (no
perftest, no output from its step) is left out of the pruning and blames
the end that could not run it.

How a node is judged (the rule the brief left to us):
- pruned (fails at least ``prune`` of its pairs, mesh.prune): FAIL
  ``rdma_mesh_pruned`` naming the peers of its failed pairs;
- not pruned: every failed pair with a peer that was not pruned keeps its
  gate reason on both ends: FAIL ``rdma_latency_high`` (Imbue's gate is per
  pair: neither end of a slow pair has passed it), UNKNOWN
  ``rdma_latency_unreadable`` for a pair that did not connect (a broken
  pair between two nodes that pass their other pairs drains neither, and
  certifies neither). A failed pair with a pruned peer is blamed on that
  peer alone;
- a node none of whose pairs ran: UNKNOWN ``rdma_latency_unreadable``.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field

from ccrhost import numbers
from ccrhost.fleet import mesh
from ccrhost.fleet.slurm_client import run_steps
from ccrhost.fleet.slurm_job import Batches, round_line, run_pair_batches
from ccrhost.model.latency import IMBUE_SOURCE, LatencyReading, check_latency
from ccrhost.model.status import FAIL, UNKNOWN, Reason
from ccrhost.probes.perftest_lat import read_report
from ccrhost.probes.sections import split

MISSING = "if ! command -v ib_write_lat >/dev/null 2>&1; then echo '@@missing'; exit 0; fi; "
MISSING_ERROR = "ib_write_lat not found (install perftest)"


@dataclass
class MeshOptions:
    group: int = mesh.GROUP_SIZE          # accept_mesh_group
    prune: float = mesh.PRUNE_THRESHOLD   # accept_mesh_prune
    max_p99_us: float = 4.2               # accept_latency_max_p99_us (Imbue)
    port: int = 18700                     # ib_write_lat's -p, clear of ib_write_bw's 18515 and up
    timeout: int = 20                     # seconds each ib_write_lat may run, server and client
    iters: int = 1000                     # ib_write_lat's -n (perftest's default for latency tests)


@dataclass
class PairOutcome:
    server: str
    client: str
    state: str                            # "pass", "high", "failed" (no connection or report), "unread"
    #                                       (a report without p99), "not run" (an end could not run it)
    reading: LatencyReading | None = None
    reasons: list[Reason] = field(default_factory=list)  # the gate's reasons for the pair, or why it did not run
    blame: tuple[str, ...] = ()           # "not run": the end(s) that could not run it

    @property
    def passed(self) -> bool | None:
        """For the pruning: True passed, False failed, None not judged."""
        return {"pass": True, "high": False, "failed": False}.get(self.state)

    def to_dict(self) -> dict:
        r = self.reading
        return {"server": self.server, "client": self.client, "state": self.state,
                "p99_us": r.p99 if r else None, "typical_us": r.t_typical if r else None,
                "reasons": [x.message for x in self.reasons]}


@dataclass
class MeshOutcome:
    reasons: dict[str, list[Reason]]      # every node: [] passed the stage
    pairs: list[PairOutcome]              # every pair in round order, for the report
    rounds: int                           # rounds run
    pruned: list[mesh.Pruned] = field(default_factory=list)

    def status(self, node: str) -> str:
        levels = {r.level for r in self.reasons[node]}
        return FAIL if FAIL in levels else UNKNOWN if levels else "OK"


def _command(device: str, opts: MeshOptions, peer: str | None = None) -> str:
    args = ["ib_write_lat", "-d", device, "-p", str(opts.port), "-n", str(opts.iters), "-F", *([peer] if peer else [])]
    return f"timeout {int(opts.timeout)} " + " ".join(shlex.quote(a) for a in args)


def server_script(device: str, opts: MeshOptions) -> str:
    return f"{MISSING}{_command(device, opts)} </dev/null 2>&1; echo \"@@rc $?\""


def client_script(device: str, peer: str, opts: MeshOptions) -> str:
    return f"{MISSING}{_command(device, opts, peer)} </dev/null 2>&1; echo \"@@rc $?\""


def _side(lines: list[str] | None) -> tuple[str, int | None, str | None]:
    """(the tool's output, its exit code, why it did not run) of one end's step output."""
    if lines is None:
        return "", None, "no output from its job step"
    if "@@missing" in lines:
        return "", None, MISSING_ERROR
    text, rc = lines, None
    for section in split(lines):
        if section.tag == "rc":
            rc = numbers.integer(section.arg, -255, 255)
    if rc is not None:
        text = lines[:max(i for i, x in enumerate(lines) if x.startswith("@@rc"))]
    return "\n".join(text), rc, None


def _last(text: str) -> str | None:
    return next((x.strip() for x in reversed(text.splitlines()) if x.strip()), None)


def judge_pair(server: str, client: str, device: str, server_lines: list[str] | None,
               client_lines: list[str] | None, opts: MeshOptions, step_error: str = "") -> PairOutcome:
    """One pair from what its two ends' steps printed (None: the step gave
    nothing for that node; ``step_error``: what srun said)."""
    where = f"{client} {device} -> {server}"
    s_text, s_rc, s_why = _side(server_lines)
    c_text, c_rc, c_why = _side(client_lines)
    if c_why or s_why == MISSING_ERROR:  # an end could not run it: the pair says nothing of the link
        ends = [(n, w) for n, w in ((server, s_why), (client, c_why)) if w and (c_why or w == MISSING_ERROR)]
        whys = "; ".join(f"{n}: {w}{f' ({step_error})' if w.startswith('no output') and step_error else ''}"
                         for n, w in ends)
        return PairOutcome(server, client, "not run",
                           reasons=[Reason(UNKNOWN, "rdma_latency_unreadable",
                                           f"{where}: RDMA latency not read: {whys}", nic=device)],
                           blame=tuple(n for n, _ in ends))
    reading = read_report(c_text, pair=where, nic=device)
    if reading.error is not None and reading.p99 is None and reading.t_typical is None:
        # no report: the connection failed, or the tool ran out of time
        words = [f"client {client}: " + ("ib_write_lat timed out after "
                                         f"{opts.timeout} s" if c_rc == 124 and not _last(c_text)
                                         else reading.error)]
        if s_text.strip() and s_rc not in (0, None) and _last(s_text):
            words.append(f"server {server}: {_last(s_text)}")
        elif s_rc == 124:
            words.append(f"server {server}: no client connected within {opts.timeout} s")
        failed = LatencyReading(error="; ".join(words), pair=where, nic=device)
        return PairOutcome(server, client, "failed", failed, check_latency(failed, opts.max_p99_us, _source(opts)))
    reasons = check_latency(reading, opts.max_p99_us, _source(opts))
    if not reasons:
        return PairOutcome(server, client, "pass", reading)
    # a report without a 99% percentile (perftest before 4.4): connected, not judged
    return PairOutcome(server, client, "high" if reasons[0].level == FAIL else "unread", reading, reasons)


def _source(opts: MeshOptions) -> str:
    return IMBUE_SOURCE if opts.max_p99_us == 4.2 else "accept_latency_max_p99_us"


def outcome(nodes: list[str], pairs: list[PairOutcome], rounds: int, opts: MeshOptions) -> MeshOutcome:
    """Every node's reasons from its pairs (the rule in the module's docstring)."""
    place = {n: i for i, n in enumerate(nodes)}
    judged = sorted((p for p in pairs if p.passed is not None),  # node order: the pruned name their peers so
                    key=lambda p: sorted((place.get(p.server, 0), place.get(p.client, 0))))
    results = {(p.server, p.client): p.passed for p in judged}
    pruned = mesh.prune(results, opts.prune)
    gone = {p.node for p in pruned}
    reasons: dict[str, list[Reason]] = {n: [] for n in nodes}
    for node, reason in mesh.pruned_reasons(pruned, opts.prune).items():
        reasons[node].append(reason)
    ran: set[str] = set()
    for p in pairs:
        ends = (p.server, p.client)
        if p.state == "not run":
            for n in p.blame:
                if n not in gone:
                    reasons[n] += p.reasons
            continue
        ran.update(ends)
        if p.state == "pass" or gone.intersection(ends):
            continue
        for n in ends:
            reasons[n] += p.reasons
    for node in nodes:
        if node not in ran and not reasons[node]:
            reasons[node].append(Reason(UNKNOWN, "rdma_latency_unreadable",
                                        f"{node}: no RDMA mesh pair could run"
                                        + ("" if len(nodes) > 1 else " (no peer in the run)")))
    return MeshOutcome(reasons, pairs, rounds, pruned)


def slurm_round(job: str, pairs: list[tuple[str, str]], nodes: dict[str, str], devices: dict[str, str],
                opts: MeshOptions) -> list[PairOutcome]:
    """One round: every server, then (a second later) every client."""
    servers = {s: server_script(devices[s], opts) for s, _ in pairs}
    clients = {c: client_script(devices[c], nodes[s], opts) for s, c in pairs}
    wait_servers = run_steps(job, servers, "ccrhost-lat-servers", opts.timeout + 15)
    time.sleep(1)  # let the servers listen
    client_out, client_err = run_steps(job, clients, "ccrhost-lat-clients", opts.timeout + 10)()
    server_out, server_err = wait_servers()
    return [judge_pair(s, c, devices[c], server_out.get(s), client_out.get(c), opts,
                       "; ".join(e for e in (server_err, client_err) if e)) for s, c in pairs]


def run_mesh(job: str | None, nodes: dict[str, str], devices: dict[str, str], opts: MeshOptions, say,
             batches: Batches | None = None, runner=None) -> MeshOutcome:
    """The stage over ``nodes`` (node -> address its peers connect to), each
    on ``devices[node]``. With ``batches``, at most its cap of nodes held at once. ``runner(pairs, nodes,
    devices, opts) -> [PairOutcome]`` runs a round another way than Slurm's (a pyinfra deploy's SSH)."""
    if job is None and batches is None and runner is None:
        raise ValueError("run_mesh needs a job, batches or a runner")
    names = [n for n in nodes if devices.get(n)]
    plan = mesh.rounds(names, opts.group) if len(names) > 1 else []
    pairs: list[PairOutcome] = []
    for number, round_pairs in enumerate(plan, start=1):
        say(round_line("mesh", number, round_pairs, "<-"))  # server <- its client
        if runner is not None:
            got = runner(round_pairs, nodes, devices, opts)
        elif batches is None:
            got = slurm_round(job, round_pairs, nodes, devices, opts)
        else:
            got = run_pair_batches(
                batches, round_pairs,
                lambda held, ok: slurm_round(held, [p for _, p in ok], nodes, devices, opts),
                lambda s, c, why: PairOutcome(s, c, "not run", reasons=[Reason(
                    UNKNOWN, "rdma_latency_unreadable", f"{c} -> {s}: RDMA latency not read: not run: {why}")],
                    blame=(s, c)))
        pairs += got
        bad = [p for p in got if p.state != "pass"]
        if bad:
            say(f"mesh round {number}: " + "; ".join(f"{p.server}<-{p.client} {p.state}" for p in bad))
    result = outcome(names, pairs, len(plan), opts)
    for node in nodes:
        if node not in result.reasons:
            result.reasons[node] = [Reason(UNKNOWN, "rdma_latency_unreadable",
                                           f"{node}: no compute RDMA device to test the mesh on")]
    return result
