"""``ccrhost slurm sweep --dry-run``: the commands a sweep would run, built by
the same functions the sweep runs them with (sbatch_args, check_step_args,
step_argvs, single_argv), printed one a line; nothing is submitted, run,
drained or resumed. Slurm is only read (sinfo, scontrol show node).

What only the run can know stays a named placeholder: ``JOB`` (the id
``sbatch --parsable`` prints for the batch), ``GPUS`` (the GPUs the node's
check reads) and the drain reason (the node's FAIL codes). The batches are
the nodes idle now; the run takes those still idle when each batch starts.
"""

from __future__ import annotations

import shlex

from ccrhost.fleet.slurm_client import SlurmNode, step_argvs
from ccrhost.fleet.slurm_job import VerifyOptions, sbatch_args

JOB = "JOB"    # the batch job's id, as sbatch --parsable prints it
GPUS = "GPUS"  # a node's GPU count, as its check reads it
DRAIN_REASON = "Reason=ccrhost: <its FAIL codes>: <what failed> [action <its action>]"


def shell_line(argv: list[str]) -> str:
    """``argv`` as one shell line that runs exactly it: a word with a newline
    (a step's per-node script) in bash's ``$'...'``."""
    def word(arg: str) -> str:
        if "\n" not in arg:
            return shlex.quote(arg)
        return "$'" + arg.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"

    return " ".join(word(a) for a in argv)


def checked(nodes: dict[str, SlurmNode]) -> tuple[list[str], dict[str, str]]:
    """The nodes a sweep checks (idle now) and the others with their state (and reason)."""
    take = [n for n, v in nodes.items() if v.usable and v.state == "idle"]
    left = {n: v.state + (f" ({v.reason})" if v.reason else "") for n, v in nodes.items() if n not in take}
    return take, left


def plan(nodes: dict[str, SlurmNode], opts: VerifyOptions, cap: int) -> list[str]:
    """Every line the dry run prints: per stage and batch, a ``# ...`` heading
    and ``would run: COMMAND`` lines; then the drains."""
    from ccrhost.fleet.slurm_verify import check_step_args

    take, left = checked(nodes)
    chunks = [take[i:i + cap] for i in range(0, len(take), cap)]
    lines = [f"# {len(nodes)} node(s); {len(take)} idle to check in {len(chunks)} batch(es) of at most {cap}"
             + (f"; not checked: {', '.join(f'{n} {s}' for n, s in sorted(left.items()))}" if left else "")]
    stages = [("check", lambda chunk: [check_step_args(JOB, chunk, opts)])]
    if opts.dcgm is not None:
        from ccrhost.fleet.slurm_dcgm import step_script

        level = opts.dcgm.level
        stages.append((f"DCGM diag level {level}", lambda chunk: step_argvs(
            JOB, {n: step_script(opts.ccrhost, opts.config, "--level", str(level)) for n in chunk}, "ccrhost-dcgm")))
    if opts.nccl is not None:
        stages.append((f"all-reduce {', '.join(opts.nccl.modes)} (GPUS: the GPUs the node's check reads)",
                       lambda chunk: [_single(n, mode, opts.nccl) for mode in opts.nccl.modes for n in chunk]))
    for stage, steps in stages:
        for i, chunk in enumerate(chunks, 1):
            lines.append(f"# {stage}: batch {i} of {len(chunks)}: {','.join(chunk)}")
            lines.append(f"would run: {shell_line(sbatch_args(chunk, opts))}   # prints {JOB}")
            lines += [f"would run: {shell_line(argv)}" for argv in steps(chunk)]
            lines.append(f"would run: {shell_line(['scancel', JOB])}")
    if opts.nccl is not None:
        lines.append("# then each node's all-reduce results are stored where its settings set verify_allreduce "
                     "(a step ccrhost-nccl-store, in batches as above)")
    if opts.drain and take:
        lines.append("# then, after the last batch, for each node whose verdict is FAIL (within the drain cap: "
                     "past it the node is held, not drained):")
        lines += [f"would run: {shell_line(['scontrol', 'update', f'NodeName={n}', 'State=DRAIN', DRAIN_REASON])}"
                  for n in take]
    return lines


def _single(node: str, mode: str, nccl) -> list[str]:
    from ccrhost.fleet.slurm_nccl import single_argv

    argv = single_argv(JOB, node, 0, mode, nccl)
    g = len(argv) - 1 - argv[::-1].index("-g")  # the binary's own -g: its GPUs
    return [*argv[:g + 1], GPUS, *argv[g + 2:]]
