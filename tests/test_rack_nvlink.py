"""The rack-level NVLink all-reduce, pure (issue 49 item 3): which trays make
each rack's run, the figure it is judged by (UNKNOWN naming allreduce.rack
where the platform has none), and a slow rack's tray found by runs without
trays in ceil(log2 n) halvings, FAILed rack_nvlink_slow naming the rack
while the others stay OK. The runs are faked at the launcher (all_reduce_perf's
report as rank 0 prints it); tests/test_rack_nvlink_lab.py runs them for real."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from nccl_report import at_busbw  # noqa: E402

from ccrhost.fleet.rack_nvlink import run_rack  # noqa: E402
from ccrhost.fleet.slurm_nccl import NcclOptions, NodeInfo  # noqa: E402
from ccrhost.model import rack_nvlink as model  # noqa: E402
from ccrhost.model.allreduce import Figure  # noqa: E402
from ccrhost.model.drain_reason import MEASURED_CODES  # noqa: E402
from ccrhost.model.platform import resolve  # noqa: E402
from ccrhost.model.reasons import REGISTRY as CATALOGUE  # noqa: E402
from ccrhost.node.active import ToolRun  # noqa: E402

FIGURE = [Figure(432.0, "allreduce.rack of gb200-nvl72")]


def trays(n):
    return [f"gb{i:02d}" for i in range(1, n + 1)]


def infos(names):
    return [NodeInfo(t, f"10.0.0.{i}", 4, "NVIDIA GB200", (400.0,) * 4) for i, t in enumerate(names, 1)]


class Launcher:
    """A fake srun: the step's -w trays; a run holding a slow tray is at half rate."""

    def __init__(self, *slow, busbw=811.0, output=None):
        self.slow, self.busbw, self.output, self.argvs = set(slow), busbw, output, []

    def __call__(self, argv, deadline, env):
        self.argvs.append(argv)
        group = argv[argv.index("-w") + 1].split(",")
        if self.output is not None:
            return ToolRun(tuple(argv), 0, self.output, 1.0)
        busbw = self.busbw / 2 if self.slow & set(group) else self.busbw
        text = at_busbw(busbw, ranks=4 * len(group), host=group[0], gpu="NVIDIA GB200")
        return ToolRun(tuple(argv), 0, "".join(f"0: {line}\n" for line in text.splitlines()), 1.0)


def run(names, launcher, figure=FIGURE):
    return run_rack("77", "nvl72-a", infos(names), figure, NcclOptions(), lambda line: None, launcher,
                    clock=lambda: 1000.0)


# --- the plan ------------------------------------------------------------------------------------------

def test_plan_groups_trays_by_rack_in_natural_order_and_leaves_out_trays_in_no_rack():
    assert model.plan({"gb10": "b", "gb2": "a", "gb1": "a", "gb9": None, "gb3": "b"}) == \
        {"a": ["gb1", "gb2"], "b": ["gb3", "gb10"]}


@pytest.mark.parametrize("n, halvings", [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4), (18, 5)])
def test_rounds_is_ceil_log2(n, halvings):
    assert model.rounds(n) == halvings


def test_the_step_runs_every_tray_of_the_rack_over_nvlink_a_task_per_gpu():
    launcher = Launcher()
    run(trays(4), launcher)
    argv = launcher.argvs[0]
    assert argv[argv.index("-w") + 1] == "gb01,gb02,gb03,gb04"
    assert "-n" in argv and argv[argv.index("-n") + 1] == "16" and "--ntasks-per-node=4" in argv
    assert "NCCL_MNNVL_ENABLE=1" in argv and "NCCL_COMM_ID=10.0.0.1:29500" in argv
    assert "ccrhost-nccl-rack" in argv


# --- the figure -----------------------------------------------------------------------------------------

def test_gb200_nvl72_has_a_rack_figure_with_its_source_and_gb300_has_none():
    gb200 = model.figure([("NVIDIA GB200", resolve("gb200-nvl72"), None)])
    assert [f.busbw for f in gb200] == [432.0] and "Azure" in gb200[0].source
    assert model.figure([("NVIDIA GB300", resolve("gb300-nvl72"), None)]) == []
    # a site's figure (verify_allreduce_min_busbw.rack) stands for the platform's
    site = model.figure([("NVIDIA GB300", resolve("gb300-nvl72"), {"rack": 500})])
    assert [f.busbw for f in site] == [500.0] and "verify_allreduce_min_busbw.rack" in site[0].source
    # one tray without a figure: the rack has none
    assert model.figure([("NVIDIA GB200", resolve("gb200-nvl72"), None),
                         ("NVIDIA GB300", resolve("gb300-nvl72"), None)]) == []


