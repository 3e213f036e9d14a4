"""``ccrhost slurm``: Slurm as the fleet engine, the commands' click wiring.

The top of the Slurm engine: each subcommand parses its options and calls
its command below (verify and sweep: ccrhost.fleet.slurm_verify; rollout:
ccrhost.fleet.rollout; remediate: ccrhost.fleet.remediate), which import
only downward (slurm_job, slurm_check, slurm_client). Nothing imports this
module back but ccrhost.cli, lazily. What each node gets so that Slurm runs
``ccrhost check`` itself is ccrhost.model.slurm (``integration_files``).
"""

from __future__ import annotations

import json

import click

from ccrhost.fleet.slurm_client import Remote, SlurmError, list_nodes
from ccrhost.fleet.slurm_job import Progress, VerifyError, VerifyOptions
from ccrhost.fleet.slurm_verify import run_verify
from ccrhost.model.managed import CHECK_CONFIG
from ccrhost.settings import InventoryDataError, validate_host


class RolloutError(VerifyError):
    def show(self, file=None):
        click.echo(f"ccrhost slurm rollout: {self.message}", err=True)


# -- the command -------------------------------------------------------------

@click.group()
def slurm():
    """Slurm as the fleet engine: check, measure and drain nodes through slurmctld."""


@slurm.command()
@click.option("--partition", "-p", help="Check this partition's nodes.")
@click.option("--nodes", "-w", "nodelist", help="Slurm hostlist of the nodes to check, e.g. gpu[001-064].")
@click.option("--measure", is_flag=True, help="Also measure bandwidth with ib_write_bw between node pairs.")
@click.option("--ccrhost", "ccrhost_cmd", default="/usr/local/bin/ccrhost", show_default=True,
              help="The ccrhost command on the nodes.")
@click.option("--config", default=CHECK_CONFIG, show_default=True, help="The check settings on the nodes.")
@click.option("--report-dir", default="ccrhost-report", show_default=True,
              help="Where the reports go (JSON, JUnit, text, HTML).")
@click.option("--drain/--no-drain", default=True, show_default=True,
              help="Drain FAIL nodes (reason 'ccrhost: ...'); an operator's reason is never touched.")
