"""ib_write_lat's report and the p99 latency gate (model/latency.py)."""

from pathlib import Path

import pytest

from ccrhost.model.latency import IMBUE_MAX_P99_US, LatencyReading, check_latency
from ccrhost.model.status import FAIL, UNKNOWN
from ccrhost.probes.perftest import NotAMeasurement, PerftestFormatError
from ccrhost.probes.perftest_lat import parse_ib_write_lat, read_report

FIXTURES = Path(__file__).parent / "fixtures" / "perftest_lat"
# perftest's own printf formats (src/perftest_parameters.h, linux-rdma/perftest
# 00b55b6; %lu and PRIu64 written %d), to build the tables no pasted sample shows
HEADER_FULL = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   "
               "99% percentile[usec]   99.9% percentile[usec] ")
HEADER_OLD = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]"      # before 1ccb3fd (2016)
HEADER_DUR = " #bytes        #iterations       t_avg[usec]    tps average"
ROW_FULL = " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"
ROW_OLD = " %-7d %d          %-7.2f        %-7.2f      %-7.2f"
ROW_DUR = " %-7d       %d            %-7.2f        %-7.2f"
CPU_HEADER, CPU_ROW = "    CPU_Util[%]", "\t    %-3.2f"
LINE = "-" * 87


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_all_sizes_with_cpu_warnings_between_rows():
    rows = parse_ib_write_lat(fixture("write_lat_ib_all_sizes_cpu_warnings.txt"))
    assert [r.bytes for r in rows] == [4096 * 2 ** i for i in range(12)]
    assert rows[0] == LatencyReading(4096, 1000, 3.74, 4.39, 3.85, 3.85, 0.04, 3.93, 4.39)
    assert (rows[-1].bytes, rows[-1].t_max, rows[-1].p99, rows[-1].p99_9) == (8388608, 447.02, 441.71, 447.02)


def test_rdma_cm_run_and_ib_read_lat_share_the_table():
    (spark,) = parse_ib_write_lat(fixture("write_lat_rdma_cm.txt"))
    assert spark == LatencyReading(2, 1000, 1.42, 1.93, 1.47, 1.47, 0.00, 1.57, 1.93)
    (mlx4,) = parse_ib_write_lat(fixture("read_lat_mlx4_cpu_warning.txt"))
    assert (mlx4.t_avg, mlx4.p99, mlx4.p99_9, mlx4.error) == (1.80, 1.88, 6.12, None)


def test_cpu_util_column_is_read_past():
    text = "\n".join([LINE, HEADER_FULL + CPU_HEADER, ROW_FULL % (2, 1000, 1.1, 9.0, 1.2, 1.25, 0.1, 1.9, 8.5)
                      + CPU_ROW % 3.5, LINE])
    (row,) = parse_ib_write_lat(text)
    assert (row.p99, row.p99_9, row.t_stdev) == (1.9, 8.5, 0.1)


def test_older_perftest_and_duration_runs_read_without_a_p99():
    (old,) = parse_ib_write_lat("\n".join([HEADER_OLD, ROW_OLD % (2, 1000, 1.1, 9.0, 1.2), LINE]))
    assert (old.t_min, old.t_max, old.t_typical, old.p99) == (1.1, 9.0, 1.2, None)
    assert old.error == "this perftest (before 4.4, 2016) prints no 99% percentile"
    (dur,) = parse_ib_write_lat("\n".join([HEADER_DUR, ROW_DUR % (2, 880000, 1.13, 441234.5), LINE]))
    assert (dur.iterations, dur.t_avg, dur.p99) == (880000, 1.13, None)
    assert dur.error == "a -D (duration) run prints no 99% percentile"
    assert check_latency(dur) == [check_latency(LatencyReading(error=dur.error))[0]]