def test_a_rack_without_a_figure_is_unknown_naming_allreduce_rack_never_a_pass():
    results, runs = run(trays(4), Launcher(), figure=[])
    assert len(runs) == 1
    assert {r.status for r in results.values()} == {"UNKNOWN"}
    assert {r.code for r in results.values()} == {"allreduce_no_threshold"}
    assert "no figure allreduce.rack" in results["gb01"].message and "rack nvl72-a" in results["gb01"].message


# --- judging and isolation ------------------------------------------------------------------------------

def test_a_healthy_rack_is_one_run_and_every_tray_ok_with_its_busbw_and_time():
    results, runs = run(trays(4), Launcher())
    assert len(runs) == 1
    for r in results.values():
        assert (r.check, r.mode, r.status, r.code) == ("allreduce", "rack", "OK", None)
        assert r.value == pytest.approx(811.0, abs=0.1) and r.measured_at == 1000.0
        assert "rack nvl72-a: 4 trays" in r.message and "threshold 432" in r.message


@pytest.mark.parametrize("n", [3, 4, 5, 8, 9, 18])
def test_a_slow_tray_is_failed_by_its_code_after_at_most_ceil_log2_halvings_others_ok(n):
    for culprit in trays(n):
        results, runs = run(trays(n), Launcher(culprit))
        assert results[culprit].status == "FAIL" and results[culprit].code == "rack_nvlink_slow", culprit
        assert results[culprit].message.startswith(f"{culprit} slows the all-reduce over NVLink of rack nvl72-a")
        assert {t: r.status for t, r in results.items() if t != culprit} == {t: "OK" for t in trays(n) if t != culprit}
        # the rack's run, the halvings, at most one confirming run, then the rack without the tray named
        assert runs[0].trays == tuple(trays(n)) and runs[0].passed is False
        without = tuple(t for t in trays(n) if t != culprit)
        assert [r.passed for r in runs if r.trays == without] == [True]
        halvings = [r for r in runs[1:] if r.trays != without]
        assert len(halvings) <= model.rounds(n) + 1, [r.trays for r in runs]
        assert all(r.trays == tuple(t for t in trays(n) if t in r.trays) for r in runs)  # the rack less some trays


def test_a_rack_of_two_slow_trays_cannot_single_one_out():
    results, runs = run(trays(2), Launcher("gb02"))
    assert len(runs) == 1  # a tray alone crosses nothing: never run
    assert {(r.status, r.code) for r in results.values()} == {("UNKNOWN", "rack_nvlink_undecided")}


def test_the_failed_tray_names_the_busbw_with_and_without_it():
    results, _ = run(trays(4), Launcher("gb03"))
    said = results["gb03"].message
    assert said.startswith("gb03 slows the all-reduce over NVLink of rack nvl72-a: busbw 405.5 GB/s over 4 trays "
                           "with it, 811.0 GB/s over 3 trays without it;"), said
    assert "below 432 GB/s (allreduce.rack of gb200-nvl72)" in said


def test_a_rack_of_three_names_the_run_without_the_tray_that_passed_not_a_failed_pair():
    # the halvings run gb02+gb03 (failed); gb02 alone is never run, so only the whole rack and the rack
    # without gb03 single it out (the scale stage, unlike the rack, counts a pair's lone rest as cleared)
    results, runs = run(trays(3), Launcher("gb03"))
    assert ("gb02", "gb03") in [r.trays for r in runs]
    assert results["gb03"].message.startswith(
        "gb03 slows the all-reduce over NVLink of rack nvl72-a: busbw 405.5 GB/s over 3 trays with it, "
        "811.0 GB/s over 2 trays without it;"), results["gb03"].message


