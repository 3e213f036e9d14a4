"""all_reduce_perf's report, read from verbatim outputs (tests/fixtures/nccl/)."""

from pathlib import Path

import pytest

from ccrhost.probes.nccl_tests import NcclTestsFormatError, command, environment, parse_all_reduce

FIX = Path(__file__).parent / "fixtures" / "nccl"


def read(name):
    return (FIX / name).read_text()


def test_two_node_h100_report_reads_every_row_and_the_summary():
    out = parse_all_reduce(read("all_reduce_h100_2node.txt"))
    assert len(out.rows) == 31 and out.ranks == 16
    assert out.out_of_bounds == 0 and out.wrong == 0
    assert out.avg_busbw == 70.742
    big = out.largest
    assert big.size == 8589934592 and big.count == 2147483648 and big.dtype == "float" and big.redop == "sum"
    assert (big.out_of_place.time_us, big.out_of_place.algbw, big.out_of_place.busbw) == (47535, 180.71, 338.82)
    assert big.in_place.busbw == 337.35
    # judged at the largest size, not the average that mixes in 8-byte latency rows
    assert big.busbw == 338.82
    assert out.warnings == () and out.failures == ()


def test_wrong_results_are_counted_from_the_rows_and_the_summary():
    out = parse_all_reduce(read("all_reduce_gh200_wrong.txt"))
    assert out.version == "2.17.8"
    assert out.out_of_bounds == 4
    row = next(r for r in out.rows if r.size == 1048576)
    assert (row.out_of_place.wrong, row.in_place.wrong) == (96, 32)
    assert out.wrong == 128
    assert out.largest.busbw == 22.87
    assert out.failures == (".. gpu-1-1 pid 662195: Test failure common.cu:1189",
                            ".. gpu-1-7 pid 2448661: Test failure common.cu:1189")


def test_a_launch_that_failed_before_any_row_has_its_failure_lines():
    out = parse_all_reduce(read("all_reduce_gh200_busy.txt"))
    assert out.rows == () and out.ranks == 8 and out.out_of_bounds is None
    assert out.failures[0] == ("gpu-1-1: Test CUDA failure common.cu:1304 "
                               "'CUDA-capable device(s) is/are busy or unavailable'")


def test_nccl_warn_lines_are_kept():
    out = parse_all_reduce(read("all_reduce_warn_excerpt.txt"))
    assert out.warnings == ("Meowth:8756:8772 [1] graph/search.cc:890 NCCL WARN Could not find a path for "
                            "pattern 4, falling back to simple order",)


def test_srun_labels_and_noise_between_rows_are_skipped():
    text = read("all_reduce_h100_2node.txt")
    labelled = "\n".join(f"0: {line}" for line in text.splitlines())
    noisy = labelled.replace("0:   8589934592", "srun: Job step aborted? no\n0:   8589934592")
    out = parse_all_reduce(noisy)
    assert len(out.rows) == 31 and out.largest.busbw == 338.82


def test_a_build_without_redop_and_root_columns_reads_by_header():
    text = ("#       size         count      type     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
            "   134217728      33554432     float   3298.6   40.69   71.21    N/A   3070.3   43.71   76.50    N/A\n"
            "# Out of bounds values : 0 OK\n")
    out = parse_all_reduce(text)
    row = out.largest
    assert row.redop is None and row.busbw == 76.50 and row.out_of_place.wrong is None and out.wrong == 0


@pytest.mark.parametrize("bad", ["nan", "inf", "-3.0", "1e400"])
def test_a_bandwidth_that_is_no_number_is_refused(bad):
    text = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
            "   busbw #wrong\n"
            f"        1024           256     float     sum      -1    18.94    0.05    {bad}      0    18.62    0.06"
            "    0.06      0\n")
    with pytest.raises(NcclTestsFormatError, match="not a finite number"):
        parse_all_reduce(text)


def test_text_that_is_no_report_is_refused():
    with pytest.raises(NcclTestsFormatError, match="no all_reduce_perf column header"):
        parse_all_reduce("bash: all_reduce_perf: command not found\n")