@click.option("--fleet-tolerance", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Also FAIL nodes whose CCR is this share below the fleet median.")
@click.option("--measure-seconds", type=int, default=10, show_default=True)
@click.option("--measure-retries", type=int, default=2, show_default=True)
@click.option("--measure-timeout", type=int, default=60, show_default=True)
@click.option("--measure-port", type=int, default=18515, show_default=True)
@click.option("--measure-ports", type=click.IntRange(1, 64), help="Measure at most this many ports per node.")
@click.option("--wait", "wait_s", type=click.FloatRange(1), default=600, show_default=True,
              help="Seconds to wait for the allocation.")
@click.option("--check-timeout", type=click.FloatRange(1), default=300, show_default=True)
@click.option("--sbatch-option", "sbatch_options", multiple=True, metavar="OPT",
              help="Passed to sbatch, e.g. --sbatch-option=--account=ops (repeatable).")
@click.option("--refresh-nic", is_flag=True, help="A sweep: each node's check queries its NICs' firmware settings "
              "and transceivers (mlxconfig, mlxlink; seconds per NIC, where verify_nic_firmware or verify_nic_optics "
              "is on) and stores them for the prolog, as the health check does.")
@click.option("--nccl", is_flag=True, help="Also run the NCCL all-reduce gate (nccl-tests all_reduce_perf): "
              "single-node NVLink and NIC-loopback modes on every node, and node pairs on ring (docs/allreduce.md).")
@click.option("--nccl-modes", default="nvlink,loopback,pair", show_default=True, help="Comma-separated modes.")
@click.option("--nccl-binary", help="all_reduce_perf on the nodes [default: verify_allreduce_binary].")
@click.option("--nccl-max-bytes", help="The size judged [default: verify_allreduce_max_bytes].")
@click.option("--nccl-iters", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--nccl-retries", type=click.IntRange(0, 10), help="[default: verify_allreduce_retries]")
@click.option("--nccl-timeout", type=click.IntRange(10, 7200),
              help="Seconds one run may take [default: verify_allreduce_timeout; unset: each run's expected time "
              "at its busbw figure, x3, + 60 s].")
@click.option("--nccl-max-nodes", type=click.IntRange(2), default=64, show_default=True,
              help="With --nccl, at most this many nodes of the partition held at once: each batch its own "
              "job on idle nodes, released before the next (inside an allocation: steps on at most this many).")
@click.option("--nccl-port", type=click.IntRange(1024, 60000), default=29500, show_default=True,
              help="NCCL_COMM_ID port of the first pair; each pair takes the next four.")
@click.option("--nccl-profile", metavar="PLATFORM",
              help="The platform whose figures judge the gate, as verify_profile names one: a built-in or a site "
              "platform file here (docs/platforms.md) [default: the built-in for each node's GPU model].")
@click.option("--nccl-srun-option", "nccl_srun_options", multiple=True, metavar="OPT",
              help="Passed to each all-reduce srun step, e.g. --nccl-srun-option=--mpi=pmix (repeatable).")
@click.option("--rack-nvlink", is_flag=True, help="Where nodes' settings turn imex_enable on: also run each NVLink "
              "rack's all-reduce over all its idle trays' GPUs (one step, NCCL_MNNVL_ENABLE=1), judged by the "
              "platform's allreduce.rack figure; a slow rack is run without trays, halving, until the tray that "
              "slows it FAILs rack_nvlink_slow. It loads every GPU of the rack: only where asked (docs/rack.md). "
              "Takes the --nccl-* binary, size, iterations, timeout, port, profile and srun options.")
@click.option("--dcgm", is_flag=True, help="Also run DCGM's diagnostics (dcgmi diag) on every idle node, by the "
              "node's own `ccrhost dcgm`: host engine first, the level under its deadline, the result stored on the "
              "node (docs/dcgm.md).")
@click.option("--dcgm-level", type=click.IntRange(1, 4), default=2, show_default=True)
@click.option("--dcgm-max-nodes", type=click.IntRange(1), default=64, show_default=True,
              help="With --dcgm, at most this many nodes held at once (each batch its own exclusive job).")
@click.option("--dcgm-timeout", type=click.IntRange(10, 6 * 3600),
              help="Seconds the diag step may take [default: the level's deadline + 70].")
@click.option("--include-busy", is_flag=True,
              help="Also check nodes running a job: the check's job waits for them (up to --wait) [default: only "
                   "idle nodes are checked, the others are listed as not checked]. Not with --nccl or --dcgm, "
                   "which take idle nodes only.")
@click.option("--evidence-max-mb", type=click.IntRange(0, 4096), default=32, show_default=True,
              help="Copy each FAIL node's evidence bundle (verify_evidence_dir) into <report-dir>/evidence/<node>/ "
              "when it is at most this size; a larger one stays on the node, named in the report (0: copy none).")
@click.option("--dry-run", is_flag=True, help="Check as ever, but drain and resume nothing: print the scontrol "
              "lines it would run (a node whose settings say slurm_mode: observe is always so).")
@click.option("--topology-conf", "topology_conf", metavar="PATH",
              type=click.Path(dir_okay=False, writable=True),
              help="Where nodes' settings turn wiring_enable on: also write the topology.conf (topology/tree) "
              "made from their discovered leaves to PATH, replaced atomically (as into <report-dir>), e.g. the "
              "controller's /etc/slurm/topology.conf; not with --dry-run. slurmctld loads it only when reconfigured: run "
              "`scontrol reconfigure` after.")
@click.option("--topology-block", "topology_block", metavar="PATH",
              type=click.Path(dir_okay=False, writable=True),
              help="Where nodes' settings turn imex_enable on: also write the block topology.conf of their NVLink "
              "racks (one BlockName per imex_rack, failing trays left out; as <report-dir>/topology-block.conf) to "
              "PATH, replaced atomically; not with --dry-run. For Slurm 24.05+ with TopologyPlugin=topology/block "
              "(23.11 where the racks are equal in size; 22.05 has none); slurmctld loads it only when "
              "reconfigured: run `scontrol reconfigure` after.")
def verify(partition, nodelist, measure, ccrhost_cmd, config, report_dir, drain, fleet_tolerance, measure_seconds,
           measure_retries, measure_timeout, measure_port, measure_ports, wait_s, check_timeout, sbatch_options,
           nccl, nccl_modes, nccl_binary, nccl_max_bytes, nccl_iters, nccl_retries, nccl_timeout, nccl_max_nodes,
           nccl_port, nccl_profile, nccl_srun_options, refresh_nic, dcgm, dcgm_level, dcgm_max_nodes, dcgm_timeout,
           include_busy, evidence_max_mb, dry_run, topology_conf, topology_block, rack_nvlink):
    """Check every idle node in one Slurm job; drain the ones that FAIL.

    Runs in the current allocation when there is one (SLURM_JOB_ID), else
    submits a job for the idle nodes and cancels it at the end; a node
    running a job is listed as not checked (--include-busy waits for it). Exit code:
    the worst verdict (0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN).
    """
    try:  # the measurement keys validate as in inventory data
        validate_host("ccrhost slurm verify", {
            "verify_measure_seconds": measure_seconds, "verify_measure_retries": measure_retries,
            "verify_measure_timeout": measure_timeout, "verify_measure_port": measure_port,
            "verify_report_dir": report_dir})
    except InventoryDataError as exc:
        raise click.UsageError("; ".join(str(e) for e in exc.errors)) from None
    opts = VerifyOptions(partition, nodelist, measure, ccrhost_cmd, config, report_dir, drain, fleet_tolerance,
                         measure_seconds, measure_retries, measure_timeout, measure_port, measure_ports, wait_s,
                         check_timeout, tuple(sbatch_options))
    opts.refresh_nic = refresh_nic
    opts.evidence_max_bytes = evidence_max_mb << 20
    opts.include_busy = include_busy
    opts.dry_run = dry_run
    opts.topology_conf = topology_conf
    opts.topology_block = topology_block
    if nccl:
        opts.nccl = nccl_options(nccl_modes, nccl_binary, nccl_max_bytes, nccl_iters, nccl_retries, nccl_timeout,
                                 nccl_max_nodes, nccl_port, nccl_srun_options, nccl_profile)
    if rack_nvlink:
        opts.rack_nvlink = nccl_options("nvlink", nccl_binary, nccl_max_bytes, nccl_iters, nccl_retries, nccl_timeout,
                                        nccl_max_nodes, nccl_port, nccl_srun_options, nccl_profile)
    if dcgm:
        from ccrhost.fleet.slurm_dcgm import DcgmOptions

        opts.dcgm = DcgmOptions(dcgm_level, dcgm_max_nodes, dcgm_timeout)
    try:
        code, verdicts, paths = run_verify(opts)
    except SlurmError as exc:
        raise VerifyError(str(exc)) from None
    return code


def nccl_options(modes, binary, max_bytes, iters, retries, timeout, max_nodes, port, srun_options, profile=None):
    """The gate's options, each validated as its inventory key is (defaults: the keys' own)."""
    from ccrhost.fleet.slurm_nccl import NcclOptions
    from ccrhost.model.allreduce import MODES

    picked = tuple(m.strip() for m in modes.split(",") if m.strip())
    bad = [m for m in picked if m not in MODES]
    if bad or not picked:
        raise click.UsageError(f"--nccl-modes {modes!r}: allowed a comma-separated list of {', '.join(MODES)}")
    given = {k: v for k, v in {"verify_allreduce_binary": binary, "verify_allreduce_max_bytes": max_bytes,
                               "verify_allreduce_retries": retries, "verify_allreduce_timeout": timeout,
                               "verify_profile": profile}.items()
             if v is not None}
    try:
        s = validate_host("ccrhost slurm verify", given)
    except InventoryDataError as exc:
        raise click.UsageError("; ".join(str(e) for e in exc.errors)) from None
    return NcclOptions(modes=picked, binary=s.verify_allreduce_binary, max_bytes=s.verify_allreduce_max_bytes,
                       iters=iters, retries=s.verify_allreduce_retries, timeout=s.verify_allreduce_timeout,
                       valid_for=s.verify_allreduce_valid_for, max_nodes=max_nodes, port=port,
                       min_busbw=s.verify_allreduce_min_busbw, srun_options=tuple(srun_options),
                       platform=s.platform())


@slurm.command()
@click.option("--partition", "-p", help="Roll through this partition's nodes.")
@click.option("--nodes", "-w", "nodelist", help="Slurm hostlist of the nodes, e.g. gpu[001-064].")
@click.option("--max-nodes", "-k", type=click.IntRange(1), default=1, show_default=True,
              help="Nodes draining or rebooting at once.")
@click.option("--max-failures", "-f", type=click.IntRange(1), default=1, show_default=True,
              help="Stop before the next batch once this many nodes failed to verify.")
@click.option("--reason", default="NIC firmware settings", show_default=True, help="Said in the drain reason.")
@click.option("--ccrhost", "ccrhost_cmd", default="/usr/local/bin/ccrhost", show_default=True,
              help="ccrhost on the nodes.")
@click.option("--config", default=CHECK_CONFIG, show_default=True, help="The check settings on the nodes.")
@click.option("--wait", "wait_s", type=click.FloatRange(1), default=3600, show_default=True,
              help="Seconds a batch may take: its jobs ending, then the reboot.")
@click.option("--check-timeout", type=click.FloatRange(1), default=300, show_default=True)
@click.option("--ssh", default="ssh -o BatchMode=yes -o ConnectTimeout=10", show_default=True,
              help="How to ask a node whether it owes a reboot (its NodeAddr is appended, then the command).")
@click.option("--force", is_flag=True, help="Reboot every node of --nodes that may be taken, owed or not "
              "(an operator's drain, a DOWN node are still skipped).")
@click.option("--dry-run", is_flag=True, help="Ask the nodes, print the commands each batch would run; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="The outcome per node as JSON on stdout (progress: stderr).")
def rollout(partition, nodelist, max_nodes, max_failures, reason, ccrhost_cmd, config, wait_s, check_timeout, ssh,
            force, dry_run, as_json):
    """Reboot, a batch at a time, the nodes that owe a reboot, so firmware
    written for the next boot takes effect (deploys/nic_firmware.py writes
    it; docs/nic-firmware.md).

    A node owes one when its own check (over --ssh, read-only) names a NIC
    firmware setting pending the next boot; --force takes the --nodes
    list instead. A node drained or down for a reason that is not
    ccrhost's, or DOWN, is skipped and said so. Slurm drains each node
    (jobs finish), reboots it when idle and brings it back DOWN; each
    node's own check then runs in a reservation of its own: OK resumes it,
    anything else (a timeout too) leaves it drained with the reason.
    Exit 0 when every rebooted node verified OK, 2 otherwise.
    """
    from ccrhost.fleet import rollout as ro

    if not (partition or nodelist):
        raise click.UsageError("name the nodes: --partition or --nodes")
    if force and not nodelist:
        raise click.UsageError("--force takes an explicit list of nodes: --nodes")
    say = Progress()
    try:
        nodes = list_nodes(partition, nodelist)
        if not nodes:
            raise click.UsageError("no such nodes")
        query = ro.pending_query(Remote(ssh, check_timeout), ccrhost_cmd, config)
        take, skipped, owed = ro.select(nodes, query, force)
        for o in skipped:
            say(f"{o.node}: skipped: {o.note}")
        plan = click.echo if dry_run and not as_json else say  # a dry run's commands: on stdout
        outcomes = ro.rollout(take, max_nodes, max_failures, reason, ccrhost_cmd, config, wait_s, check_timeout,
                              say=plan, dry_run=dry_run, owed=owed) if take else []
    except SlurmError as exc:
        raise RolloutError(str(exc)) from None
    outcomes = sorted(outcomes + skipped, key=lambda o: o.node)
    if as_json:
        click.echo(ro.to_json(outcomes, dry_run), nl=False)
    else:
        for o in outcomes:
            click.echo(f"{o.node}: {o.status}: {o.note}")
        if dry_run:
            click.echo("dry run: nothing was changed")
        if not take:
            click.echo("no node to reboot")
    return ro.exit_code(outcomes)


@slurm.command()
@click.option("--partition", "-p", help="Only this partition's nodes.")
@click.option("--nodes", "-w", "nodelist", help="Slurm hostlist of the nodes to consider, e.g. gpu[001-064].")
@click.option("--allow", "allowed", multiple=True, type=click.Choice(["reset_gpu", "reboot"]),
              help="An action this run may carry out (repeatable); none by default: the run only says what "
                   "each drained node needs.")
@click.option("--max-reboots", type=click.IntRange(0), default=1, show_default=True,
              help="Nodes rebooting at once, at most (those Slurm shows rebooting count).")
@click.option("--dry-run", is_flag=True, help="Print each command it would run, exactly, one a line (`NODE: would "
              "run: ssh ... ADDRESS '...'`, `NODE: would run: scontrol ...`); run none of them, change nothing.")
@click.option("--ssh", default="ssh -o BatchMode=yes -o ConnectTimeout=10", show_default=True,
              help="How to run a command on a node (its NodeAddr is appended, then the command).")
@click.option("--ccrhost", "ccrhost_cmd", default="/usr/local/bin/ccrhost", show_default=True,
              help="The ccrhost command on the nodes.")
@click.option("--config", default=CHECK_CONFIG, show_default=True, help="The check settings on the nodes.")
@click.option("--dcgm-level", type=click.IntRange(0, 4), default=0, show_default=True,
              help="After a repair, run DCGM's diag at this level on the node (`ccrhost dcgm`; it is drained, so "
                   "idle) before its check, which judges the stored result where the node's settings set "
                   "verify_dcgm (0: none).")
@click.option("--accept/--no-accept", "accept", default=True, show_default=True,
              help="A repaired node that keeps an acceptance certificate returns only through `ccrhost slurm "
                   "accept` of the stages its failure concerned (it resumes the node when certified again).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document of every node's steps and outcome on stdout (the per-node lines go "
                   "to stderr).")
def remediate(partition, nodelist, allowed, max_reboots, dry_run, ssh, ccrhost_cmd, config, dcgm_level, accept,
              as_json):
    """Repair drained nodes and return the ones that pass their check.

    For each drained node with a ccrhost drain reason, the action the reason
    names (``[action reset_gpu gpu 2]``) when --allow enables it: reset an
    idle GPU (nvidia-smi -r -i N), or reboot (scontrol reboot, within
    --max-reboots); then the node's check, and RESUME only when it passes.
    An operator's reason, a replace or a measured drain is never touched.
    Every step is printed per node as the node finishes. Exit 0 when
    nothing failed, 2 when a repair or the check after it failed on a node
    (it stays drained), 3 when Slurm could not be asked.
    """
    import json

    from ccrhost.fleet import remediate as rem

    opts = rem.RemediateOptions(tuple(allowed), max_reboots, dry_run, ssh, ccrhost_cmd, config,
                                dcgm_level=dcgm_level, accept=accept)

    def done(log):
        for step in log.steps:
            click.echo(f"{log.node}: {step}", err=as_json)
        click.echo(f"{log.node}: {'dry run' if dry_run else log.outcome}" + (": FAILED" if log.failed else ""),
                   err=as_json)

    try:
        nodes = list_nodes(partition, nodelist)
        logs = rem.remediate(nodes, opts, done=done)
    except SlurmError as exc:
        raise click.ClickException(f"ccrhost slurm remediate: {exc}") from None
    if not logs:
        click.echo("no drained node", err=as_json)
    code = rem.exit_code(logs)
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "exit_code": code, "nodes": [log.to_dict() for log in logs]},
                              indent=2))
    return code


