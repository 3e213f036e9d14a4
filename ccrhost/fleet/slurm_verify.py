"""``ccrhost slurm verify``: one allocation, a job step that runs ``ccrhost
check`` on every node at once, with ``--measure`` ib_write_bw between node
pairs as job steps (the pairing, retries and culprit isolation of
``ccrhost.measure``), the fleet reports, and a drain for every FAIL node.
With ``--nccl`` the allocation is cut into batches of at most
``--nccl-max-nodes`` idle nodes (ccrhost.fleet.slurm_job.Batches), one held
at a time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from dataclasses import replace

from ccrhost.fleet.slurm_check import (
    CheckOutput,
    busy_verdict,
    check_script,
    drained_verdict,
    judge,
    parse_check_task,
)
from ccrhost.fleet.slurm_client import STEP_LABEL, run_steps, expand_hostlist, list_nodes, run_slurm, srun_args
from ccrhost.fleet.slurm_job import (
    Batches,
    NodesLost,
    Progress,
    VerifyError,
    VerifyOptions,
    round_line,
    run_pair_batches,
    submit,
)
from ccrhost.model.managed import DRAIN_PREFIX
from ccrhost.model.status import Reason
from ccrhost.model.verdict import EXIT_CODES, FAIL, OK, UNKNOWN, WARN, Verdict, apply_fleet_rules, worst
from ccrhost.settings import HostSettings


def slurm_round(job: str, pairs: list[tuple[str, str]], plan) -> list:
    """One measurement round as two job steps: every server of the round,
    then (a second later) every client; see ``ccrhost.measure.run_round``."""
    from ccrhost.fleet.measure import judge_pair
    from ccrhost.probes.perftest import (
        MISSING,
        clients_script,
        parse_clients_output,
        parse_servers_output,
        server_runs,
    )

    widths = [min(len(plan.devices[s]), len(plan.devices[c])) for s, c in pairs]
    servers = {s: MISSING + " ".join(f"{run} </dev/null >/dev/null 2>&1 &" for run in
                                     server_runs(plan.devices[s][:n], plan.port, plan.seconds, plan.timeout))
               + " wait"
               for (s, c), n in zip(pairs, widths)}
    clients = {c: clients_script(plan.devices[c][:n], plan.address[s], plan.port, plan.seconds, plan.timeout)
               for (s, c), n in zip(pairs, widths)}
    longest = max(widths) * (plan.timeout + 1) + 15
    wait_servers = run_steps(job, servers, "ccrhost-bw-servers", longest + 5)
    time.sleep(1)  # let the servers listen
    client_out, client_err = run_steps(job, clients, "ccrhost-bw-clients", longest)()
    server_out, server_err = wait_servers()
    results = []
    for (s, c), n in zip(pairs, widths):
        server = (parse_servers_output(server_out[s]) if s in server_out
                  else {"error": f"no result from its job step ({server_err or 'no output'})"})
        client = (parse_clients_output(client_out[c]) if c in client_out
                  else {"@all": {"gbps": None, "error": f"no result from its job step ({client_err or 'no output'})"}})
        results.append(judge_pair(s, c, n, server, client, plan))
    return results


def check_step_args(job: str, nodes: list[str], opts: VerifyOptions) -> list[str]:
    """The check step: each node's own ``ccrhost check`` (ccrhost.fleet.slurm_check.check_script)."""
    return [*srun_args(job, nodes, "ccrhost-check"), "/bin/sh", "-c",
            check_script(opts.ccrhost, opts.config, opts.refresh_nic)]


