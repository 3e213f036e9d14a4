"""`ccrhost slurm verify` with Slurm faked, for the fleet views' tests
(tests/test_wiring_report.py, tests/test_rack_report.py): the nodes idle,
the job submitted, each node's check step printing its verdict and its
check.yaml, every drain recorded instead of run. And ``asked_for``: which
nodes it asks a job for, of an idle, a mixed and an allocated node
(tests/test_slurm_verify.py, tests/test_rack_nvlink.py)."""

import io
import json

import pytest
from test_slurm_verify import task_lines

from ccrhost.model.drain_reason import drain_reason


def run_verify(monkeypatch, tmp_path, verdicts, config_of, **options):
    """(exit code, verdicts, drained node -> reason, what it said); ``config_of(node)``: its check.yaml."""
    from ccrhost.fleet import slurm_verify
    from ccrhost.fleet.slurm_check import parse_check_task
    from ccrhost.fleet.slurm_client import SlurmNode
    from ccrhost.fleet.slurm_job import VerifyOptions
    from ccrhost.node import drain as node_drain

    drained = {}

    def drain(v, node=None, **kw):
        drained[node] = drain_reason(v)
        return node_drain._note(f"drained {node}: {drained[node]}")

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(slurm_verify, "list_nodes", lambda p, n: {
        name: SlurmNode(name, f"10.0.0.{i}", "idle", None) for i, name in enumerate(verdicts, 1)})
    monkeypatch.setattr(slurm_verify, "submit", lambda usable, opts, say: "77")
    monkeypatch.setattr(slurm_verify, "run_slurm", lambda *a, **k: None)
    monkeypatch.setattr(slurm_verify, "check_step", lambda job, nodes, opts, say: {
        n: parse_check_task(task_lines(n, json.dumps(verdicts[n].to_dict(), default=str), verdicts[n].exit_code,
                                       config=config_of(n))) for n in nodes})
    monkeypatch.setattr(node_drain, "drain", drain)
    stream = io.StringIO()
    code, got, _ = slurm_verify.run_verify(VerifyOptions("gpu", report_dir=str(tmp_path / "report"), **options),
                                           stream=stream)
    return code, got, drained, stream.getvalue()


class Asked(Exception):
    """The fake submit's stop: run_verify asked for a job."""


def asked_for(monkeypatch, opts) -> tuple[list[list[str]], str]:
    """(the nodes each job was asked for, what run_verify said before) of n1 idle, n2 mixed and n3
    allocated: the first job asked for (one job, or a batch's under a cap) stops it."""
    from ccrhost.fleet import slurm_job, slurm_verify
    from ccrhost.fleet.slurm_client import SlurmNode

    asked = []

    def submit(usable, opts, say):
        asked.append(list(usable))
        raise Asked

    nodes = {"n1": SlurmNode("n1", "10.0.0.1", "idle", None), "n2": SlurmNode("n2", "10.0.0.2", "mixed", None),
             "n3": SlurmNode("n3", "10.0.0.3", "allocated", None)}
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(slurm_verify, "list_nodes", lambda p, n: nodes)
    monkeypatch.setattr(slurm_job, "list_nodes", lambda nodelist: {k: nodes[k] for k in nodelist.split(",")})
    monkeypatch.setattr(slurm_verify, "submit", submit)  # one job for all the nodes
    monkeypatch.setattr(slurm_job, "submit", submit)  # a batch's job (Batches.hold), where capped
    said = io.StringIO()
    with pytest.raises(Asked):
        slurm_verify.run_verify(opts, stream=said)
    return asked, said.getvalue()