@slurm.command()
@click.option("--partition", "-p", required=True, help="The partition to sweep.")
@click.option("--nodes", "-w", "nodelist", help="Only these nodes of it (a Slurm hostlist).")
@click.option("--max-nodes", type=click.IntRange(1), default=4, show_default=True,
              help="At most this many nodes held at once.")
@click.option("--max-percent", type=click.FloatRange(0, 100, min_open=True), default=10.0, show_default=True,
              help="At most this share of the partition's nodes held at once (rounded up; the smaller cap wins).")
@click.option("--nice", type=click.IntRange(0, 2147483645), default=10000, show_default=True,
              help="sbatch --nice for each batch job: the lowest priority, so every waiting job goes first.")
@click.option("--dcgm-level", type=click.IntRange(0, 4), default=2, show_default=True,
              help="DCGM diag level (0: no diag).")
@click.option("--nccl", is_flag=True, help="Also run the single-node all-reduce modes (nvlink, loopback).")
@click.option("--nccl-profile", metavar="PLATFORM",
              help="With --nccl, the platform whose figures judge the modes (verify_profile: a built-in or a site "
              "platform file here) [default: the built-in for each node's GPU model].")
@click.option("--ccrhost", "ccrhost_cmd", default="/usr/local/bin/ccrhost", show_default=True)
@click.option("--config", default=CHECK_CONFIG, show_default=True)
@click.option("--report-dir", default="ccrhost-sweep", show_default=True)
@click.option("--drain/--no-drain", default=True, show_default=True,
              help="Drain nodes that FAIL (never on UNKNOWN: a hung host engine drains nothing).")