@pytest.mark.parametrize("header", [
    # a six-column table no perftest printed (t_avg without t_stdev)
    " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]",
    " #bytes        #iterations       t_avg[usec]    t_stdev[usec]",
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
])
def test_a_header_ib_write_lat_never_prints_is_refused_naming_it(header):
    with pytest.raises(PerftestFormatError) as exc:
        parse_ib_write_lat(f"{header}\n 2       1000           1.85           28.40          2.05             2.11\n")
    assert str(exc.value) == f"line {header.strip()!r}: not a header ib_write_lat prints"


def test_a_row_with_the_wrong_count_is_refused_naming_it():
    row = " 2       1000          1.79           5.41         1.87     \t       1.88        \t0.18   \t\t2.03"
    with pytest.raises(PerftestFormatError) as exc:
        parse_ib_write_lat(f"{HEADER_FULL}\n{row}\n")
    assert str(exc.value) == f"line {row.strip()!r}: 8 values where ib_write_lat prints 9"


def test_a_nan_or_negative_latency_is_no_measurement():
    for bad in ("nan", "-1.00"):
        row = f" 2       1000          1.79           5.41         1.87    1.88   0.18   {bad}   5.41"
        with pytest.raises(NotAMeasurement, match="p99 is not a finite number >= 0"):
            parse_ib_write_lat(f"{HEADER_FULL}\n{row}\n")


def test_no_header_or_no_row():
    with pytest.raises(PerftestFormatError, match="no ib_write_lat report header found"):
        parse_ib_write_lat(" Couldn't connect to 10.0.0.2:18515\n")
    with pytest.raises(PerftestFormatError, match="no ib_write_lat result row found"):
        parse_ib_write_lat(f"{HEADER_FULL}\n{LINE}\n")


def test_read_report_takes_the_first_size_and_names_the_pair():
    reading = read_report(fixture("write_lat_ib_all_sizes_cpu_warnings.txt"), "node-0 mlx5_0 -> 10.65.0.3", "mlx5_0")
    assert (reading.bytes, reading.p99, reading.pair, reading.nic) == (4096, 3.93, "node-0 mlx5_0 -> 10.65.0.3",
                                                                      "mlx5_0")


def test_a_failed_run_reads_as_unknown_with_its_last_line():
    reading = read_report(" Couldn't connect to 10.0.0.2:18515\n", "a mlx5_0 -> b", "mlx5_0")
    assert reading.error == ("ib_write_lat failed: Couldn't connect to 10.0.0.2:18515 "
                             "(no ib_write_lat report header found)")
    (reason,) = check_latency(reading)
    assert (reason.level, reason.code, reason.nic) == (UNKNOWN, "rdma_latency_unreadable", "mlx5_0")
    assert reason.message == f"a mlx5_0 -> b: RDMA latency not read: {reading.error}"


def test_p99_above_the_limit_fails_naming_pair_value_limit_and_source():
    reading = LatencyReading(2, 1000, 1.7, 9.0, 1.8, 1.9, 0.2, 4.35, 8.9, pair="a mlx5_0 -> b", nic="mlx5_0")
    (reason,) = check_latency(reading, IMBUE_MAX_P99_US)
    assert (reason.level, reason.code, reason.nic) == (FAIL, "rdma_latency_high", "mlx5_0")
    assert reason.message == ("a mlx5_0 -> b: ib_write_lat p99 4.35 µs is above 4.2 µs "
                              "(Imbue host validation, ib_write_lat p99 at most 4.2 µs)")


def test_p99_at_or_below_the_limit_passes():
    assert check_latency(LatencyReading(p99=4.2)) == []
    assert check_latency(parse_ib_write_lat(fixture("write_lat_rdma_cm.txt"))[0]) == []
    # the largest sizes of the -a run are far above a 2-byte gate
    assert check_latency(parse_ib_write_lat(fixture("write_lat_ib_all_sizes_cpu_warnings.txt"))[-1])[0].code \
        == "rdma_latency_high"