def test_a_slow_rack_no_run_singles_out_is_undecided_never_failed():
    # slow only as a whole (a limit of its size, or a flaky first run)
    class WholeOnly(Launcher):
        def __call__(self, argv, deadline, env):
            group = argv[argv.index("-w") + 1].split(",")
            self.slow = set(group) if len(group) == 4 else set()
            return super().__call__(argv, deadline, env)

    results, _ = run(trays(4), WholeOnly())
    assert not any(r.status == "FAIL" for r in results.values())
    assert {r.code for r in results.values() if r.status != "OK"} == {"rack_nvlink_undecided"}


def test_a_run_that_gives_no_verdict_on_speed_leaves_every_tray_unknown():
    results, _ = run(trays(4), Launcher(output="slurmstepd: error: execve(): all_reduce_perf: No such file\n"))
    assert {r.status for r in results.values()} == {"UNKNOWN"}
    wrong = at_busbw(811.0, ranks=16, wrong=3, gpu="NVIDIA GB200")
    results, _ = run(trays(4), Launcher(output="".join(f"0: {x}\n" for x in wrong.splitlines())))
    assert {(r.status, r.code) for r in results.values()} == {("UNKNOWN", "rack_nvlink_undecided")}


def test_the_new_codes_are_catalogued_and_the_slow_one_is_a_measured_drain():
    assert CATALOGUE["rack_nvlink_slow"].level == "FAIL" and CATALOGUE["rack_nvlink_undecided"].level == "UNKNOWN"
    assert CATALOGUE["rack_nvlink_slow"].see.startswith("rack.md#")
    assert "rack_nvlink_slow" in MEASURED_CODES


def test_bisection_runs_grow_as_log2_of_the_rack():
    worst = {n: max(len(run(trays(n), Launcher(c))[1]) for c in trays(n)) for n in (4, 8, 16)}
    # the rack, ceil(log2 n) halvings, a confirming run, the rack without the tray named
    assert all(worst[n] <= 1 + math.ceil(math.log2(n)) + 2 for n in worst), worst
    assert worst[16] - worst[8] <= 1 and worst[8] - worst[4] <= 2, worst  # doubling the rack: about one run more


def test_explain_covers_the_new_codes(capsys):
    from ccrhost.cli import entry

    for code, level in (("rack_nvlink_slow", "FAIL"), ("rack_nvlink_undecided", "UNKNOWN")):
        with pytest.raises(SystemExit):
            entry(["explain", code])
        out = capsys.readouterr().out
        assert out.startswith(f"{code} ({level})\nAction: investigate; scope: node\n"), out
        assert "--rack-nvlink" in out, out


def test_slurm_verify_rack_nvlink_is_an_option_and_asks_for_idle_nodes_only_even_with_include_busy(monkeypatch):
    # it loads every GPU of a rack: never on a node running a job (--include-busy or not)
    from slurm_fakes import asked_for

    from ccrhost.cli import entry
    from ccrhost.fleet.slurm_job import VerifyOptions

    seen = []
    monkeypatch.setattr("ccrhost.fleet.slurm.run_verify", lambda opts, stream=None: (seen.append(opts), (0, {}, {}))[1])
    with pytest.raises(SystemExit):
        entry(["slurm", "verify", "-p", "gpu", "--rack-nvlink", "--nccl-max-bytes", "4G"])
    assert isinstance(seen[0].rack_nvlink, NcclOptions) and seen[0].rack_nvlink.max_bytes == "4G"
    assert seen[0].nccl is None
    with pytest.raises(SystemExit):
        entry(["slurm", "verify", "-p", "gpu"])
    assert seen[1].rack_nvlink is None

    asked, _ = asked_for(monkeypatch, VerifyOptions("gpu", include_busy=True, rack_nvlink=NcclOptions()))
    assert asked == [["n1"]]


def fake_verdict(status="OK"):
    from types import SimpleNamespace

    gpus = [SimpleNamespace(name="NVIDIA GB200")] * 4
    return SimpleNamespace(status=status, evaluated=True, readings=SimpleNamespace(gpus=gpus, ports=[]))