@click.option("--wait", "wait_s", type=click.FloatRange(1), default=600, show_default=True)
@click.option("--check-timeout", type=click.FloatRange(1), default=300, show_default=True)
@click.option("--sbatch-option", "sbatch_options", multiple=True, metavar="OPT")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document of every node's verdict (status, codes, action) and the report paths "
                   "on stdout (the progress stays on stderr).")
@click.option("--dry-run", is_flag=True, help="Submit, run, drain and resume nothing: print every command the "
              "sweep would run, one a line (each batch's sbatch, srun steps and scancel, with its nodes; the scontrol "
              "drain for a node that FAILs), on stdout. Slurm is only read.")
def sweep(partition, nodelist, max_nodes, max_percent, nice, dcgm_level, nccl, nccl_profile, ccrhost_cmd, config,
          report_dir, drain, wait_s, check_timeout, sbatch_options, as_json, dry_run):
    """Run the active checks on the partition's idle nodes only, a few at a time.

    Each batch is an exclusive job of the lowest priority (--nice) on nodes
    that are idle when it starts, holding at most min(--max-nodes,
    --max-percent of the partition) nodes, released before the next: a node
    running a job is never touched. Each node stores its results with their
    time and validity, where its prolog and health check read them (a
    result past its validity is UNKNOWN as stale). Run it from cron.
    Exit 0 OK, 1 WARN, 2 FAIL, 3 UNKNOWN: the worst node's verdict
    (--dry-run: 0, having run nothing).
    """
    import math

    from ccrhost.fleet.slurm_dcgm import DcgmOptions

    nodes = list_nodes(partition, nodelist)
    if not nodes:
        raise VerifyError(f"no nodes in partition {partition}" + (f" matching {nodelist}" if nodelist else ""))
    cap = max(1, min(max_nodes, math.ceil(len(nodes) * max_percent / 100)))
    opts = VerifyOptions(partition, nodelist, False, ccrhost_cmd, config, report_dir, drain, None, wait=wait_s,
                         check_timeout=check_timeout,
                         sbatch_options=(f"--nice={nice}", *sbatch_options), idle_only=True, max_nodes=cap,
                         dry_run=dry_run)
    if dcgm_level:
        opts.dcgm = DcgmOptions(dcgm_level, cap)
    if nccl:
        if cap < 2:
            raise click.UsageError(f"--nccl: the cap is {cap} node(s) of {len(nodes)}; raise --max-nodes or --max-percent")
        opts.nccl = nccl_options("nvlink,loopback", None, None, 20, None, None, cap, 29500, (), nccl_profile)
    Progress()(f"sweep of {partition}: {len(nodes)} nodes, at most {cap} held at once, nice {nice}")
    if dry_run:
        from ccrhost.fleet.sweep_plan import plan

        lines = plan(nodes, opts, cap)
        if as_json:
            click.echo(json.dumps({"partition": partition, "dry_run": True, "exit_code": 0, "would_run": lines},
                                  indent=2))
        else:
            click.echo("\n".join(lines))
            click.echo("dry run: no job submitted, nothing drained or resumed")
        return 0
    try:
        code, verdicts, paths = run_verify(opts)
    except SlurmError as exc:
        raise VerifyError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(sweep_document(partition, code, verdicts, paths), indent=2))
    return code


