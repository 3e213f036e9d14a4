"""deploys/accept.py's flow (ccrhost.fleet.accept_deploy) with the runners
that touch the nodes faked: which stages run on which nodes, what each
certificate records, what a second run re-runs, busy nodes, --dry, and the
line a node not certified is failed with. The node's verdict is faked too
(its own reasons, plus what this run measured); the real one is judged in
tests/test_accept_deploy_lab.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from dataclasses import dataclass

import pytest

from ccrhost.fleet import accept_deploy as ad
from ccrhost.fleet.measure import HostMeasurement
from ccrhost.fleet.slurm_mesh import PairOutcome
from ccrhost.model import certificate as cm
from ccrhost.model.active import ActiveResult
from ccrhost.model.busy import GpuProcess, GpuWork
from ccrhost.model.status import FAIL, OK, UNKNOWN, Reason, worst
from ccrhost.model.verdict import Readings, Verdict
from ccrhost.settings import validate_host

sys.path.insert(0, str(Path(__file__).parent))  # nccl_report

NODES = ["node1", "node2", "node3"]


@dataclass
class Port:
    device: str = "mlx5_0"
    active: bool = True
    efa: bool = False
    effective_gbps: float = 400.0


@dataclass
class Gpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str | None = None  # not read: the certificate records no GPUs


@dataclass
class Snap:
    node: str
    fabric: str
    reasons: tuple = ()


def fake_verdict(snap, settings, measured=None, gpudirect=None, first=None, allreduce=None, nic_fw=None,
                 dcgm=None, *rest):
    """The node's own reasons, and every result this run measured that is not OK."""
    reasons = list(snap.reasons)
    if measured is not None:
        reasons += [Reason(UNKNOWN, "measure_failed", e) for e in measured.errors]
    for reading in (dcgm, allreduce):
        for d in (reading.results.values() if reading is not None else ()):
            if d["status"] != OK:
                reasons.append(Reason(d["status"], d["code"], d["message"]))
    readings = Readings([Port()] * 8, [Gpu()] * 8)
    readings.fabric = first
    return Verdict(worst([r.level for r in reasons] or [OK]), reasons, None, None, readings)


class Fake:
    """The runners, recording each call: ``cut`` nodes fail every mesh pair, ``gpu_bad`` fail the GEMM."""

    def __init__(self, cut=(), gpu_bad=(), busy=(), passive_bad=(), stored=None, group_slow=()):
        self.cut, self.gpu_bad, self.busy_nodes, self.passive_bad = set(cut), set(gpu_bad), set(busy), set(passive_bad)
        self.group_slow = set(group_slow)  # slows a group of three nodes or more (S4), never a pair
        self.stored = stored if stored is not None else {}
        self.calls: list[tuple] = []
        self.reads = 0

    def runners(self) -> ad.Runners:
        return ad.Runners(self.snapshots, self.certificates, self.busy, self.dcgm, self.gemm, self.singles,
                          self.mesh_round, self.bandwidth, self.pair_allreduce, self.scale_launch)

    def scale_launch(self, job, members, opts, port, timeout):
        """mpirun's run of one group, as all_reduce_perf prints it: 150 GB/s with a slow node, else 380."""
        from nccl_report import at_busbw

        from ccrhost.node.active import ToolRun

        names = [m.name for m in members]
        self.calls.append(("scale", tuple(names), f"{members[0].address}:{port}"))
        slow = self.group_slow & set(names) and len(names) >= 3
        return ToolRun(("mpirun",), 0, at_busbw(150.0 if slow else 380.0, ranks=8 * len(names)), 1.0)

    def snapshots(self, names, again):
        self.calls.append(("snapshots", tuple(names)))
        self.reads += 1
        return {n: Snap(n, f"reading-{self.reads}", (Reason(FAIL, "port_down", "mlx5_0 is DOWN"),)
                        if n in self.passive_bad else ()) for n in names}

    def certificates(self, names):
        return {n: self.stored.get(n, "") for n in names}

    def busy(self, names):
        self.calls.append(("busy", tuple(names)))
        return {n: GpuWork(processes=(GpuProcess(4242, "python3", "2048 MiB"),))
                for n in names if n in self.busy_nodes}

    def dcgm(self, names, level):
        self.calls.append(("dcgm", tuple(names), level))
        return {n: ActiveResult("dcgm_diag", f"level {level}", OK, None, "passed", 1.0, 3600) for n in names}

    def gemm(self, names, seconds):
        self.calls.append(("gemm", tuple(names), seconds))
        return {n: ActiveResult("gemm", "fp16", FAIL if n in self.gpu_bad else OK,
                                "gemm_slow" if n in self.gpu_bad else None,
                                "GPU 0 at 0.30 of its peak" if n in self.gpu_bad else "fine", 1.0, 3600, 600.0)
                for n in names}

    def singles(self, names):
        self.calls.append(("singles", tuple(names)))
        return {n: [ActiveResult("allreduce", "nvlink", OK, None, "fine", 1.0, 3600, 470.0)] for n in names}

    def mesh_round(self, pairs, addresses, devices, opts):
        self.calls.append(("mesh", tuple(pairs)))
        out = []
        for s, c in pairs:
            if self.cut & {s, c}:
                out.append(PairOutcome(s, c, "failed", reasons=[Reason(UNKNOWN, "rdma_latency_unreadable",
                                                                       f"{c} -> {s}: Unable to init the socket")]))
            else:
                out.append(PairOutcome(s, c, "pass"))
        return out

    def bandwidth(self, names):
        self.calls.append(("bandwidth", tuple(names)))
        return {n: HostMeasurement({"mlx5_0": 390.0}) for n in names}

    def pair_allreduce(self, names):
        self.calls.append(("pair_allreduce", tuple(names)))
        return {n: ActiveResult("allreduce", "pair", OK, None, "fine", 1.0, 3600, 40.0) for n in names}

    def ran(self, kind: str) -> list[tuple]:
        return [c[1:] for c in self.calls if c[0] == kind]


