"""``ccrhost slurm verify`` collects the evidence bundles (issue 40): a FAIL
node's bundle is copied into the report directory through an srun step;
a bundle too large, gone or not ccrhost's gets a note, never a changed
verdict. The stand-in for srun runs each node's branch of the real step
script with the node's SLURMD_NODENAME and labels its lines as ``srun -l``."""

from __future__ import annotations

import json
import subprocess

from test_actions import remap_pending_on_gpu2
from test_evidence import NOW, fake_nvidia_smi, settings

from ccrhost.fleet import slurm_check, slurm_client, slurm_evidence
from ccrhost.fleet.measure import HostMeasurement
from ccrhost.node import evidence


def local_steps(calls):
    """A stand-in for slurm_client.run_steps: the same case scripts, run here."""
    def run_steps(job, branches, name, timeout):
        calls.append((job, sorted(branches), name))
        results = {}
        for nodes, script in slurm_client._case_steps(branches):
            for task, node in enumerate(nodes):
                out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=timeout,
                                     env={"SLURMD_NODENAME": node, "PATH": "/usr/bin:/bin"})
                tasks = {}
                slurm_client._labelled([f"{task}: {line}" for line in out.stdout.splitlines()], tasks)
                results.update(slurm_client._by_node(tasks))
        return lambda: (results, "")
    return run_steps


def failed_bundle(tmp_path, monkeypatch, folder="node-evidence"):
    if not (tmp_path / "bin").exists():
        fake_nvidia_smi(tmp_path, monkeypatch)
    v = remap_pending_on_gpu2()
    v.evidence = evidence.keep_evidence(settings(tmp_path / folder), v, NOW)
    return v


def test_a_fail_nodes_bundle_lands_in_the_report_dir_and_the_report_names_it(tmp_path, monkeypatch):
    v = failed_bundle(tmp_path, monkeypatch)
    gone = failed_bundle(tmp_path, monkeypatch, "pruned")
    for p in (tmp_path / "pruned" / "20261205T082117Z").iterdir():
        p.unlink()
    (tmp_path / "pruned" / "20261205T082117Z").rmdir()
    outputs = {"node1": slurm_check.CheckOutput("node1", None, json.dumps(v.to_dict()), 2),
               "node2": slurm_check.CheckOutput("node2", None, json.dumps(gone.to_dict()), 2),
               "node3": slurm_check.CheckOutput("node3", None, '{"status": "OK", "evidence": null}', 0)}
    named = {n: slurm_evidence.evidence_of(o.text) for n, o in outputs.items()}
    assert named == {"node1": v.evidence, "node2": gone.evidence, "node3": None}
    calls, said = [], []
    report = tmp_path / "report"
    got = slurm_evidence.collect("77", {n: p for n, p in named.items() if p}, report, said.append,
                                 run_steps=local_steps(calls))
    assert calls == [("77", ["node1", "node2"], "ccrhost-evidence")]
    copy = report / "evidence" / "node1" / "20261205T082117Z"
    assert got["node1"].to_dict() == {"bundle": "20261205T082117Z", "path": str(copy), "bytes": got["node1"].bytes}
    assert got["node1"].bytes > 0
    node_files = sorted(p.name for p in (tmp_path / "node-evidence" / "20261205T082117Z").iterdir())
    assert sorted(p.name for p in copy.iterdir()) == node_files == \
        ["kernel-log.txt", "nvidia-smi-q-gpu2.txt", "verdict.json"]
    for name in node_files:
        assert (copy / name).read_bytes() == (tmp_path / "node-evidence" / "20261205T082117Z" / name).read_bytes()
    assert got["node2"].path is None and got["node2"].note == \
        "bundle 20261205T082117Z is not on the node (removed by age, or its folder is not readable)"
    assert not (report / "evidence" / "node2").exists()
    assert said[-1] == f"evidence of node2: {got['node2'].note}"