def sweep_document(partition: str, code: int, verdicts: dict, paths: dict) -> dict:
    """`sweep --json`: each node's verdict in a line's worth (the reports hold the rest)."""
    from ccrhost.model.verdict_line import reason_codes

    return {"partition": partition, "exit_code": code,
            "nodes": {name: {"status": v.status, "codes": reason_codes(v), "action": v.action,
                             "summary": v.summary()} for name, v in sorted(verdicts.items())},
            "reports": {kind: str(path) for kind, path in paths.items()}}


@slurm.command()
@click.option("--partition", "-p", help="Accept this partition's drained nodes (new, or back from repair).")
@click.option("--nodes", "-w", "nodelist", help="Slurm hostlist of the nodes to accept, e.g. gpu[065-128].")
@click.option("--max-nodes", "-k", type=click.IntRange(2), default=8, show_default=True,
              help="Nodes in a stage at once, at most: each batch its own job in the run's reservation; the "
                   "power-heavy stages (node, soak) load one batch after another.")
@click.option("--stages", help="Run only these stages (comma-separated, of check,node,mesh,pairs,scale,soak) "
              "[default: each node's accept_stages].")
@click.option("--again", help="Run these stages even where a node's certificate holds them (comma-separated).")
@click.option("--budget", type=click.FloatRange(60), default=24 * 3600, show_default=True,
              help="Seconds for the whole run; the reservation lasts as long. A stage not started in time is "
                   "UNKNOWN (accept_budget_exceeded) for its nodes.")