@pytest.fixture(autouse=True)
def judged_by_fake(monkeypatch):
    from ccrhost.operations import verify

    monkeypatch.setattr(verify, "node_verdict", fake_verdict)


def settings(tmp_path, **data):
    base = {"accept_stages": ("check", "node", "mesh", "pairs", "soak"), "accept_soak_minutes": 0.1,
            "accept_dcgm_level": 1, "verify_gemm_seconds": 5, "accept_mesh_timeout": 4,
            "verify_report_dir": str(tmp_path / "report")}
    return {n: validate_host(n, {**base, **data.get(n, {}), **data.get("all", {})}) for n in NODES}


def accept(tmp_path, fake, dry=False, clock=None, **data):
    s = settings(tmp_path, **data)
    kwargs = {"clock": clock} if clock else {}
    return ad.run(NODES, s, {n: f"10.0.0.{i}" for i, n in enumerate(NODES, 1)}, fake.runners(),
                  str(tmp_path / "report"), dry, **kwargs)


def statuses(cert) -> dict[str, str]:
    return {s: r.status for s, r in cert.stages.items()}


def test_healthy_nodes_are_certified_and_the_cut_one_fails_at_the_mesh_naming_its_code(tmp_path):
    fake = Fake(cut={"node3"})
    results, out = accept(tmp_path, fake)
    assert {n: r.state for n, r in results.items()} == {"node1": "certified", "node2": "certified",
                                                         "node3": "failed"}
    assert statuses(results["node1"].certificate) == {"check": OK, "node": OK, "mesh": OK, "pairs": OK,
                                                      "soak": OK, "scale": cm.SKIPPED}
    assert statuses(results["node3"].certificate) == {"check": OK, "node": OK, "mesh": FAIL, "scale": cm.SKIPPED}
    assert results["node3"].message.startswith(
        "acceptance failed at S2 connectivity mesh: FAIL rdma_mesh_pruned: failed 2 of 2 RDMA mesh pairs")
    assert results["node1"].message == "acceptance: certified (check, node, mesh, pairs, soak)"
    # node3 goes no further: the pairs and the soak run on node1 and node2 alone
    assert fake.ran("bandwidth") == [(("node1", "node2"),)]
    assert fake.ran("gemm") == [(("node1", "node2", "node3"), 5), (("node1", "node2"), 6)]
    assert fake.ran("dcgm") == [(("node1", "node2", "node3"), 1)]
    assert len(fake.ran("mesh")) == 3  # three nodes: three rounds of one pair
    # the report directory keeps every node's certificate and the run's report
    for name in NODES:
        doc = json.loads((tmp_path / "report" / "certificates" / f"{name}.json").read_text())
        assert cm.Certificate.from_dict(doc) == results[name].certificate
    assert json.loads((tmp_path / "report" / "accept.json").read_text())["details"]["mesh"]["pruned"] == ["node3"]


