"""Acceptance S2 as Slurm steps (fleet/slurm_mesh.py): each pair judged
from its two ends' step output, built from ib_write_lat's verbatim reports
(tests/fixtures/perftest_lat), and the nodes judged from the pairs."""

from pathlib import Path

import pytest

from ccrhost.fleet import slurm_mesh
from ccrhost.fleet.slurm_mesh import MeshOptions, PairOutcome, judge_pair, outcome, run_mesh
from ccrhost.model.status import FAIL, UNKNOWN

FIXTURES = Path(__file__).parent / "fixtures" / "perftest_lat"
OPTS = MeshOptions(timeout=5, iters=200)
# perftest's own words when the peer does not answer (the lab's ib_write_bw shim prints them too)
REFUSED = [" Couldn't connect to 198.18.0.13:18700",
           "Unable to open file descriptor for socket connection Unable to init the socket connection", "@@rc 1"]


def report(name: str, rc: int = 0) -> list[str]:
    return [*(FIXTURES / name).read_text().splitlines(), f"@@rc {rc}"]


def test_scripts_run_one_bounded_ib_write_lat_per_end():
    assert slurm_mesh.server_script("mlx5_0", OPTS) == (
        "if ! command -v ib_write_lat >/dev/null 2>&1; then echo '@@missing'; exit 0; fi; "
        "timeout 5 ib_write_lat -d mlx5_0 -p 18700 -n 200 -F </dev/null 2>&1; echo \"@@rc $?\"")
    assert slurm_mesh.client_script("mlx5_1", "198.18.0.12", OPTS).endswith(
        "timeout 5 ib_write_lat -d mlx5_1 -p 18700 -n 200 -F 198.18.0.12 </dev/null 2>&1; echo \"@@rc $?\"")


def test_a_connected_pair_within_the_limit_passes():
    got = judge_pair("node1", "node2", "rocep1s0f1", report("write_lat_rdma_cm.txt"),
                     report("write_lat_rdma_cm.txt"), OPTS)
    assert (got.state, got.passed, got.reasons, got.reading.p99) == ("pass", True, [], 1.57)
    assert got.to_dict() == {"server": "node1", "client": "node2", "state": "pass", "p99_us": 1.57,
                             "typical_us": 1.47, "reasons": []}


def test_a_high_p99_fails_the_pair_with_rdma_latency_high():
    got = judge_pair("node1", "node2", "mlx4_0", report("read_lat_mlx4_cpu_warning.txt"),
                     report("read_lat_mlx4_cpu_warning.txt"), MeshOptions(max_p99_us=1.8))
    assert (got.state, got.passed) == ("high", False)
    assert [(r.level, r.code, r.message) for r in got.reasons] == [
        (FAIL, "rdma_latency_high", "node2 mlx4_0 -> node1: ib_write_lat p99 1.88 µs is above 1.8 µs "
                                    "(accept_latency_max_p99_us)")]
    assert judge_pair("a", "b", "mlx5_0", [], report("write_lat_ib_all_sizes_cpu_warnings.txt"),
                      OPTS).state == "pass"  # its smallest size, 4096 bytes: p99 3.93, under Imbue's 4.2


def test_a_failed_connection_fails_the_pair_in_the_tools_own_words():
    got = judge_pair("node3", "node2", "mlx5_0", ["@@rc 124"], REFUSED, OPTS)
    assert (got.state, got.passed) == ("failed", False)
    assert [(r.level, r.code, r.message) for r in got.reasons] == [
        (UNKNOWN, "rdma_latency_unreadable", "node2 mlx5_0 -> node3: RDMA latency not read: client node2: "
         "ib_write_lat failed: Unable to open file descriptor for socket connection Unable to init the socket "
         "connection (no ib_write_lat report header found); server node3: no client connected within 5 s")]
    # the client hanging in connect() until its timeout (the server's answers routed nowhere)
    hung = judge_pair("node2", "node3", "mlx5_0", [" Port number 1 state is Down", " Couldn't set the link layer",
                                                   "@@rc 1"], ["@@rc 124"], OPTS)
    assert hung.state == "failed"
    assert hung.reasons[0].message == ("node3 mlx5_0 -> node2: RDMA latency not read: client node3: ib_write_lat "
                                       "timed out after 5 s; server node2: Couldn't set the link layer")


def test_a_pair_an_end_could_not_run_is_not_judged_and_blames_that_end():
    missing = judge_pair("node1", "node2", "mlx5_0", ["@@missing"], report("write_lat_rdma_cm.txt"), OPTS)
    assert (missing.state, missing.passed, missing.blame) == ("not run", None, ("node1",))
    assert missing.reasons[0].message == ("node2 mlx5_0 -> node1: RDMA latency not read: node1: ib_write_lat not "
                                          "found (install perftest)")
    silent = judge_pair("node1", "node2", "mlx5_0", ["@@rc 124"], None, OPTS, "srun: error: node2: lost")
    assert (silent.state, silent.blame) == ("not run", ("node2",))
    assert silent.reasons[0].message.endswith("node2: no output from its job step (srun: error: node2: lost)")
    # the server's step said nothing, the client read a report: the pair ran
    assert judge_pair("node1", "node2", "x", None, report("write_lat_rdma_cm.txt"), OPTS).state == "pass"


def _pair(s, c, state, msg="m"):
    from ccrhost.model.status import Reason

    level = {"high": FAIL, "failed": UNKNOWN, "not run": UNKNOWN}.get(state)
    code = "rdma_latency_high" if state == "high" else "rdma_latency_unreadable"
    return PairOutcome(s, c, state, reasons=[Reason(level, code, msg)] if level else [],
                       blame=(c,) if state == "not run" else ())


