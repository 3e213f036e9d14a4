"""ib_write_bw reports: the verbatim RoCE sample and the other header variants."""

from pathlib import Path

import pytest

from ccrhost.probes.perftest import (
    PerftestFormatError,
    client_command,
    parse_client_runs,
    parse_ib_write_bw,
)

SAMPLE = (Path(__file__).parent / "fixtures/ib_write_bw_roce.txt").read_text()


def test_sample_with_cpu_frequency_warning_between_header_and_data():
    r = parse_ib_write_bw(SAMPLE)
    assert (r.msg_bytes, r.iterations, r.peak_gbps, r.average_gbps) == (65536, 5000, 92.42, 92.40)


@pytest.mark.parametrize("unit, value, gbps", [("MB/sec", "11000.00", 11000 * 8 * 2**20 / 1e9),
                                              ("MiB/sec", "11000.00", 11000 * 8 * 2**20 / 1e9),
                                              ("Gb/sec", "380.5", 380.5)])
def test_header_units(unit, value, gbps):
    text = SAMPLE.replace("[Gb/sec]", f"[{unit}]").replace("92.40 ", f"{value} ")
    assert parse_ib_write_bw(text).average_gbps == pytest.approx(gbps)


def test_missing_report():
    with pytest.raises(PerftestFormatError, match="header"):
        parse_ib_write_bw(" Couldn't connect to 198.18.0.12:18515\nUnable to open file descriptor for socket connection")
    with pytest.raises(PerftestFormatError, match="row"):
        parse_ib_write_bw(SAMPLE.split(" 65536")[0])


def test_client_command_quotes_every_value():
    assert client_command("mlx5_0", "10.0.0.2", 18515, 10) == \
        "ib_write_bw -d mlx5_0 -p 18515 -D 10 -F --report_gbits 10.0.0.2"
    assert "'x;touch /tmp/pwned'" in client_command("x;touch /tmp/pwned", "h", 1, 1)


def test_client_runs_per_device():
    report = SAMPLE.splitlines()
    lines = ["@@dev mlx5_0", *report, "@@rc 0",
             "@@dev mlx5_1", "Couldn't connect to 198.18.0.12:18516", "@@rc 1",
             "@@dev mlx5_2", "@@rc 124"]
    out = parse_client_runs(lines)
    assert out["mlx5_0"]["error"] is None and out["mlx5_0"]["gbps"] == parse_ib_write_bw("\n".join(report)).average_gbps
    assert out["mlx5_1"] == {"gbps": None, "error": "ib_write_bw on mlx5_1 failed: Couldn't connect to 198.18.0.12:18516"}
    assert out["mlx5_2"] == {"gbps": None, "error": "ib_write_bw on mlx5_2 timed out"}
    assert parse_client_runs(["@@missing"])["@all"]["error"] == "ib_write_bw not found (install perftest)"


@pytest.mark.parametrize("bad", ["nan", "inf", "-5", "-inf", "NaN"])
def test_a_row_that_is_no_measurement_is_refused_and_never_counted(bad):
    row = f" 65536      5000             {bad}              {bad}              0.176230"
    text = SAMPLE.replace(" 65536      5000             92.42              92.40              0.176230", row)
    with pytest.raises(PerftestFormatError, match="not a finite number"):
        parse_ib_write_bw(text)
    runs = parse_client_runs(["@@dev mlx5_0", *text.splitlines(), "@@rc 0"])
    assert runs["mlx5_0"]["gbps"] is None and repr(row.strip()) in runs["mlx5_0"]["error"]
