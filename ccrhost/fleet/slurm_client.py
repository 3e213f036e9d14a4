"""Talking to Slurm: its client commands (sinfo, scontrol, srun), the
nodes as sinfo and scontrol show them, and job steps that run a script per
node in an allocation and give back each node's output.

The bottom of the Slurm fleet engine: it imports none of the commands
(ccrhost.fleet.slurm_verify, rollout, remediate, ...); they import it.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from dataclasses import dataclass, replace

from ccrhost.model.ports import natural_key


# -- talking to Slurm --------------------------------------------------------

class SlurmError(RuntimeError):
    pass


def run_slurm(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    """A Slurm client command (SLURM_CONF from the environment)."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SlurmError(f"{args[0]} not found: install Slurm's client commands (slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(args)}: no answer within {timeout:g} s") from None
    if check and proc.returncode != 0:
        raise SlurmError(f"{' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip() or f'exit {proc.returncode}'}")
    return proc


@dataclass(frozen=True)
class SlurmNode:
    name: str
    address: str      # NodeAddr: what peers connect to for the bandwidth test
    state: str        # sinfo %T: idle, mixed, allocated, drained, down*, ...
    reason: str | None
    held: str | None = None  # the node comment ccrhost sets where the drain cap held (scontrol show node)

    @property
    def usable(self) -> bool:
        """Whether a new job can get it (a drained or down node never starts one; on a node
        the drain cap held, ccrhost's prolog keeps every job off)."""
        bad = ("drain", "down", "fail", "maint", "reboot", "unknown", "inval", "power", "future")
        return not self.state.endswith("*") and not any(word in self.state for word in bad) and not self.held


def parse_sinfo(text: str) -> dict[str, SlurmNode]:
    """``sinfo -h -N -o '%N|%o|%T|%E'``: a node once per partition; reason last (it may hold '|')."""
    nodes = {}
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) != 4 or not parts[0]:
            continue
        name, addr, state, reason = (p.strip() for p in parts)
        nodes.setdefault(name, SlurmNode(name, addr, state, None if reason in ("", "none", "(null)") else reason))
    return nodes


def list_nodes(partition: str | None = None, nodelist: str | None = None) -> dict[str, SlurmNode]:
    args = ["sinfo", "-h", "-N", "-o", "%N|%o|%T|%E"]
    if partition:
        args += ["-p", partition]
    if nodelist:
        args += ["-n", nodelist]
    nodes = parse_sinfo(run_slurm(*args).stdout)
    held = held_nodes(run_slurm("scontrol", "show", "node", "-o").stdout)
    return {n: replace(v, held=held[n]) if n in held else v for n, v in nodes.items()}


def node_fields(line: str) -> dict[str, str]:
    """One node's ``scontrol show node -o`` line: its KEY=VALUE fields
    (State, BootTime, ...), with Reason whole (it holds spaces) and, where
    Slurm stamped it, ``ReasonTime``: the TIME of the ``[USER@TIME]`` it ends with."""
    from ccrhost.model.drain_reason import REASON_FIELD

    fields = dict(re.findall(r"(\w+)=(\S*)", line))
    reason = REASON_FIELD.search(line)
    if reason:
        fields["Reason"] = reason.group(1)
        if reason.group(2):
            fields["ReasonTime"] = reason.group(2)
    return fields


def held_nodes(text: str) -> dict[str, str]:
    """``scontrol show node -o``: {node: its comment} where ccrhost's drain cap held."""
    from ccrhost.model.drain_reason import COMMENT_FIELD, HELD_PREFIX

    held = {}
    for line in text.splitlines():
        name, comment = re.match(r"NodeName=(\S+)", line), COMMENT_FIELD.search(line)
        if name and comment and comment.group(1).strip().startswith(HELD_PREFIX):
            held[name.group(1)] = comment.group(1).strip()
    return held


def expand_hostlist(expression: str) -> list[str]:
    return run_slurm("scontrol", "show", "hostnames", expression).stdout.split()


