"""deploys/accept.py end to end on a 3-node lab without Slurm (issue 50):
the stages over pyinfra's SSH connections, each node's certificate stored
on it.

node3 cannot reach node1 or node2 over the fabric (unreachable=node1+node2:
SSH still works): its passive check and S1 (DCGM diag, GEMM) pass, the full
mesh (S2) prunes it. A --dry run first runs only the passive check and
writes nothing anywhere. The real run certifies node1 and node2 with a
certificate file on each, and fails node3 naming S2 and rdma_mesh_pruned.
S4 runs the all-reduce over growing groups under the lab's mpirun. With
node3's routes mended, a second run re-runs only what did not hold: node3's
mesh, pairs, scale and soak (its S1 held), node1 and node2 their passive
check alone (partners in the fleet stages, not re-recorded).
"""

import json

import pytest
from conftest import lab_inventory, lab_ssh, node_address, run_pyinfra

pytestmark = pytest.mark.lab

CERT = "/var/lib/ccrhost/certificate.json"
DATA = {"accept_stages": ("check", "node", "mesh", "pairs", "scale", "soak"), "accept_soak_minutes": 0.05,
        # S4's groups under the lab's mpirun (ranks on the other nodes started over SSH)
        "verify_allreduce_launcher": "mpirun", "verify_allreduce_iters": 5, "verify_allreduce_timeout": 20,
        "accept_dcgm_level": 1, "accept_mesh_timeout": 3, "verify_gemm_seconds": 5,
        "verify_dcgm_state": "/run/ccrhost/dcgm.json", "verify_dcgm_engine_timeout": 3,
        "verify_dcgm_timeouts": {1: 8, 2: 8, 3: 8, 4: 8},
        # 1 s ib_write_bw runs on a busy machine can read low: the bandwidth is not what this test is about
        "verify_measure_seconds": 1, "verify_measure_retries": 0, "verify_measure_timeout": 20,
        "verify_measure_min_fraction": 0.5}


def stored(lab, node: str) -> dict | None:
    got = lab_ssh(lab, node, f"cat {CERT}")
    return json.loads(got.stdout) if got.returncode == 0 else None


def accept(tmp_path, inventory: str, *args: str):
    """deploys/accept.py, its output kept beside the test's other files (accept-N.log)."""
    run = run_pyinfra("deploys/accept.py", *args, inventory=inventory, timeout=300)
    (tmp_path / f"accept-{len(list(tmp_path.glob('accept-*.log'))) + 1}.log").write_text(run.out)
    return run


def runs_of(cert: dict) -> dict[str, str]:
    return {s: r["run"] for s, r in cert["stages"].items()}


def test_accept_deploy_certifies_the_healthy_nodes_fails_the_cut_one_and_resumes(make_lab, tmp_path):
    lab = make_lab(nodes=3, faults=["node3:unreachable=node1+node2"])
    report = tmp_path / "report"
    inventory = lab_inventory(tmp_path, **DATA)

    dry = accept(tmp_path, inventory, "--dry")
    assert "Traceback" not in dry.out, dry.out
    assert ("acceptance (dry run): would run S1 node-local, S2 connectivity mesh, S3 pair bandwidth, S4 scale, "
            "S5 soak") in dry.out
    assert dry.rc == 0 and "would run: fail" not in dry.out, dry.out
    assert f"would run: write {CERT} (" in dry.out  # the certificate it would store, not stored
    assert [stored(lab, f"node{i}") for i in (1, 2, 3)] == [None, None, None]
    assert not report.exists()

    run = accept(tmp_path, inventory)
    assert run.rc == 1, run.out
    assert "Traceback" not in run.out
    certs = {i: stored(lab, f"node{i}") for i in (1, 2, 3)}
    for i in (1, 2):
        cert = certs[i]
        assert cert["node"] == node_address(i) and cert["issued_at"] is not None, run.out
        assert {s: r["status"] for s, r in cert["stages"].items()} == {
            "check": "OK", "node": "OK", "mesh": "OK", "pairs": "OK", "scale": "OK", "soak": "OK"}, cert
        assert cert["stages"]["pairs"]["figures"]["gemm_tflops_min"] > 0
        # the report directory keeps the same certificate
        assert json.loads((report / "certificates" / f"{node_address(i)}.json").read_text()) == cert
    bad = certs[3]
    assert {s: r["status"] for s, r in bad["stages"].items()} == {
        "check": "OK", "node": "OK", "mesh": "FAIL"}, bad
    assert bad["issued_at"] is None
    assert f"[{node_address(3)}] acceptance failed at S2 connectivity mesh: FAIL rdma_mesh_pruned: failed 2 of 2 " \
           "RDMA mesh pairs" in run.out
    first_run = bad["stages"]["check"]["run"]

    lab.clear("node3", "unreachable")
    again = accept(tmp_path, inventory)
    assert again.rc == 0, again.out
    after = {i: stored(lab, f"node{i}") for i in (1, 2, 3)}
    second_run = after[3]["stages"]["check"]["run"]
    assert second_run != first_run
    assert runs_of(after[3]) == {"check": second_run, "node": first_run, "mesh": second_run, "pairs": second_run,
                                 "scale": second_run, "soak": second_run}, after[3]
    assert after[3]["issued_at"] is not None
    for i in (1, 2):
        assert runs_of(after[i]) == {**runs_of(certs[i]), "check": second_run}, after[i]
    doc = json.loads((report / "accept.json").read_text())
    assert doc["ran"] == {node_address(1): ["check"], node_address(2): ["check"],
                          node_address(3): ["check", "mesh", "pairs", "scale", "soak"]}
    # S4 ran each group under mpirun from its first node: the pair, then all three
    groups = [r["group"] for r in doc["details"]["scale"]["runs"]]
    assert groups[0] == [node_address(1), node_address(2)] and len(groups[-1]) == 3, doc["details"]["scale"]
    assert "mpirun --lab-orted" in (lab.root("node2") / "run/ccrhost-lab/commands.log").read_text()