def test_a_bundle_over_the_cap_stays_on_the_node_and_a_path_that_is_no_bundle_is_never_fetched(tmp_path, monkeypatch):
    v = failed_bundle(tmp_path, monkeypatch)
    calls = []
    report = tmp_path / "report"
    got = slurm_evidence.collect("77", {"node1": v.evidence, "node2": "/etc", "node3": "/var/../etc/20261205T082117Z",
                                        "../x": v.evidence}, report, lambda _: None, cap=64,
                                 run_steps=local_steps(calls))
    assert calls == [("77", ["node1"], "ccrhost-evidence")]  # only the bundle a check names is asked for
    assert got["node1"].path is None and got["node1"].bytes == 65  # cut one byte past the cap
    assert got["node1"].note == "bundle 20261205T082117Z is over 64 bytes: not copied, it stays on the node"
    assert got["node2"].note == "'/etc' is not a bundle ccrhost names: not fetched"
    assert got["node3"].note.endswith("is not a bundle ccrhost names: not fetched")
    assert got["../x"].note.endswith("is not a bundle ccrhost names: not fetched")
    assert not report.exists()


def test_a_step_that_gave_nothing_or_garbage_is_a_note(tmp_path):
    assert slurm_evidence.unpack("n", "20261205T082117Z", None, tmp_path, 100).note == "no output from the evidence step"
    assert slurm_evidence.unpack("n", "20261205T082117Z", ["@@tar", "AAAA"], tmp_path, 100).note == \
        "the evidence step did not finish: @@tar AAAA"
    assert slurm_evidence.unpack("n", "20261205T082117Z", [], tmp_path, 100).note == "the evidence step did not finish"
    assert slurm_evidence.unpack("n", "20261205T082117Z", ["@@tar", "!!", "@@end"], tmp_path, 100).note.startswith(
        "the bundle's base64 does not decode")
    assert slurm_evidence.unpack("n", "20261205T082117Z", ["@@tar", "@@end"], tmp_path, 100).note == \
        "tar gave nothing for 20261205T082117Z (can the step's user read verify_evidence_dir?)"
    assert list(tmp_path.iterdir()) == []


def test_a_re_judged_verdict_keeps_naming_its_bundle(tmp_path, monkeypatch):
    import yaml

    v = failed_bundle(tmp_path, monkeypatch)
    out = slurm_check.CheckOutput("node1", yaml.safe_dump({"verify_profile": "hgx-h100-8x400"}), json.dumps(v.to_dict()), 2)
    assert slurm_check.judge(out)[0].evidence == v.evidence
    measured = HostMeasurement(gbps={f"mlx5_{i}": 390.0 for i in range(8)})
    again = slurm_check.judge(out, measured)[0]  # evaluated again with the measurement: the bundle is still named
    assert again.readings.ports[0].measured_gbps == 390.0 and again.evidence == v.evidence


def test_a_stream_cut_short_is_asked_for_once_more(tmp_path, monkeypatch):
    v = failed_bundle(tmp_path, monkeypatch)
    calls, said = [], []
    real = local_steps(calls)

    def flaky(job, branches, name, timeout):
        results, error = real(job, branches, name, timeout)()
        if len(calls) == 1:  # the first stream loses its tail, as srun's did twice on the Slurm lab
            results = {n: lines[:-3] for n, lines in results.items()}
        return lambda: (results, error)

    got = slurm_evidence.collect("77", {"node1": v.evidence}, tmp_path / "report", said.append, run_steps=flaky)
    assert len(calls) == 2 and got["node1"].path == str(tmp_path / "report/evidence/node1/20261205T082117Z")
    assert said[1].startswith("evidence of node1: the evidence step did not finish: ") and \
        said[1].endswith("; asking again")

    def always_cut(job, branches, name, timeout):
        results, error = real(job, branches, name, timeout)()
        return lambda: ({n: lines[:-3] for n, lines in results.items()}, error)

    calls.clear()
    got = slurm_evidence.collect("77", {"node1": v.evidence}, tmp_path / "report2", said.append, run_steps=always_cut)
    assert len(calls) == 2 and got["node1"].path is None  # once more, not forever
    assert got["node1"].note.startswith("the evidence step did not finish")
