"""Port counters: 4-byte words, wrap-around, missing and unreadable files."""

import pytest

from ccrhost.model.utilization import delta, percentile, rates, summarize
from ccrhost.probes.counters import PortCounters, Sample, parse_counters


def files(**values):
    return {path.replace("__", "/"): [str(v)] for path, v in values.items()}


def test_words_and_64_bit_preference():
    got = parse_counters({
        "mlx5_0/ports/1/counters/port_xmit_data": ["100"],
        "mlx5_0/ports/1/counters/port_xmit_data_64": ["5000000000"],
        "mlx5_0/ports/1/counters/port_rcv_data_64": ["7"],
        "mlx5_0/ports/1/counters/port_rcv_data": ["7"],
        "mlx5_0/ports/1/hw_counters/np_cnp_sent": ["3"],
        "mlx5_0/ports/1/hw_counters/out_of_sequence": ["9"],   # a transport error: the monitor shows its rise
        "mlx5_0/ports/1/hw_counters/duplicate_request": ["9"],  # neither congestion nor an error judged: not kept
    })
    assert got[("mlx5_0", 1)] == PortCounters(5000000000, 7, None, {"np_cnp_sent": 3, "out_of_sequence": 9})


def test_old_kernels_counters_ext_and_no_pma():
    got = parse_counters({"mlx5_0/ports/1/counters_ext/port_xmit_data_64": ["10"],
                          "mlx5_0/ports/1/counters/port_rcv_data": ["N/A (no PMA)"]})
    assert got[("mlx5_0", 1)].tx_words == 10 and got[("mlx5_0", 1)].rx_words is None


def test_32_bit_counter_wraps():
    assert delta(2**32 - 10, 5, 2**32) == 15
    assert delta(100, 50, None) is None  # a 64-bit counter going back was reset, not wrapped
    assert delta(None, 5, 2**32) is None


def test_rates_count_four_byte_words():
    before = parse_counters({"mlx5_0/ports/1/counters/port_xmit_data": ["0"], "mlx5_0/ports/1/counters/port_rcv_data": ["0"]})
    after = parse_counters({"mlx5_0/ports/1/counters/port_xmit_data": [str(10**9 // 4)],
                            "mlx5_0/ports/1/counters/port_rcv_data": ["0"]})
    (r,) = rates(before, after, 1.0)
    assert r.tx_gbps == pytest.approx(8.0) and r.rx_gbps == 0


def sample(t, words, util, cnp=0):
    return Sample(t, parse_counters({
        "mlx5_0/ports/1/counters/port_xmit_data_64": [str(words)],
        "mlx5_0/ports/1/counters/port_rcv_data_64": ["0"],
        "mlx5_0/ports/1/hw_counters/np_cnp_sent": [str(cnp)],
    }), util)


def test_summary_against_targets():
    # 100 Gb/s for 2 s on a 400 Gb/s port, GPUs at 95%
    words_per_s = int(100e9 / 8 / 4)
    samples = [sample(0, 0, [95, 95]), sample(1, words_per_s, [95, 95], 2), sample(2, 2 * words_per_s, [96, 94], 5)]
    s = summarize(samples, {"mlx5_0/1": 400.0}, gpu_count=2)
    assert s.network_fraction == pytest.approx(0.25)
    assert s.gpu_util_mean == pytest.approx(95) and s.gpu_ok is True and s.net_ok is False
    assert s.verdict == "FAIL"
    assert s.bytes_per_gpu_second == pytest.approx(100e9 / 8 / 2)
    assert s.hw_totals == {"np_cnp_sent": 5}
    ok = summarize(samples, {"mlx5_0/1": 120.0}, gpu_count=2)
    assert ok.verdict == "OK"


def test_no_gpu_readings_is_unknown():
    full = int(400e9 / 8 / 4)  # one second at 400 Gb/s
    s = summarize([sample(0, 0, []), sample(1, full, [])], {"mlx5_0/1": 400.0}, gpu_count=0)
    assert s.net_ok is True and s.gpu_util_mean is None and s.verdict == "UNKNOWN"


def test_percentile():
    assert percentile([10, 20, 30, 40, 50], 0.05) == pytest.approx(12)
    assert percentile([], 0.05) is None
