"""slurm verify --nccl without a cluster: the steps it starts (argv, env),
the cap on nodes at once, and each node's readings from the runs."""

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from nccl_report import at_busbw  # noqa: E402

from ccrhost.fleet.slurm_nccl import NcclOptions, NodeInfo, run_modes  # noqa: E402
from ccrhost.node.active import ToolRun  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"


def infos(n):
    return {f"gpu{i:02d}": NodeInfo(f"gpu{i:02d}", f"10.0.0.{i}", 8, H100, (400.0,) * 8) for i in range(1, n + 1)}


class Cluster:
    """A fake srun: answers by mode and nodes; records argv and the most nodes busy at once."""

    def __init__(self, slow=()):
        self.slow, self.calls, self.busy, self.most = set(slow), [], 0, 0
        self.lock = threading.Lock()

    def __call__(self, argv, deadline, env):
        nodes = argv[argv.index("-w") + 1].split(",")
        with self.lock:
            self.calls.append(argv)
            self.busy += len(nodes)
            self.most = max(self.most, self.busy)
        import time
        time.sleep(0.01)
        loop = "NCCL_P2P_DISABLE=1" in argv
        pair = len(nodes) == 2
        busbw = 380.0 if pair else 47.0 if loop else 470.0
        if set(nodes) & self.slow and pair:
            busbw = 150.0
        with self.lock:
            self.busy -= len(nodes)
        return ToolRun(tuple(argv), 0, "".join(f"0: {line}\n" for line in at_busbw(busbw).splitlines()), 1.0)


def test_every_mode_runs_as_steps_and_each_node_gets_its_readings():
    cluster = Cluster(slow={"gpu03"})
    said = []
    # H100 has no published loopback figure (Azure removed its 40 in 2023): the site gives one
    got = run_modes("77", infos(6), NcclOptions(retries=0, max_nodes=4, min_busbw={"loopback": 40.0}), said.append,
                    run=cluster, clock=lambda: 9.0)
    assert set(got) == {f"gpu{i:02d}" for i in range(1, 7)}
    r = got["gpu03"].results
    assert r["nvlink"]["status"] == "OK" and r["loopback"]["status"] == "OK" and r["pair"]["code"] == "allreduce_slow"
    assert got["gpu04"].results["pair"]["status"] == "OK"  # cleared by a known-good partner
    assert cluster.most <= 4
    single = next(a for a in cluster.calls if "-w" in a and a[a.index("-w") + 1] == "gpu01")
    assert single[:3] == ["srun", "--jobid=77", "--overlap"] and "--kill-on-bad-exit=1" in single
    assert single[single.index("-n") + 1] == "1" and single[-2:] == ["-g", "8"]
    pair = next(a for a in cluster.calls if "gpu01,gpu02" in a)
    assert pair[pair.index("-n") + 1] == "16" and "--ntasks-per-node=8" in pair and pair[-2:] == ["-g", "1"]
    assert "NCCL_ALGO=RING" in pair and "NCCL_COMM_ID=10.0.0.1:29500" in pair
    assert "all-reduce pair round 1: 3 pair(s): gpu01+gpu02, gpu03+gpu04, gpu05+gpu06" in said


def test_the_rendezvous_is_on_the_node_slurm_lists_first():
    cluster = Cluster()
    nodes = {**infos(2), "gpu10": NodeInfo("gpu10", "10.0.0.10", 8, H100, (400.0,) * 8)}
    ordered = {k: nodes[k] for k in ("gpu10", "gpu02", "gpu01")}  # gpu10 first in the inventory
    run_modes("5", ordered, NcclOptions(modes=("pair",), retries=0), lambda m: None, run=cluster)
    first = next(a for a in cluster.calls if "gpu10,gpu02" in a)
    assert "NCCL_COMM_ID=10.0.0.2:29500" in first  # gpu02 sorts before gpu10 in Slurm's order