def hostlist(names) -> str:
    """Slurm's hostlist expression of ``names``: runs of one prefix and
    same-width numbers as ``gpu[001-003,007]`` (topology.conf(5): "Slurm's
    hostlist expression parser is used")."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain = []
    for name in sorted(set(names), key=natural_key):
        m = re.fullmatch(r"(.*?)([0-9]+)", name)
        if m and not re.search(r"[\[\],]", name):
            groups.setdefault((m.group(1), len(m.group(2))), []).append(int(m.group(2)))
        else:
            plain.append(name)
    parts = []
    for (prefix, width), numbers in groups.items():
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        runs, start = [], numbers[0]
        for a, b in zip(numbers, numbers[1:] + [None]):
            if b != a + 1:
                runs.append(f"{start:0{width}d}" if start == a else f"{start:0{width}d}-{a:0{width}d}")
                start = b
        parts.append(f"{prefix}[{','.join(runs)}]")
    return ",".join(sorted(parts + plain, key=natural_key))


# -- a command on a node, over the operator's ssh --------------------------

class Remote:
    """A command on a node over the operator's ssh; (exit code, output)."""

    def __init__(self, ssh: str, timeout: float):
        self.ssh, self.timeout = shlex.split(ssh), timeout

    def __call__(self, address: str, command: str) -> tuple[int, str]:
        try:
            out = subprocess.run([*self.ssh, address, command], capture_output=True, text=True, timeout=self.timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 255, f"ssh {address}: {exc}"
        return out.returncode, (out.stdout + out.stderr).strip()


# -- job steps: a script per node, its output by node ----------------------

STEP_LABEL = re.compile(r"^\s*([0-9]{1,9}): ?(.*)$")  # ASCII digits: int() takes any Unicode one


def _labelled(lines, tasks: dict[int, list[str]]) -> None:
    for line in lines:
        match = STEP_LABEL.match(line.rstrip("\n"))
        if match:
            tasks.setdefault(int(match.group(1)), []).append(match.group(2))


def srun_args(job: str, nodes: list[str], name: str) -> list[str]:
    """One task per node, output labelled by task; ``--overlap`` shares the
    allocation with the job's own batch step and with other steps."""
    return ["srun", f"--jobid={job}", "--overlap", "-J", name, "-N", str(len(nodes)), "-n", str(len(nodes)),
            "--ntasks-per-node=1", "-w", ",".join(nodes), "-l", "--kill-on-bad-exit=0"]


MAX_SCRIPT = 96 * 1024  # one step's command must stay under Linux's 128 KiB per argument


def _case_steps(branches: dict[str, str]) -> list[tuple[list[str], str]]:
    """Split per-node scripts into steps: (nodes, one script that picks its branch by node name)."""
    steps, nodes, parts, size = [], [], [], 0
    for node, script in branches.items():
        part = f"{shlex.quote(node)}) {script} ;;\n"
        if nodes and size + len(part) > MAX_SCRIPT:
            steps.append((nodes, parts))
            nodes, parts, size = [], [], 0
        nodes.append(node)
        parts.append(part)
        size += len(part)
    if nodes:
        steps.append((nodes, parts))
    return [(n, 'echo "@@node $SLURMD_NODENAME"\ncase "$SLURMD_NODENAME" in\n' + "".join(p) + "esac\n")
            for n, p in steps]


def _by_node(tasks: dict[int, list[str]]) -> dict[str, list[str]]:
    out = {}
    for lines in tasks.values():
        if lines and lines[0].startswith("@@node "):
            out[lines[0][7:].strip()] = lines[1:]
    return out


def step_argvs(job: str, branches: dict[str, str], name: str) -> list[list[str]]:
    """The srun commands that run each node's script of ``branches`` (one per step)."""
    return [[*srun_args(job, nodes, name), "/bin/sh", "-c", script] for nodes, script in _case_steps(branches)]


def run_steps(job: str, branches: dict[str, str], name: str, timeout: float):
    """Start the steps for ``branches``; return a function that waits and gives {node: lines}."""
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for argv in step_argvs(job, branches, name)]

    def collect() -> tuple[dict[str, list[str]], str]:
        tasks: dict[int, list[str]] = {}
        results, errors = {}, []
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                errors.append(f"step {name} ran past {timeout:g} s")
            tasks.clear()
            _labelled(out.splitlines(), tasks)
            results.update(_by_node(tasks))
            errors += [x for x in err.splitlines() if x.strip()][-2:]
        return results, "; ".join(errors)

    return collect
