"""Acceptance S4 on a 6-node Slurm lab: node5 carries ``group_slow=4`` (its
NIC degrades in a ring of four nodes or more). Its pairs pass; the scale
stage grows groups 2, 4, 6, fails at 6, and bisects that step's two new
nodes to node5 (allreduce_scale_slow), admitting the five others."""

import math
import time

import pytest
from conftest import heal_slurm_lab, node_address

from ccrhost.fleet.slurm_nccl import NcclOptions, NodeInfo, pair_run
from ccrhost.fleet.slurm_scale import run_scale
from ccrhost.lab import slurm as lab_slurm
from ccrhost.lab.inventory import LAB_PLATFORM
from ccrhost.model.platform import resolve

pytestmark = pytest.mark.lab

SLURM_NODES = 6
SLURM_HEALTHCHECK_INTERVAL = 0
NODES = [f"node{i}" for i in range(1, SLURM_NODES + 1)]


@pytest.fixture
def held(slurm_lab, monkeypatch):
    lab = slurm_lab
    lab.fault("node5", "group_slow=4")
    monkeypatch.setenv("SLURM_CONF", lab_slurm.client_env(lab)["SLURM_CONF"])
    job = lab_slurm.run(lab, "sbatch", "--parsable", "-J", "ccrhost-scale", "-w", ",".join(NODES), "-N",
                        str(SLURM_NODES), "--exclusive", "-o", "/dev/null", "--wrap", "exec sleep 3600",
                        check=True).stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while lab_slurm.run(lab, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() != "RUNNING":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.3)
        yield job
    finally:
        heal_slurm_lab(lab)


def test_a_node_that_slows_a_large_group_but_passes_pairs_is_named(held):
    job = held
    opts = NcclOptions(max_bytes="64M", iters=2, timeout=60, platform=resolve(LAB_PLATFORM))
    infos = {n: NodeInfo(n, node_address(i), 8, "NVIDIA H100 80GB HBM3", (400.0,) * 8)
             for i, n in enumerate(NODES, start=1)}
    # its pairs pass: the fault is invisible to the pair mode
    pair = pair_run(job, infos["node5"], infos["node6"], opts, 0)
    assert pair.verdict.status == "OK", pair.verdict.message
    said = []
    out = run_scale(job, infos, opts, said.append)
    assert out.admitted == ("node1", "node2", "node3", "node4", "node6"), "\n".join(said)
    assert set(out.reasons) == {"node5"}, out.reasons
    reason = out.reasons["node5"]
    assert (reason.level, reason.code) == ("FAIL", "allreduce_scale_slow")
    assert reason.message.startswith("node5: slowed a group of 6 nodes at admission step 3: busbw "), reason.message
    assert "over 5 nodes with it" in reason.message and "over 4 nodes without it" in reason.message
    bisect = [r for r in out.runs if r.step == 3 and r.purpose in ("halve", "confirm")]
    assert 1 <= len(bisect) <= math.ceil(math.log2(2)) + 1
    assert [len(r.group) for r in out.runs if r.purpose == "step"] == [2, 4, 6]
    assert out.runs[-1].group == ("node1", "node2", "node3", "node4", "node6") and out.runs[-1].passed