@click.option("--soak-minutes", type=click.FloatRange(0, min_open=True),
              help="The soak's length [default: each node's accept_soak_minutes].")
@click.option("--reservation", help="The reservation's name [default: ccrhost-accept-<time>].")
@click.option("--ccrhost", "ccrhost_cmd", default="/usr/local/bin/ccrhost", show_default=True,
              help="The ccrhost command on the nodes.")
@click.option("--config", default=CHECK_CONFIG, show_default=True, help="The check settings on the nodes.")
@click.option("--report-dir", default="ccrhost-report", show_default=True,
              help="Where accept.json and each node's certificate go.")
@click.option("--wait", "wait_s", type=click.FloatRange(1), default=600, show_default=True,
              help="Seconds to wait for each batch's allocation.")
@click.option("--check-timeout", type=click.FloatRange(1), default=300, show_default=True)
@click.option("--measure-seconds", type=click.IntRange(1, 600), default=5, show_default=True,
              help="ib_write_bw's -D in S3.")
@click.option("--measure-ports", type=click.IntRange(1, 64), help="Measure at most this many ports per node in S3.")
@click.option("--mesh-timeout", type=click.IntRange(2, 600), default=20, show_default=True,
              help="Seconds an ib_write_lat end waits for its peer in S2.")
@click.option("--nccl-binary", help="all_reduce_perf on the nodes [default: verify_allreduce_binary].")
@click.option("--nccl-max-bytes", help="The size judged [default: verify_allreduce_max_bytes].")
@click.option("--nccl-iters", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--nccl-timeout", type=click.IntRange(10, 7200), help="Seconds one all-reduce run may take.")
@click.option("--nccl-profile", metavar="PLATFORM", help="The platform whose figures judge the all-reduce runs.")
@click.option("--sbatch-option", "sbatch_options", multiple=True, metavar="OPT",
              help="Passed to sbatch, e.g. --sbatch-option=--account=ops (repeatable).")
@click.option("--dry-run", is_flag=True, help="List the nodes, the reservation and the resume it would make; "
              "submit, reserve, resume and drain nothing.")
def accept(partition, nodelist, max_nodes, stages, again, budget, soak_minutes, reservation, ccrhost_cmd, config,
           report_dir, wait_s, check_timeout, measure_seconds, measure_ports, mesh_timeout, nccl_binary, nccl_max_bytes, nccl_iters, nccl_timeout,
           nccl_profile, sbatch_options, dry_run):
    """Accept new or repaired nodes: staged burn-in ending in a certificate.

    The nodes (a hostlist, or a partition's drained nodes) go into a
    reservation of this run, are resumed inside it, and run the stages in
    order: check (S0), node (S1: DCGM diag, nvbandwidth, GEMM, single-node
    all-reduce), mesh (S2: ib_write_lat full mesh, pruning, latency), pairs
    (S3: ib_write_bw), scale (S4: all-reduce over doubling groups, bisected),
    soak (S5). A node that fails a stage goes no further; each stage is kept
    in the node's certificate, and a second run re-runs only what does not
    hold. Only certified nodes return to service; the others are drained
    naming the stage and codes. A node running a job is never touched.
    Exit 0 when every node was certified, 2 when one failed, 3 when one is
    not known (a stage could not run).
    """
    from ccrhost.fleet.accept import AcceptOptions, run_accept
    from ccrhost.model.certificate import STAGES

    def stage_list(text, flag):
        if text is None:
            return None
        picked = tuple(s.strip() for s in text.split(",") if s.strip())
        bad = [s for s in picked if s not in STAGES]
        if bad or not picked:
            raise click.UsageError(f"{flag} {text!r}: allowed a comma-separated list of {', '.join(STAGES)}")
        return picked

    if not partition and not nodelist:
        raise click.UsageError("give --nodes or --partition")
    opts = AcceptOptions(partition=partition, nodelist=nodelist, ccrhost=ccrhost_cmd, config=config,
                         report_dir=report_dir, max_nodes=max_nodes, stages=stage_list(stages, "--stages"),
                         again=stage_list(again, "--again") or (), budget=budget, soak_minutes=soak_minutes,
                         reservation=reservation, dry_run=dry_run, wait=wait_s, check_timeout=check_timeout,
                         sbatch_options=tuple(sbatch_options), measure_seconds=measure_seconds,
                         measure_ports=measure_ports, mesh_timeout=mesh_timeout,
                         nccl=nccl_options("nvlink,loopback,pair", nccl_binary, nccl_max_bytes, nccl_iters, None,
                                           nccl_timeout, max_nodes, 29500, (), nccl_profile))
    try:
        code, _ = run_accept(opts)
    except SlurmError as exc:
        raise VerifyError(str(exc)) from None
    return code
