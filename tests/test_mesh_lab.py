"""Acceptance S2 end to end on a 5-node Slurm lab: the full mesh of
ib_write_lat pairs as job steps (fleet/slurm_mesh.run_mesh) prunes exactly
the node that cannot reach its peers.

node2 has ``unreachable=node3+node4+node5``: a real unreachable route per
peer in its network namespace. Its pairs with them fail for real from
either end (its own connects fail at once, its answers to theirs go
nowhere until the pair's timeout), its pair with node1 passes, and Slurm
still reaches it (the controller's path is not routed away). Five nodes
take five rounds (the odd count rests one a round).
"""

import subprocess

import pytest
from conftest import heal_slurm_lab

from ccrhost.lab import slurm as lab_slurm

pytestmark = pytest.mark.lab

SLURM_NODES = 5
SLURM_HEALTHCHECK_INTERVAL = 0  # nothing here waits on the health check
NODES = [f"node{i}" for i in range(1, 6)]


def routes(lab, node: str) -> list[str]:
    out = subprocess.run(["ip", "-n", lab.node(node).netns, "route", "show", "type", "unreachable"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(line.split()[1] for line in out.splitlines())


def test_mesh_prunes_exactly_the_node_that_reaches_no_peer(slurm_lab, monkeypatch):
    from ccrhost.fleet.slurm_job import Progress, VerifyOptions, submit
    from ccrhost.fleet.slurm_mesh import MeshOptions, run_mesh

    lab = slurm_lab
    monkeypatch.setenv("SLURM_CONF", lab_slurm.client_env(lab)["SLURM_CONF"])
    addresses = {n: lab.node(n).address for n in NODES}
    job = None
    try:
        assert lab.fault("node2", "unreachable=node3+node4+node5") == ["unreachable=node3+node4+node5"]
        assert routes(lab, "node2") == sorted(addresses[n] for n in ("node3", "node4", "node5"))
        say = Progress()
        job = submit(NODES, VerifyOptions(wait=60), say)
        # timeout 4: a healthy pair takes well under a second; a cut pair waits it out once a round
        got = run_mesh(job, addresses, dict.fromkeys(NODES, "mlx5_0"), MeshOptions(timeout=4, iters=100), say)
        assert got.rounds == 5 and len(got.pairs) == 10
        assert [p.node for p in got.pruned] == ["node2"]
        assert {n: [(r.level, r.code) for r in rs] for n, rs in got.reasons.items()} == {
            "node1": [], "node2": [("FAIL", "rdma_mesh_pruned")], "node3": [], "node4": [], "node5": []}
        assert got.reasons["node2"][0].message == (
            "failed 3 of 4 RDMA mesh pairs (75%; at least 50% prunes, AMD cvs prune_failure_threshold): "
            "with node3, node4, node5")
        states = {frozenset((p.server, p.client)): p.state for p in got.pairs}
        assert {k: v for k, v in states.items() if v != "pass"} == {
            frozenset(("node2", n)): "failed" for n in ("node3", "node4", "node5")}
        passed = [p.reading for p in got.pairs if p.state == "pass"]
        assert {(r.iterations, r.p99 < 4.2) for r in passed} == {(100, True)}
        # node2's own connects fail at once in perftest's words; a peer's connect to node2 waits for its timeout
        for p in got.pairs:
            if p.state == "failed":
                words = ("Unable to init the socket connection" if p.client == "node2"
                         else "ib_write_lat timed out after 4 s")
                assert f"client {p.client}: " in p.reasons[0].message and words in p.reasons[0].message, p
    finally:
        if job:
            lab_slurm.run(lab, "scancel", job)
        heal_slurm_lab(lab)
    assert routes(lab, "node2") == []