def check_step(job: str, nodes: list[str], opts: VerifyOptions, say) -> dict[str, CheckOutput]:
    proc = subprocess.Popen(check_step_args(job, nodes, opts), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    killer = threading.Timer(opts.check_timeout, proc.kill)
    killer.start()
    tasks: dict[int, list[str]] = {}
    results: dict[str, CheckOutput] = {}
    try:
        for line in proc.stdout:
            match = STEP_LABEL.match(line.rstrip("\n"))
            if not match:
                continue
            task = int(match.group(1))
            tasks.setdefault(task, []).append(match.group(2))
            if match.group(2).startswith("@@rc "):
                out = parse_check_task(tasks[task])
                if out is not None:
                    results[out.node] = out
                    status = {0: OK, 1: WARN, 2: FAIL}.get(out.rc, UNKNOWN)
                    say(f"checked {len(results)}/{len(nodes)}: {out.node} {status}")
        proc.wait()
    finally:
        killer.cancel()
    reader.join(timeout=5)
    for node in nodes:
        if node not in results:
            said = " ".join(x.strip() for x in err[-3:]) or f"srun exited {proc.returncode}"
            results[node] = CheckOutput(node, None, f"no result from the check step: {said}", None)
    return results


def _fetch_evidence(job: str, outputs: dict[str, CheckOutput], opts: VerifyOptions, say) -> dict:
    """The evidence bundles the checks named, copied into the report directory (ccrhost.fleet.slurm_evidence)."""
    from ccrhost.fleet import slurm_evidence

    named = {n: p for n, out in outputs.items() if (p := slurm_evidence.evidence_of(out.text))}
    if not named or not opts.evidence_max_bytes:
        return {}
    return slurm_evidence.collect(job, named, opts.report_dir, say, opts.check_timeout, opts.evidence_max_bytes)


def measure_pairs(job: str, verdicts: dict[str, Verdict], settings: dict, addresses: dict, opts: VerifyOptions, say,
             batches: Batches | None = None):
    from ccrhost.fleet.measure import MeasurePlan, measure_fleet

    names = [n for n in verdicts if n in settings]
    devices, expected = {}, {}
    for name in names:
        ports = [p for p in verdicts[name].readings.ports if p.active]
        devices[name] = list(dict.fromkeys(p.device for p in ports))[:opts.measure_ports]
        expected[name] = {p.device: p.link_gbps for p in ports}
    first = settings[names[0]] if names else HostSettings()
    plan = MeasurePlan(devices=devices, expected=expected, address={n: addresses[n] for n in names},
                       seconds=opts.measure_seconds, timeout=opts.measure_timeout, retries=opts.measure_retries,
                       min_fraction=first.verify_measure_min_fraction, port=opts.measure_port)
    rounds = [0]

    def runner(pairs):
        rounds[0] += 1
        say(round_line("measure", rounds[0], pairs, "<->"))
        if batches is None:
            return slurm_round(job, pairs, plan)
        from ccrhost.fleet.measure import PairResult

        return run_pair_batches(
            batches, pairs, lambda held, ok: slurm_round(held, [p for _, p in ok], plan),
            lambda s, c, why: PairResult(s, c, [], [f"{s}<->{c}: not run: {why}"], False))

    return measure_fleet(None, dict.fromkeys(names), plan, runner=runner)


def store_allreduce(job: str | None, readings: dict, settings: dict, say, batches: Batches | None = None) -> None:
    """Each node's results in its state file, where the prolog and the
    health check read them with their age: only on nodes whose settings
    turn the gate on (``verify_allreduce``), each at its own path."""
    from ccrhost.model.active import ActiveResult
    from ccrhost.node.active import store_script

    branches = {name: store_script(settings[name].verify_allreduce_state,
                                   [ActiveResult.from_dict(d) for d in reading.results.values()])
                for name, reading in readings.items() if name in settings and settings[name].verify_allreduce}
    if not branches:
        return
    stored, errors = {}, []
    for chunk in ([list(branches)] if batches is None else batches.chunks(list(branches))):
        with (nullcontext((job, chunk)) if batches is None else batches.hold(chunk)) as (held, taken):
            if taken:
                out, err = run_steps(held, {n: branches[n] for n in taken}, "ccrhost-nccl-store", 60)()
                stored.update(out)
                errors += [err] if err else []
    say(f"all-reduce results stored on {len(stored)} of {len(branches)} node(s)"
        + (f" ({'; '.join(errors)})" if errors else ""))


def rack_allreduce(job, judged: dict[str, Verdict], outputs, measured, settings, addresses, opts: VerifyOptions,
                   say, batches, verdicts) -> dict:
    """--rack-nvlink (fleet/rack_nvlink.py): each tray's rack result added to its all-reduce results, its
    verdict judged again with them, and stored on the tray for the prolog. Returns the trays' readings."""
    from ccrhost.fleet.rack_nvlink import run_racks
    from ccrhost.model.allreduce import RACK, AllReduceReading

    got = run_racks(job, judged, settings, addresses, opts.rack_nvlink, say, batches)
    now = time.time()
    readings = {}
    for name, result in got.items():
        base = verdicts[name].readings.allreduce if verdicts[name].readings is not None else None
        readings[name] = AllReduceReading(now, {**(base.results if base else {}), RACK: result.to_dict()},
                                          base.error if base else None)
        verdicts[name] = judge(outputs[name], measured.get(name), readings[name])[0]
    store_allreduce(job, {n: AllReduceReading(now, {RACK: r.to_dict()}) for n, r in got.items()}, settings, say,
                    batches)
    return readings


def run_verify(opts: VerifyOptions, stream=None) -> tuple[int, dict[str, Verdict], dict]:
    """The fleet job. Returns (exit code, verdict per node, report paths)."""
    from ccrhost.fleet.report import text_table, write_reports
    from ccrhost.node import drain as node_drain

    say = Progress(stream)
    inside = os.environ.get("SLURM_JOB_ID")
    nodes = list_nodes(opts.partition, opts.nodelist)
    if inside:
        mine = set(expand_hostlist(os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST", "")))
        if not opts.nodelist:
            nodes = {n: v for n, v in nodes.items() if n in mine}
        strangers = sorted(set(nodes) - mine)
        if strangers:
            raise VerifyError(f"nodes {','.join(strangers)} are not in the allocation of job {inside}")
        usable = list(nodes)
    else:
        usable = [n for n, v in nodes.items() if v.usable]
    if not nodes:
        raise VerifyError(f"no nodes{f' in partition {opts.partition}' if opts.partition else ''}"
                          f"{f' matching {opts.nodelist}' if opts.nodelist else ''}")
    capped = (opts.nccl is not None or opts.dcgm is not None or opts.rack_nvlink is not None
              or opts.idle_only) and not inside
    if (capped or not opts.include_busy) and not inside:
        # only idle nodes (in batches of at most the cap where capped): a job for a node that runs
        # another would wait for it (up to --wait), and the check would run beside that job
        usable = [n for n in usable if nodes[n].state == "idle"]
    batch_cap = opts.max_nodes or min((o.max_nodes for o in (opts.nccl, opts.dcgm, opts.rack_nvlink)
                                       if o is not None), default=64)
    verdicts: dict[str, Verdict] = {n: drained_verdict(v) if not v.usable or inside else busy_verdict(v)
                                    for n, v in nodes.items() if n not in usable}
    say(f"{len(nodes)} nodes, {len(usable)} can run the check"
        + (f"; not checked: {', '.join(sorted(verdicts))}" if verdicts else ""))
    job = inside
    batches = None
    evidence: dict = {}  # node -> slurm_evidence.Fetched: the bundles its check named
    would: dict[str, list[str]] = {}  # node -> the scontrol lines a dry run or an observing node did not run
    wiring = None  # fleet/wiring_report.WiringReport, where any node's settings turn wiring on
    racks = None  # fleet/rack_report.RackReport, where any node's settings turn imex_enable on
    try:
        if inside:
            say(f"running in the existing allocation of job {inside}")
        if capped:
            batches = Batches(opts, say, batch_cap)
            say(f"at most {batches.cap} nodes held at once: each batch its own job, released before the next")
        while usable and not job and not capped:
            try:
                job = submit(usable, opts, say)
            except NodesLost as lost:  # never wait on them: report each with its reason, go on with the rest
                for name, node in lost.nodes.items():
                    verdicts[name] = drained_verdict(node)
                usable = [n for n in usable if n not in lost.nodes]
        if usable:
            if capped:
                outputs = {}
                for chunk in batches.chunks(usable):
                    with batches.hold(chunk) as (held, taken):
                        if taken:
                            got = check_step(held, taken, opts, say)
                            outputs.update(got)
                            evidence.update(_fetch_evidence(held, got, opts, say))  # while the batch is held
                usable = [n for n in usable if n in outputs]
            else:
                outputs = check_step(job, usable, opts, say)
                evidence.update(_fetch_evidence(job, outputs, opts, say))
            settings = {}
            for name in usable:
                verdicts[name], node_settings = judge(outputs[name])
                if node_settings is not None:
                    settings[name] = node_settings
            measured, allreduce = {}, {}
            if opts.measure:
                measured = measure_pairs(job, {n: verdicts[n] for n in usable}, settings,
                                    {n: nodes[n].address for n in usable}, opts, say, batches)
                for name, m in measured.items():
                    verdicts[name] = judge(outputs[name], m)[0]
            if opts.nccl is not None:
                from ccrhost.fleet.slurm_nccl import node_infos, run_modes

                infos = node_infos({n: verdicts[n] for n in usable if n in settings},
                                   {n: nodes[n].address for n in usable})
                readings = run_modes(job, infos, opts.nccl, say, batches=batches)
                for name, reading in readings.items():
                    verdicts[name] = judge(outputs[name], measured.get(name), reading)[0]
                store_allreduce(job, readings, settings, say, batches)
                allreduce = readings
            if opts.rack_nvlink is not None:
                allreduce.update(rack_allreduce(job, {n: verdicts[n] for n in usable if n in settings}, outputs,
                                                measured, settings, {n: nodes[n].address for n in usable}, opts,
                                                say, batches, verdicts))
            if opts.dcgm is not None:
                from ccrhost.fleet.slurm_dcgm import run_diag

                # nodes whose own check judged readings (the same nodes the all-reduce gate runs on)
                judged = [n for n in usable if n in settings and verdicts[n].evaluated]
                diag = run_diag(job, judged, opts.dcgm, opts.ccrhost, opts.config, say, batches)
                for name, reading in diag.items():
                    reading.required = settings[name].verify_dcgm  # judged as the node's own check judges it
                    verdicts[name] = judge(outputs[name], measured.get(name), allreduce.get(name), reading)[0]
            if batches is not None:
                for name, node in batches.lost.items():
                    if name not in outputs:
                        verdicts[name] = drained_verdict(node)
                for name, node in batches.busy.items():
                    if name not in outputs:
                        verdicts[name] = busy_verdict(node)
            apply_fleet_rules(verdicts, opts.fleet_tolerance)
            # the fleet's wiring (issue 48) before the drains: leaf_suspect rides along in their reasons
            from ccrhost.fleet.wiring_report import report as wiring_report

            to_slurm = opts.topology_conf if not opts.dry_run else None  # a dry run changes nothing of Slurm's
            wiring = wiring_report(verdicts, settings, opts.report_dir, say, topology_conf=to_slurm,
                                   cluster=list(nodes))
            if wiring is not None and opts.topology_conf and opts.dry_run:
                say(f"wiring: dry run: {opts.topology_conf} not written (the report directory's topology.conf is)")
            # the NVLink racks (issue 49): a FAIL rack reason drains its tray below, the block file leaves it out
            from ccrhost.fleet.rack_report import FILE as BLOCK_FILE
            from ccrhost.fleet.rack_report import report as rack_report

            racks = rack_report(verdicts, settings, opts.report_dir, say,
                                topology_block=opts.topology_block if not opts.dry_run else None,
                                cluster=list(nodes))
            if racks is not None and opts.topology_block and opts.dry_run:
                say(f"rack: dry run: {opts.topology_block} not written (the report directory's {BLOCK_FILE} is)")
            if opts.drain:
                # before the allocation ends, so no job lands on a node about to be drained
                # (capped: after the last batch; a job that landed meanwhile runs to its end)
                for name in usable:
                    v, reason = verdicts[name], nodes[name].reason
                    ours = reason is not None and reason.startswith(DRAIN_PREFIX)
                    if v.status == FAIL or (ours and v.status in (OK, WARN)):
                        cap = settings[name].drain_cap() if name in settings else None
                        if cap is not None:
                            cap = replace(cap, textfile=None)  # the node's own file, not the controller's
                        # --dry-run, or the node's own settings observe only (slurm_mode): say, do not act
                        dry = opts.dry_run or getattr(settings.get(name), "slurm_mode", None) == "observe"
                        note = node_drain.drain(v, node=name, scontrol="scontrol",
                                                measured=opts.measure or opts.nccl is not None
                                                or opts.rack_nvlink is not None,
                                                cap=cap, dry_run=dry)
                        say(note)
                        if note.actions:
                            would[name] = list(note.actions)
                        if note.held and not dry:
                            v.reasons.append(Reason(WARN, "drain_capped",
                                                    f"the drain cap held: not drained ({note.held.text()})"))
    finally:
        if job and not inside:
            run_slurm("scancel", job, check=False)
    paths = write_reports(verdicts, opts.report_dir,
                          meta={"engine": "slurm", "job": job, "partition": opts.partition,
                                "addresses": {n: v.address for n, v in nodes.items()},
                                **({"evidence": {n: f.to_dict() for n, f in sorted(evidence.items())}}
                                   if evidence else {}),
                                **({"would_run": dict(sorted(would.items()))} if would else {}),
                                **({"wiring": wiring.to_dict()} if wiring is not None else {}),
                                **({"rack": racks.to_dict()} if racks is not None else {})},
                          addresses={n: v.address for n, v in nodes.items()})
    stream = stream if stream is not None else sys.stderr
    stream.write("\n" + text_table(verdicts))
    for name, lines in sorted(would.items()):
        stream.write("".join(f"{name}: not done (dry run or slurm_mode observe): {line}\n" for line in lines))
    stream.write(f"Reports: {', '.join(str(p) for p in paths.values())}\n")
    return EXIT_CODES[worst(v.status for v in verdicts.values())], verdicts, paths