def test_the_command_and_each_modes_environment():
    assert command("/opt/nccl-tests/all_reduce_perf", "nvlink", 8) == [
        "/opt/nccl-tests/all_reduce_perf", "-b", "1G", "-e", "16G", "-f", "2", "-n", "20", "-c", "1", "-g", "8"]
    assert command("all_reduce_perf", "pair", 8, per_process=True)[-2:] == ["-g", "1"]
    assert environment("nvlink") == {"NCCL_DEBUG": "WARN"}
    assert environment("loopback") == {"NCCL_DEBUG": "WARN", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    assert environment("pair") == {"NCCL_DEBUG": "WARN", "NCCL_ALGO": "RING"}


def test_a_launchers_not_found_is_a_missing_binary():
    from ccrhost.probes.nccl_tests import run_result

    srun = ("8: slurmstepd: error: execve(): all_reduce_perf: No such file or directory\n"
            "srun: error: node2: task 8: Exited with exit code 2\n")
    assert run_result(srun, 2).missing == ("not installed: slurmstepd: error: execve(): all_reduce_perf: "
                                           "No such file or directory (on node2)")
    # srun names the node whose tasks exited by themselves; one whose tasks it killed is not named
    assert run_result(srun + "srun: error: node1: tasks 0-7: Killed\n", 2).missing_on == ("node2",)
    assert run_result("bash: line 1: all_reduce_perf: command not found\n", 127).missing.endswith("command not found")
    assert run_result((FIX / "all_reduce_h100_2node.txt").read_text(), 0).missing is None
    # Open MPI names the node and the program on lines of their own
    ompi = run_result((FIX / "mpirun_not_found.txt").read_text(), 1)
    assert ompi.missing == "not installed: Open MPI could not find pw.x on 731-sc"
    assert ompi.missing_on == ("731-sc",)


def test_the_pair_mode_under_open_mpis_mpirun():
    from ccrhost.probes.nccl_tests import mpirun_argv, mpirun_script, parse_run_script

    argv = mpirun_argv("/opt/ompi/bin/mpirun", "all_reduce_perf", ["10.0.0.1", "10.0.0.2"], 8, "10.0.0.1:29500",
                       "16G", 20)
    assert argv == ["/opt/ompi/bin/mpirun", "-np", "16", "-H", "10.0.0.1:8,10.0.0.2:8",
                    "-x", "NCCL_DEBUG=WARN", "-x", "NCCL_ALGO=RING", "-x", "NCCL_COMM_ID=10.0.0.1:29500",
                    "all_reduce_perf", "-b", "16G", "-e", "16G", "-f", "2", "-n", "20", "-c", "1", "-g", "1"]
    script = mpirun_script(argv, 60)
    assert script.startswith("if ! command -v /opt/ompi/bin/mpirun >/dev/null 2>&1; then echo '@@missing'")
    assert "timeout -k 5 60 /opt/ompi/bin/mpirun -np 16" in script
    assert parse_run_script(["@@missing"])[3] == "not found on PATH (command -v)"
    assert parse_run_script(["x", "@@rc 124"])[2] is True


def test_per_iteration_columns_and_a_timestamp_are_read_by_each_halfs_time_column():
    # laid out with nccl-tests 2.19.6 src/util.cu writeResultHeader's per-iteration format strings
    # (constructed: no verbatim sample of this variant was found); figures from the GH200 fixture's last row
    header = ("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s"
              "  %7s %*s" % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "i_min",
                             "i_max", "i_p99", "i_cv%", "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99",
                             "i_cv%", 19, "timestamp"))
    row = ("   134217728      33554432     float     sum      -1  5869.38   22.87   22.87       0  5801.10  5990.02"
           "  5990.02     0.81  5886.67   22.80   22.80       0  5850.00  5930.00  5930.00     0.40 2026-01-23 10:00:01")
    out = parse_all_reduce(f"{header}\n{row}\n# Out of bounds values : 0 OK\n")
    big = out.largest
    assert (big.out_of_place.busbw, big.out_of_place.wrong, big.in_place.busbw, big.in_place.time_us) == (
        22.87, 0, 22.80, 5886.67)
