"""How long one all-reduce run may take (derived from the expected time at
the platform's figure, a setting overrides), and a node that hung, found no
binary or moved wrong data is not run again in the same run (issue 45 case 14)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from nccl_report import at_busbw  # noqa: E402

from ccrhost.fleet.slurm_nccl import NcclOptions, NodeInfo, run_modes  # noqa: E402
from ccrhost.model import allreduce as ar  # noqa: E402
from ccrhost.node import allreduce as node_ar  # noqa: E402
from ccrhost.node.active import ToolRun  # noqa: E402
from ccrhost.settings import InventoryDataError, validate_host  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"


def test_the_timeout_follows_the_expected_run_at_the_platforms_figure():
    nvlink = ar.threshold("nvlink", H100, [])  # 460 GB/s
    # 2 x (5 warm-up + 20 + 1 validation) all-reduces of 16 GiB, each 16 GiB x 2 x 7/8 at 460 GB/s
    assert round(ar.expected_seconds(nvlink, 8, "16G", 20), 3) == round(52 * 17179869184 * 1.75 / 460e9, 3)
    assert ar.run_timeout(nvlink, 8, "16G", 20) == 71      # 60 s start-up + 3 x 3.4 s
    loop = ar.Figure(40.0, "a site's loopback figure")     # 40 GB/s: ten times longer
    assert ar.run_timeout(loop, 8, "16G", 20) == 178
    pair = ar.threshold("pair", H100, [400.0] * 8)         # 368 GB/s over 16 ranks
    assert ar.run_timeout(pair, 16, "16G", 20) == 74
    assert ar.run_timeout(ar.Figure(0.5, "x"), 8, "16G", 1000) == ar.TIMEOUT_MAX
    # a setting overrides; no figure known: the old fixed 300 s
    assert ar.run_timeout(nvlink, 8, "16G", 20, setting=900) == 900
    assert ar.run_timeout(None, 8, "16G", 20) == 300
    assert ar.size_bytes("16G") == 17179869184 and ar.size_bytes("512M") == 1 << 29 and ar.size_bytes("1024") == 1024


def test_the_setting_is_unset_by_default_and_still_bounded():
    assert validate_host("n1", {}).verify_allreduce_timeout is None
    assert validate_host("n1", {"verify_allreduce_timeout": 45}).verify_allreduce_timeout == 45
    try:
        validate_host("n1", {"verify_allreduce_timeout": 5})
    except InventoryDataError as exc:
        assert "verify_allreduce_timeout" in str(exc)
    else:
        raise AssertionError("a 5 s timeout was accepted")


class Hanging:
    """A fake srun: ``hung`` nodes time out, the rest pass; records each call's nodes and deadline."""

    def __init__(self, hung=(), missing=()):
        self.hung, self.missing, self.calls = set(hung), set(missing), []

    def __call__(self, argv, deadline, env):
        nodes = argv[argv.index("-w") + 1].split(",")
        loop = "NCCL_P2P_DISABLE=1" in argv
        self.calls.append((tuple(nodes), "loopback" if loop else "pair" if len(nodes) == 2 else "nvlink", deadline))
        if set(nodes) & self.hung:
            return ToolRun(tuple(argv), None, "", deadline, timed_out=True)
        if set(nodes) & self.missing:
            return ToolRun(tuple(argv), 2, "0: slurmstepd: error: execve(): all_reduce_perf: No such file or "
                           "directory\n", 0.1)
        busbw = 380.0 if len(nodes) == 2 else 47.0 if loop else 470.0
        text = "".join(f"0: {line}\n" for line in at_busbw(busbw, ranks=16 if len(nodes) == 2 else 8).splitlines())
        return ToolRun(tuple(argv), 0, text, 1.0)


def infos(n):
    return {f"gpu{i:02d}": NodeInfo(f"gpu{i:02d}", f"10.0.0.{i}", 8, H100, (400.0,) * 8) for i in range(1, n + 1)}