def test_only_trays_of_a_rack_that_do_not_fail_their_own_checks_run_and_a_rack_of_one_runs_nothing():
    from types import SimpleNamespace

    from ccrhost.fleet.rack_nvlink import run_racks, trays_to_run

    def tray(rack, imex=True):
        return SimpleNamespace(imex_enable=imex, imex_rack=rack, platform=lambda: resolve("gb200-nvl72"),
                               verify_allreduce_min_busbw=None)

    verdicts = {n: fake_verdict("FAIL" if n == "gb03" else "OK") for n in ("gb01", "gb02", "gb03", "gb04", "gb05",
                                                                          "gb06", "cpu1")}
    settings = {"gb01": tray("a"), "gb02": tray("a"), "gb03": tray("a"), "gb04": tray(None), "gb05": tray("b"),
                "gb06": tray("c"), "cpu1": tray("a", imex=False)}
    addresses = {n: f"10.0.0.{i}" for i, n in enumerate(verdicts, 1)}
    said = []
    racks, infos = trays_to_run(verdicts, settings, addresses, said.append)
    assert racks == {"a": ["gb01", "gb02"], "b": ["gb05"], "c": ["gb06"]}
    assert "rack all-reduce: not run on gb03: FAIL their own checks" in said
    launcher = Launcher()
    results = run_racks("77", verdicts, settings, addresses, NcclOptions(), said.append, run=launcher)
    assert set(results) == {"gb01", "gb02"} and len(launcher.argvs) == 1  # racks b and c: one tray each
    assert results["gb01"].status == "OK" and "threshold 432 GB/s" in results["gb01"].message


def test_the_stored_rack_result_is_what_the_check_and_prolog_judge_and_it_goes_stale():
    from ccrhost.model.allreduce import AllReduceReading, check_allreduce

    results, _ = run(trays(4), Launcher("gb02"))
    fresh = AllReduceReading(1000.0 + 60, {"rack": results["gb02"].to_dict()})
    assert [(r.level, r.code) for r in check_allreduce(fresh)] == [("FAIL", "rack_nvlink_slow")]
    assert "rack nvl72-a" in check_allreduce(fresh)[0].message
    ok = AllReduceReading(1000.0 + 60, {"rack": results["gb01"].to_dict()})
    assert check_allreduce(ok) == []
    stale = AllReduceReading(1000.0 + 86400 + 1, {"rack": results["gb02"].to_dict()})
    assert [(r.level, r.code) for r in check_allreduce(stale)] == [("UNKNOWN", "allreduce_stale")]
    assert check_allreduce(stale)[0].message.startswith("rack-level all-reduce over NVLink: ")


def test_a_tray_its_batch_could_not_hold_is_left_out_of_every_run_and_keeps_no_result():
    """A tray running someone's job (or lost) when its rack's trays are held: the rack runs without it,
    says so, and gives it no result (its stored one stays as it was); a rack left with one held tray
    runs nothing."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from ccrhost.fleet.rack_nvlink import run_racks

    class Batches:
        def __init__(self, busy):
            self.busy, self.asked = set(busy), []

        @contextmanager
        def hold(self, names):
            self.asked.append(list(names))
            yield "88", [n for n in names if n not in self.busy]

    rack_a, rack_b = trays(4), ["gb05", "gb06"]
    tray = SimpleNamespace(imex_enable=True, platform=lambda: resolve("gb200-nvl72"), verify_allreduce_min_busbw=None)
    settings = {n: SimpleNamespace(**vars(tray), imex_rack="a" if n in rack_a else "b") for n in rack_a + rack_b}
    verdicts = {n: fake_verdict("OK") for n in settings}
    addresses = {n: f"10.0.0.{i}" for i, n in enumerate(settings, 1)}
    said, launcher, batches = [], Launcher("gb03"), Batches({"gb03", "gb06"})
    results = run_racks(None, verdicts, settings, addresses, NcclOptions(), said.append, batches=batches,
                        run=launcher)
    assert batches.asked == [rack_a, rack_b]
    ran = [argv[argv.index("-w") + 1].split(",") for argv in launcher.argvs]
    assert ran == [["gb01", "gb02", "gb04"]] and all("--jobid=88" in argv for argv in launcher.argvs), launcher.argvs
    assert set(results) == {"gb01", "gb02", "gb04"} and all(r.status == "OK" for r in results.values())
    assert "rack all-reduce: rack a: gb03 not held (busy or lost): run without them" in said
    assert "rack all-reduce: rack b: gb06 not held (busy or lost): run without them" in said