def test_a_second_run_reruns_only_what_did_not_hold(tmp_path):
    first, _ = accept(tmp_path, Fake(cut={"node3"}), clock=lambda: 1000.0)
    stored = {n: json.dumps(r.certificate.to_dict()) for n, r in first.items()}
    fake = Fake(stored=stored)  # node3's link mended
    results, out = accept(tmp_path, fake, clock=lambda: 2000.0)
    assert {n: r.state for n, r in results.items()} == dict.fromkeys(NODES, "certified")
    assert out.ran == {"node1": ["check"], "node2": ["check"], "node3": ["check", "mesh", "pairs", "soak"]}
    # S1 held on node3: not run again; the mesh and the pairs run with the certified nodes as partners
    assert fake.ran("dcgm") == []
    assert fake.ran("gemm") == [(("node3",), 6)]
    assert fake.ran("bandwidth") == [(("node1", "node2", "node3"),)]
    node1, node3 = results["node1"].certificate, results["node3"].certificate
    assert {s: r.at for s, r in node1.stages.items() if s != "scale"} == {
        "check": 2000.0, "node": 1000.0, "mesh": 1000.0, "pairs": 1000.0, "soak": 1000.0}
    assert {s: r.at for s, r in node3.stages.items()} == {
        "check": 2000.0, "node": 1000.0, "mesh": 2000.0, "pairs": 2000.0, "soak": 2000.0, "scale": 1000.0}
    assert node3.issued_at == 2000.0


def test_a_partner_that_fails_a_fleet_stage_now_is_recorded_and_not_left_certified(tmp_path):
    first, _ = accept(tmp_path, Fake(cut={"node3"}), clock=lambda: 1000.0)
    stored = {n: json.dumps(r.certificate.to_dict()) for n, r in first.items()}
    # node3 mended, node1 now fails the pairs: its held S3 does not stand
    fake = Fake(stored=stored)
    fake.bandwidth = lambda names: {n: HostMeasurement(errors=["node1<->node3: timed out"] if n == "node1" else [])
                                    for n in names}
    results, out = accept(tmp_path, fake, clock=lambda: 2000.0)
    assert results["node1"].state == "incomplete"
    assert results["node1"].certificate.stages["pairs"].status == UNKNOWN
    assert results["node1"].message.startswith("acceptance incomplete at S3 pair bandwidth: UNKNOWN measure_failed")


def test_a_stage_that_fails_on_one_node_stops_that_node_only(tmp_path):
    fake = Fake(gpu_bad={"node2"})
    results, out = accept(tmp_path, fake)
    assert results["node2"].state == "failed" and out.stopped == {"node2": "node"}
    assert results["node2"].message == "acceptance failed at S1 node-local: FAIL gemm_slow: GPU 0 at 0.30 of its peak"
    assert fake.ran("bandwidth") == [(("node1", "node3"),)]
    assert [r.state for n, r in results.items() if n != "node2"] == ["certified", "certified"]


def test_the_scale_stage_is_unknown_naming_why_never_a_pass(tmp_path):
    results, _ = accept(tmp_path, Fake(), all={"accept_stages": ("check", "scale")})
    for r in results.values():
        assert r.state == "incomplete" and statuses(r.certificate)["scale"] == UNKNOWN
        assert r.message.startswith("acceptance incomplete at S4 scale: UNKNOWN accept_not_run: S4 scale: not run "
                                    "from a pyinfra deploy: verify_allreduce_launcher none: the growing groups' "
                                    "all-reduce launches with mpirun here")


def test_the_scale_stage_launches_growing_groups_with_mpirun_and_bisects_to_the_slow_node(tmp_path):
    """S4 from the deploy: each group's all-reduce from its first node (mpirun's root), the groups growing as
    on Slurm, the group that fails bisected to the node that slows it; the others certified."""
    fake = Fake(group_slow={"node3"})
    results, out = accept(tmp_path, fake, all={"accept_stages": ("check", "scale"),
                                               "verify_allreduce_launcher": "mpirun"})
    groups = [c[1] for c in fake.calls if c[0] == "scale"]
    assert groups[0] == ("node1", "node2") and ("node1", "node2", "node3") in groups
    assert all(c[2].startswith("10.0.0.1:") for c in fake.calls if c[0] == "scale")  # rooted at the first node
    assert {n: r.state for n, r in results.items()} == {"node1": "certified", "node2": "certified",
                                                         "node3": "failed"}
    assert results["node3"].message.startswith("acceptance failed at S4 scale: FAIL allreduce_scale_slow: node3: "
                                               "slowed a group of 3 nodes")
    assert out.details["scale"]["admitted"] == ["node1", "node2"]