def test_a_node_failing_most_pairs_is_pruned_and_its_peers_pass():
    nodes = ["node1", "node2", "node3", "node4", "node5"]
    bad = {("node2", "node3"), ("node4", "node2"), ("node2", "node5")}
    pairs = [_pair(a, b, "failed" if (a, b) in bad else "pass") for i, a in enumerate(nodes) for b in nodes[i + 1:]]
    pairs = [_pair(p.client, p.server, "failed") if (p.client, p.server) in bad else p for p in pairs]
    got = outcome(nodes, pairs, 5, OPTS)
    assert [p.node for p in got.pruned] == ["node2"]
    assert {n: [(r.level, r.code) for r in rs] for n, rs in got.reasons.items()} == {
        "node1": [], "node2": [(FAIL, "rdma_mesh_pruned")], "node3": [], "node4": [], "node5": []}
    assert got.reasons["node2"][0].message == ("failed 3 of 4 RDMA mesh pairs (75%; at least 50% prunes, AMD cvs "
                                               "prune_failure_threshold): with node3, node4, node5")
    assert (got.rounds, got.status("node2"), got.status("node1")) == (5, FAIL, "OK")


def test_failed_pairs_between_nodes_kept_stay_on_both_ends():
    nodes = ["a", "b", "c", "d"]
    pairs = [_pair("a", "b", "high", "slow"), _pair("c", "d", "failed", "refused"), _pair("a", "c", "pass"),
             _pair("b", "d", "pass"), _pair("a", "d", "pass"), _pair("b", "c", "pass")]
    got = outcome(nodes, pairs, 3, OPTS)
    assert got.pruned == []
    assert {n: [(r.level, r.message) for r in rs] for n, rs in got.reasons.items()} == {
        "a": [(FAIL, "slow")], "b": [(FAIL, "slow")], "c": [(UNKNOWN, "refused")], "d": [(UNKNOWN, "refused")]}
    assert (got.status("a"), got.status("c")) == (FAIL, UNKNOWN)


def test_a_node_whose_pairs_could_not_run_is_unknown_and_left_out_of_the_pruning():
    pairs = [_pair("a", "b", "not run", "b: ib_write_lat not found"), _pair("a", "c", "pass"),
             _pair("b", "c", "not run", "c: no output")]
    got = outcome(["a", "b", "c"], pairs, 3, OPTS)
    assert got.pruned == []
    assert {n: [r.message for r in rs] for n, rs in got.reasons.items()} == {
        "a": [], "b": ["b: ib_write_lat not found"], "c": ["c: no output"]}
    alone = outcome(["a", "b"], [_pair("a", "b", "not run", "b: gone")], 1, OPTS)
    assert alone.reasons["a"][0].message == "a: no RDMA mesh pair could run"


def test_run_mesh_runs_each_round_as_a_server_and_a_client_step(monkeypatch):
    """Five nodes, node2 reaching none of node3-5: five rounds (the odd
    count rests one node a round), node2 pruned, a node with no device
    UNKNOWN and in no pair."""
    nodes = {f"node{i}": f"198.18.0.{10 + i}" for i in range(1, 7)}
    devices = {n: "mlx5_0" for n in nodes if n != "node6"}
    cut = {"node2": {"node3", "node4", "node5"}}
    steps, started = [], {}

    def run_steps(job, branches, name, timeout):
        steps.append((job, name, sorted(branches)))
        if name.endswith("servers"):
            started.update(branches)
            return lambda: ({n: ["@@rc 0"] for n in branches}, "")
        out = {}
        for client, script in branches.items():
            server = next(n for n, a in nodes.items() if f" {a} " in script)
            blocked = server in cut.get(client, ()) or client in cut.get(server, ())
            out[client] = REFUSED if blocked else report("write_lat_rdma_cm.txt")
        return lambda: (out, "")

    monkeypatch.setattr(slurm_mesh, "run_steps", run_steps)
    monkeypatch.setattr(slurm_mesh.time, "sleep", lambda s: None)
    said = []
    got = run_mesh("42", nodes, devices, OPTS, said.append)
    assert got.rounds == 5 and len(steps) == 10 and {s[0] for s in steps} == {"42"}
    assert len(got.pairs) == 10 and {frozenset((p.server, p.client)) for p in got.pairs} == {
        frozenset((a, b)) for a in devices for b in devices if a < b}
    assert {n: got.status(n) for n in nodes} == {"node1": "OK", "node2": FAIL, "node3": "OK", "node4": "OK",
                                                  "node5": "OK", "node6": UNKNOWN}
    assert got.reasons["node2"][0].message.endswith("with node3, node4, node5")
    assert got.reasons["node6"][0].message == "node6: no compute RDMA device to test the mesh on"
    assert said[0].startswith("mesh round 1: 2 pair(s): ")
    with pytest.raises(ValueError):
        run_mesh(None, nodes, devices, OPTS, said.append)


def test_the_lab_unreachable_fault_names_other_lab_nodes_only():
    from ccrhost.lab.profile import Fault
    from ccrhost.lab.reach import ReachError, targets

    addresses = {"node1": "198.18.0.11", "node2": "198.18.0.12", "node3": "198.18.0.13"}
    assert targets("node2", [Fault(kind="unreachable", value="node1+node3"), Fault(kind="port_down")],
                   addresses) == {"198.18.0.11", "198.18.0.13"}
    with pytest.raises(ReachError, match="no lab node 'node9'"):
        targets("node2", [Fault(kind="unreachable", value="node9")], addresses)
    with pytest.raises(ReachError, match="node2 cannot be cut off from itself"):
        targets("node2", [Fault(kind="unreachable", value="node2")], addresses)