def test_results_are_stored_only_on_nodes_whose_settings_turn_the_gate_on(monkeypatch, tmp_path):
    import subprocess

    from ccrhost.fleet import slurm_verify
    from ccrhost.model.allreduce import AllReduceReading
    from ccrhost.node.active import load
    from ccrhost.settings import validate_host

    ran = {}

    def fake_steps(job, branches, name, timeout):
        ran.update(branches)
        for node, script in branches.items():  # run each node's branch here, as its step would
            subprocess.run(["sh", "-c", script], check=True)
        return lambda: ({n: [] for n in branches}, "")

    monkeypatch.setattr(slurm_verify, "run_steps", fake_steps)
    result = {"check": "allreduce", "mode": "pair", "status": "FAIL", "code": "allreduce_slow", "message": "slow",
              "measured_at": 5.0, "valid_for": 60.0, "value": 150.0}
    settings = {"on": validate_host("on", {"verify_allreduce": True,
                                           "verify_allreduce_state": str(tmp_path / "on" / "active.json")}),
                "off": validate_host("off", {"verify_allreduce_state": str(tmp_path / "off" / "active.json")})}
    said = []
    slurm_verify.store_allreduce("7", {n: AllReduceReading(6.0, {"pair": result}) for n in settings}, settings,
                                  said.append)
    assert set(ran) == {"on"} and not (tmp_path / "off").exists()
    stored = load(str(tmp_path / "on" / "active.json"))
    assert stored["allreduce/pair"].code == "allreduce_slow" and stored["allreduce/pair"].measured_at == 5.0
    assert said == ["all-reduce results stored on 1 of 1 node(s)"]


class FakeBatches:
    """``ccrhost.fleet.slurm_job.Batches`` without Slurm: records every hold; ``busy`` nodes are never taken."""

    def __init__(self, cap, busy=()):
        from ccrhost.fleet.slurm_client import SlurmNode

        self.cap, self.holds, self.lost, self.held = cap, [], {}, 0
        self.busy = {n: SlurmNode(n, n, "allocated", None) for n in busy}

    def chunks(self, names):
        return [names[i:i + self.cap] for i in range(0, len(names), self.cap)]

    def hold(self, nodes):
        from contextlib import contextmanager

        @contextmanager
        def held():
            assert self.held == 0, "a batch while another is held"
            taken = [n for n in nodes if n not in self.busy]
            self.holds.append(taken)
            self.held = len(taken)
            try:
                yield f"job{len(self.holds)}", taken
            finally:
                self.held = 0
        return held()


def test_with_batches_each_allocation_holds_at_most_the_cap_and_a_busy_node_is_never_run_on():
    cluster = Cluster(slow={"gpu03"})
    batches = FakeBatches(4, busy={"gpu06"})
    got = run_modes(None, infos(8), NcclOptions(retries=0, max_nodes=4), lambda m: None, run=cluster,
                    clock=lambda: 9.0, batches=batches)
    assert batches.holds and all(len(h) <= 4 for h in batches.holds)
    assert not any("gpu06" in h for h in batches.holds)
    assert not any("gpu06" in a[a.index("-w") + 1] for a in cluster.calls)
    for argv in cluster.calls:  # each step in the job that holds its nodes
        job = argv[1].split("=")[1]
        assert set(argv[argv.index("-w") + 1].split(",")) <= set(batches.holds[int(job[3:]) - 1])
    busy = got["gpu06"].results
    assert {m: (r["status"], r["code"]) for m, r in busy.items()} == dict.fromkeys(
        ("nvlink", "loopback"), ("UNKNOWN", "allreduce_failed")) | {"pair": ("UNKNOWN", "allreduce_failed")}
    assert "gpu06 allocated" in busy["nvlink"]["message"]
    assert got["gpu03"].results["pair"]["code"] == "allreduce_slow"
    assert got["gpu05"].results["pair"]["status"] == "OK"  # its partner was busy: cleared by a known-good node