def test_a_busy_node_is_not_touched(tmp_path):
    fake = Fake(busy={"node2"})
    results, out = accept(tmp_path, fake)
    assert results["node2"].state == "untouched" and results["node2"].certificate is None
    assert results["node2"].message == (
        "acceptance: UNKNOWN node_busy: acceptance not run: GPU work is running (pid 4242 python3 (2048 MiB)); "
        "drain the node first, or set verify_active_when_busy: true to run it anyway")
    assert all("node2" not in c[1] for c in fake.calls if c[0] not in ("busy",)), fake.calls
    assert not (tmp_path / "report" / "certificates" / "node2.json").exists()
    assert [results[n].state for n in ("node1", "node3")] == ["certified", "certified"]


def test_a_node_that_fails_its_passive_check_runs_nothing_more(tmp_path):
    fake = Fake(passive_bad={"node1"})
    results, _ = accept(tmp_path, fake)
    assert statuses(results["node1"].certificate) == {"check": FAIL, **{s: cm.SKIPPED for s in ("scale",)}}
    assert results["node1"].message == "acceptance failed at S0 passive check: FAIL port_down: mlx5_0 is DOWN"
    assert all("node1" not in c[1] for c in fake.calls if c[0] not in ("snapshots", "busy"))


def test_the_all_reduce_modes_run_where_the_nodes_settings_ask(tmp_path):
    fake = Fake()
    accept(tmp_path, fake, node1={"verify_allreduce": True, "verify_allreduce_launcher": "mpirun"},
           node2={"verify_allreduce": True, "verify_allreduce_launcher": "mpirun"}, node3={"verify_allreduce": True})
    assert fake.ran("singles") == [(("node1", "node2", "node3"),)]
    assert fake.ran("pair_allreduce") == [(("node1", "node2"),)]


def test_a_dry_run_reads_and_says_what_it_would_run_and_writes_nothing(tmp_path):
    fake = Fake()
    results, _ = accept(tmp_path, fake, dry=True)
    assert {c[0] for c in fake.calls} == {"busy", "snapshots"}
    assert results["node1"].message == ("acceptance (dry run): would run S1 node-local, S2 connectivity mesh, "
                                        "S3 pair bandwidth, S5 soak")
    assert results["node1"].planned == ("node", "mesh", "pairs", "soak")
    assert not (tmp_path / "report").exists()


def test_a_node_a_runner_gave_no_result_is_unknown_never_passed(tmp_path):
    fake = Fake()
    fake.dcgm = lambda names, level: {n: ActiveResult("dcgm_diag", f"level {level}", OK, None, "passed", 1.0, 3600)
                                      for n in names if n != "node2"}
    results, out = accept(tmp_path, fake)
    assert results["node2"].state == "incomplete" and out.stopped == {"node2": "node"}
    assert results["node2"].message == ("acceptance incomplete at S1 node-local: UNKNOWN accept_not_run: "
                                        "S1 node-local: DCGM diag level 1: the node gave no result")


def test_the_power_heavy_stages_load_at_most_accept_max_nodes_at_once(tmp_path):
    """S1 and S5 in batches of the smallest accept_max_nodes, one after another; S4's largest group too."""
    fake_soak = Fake()
    accept(tmp_path / "soak", fake_soak, all={"accept_stages": ("check", "soak")}, node1={"accept_max_nodes": 2})
    assert [names for names, _ in fake_soak.ran("gemm")] == [("node1", "node2"), ("node3",)]
    fake = Fake()
    results, _ = accept(tmp_path, fake, all={"accept_stages": ("check", "node", "scale", "soak"),
                                             "verify_allreduce_launcher": "mpirun"},
                        node3={"accept_max_nodes": 2})
    assert fake.ran("dcgm") == [(("node1", "node2"), 1), (("node3",), 1)]
    # S1 in two batches; S5 only for the two that passed S4 (below)
    assert [names for names, _ in fake.ran("gemm")] == [("node1", "node2"), ("node3",), ("node1", "node2")]
    assert max(len(c[1]) for c in fake.calls if c[0] == "scale") == 2
    # three nodes in chunks of two leave node3 alone at S4: not run, so never certified on it
    assert {n: r.state for n, r in results.items()} == {"node1": "certified", "node2": "certified",
                                                         "node3": "incomplete"}
    assert "all-reduce at scale not run: chunk 2/2 of the cap of 2 held no other node" in results["node3"].message