def test_a_node_that_hung_is_run_once_and_keeps_its_hang_in_every_later_mode():
    srun = Hanging(hung={"gpu02"}, missing={"gpu03"})
    got = run_modes("7", infos(4), NcclOptions(retries=1, min_busbw={"loopback": 40.0}), lambda _: None, run=srun,
                    clock=lambda: 9.0)
    assert [c for c in srun.calls if "gpu02" in c[0]] == [(("gpu02",), "nvlink", 71)]  # one deadline, no more
    assert [c for c in srun.calls if "gpu03" in c[0]] == [(("gpu03",), "nvlink", 71)]
    hung = got["gpu02"].results
    assert (hung["nvlink"]["status"], hung["nvlink"]["code"]) == ("UNKNOWN", "allreduce_hang")
    for mode in ("loopback", "pair"):
        assert (hung[mode]["status"], hung[mode]["code"], hung[mode]["runs"]) == ("UNKNOWN", "allreduce_skipped", 0)
    assert hung["pair"]["message"] == ("two-node ring all-reduce (gpu02): not run: the nvlink mode of this run "
                                       "ended allreduce_hang")
    assert got["gpu03"].results["loopback"]["code"] == "allreduce_skipped"
    # the others pair among themselves, each deadline its own mode's
    assert {c for c in srun.calls if c[1] == "pair"} == {(("gpu01", "gpu04"), "pair", 74)}
    assert {c[2] for c in srun.calls if c[1] == "loopback"} == {178}
    assert got["gpu01"].results["pair"]["status"] == "OK" and got["gpu04"].results["pair"]["status"] == "OK"


def test_an_explicit_timeout_is_every_runs_deadline():
    srun = Hanging()
    run_modes("7", infos(2), NcclOptions(retries=0, timeout=20), lambda _: None, run=srun, clock=lambda: 9.0)
    assert {c[2] for c in srun.calls} == {20}


def test_the_node_runner_skips_the_modes_after_a_hang(tmp_path):
    calls = []

    def run(argv, deadline, env):
        calls.append(deadline)
        return ToolRun(tuple(argv), None, "", deadline, timed_out=True)

    s = validate_host("n1", {"verify_allreduce": True, "verify_allreduce_state": str(tmp_path / "active.json")})
    results = node_ar.run_and_store(s, H100, 8, [], run=run, clock=lambda: 5.0)
    assert calls == [71]
    assert [(r.mode, r.code, r.runs) for r in results] == [("nvlink", "allreduce_hang", 1),
                                                           ("loopback", "allreduce_skipped", 0)]


def test_the_deploys_pairs_leave_out_a_host_whose_single_node_modes_hung(monkeypatch):
    from types import SimpleNamespace

    from ccrhost.fleet import allreduce as fleet_ar
    from ccrhost.model.active import ActiveResult

    def result(mode, code):
        return ActiveResult("allreduce", mode, "UNKNOWN" if code else "OK", code, "m", 1.0, 60)

    singles = {"h1": [result("nvlink", None)], "h2": [result("nvlink", "allreduce_hang"),
                                                      result("loopback", "allreduce_skipped")],
               "h3": [result("nvlink", None)]}
    seen = {}

    def pairs(state, inventory, settings_by_host, clock, exclude=frozenset()):
        seen["exclude"] = set(exclude)
        return {n: result("pair", None) for n in ("h1", "h3")}

    monkeypatch.setattr(fleet_ar, "_singles_host", lambda state, h, s: singles[h.name])
    monkeypatch.setattr(fleet_ar, "mpirun_pairs", pairs)
    class Host:
        def __init__(self, name):
            self.name = name

    hosts = [Host(n) for n in ("h1", "h2", "h3")]

    class Inventory(list):
        def get_active_hosts(self):
            return list(self)

    settings = SimpleNamespace(verify_allreduce=True, verify_allreduce_launcher="mpirun", verify_allreduce_valid_for=60)
    got = fleet_ar.fleet_allreduce(None, Inventory(hosts), dict.fromkeys(("h1", "h2", "h3"), settings),
                                   clock=lambda: 2.0)
    assert seen["exclude"] == {"h2"}
    assert [(r.mode, r.code) for r in got["h2"]] == [("nvlink", "allreduce_hang"), ("loopback", "allreduce_skipped"),
                                                     ("pair", "allreduce_skipped")]
    assert [(r.mode, r.code) for r in got["h1"]] == [("nvlink", None), ("pair", None)]
