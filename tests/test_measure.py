"""Pairing, retries and culprit isolation, with a fake round runner."""

from ccrhost.fleet.measure import MeasurePlan, PairResult, measure_fleet
from ccrhost.fleet.pairing import first_rounds, isolation_round

DEVS = ["mlx5_0", "mlx5_1"]


def plan(hosts, retries=1):
    return MeasurePlan(devices={h: DEVS for h in hosts}, expected={h: {d: 400.0 for d in DEVS} for h in hosts},
                       address={h: h for h in hosts}, seconds=1, retries=retries)


def fake_runner(slow_hosts=(), broken_hosts=(), flaky_once=()):
    calls, flaked = [], set()

    def run(pairs):
        calls.append(list(pairs))
        out = []
        for s, c in pairs:
            errors = [f"{h}: ib_write_bw not found (install perftest)" for h in (s, c) if h in broken_hosts]
            rate = 190.0 if {s, c} & set(slow_hosts) else 385.0
            key = (s, c)
            if key in flaky_once and key not in flaked:
                flaked.add(key)
                rate = 100.0
            gbps = [] if errors else [(d, d, rate) for d in DEVS]
            out.append(PairResult(s, c, gbps, errors, slow=rate < 360 and not errors))
        return out

    return run, calls


def test_rounds_cover_every_host_once_plus_the_odd_one():
    assert first_rounds(["a", "b", "c", "d"]) == [[("a", "b"), ("c", "d")]]
    assert first_rounds(["a", "b", "c"]) == [[("a", "b")], [("a", "c")]]
    assert first_rounds(["a"]) == []


def test_isolation_uses_distinct_good_partners():
    assert isolation_round([("c", "d")], ["a", "b"]) == [("a", "c"), ("b", "d")]
    assert isolation_round([("c", "d")], ["a"]) == [("a", "c")]


def test_slow_pair_is_split_and_the_culprit_named():
    hosts = ["a", "b", "c", "d"]
    run, calls = fake_runner(slow_hosts=["c"])
    out = measure_fleet(None, dict.fromkeys(hosts), plan(hosts, retries=1), runner=run)
    assert calls == [[("a", "b"), ("c", "d")], [("c", "d")], [("a", "c"), ("b", "d")], [("a", "c")]]
    assert out["c"].gbps == {"mlx5_0": 190.0, "mlx5_1": 190.0}
    assert out["c"].note == "slow with d and with known-good a"
    assert out["d"].gbps == {"mlx5_0": 385.0, "mlx5_1": 385.0}
    assert out["d"].note == "slow with c, fine with known-good b"
    assert out["a"].note is None and out["a"].gbps["mlx5_0"] == 385.0


def test_a_flaky_pair_passes_on_retry():
    hosts = ["a", "b"]
    run, calls = fake_runner(flaky_once=[("a", "b")])
    out = measure_fleet(None, dict.fromkeys(hosts), plan(hosts, retries=1), runner=run)
    assert len(calls) == 2 and out["a"].gbps["mlx5_0"] == 385.0 and not out["a"].errors


def test_missing_tool_is_an_error_for_that_host_only():
    hosts = ["a", "b", "c", "d"]
    run, _ = fake_runner(broken_hosts=["d"])
    out = measure_fleet(None, dict.fromkeys(hosts), plan(hosts, retries=0), runner=run)
    assert out["d"].errors == ["d: ib_write_bw not found (install perftest)"]
    assert out["c"].errors == [] and out["c"].note == "unmeasurable with d, fine with known-good a"


def test_both_slow_and_no_good_partner():
    hosts = ["a", "b"]
    run, _ = fake_runner(slow_hosts=["a"])
    out = measure_fleet(None, dict.fromkeys(hosts), plan(hosts, retries=0), runner=run)
    assert out["a"].note == "slow with b; no known-good partner left to tell which is at fault"
    assert out["b"].note == "slow with a; no known-good partner left to tell which is at fault"


def test_single_host_cannot_be_measured():
    out = measure_fleet(None, {"a": None}, plan(["a"]), runner=lambda pairs: [])
    assert out["a"].errors == ["no peer to measure against (one host in the run)"]


def test_a_host_fine_elsewhere_is_not_retested_and_lends_no_partner_slot():
    # three hosts, c slow: (a,b) fine, (a,c) slow; only b can tell whether c is at fault
    assert isolation_round([("a", "c")], ["a", "b"]) == [("b", "c")]
    hosts = ["a", "b", "c"]
    run, calls = fake_runner(slow_hosts=["c"])
    out = measure_fleet(None, dict.fromkeys(hosts), plan(hosts, retries=0), runner=run)
    assert calls == [[("a", "b")], [("a", "c")], [("b", "c")]]
    assert out["c"].note == "slow with a and with known-good b"
    assert out["a"].gbps == {"mlx5_0": 385.0, "mlx5_1": 385.0} and out["a"].note is None
