"""Acceptance S4 without a cluster: the all-reduce over doubling groups
(ccrhost.fleet.slurm_scale), with a fake srun that answers by the group."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from nccl_report import at_busbw  # noqa: E402

from ccrhost.fleet.slurm_nccl import NcclOptions, NodeInfo  # noqa: E402
from ccrhost.fleet.slurm_scale import group_figure, run_scale  # noqa: E402
from ccrhost.node.active import ToolRun  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"


def infos(n):
    return {f"gpu{i:02d}": NodeInfo(f"gpu{i:02d}", f"10.0.0.{i}", 8, H100, (400.0,) * 8) for i in range(1, n + 1)}


class Fabric:
    """A fake srun: a group with a ``slow`` node (of ``from_size`` nodes or more) runs at 150 GB/s, else 380;
    ``hang`` nodes never finish; ``missing`` nodes have no binary."""

    def __init__(self, slow=(), from_size=3, hang=(), missing=()):
        self.slow, self.from_size, self.hang, self.missing = set(slow), from_size, set(hang), set(missing)
        self.calls = []

    def __call__(self, argv, deadline, env):
        nodes = argv[argv.index("-w") + 1].split(",")
        self.calls.append(argv)
        if set(nodes) & self.hang:
            return ToolRun(tuple(argv), None, "", deadline, timed_out=True)
        if set(nodes) & self.missing:
            bad = sorted(set(nodes) & self.missing)[0]
            return ToolRun(tuple(argv), 2, "slurmstepd: error: execve(): all_reduce_perf: No such file or directory\n"
                           f"srun: error: {bad}: tasks 0-7: Exited with exit code 2\n", 1.0)
        slow = set(nodes) & self.slow and len(nodes) >= self.from_size
        report = at_busbw(150.0 if slow else 380.0, ranks=8 * len(nodes))
        return ToolRun(tuple(argv), 0, "".join(f"0: {line}\n" for line in report.splitlines()), 1.0)

    def groups(self):
        return [tuple(a[a.index("-w") + 1].split(",")) for a in self.calls]


def test_each_group_is_one_step_over_its_nodes_a_task_per_gpu_rooted_at_slurms_first_node():
    fabric = Fabric()
    nodes = {**infos(3), "gpu10": NodeInfo("gpu10", "10.0.0.10", 8, H100, (400.0,) * 8)}
    ordered = {k: nodes[k] for k in ("gpu10", "gpu02", "gpu01", "gpu03")}
    said = []
    out = run_scale("42", ordered, NcclOptions(iters=5), said.append, run=fabric)
    assert fabric.groups() == [("gpu10", "gpu02"), ("gpu10", "gpu02", "gpu01", "gpu03")]
    argv = fabric.calls[1]
    assert argv[:3] == ["srun", "--jobid=42", "--overlap"] and "--kill-on-bad-exit=1" in argv
    assert argv[argv.index("-N") + 1] == "4" and argv[argv.index("-n") + 1] == "32"
    assert "--ntasks-per-node=8" in argv and "NCCL_ALGO=RING" in argv
    assert any(a.startswith("NCCL_COMM_ID=10.0.0.1:") for a in argv)  # gpu01 sorts first in Slurm's order
    assert argv[-13:] == ["all_reduce_perf", "-b", "16G", "-e", "16G", "-f", "2", "-n", "5", "-c", "1", "-g", "1"]
    assert out.admitted == ("gpu10", "gpu02", "gpu01", "gpu03") and out.reasons == {} and out.count == 2
    assert [(r.group, r.passed, r.busbw, r.purpose, r.step) for r in out.runs] == [
        (("gpu10", "gpu02"), True, 380.0, "step", 1), (("gpu10", "gpu02", "gpu01", "gpu03"), True, 380.0, "step", 2)]
    assert said[-1].startswith("all-reduce scale: 4 nodes: ring all-reduce over 4 nodes (gpu10,gpu02,gpu01,gpu03): "
                               "busbw 380.0 GB/s")


def test_the_group_figure_is_the_pair_figure_of_its_slowest_member():
    nodes = list(infos(2).values()) + [NodeInfo("gpu09", "10.0.0.9", 8, H100, (400.0,) * 4)]
    assert [f.busbw for f in group_figure(nodes, NcclOptions())] == [184.0]  # 4 x 46 GB/s
    assert [f.busbw for f in group_figure(nodes[:2], NcclOptions())] == [368.0]


@pytest.mark.parametrize("culprit", [f"gpu{i:02d}" for i in range(9, 17)])
def test_a_node_that_slows_only_a_large_group_is_bisected_within_log2_of_the_step(culprit):
    fabric = Fabric(slow={culprit}, from_size=9)
    out = run_scale("7", infos(16), NcclOptions(max_nodes=16), lambda m: None, run=fabric)
    assert out.admitted == tuple(n for n in infos(16) if n != culprit)
    assert set(out.reasons) == {culprit}
    reason = out.reasons[culprit]
    assert reason.level == "FAIL" and reason.code == "allreduce_scale_slow"
    assert reason.message.startswith(f"{culprit}: slowed a group of 16 nodes at admission step 4: busbw 150.0 GB/s "
                                     "over ")
    assert "over 9 nodes with it, 380.0 GB/s over 8 nodes without it" in reason.message
    step = [r for r in out.runs if r.step == 4 and r.purpose in ("halve", "confirm")]
    assert 1 <= len(step) <= math.ceil(math.log2(8)) + 1  # the step's 8 new nodes
    # steps 1-3, the failing step, its bisection, then the step again without the culprit
    assert out.count == 3 + 1 + len(step) + 1


def test_the_message_names_the_busbw_with_and_without_the_culprit():
    out = run_scale("7", infos(4), NcclOptions(), lambda m: None, run=Fabric(slow={"gpu04"}))
    assert out.reasons["gpu04"].message.startswith(
        "gpu04: slowed a group of 4 nodes at admission step 2: busbw 150.0 GB/s over 3 nodes with it, "
        "380.0 GB/s over 2 nodes without it; ring all-reduce over 3 nodes (gpu01,gpu02,gpu04): busbw 150.0 GB/s")
    assert out.admitted == ("gpu01", "gpu02", "gpu03")


def test_a_failing_first_pair_is_undecided_never_a_fail():
    out = run_scale("7", infos(4), NcclOptions(), lambda m: None, run=Fabric(slow={"gpu02"}, from_size=2))
    assert {n: (r.level, r.code) for n, r in out.reasons.items()} == {
        "gpu01": ("UNKNOWN", "allreduce_scale_undecided"), "gpu02": ("UNKNOWN", "allreduce_scale_undecided")}
    assert out.admitted == ("gpu03", "gpu04")


def test_a_run_that_cannot_measure_leaves_its_new_nodes_unknown_and_admission_goes_on():
    fabric = Fabric(hang={"gpu03"}, missing={"gpu06"})
    said = []
    out = run_scale("7", infos(8), NcclOptions(), said.append, run=fabric)
    assert {n: (r.level, r.code) for n, r in out.reasons.items()} == {
        "gpu03": ("UNKNOWN", "allreduce_hang"), "gpu04": ("UNKNOWN", "allreduce_hang"),
        "gpu06": ("UNKNOWN", "allreduce_missing")}
    assert out.admitted == ("gpu01", "gpu02", "gpu05", "gpu07", "gpu08")
    assert not any(r.level == "FAIL" for r in out.reasons.values())
    assert "gpu03, gpu04 left UNKNOWN (allreduce_hang); admission goes on without them" in "\n".join(said)
    # the first pair ran once: the restarted admission answers it from its result
    assert fabric.groups().count(("gpu01", "gpu02")) == 1


def test_more_nodes_than_the_cap_are_admitted_per_chunk_and_no_group_exceeds_it():
    fabric = Fabric(slow={"gpu10"})
    said = []
    out = run_scale("7", infos(10), NcclOptions(max_nodes=4), said.append, run=fabric)
    assert max(len(g) for g in fabric.groups()) <= 4
    assert "all-reduce scale: 10 nodes, more than the cap of 4: admitted per chunk (4, 3, 3 nodes), no group larger " \
           "than 4" in said
    assert set(out.reasons) == {"gpu10"} and out.reasons["gpu10"].code == "allreduce_scale_slow"
    assert "(chunk 3/3)" in out.reasons["gpu10"].message
    assert len(out.admitted) == 9


def test_with_batches_each_group_is_held_for_its_run_and_a_busy_node_is_unknown():
    from test_allreduce_slurm import FakeBatches

    batches = FakeBatches(cap=8, busy={"gpu04"})
    fabric = Fabric()
    out = run_scale(None, infos(4), NcclOptions(), lambda m: None, batches=batches, run=fabric)
    assert batches.holds[0] == ["gpu01", "gpu02"] and fabric.calls[0][1] == "--jobid=job1"
    assert out.reasons["gpu04"].level == "UNKNOWN" and "gpu04 allocated" in out.reasons["gpu04"].message
    assert out.admitted == ("gpu01", "gpu02", "gpu03")


def test_one_node_is_unknown_and_start_below_two_is_refused():
    out = run_scale("7", infos(1), NcclOptions(), lambda m: None, run=Fabric())
    assert out.reasons["gpu01"].code == "allreduce_scale_undecided" and out.count == 0
    with pytest.raises(ValueError, match="start must be at least 2"):
        run_scale("7", infos(4), NcclOptions(), lambda m: None, start=1, run=Fabric())


def test_the_labs_group_slow_fault_needs_a_ring_larger_than_a_pair():
    from ccrhost.lab.profile import ProfileError, link_files, load_profile, parse_fault

    profile = load_profile("hgx-h100-8x400")
    assert link_files(profile, [parse_fault("node5:group_slow=4")[1]])
    for bad in ("group_slow=2", "group_slow", "group_slow=x"):
        with pytest.raises(ProfileError, match="give the ring size K it slows from, 3 or more"):
            link_files(profile, [parse_fault(f"node5:{bad}")[1]])


def test_a_chunk_of_one_node_is_never_admitted_unmeasured():
    """Three nodes under a cap of two: chunks of two and one; the lone node has no group, so it is UNKNOWN."""
    fabric = Fabric()
    out = run_scale("7", infos(3), NcclOptions(max_nodes=2), lambda m: None, run=fabric)
    assert fabric.groups() == [("gpu01", "gpu02")]
    assert out.admitted == ("gpu01", "gpu02")
    assert out.reasons["gpu03"].level == "UNKNOWN" and out.reasons["gpu03"].code == "allreduce_scale_undecided"
