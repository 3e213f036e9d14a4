"""all_reduce_perf rows as each nccl-tests version prints them, built with the
tool's own format strings (NVIDIA/nccl-tests src/common.cu, src/util.cu):
Python's % takes C's (the ``l`` length modifier is ignored), so each row
below is what that build writes for the figures given."""

from ccrhost.model import allreduce as ar
from ccrhost.model.status import FAIL, OK
from ccrhost.probes.nccl_tests import parse_all_reduce, run_result

# 2.17.3 on, src/util.cu: the header (writeResultHeader), the row's parameters and each half
HEADER_217 = ("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
              % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                 "busbw", "#wrong", 0, ""))
PARAMS_217 = "%12li  %12li  %8s  %6s  %6s"
HALF_217 = "  %7s  %6s  %6s  %6g"
# 2.13.0 - 2.16: src/common.cu, %5g #wrong
HALF_213 = "  %7s  %6.2f  %6.2f  %5g"
# before 2.13 (2.11.0 src/all_reduce.cu and src/common.cu): no root column, an "error" column printed %5.0le
HEADER_211 = ("# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
              % ("size", "count", "type", "redop", "time", "algbw", "busbw", "error", "time", "algbw", "busbw",
                 "error"))
PARAMS_211 = "%12li  %12li  %8s  %6s"
HALF_211 = "  %7s  %6.2f  %6.2f  %5.0le"


def float_str(value, width):
    """getFloatStr (2.17.3 on, src/util.cu): %.2f, %.1f, %.0f, then %.1e (width 7) or %.0e."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        text = fmt % (width, value)
        if len(text) <= width:
            return text
    return ("%*.1e" if width >= 7 else "%*.0e") % (width, value)


def row_217(size, us, busbw, wrong, ranks=8):
    algbw = size / 1e3 / us
    half = HALF_217 % (float_str(us, 7), float_str(algbw, 6), float_str(busbw, 6), wrong)
    return PARAMS_217 % (size, size // 4, "float", "sum", "-1") + half + half


def test_a_million_wrong_elements_print_as_1e06_and_fail_as_wrong_results():
    row = row_217(17179869184, 5869.38, 22.87, 1234567)
    assert "1.23457e+06" in row  # %6g
    text = (f"{HEADER_217}\n{row}\n# Out of bounds values : 2 FAILED\n# Avg bus bandwidth    : 22.87 \n"
            " .. node1 pid 1: Test failure common.cu:1189\n")
    out = parse_all_reduce(text)
    assert out.largest.out_of_place.wrong == 1234570 and out.out_of_bounds == 2
    v = ar.judge_run(run_result(text, 1), "nvlink", ar.Figure(460, "x"))
    assert (v.status, v.code) == (FAIL, "allreduce_wrong")  # drains; never UNKNOWN allreduce_failed
    exact = row_217(17179869184, 5869.38, 22.87, 1000000)
    assert exact.endswith("   1e+06") and parse_all_reduce(f"{HEADER_217}\n{exact}\n").wrong == 2000000


def test_a_ten_second_all_reduce_prints_its_time_as_an_exponent_and_is_judged():
    # 16 GiB at 1.7 GB/s busbw over 8 GPUs: 1.77e7 us, wider than %7.0f
    us = 17179869184 / 1e3 / (1.7 * 8 / 14)
    row = row_217(17179869184, us, 1.7, 0)
    assert "1.8e+07" in row
    out = parse_all_reduce(f"{HEADER_217}\n{row}\n# Out of bounds values : 0 OK\n")
    assert out.largest.out_of_place.time_us == 1.8e7 and out.largest.busbw == 1.7
    v = ar.judge_run(run_result(f"{HEADER_217}\n{row}\n", 0), "nvlink", ar.Figure(460, "x"))
    assert (v.status, v.code) == (FAIL, "allreduce_slow")


def test_the_213_to_216_wrong_column_reads_as_a_count():
    half = HALF_213 % ("  47535", 180.71, 338.82, 0.0)
    row = PARAMS_217 % (8589934592, 2147483648, "float", "sum", "-1") + half + HALF_213 % ("  47600", 180.46, 337.35, 3e6)
    out = parse_all_reduce(f"{HEADER_217}\n{row}\n")
    assert (out.largest.out_of_place.wrong, out.largest.in_place.wrong) == (0, 3000000)


def test_a_build_before_213_prints_the_largest_deviation_and_reads_clean():
    half = HALF_211 % ("  47535", 180.71, 338.82, 2e-07)
    assert half.endswith("2e-07")
    row = PARAMS_211 % (8589934592, 2147483648, "float", "sum") + half + HALF_211 % ("  47600", 180.46, 337.35, 0.0)
    text = f"{HEADER_211}\n{row}\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 338.085 \n"
    out = parse_all_reduce(text)
    big = out.largest
    # the deviation is no count of wrong elements: the summary line says whether it was in bounds
    assert (big.out_of_place.wrong, big.in_place.wrong, out.wrong, big.busbw) == (None, None, 0, 338.82)
    v = ar.judge_run(run_result(text, 0), "pair", ar.Figure(300, "x"))
    assert (v.status, v.busbw) == (OK, 338.82)
    bad = text.replace("0 OK", "1 FAILED")
    assert ar.judge_run(run_result(bad, 1), "pair", ar.Figure(300, "x")).code == "allreduce_wrong"


def test_a_count_that_is_no_whole_number_is_refused():
    import pytest

    from ccrhost.probes.nccl_tests import NcclTestsFormatError

    row = PARAMS_217 % (1024, 256, "float", "sum", "-1") + HALF_217 % ("  18.94", "  0.05", "  0.06", 0.5) * 2
    with pytest.raises(NcclTestsFormatError, match="is not a count"):
        parse_all_reduce(f"{HEADER_217}\n{row}\n")
    assert run_result(f"{HEADER_217}\n{row}\n", 0).output is None


# -- an NCCL WARN beside a measurement ---------------------------------------------------

WARN = ("node2:8756:8772 [1] graph/search.cc:890 NCCL WARN Could not find a path for pattern 4, "
        "falling back to simple order")


def with_warning(report):
    lines = report.splitlines()
    return "\n".join(lines[:3] + [WARN] + lines[3:]) + "\n"


def test_an_nccl_warn_does_not_turn_a_measured_slow_run_into_unknown():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from nccl_report import at_busbw

    slow = ar.judge_run(run_result(with_warning(at_busbw(300.0)), 0), "nvlink", ar.Figure(460, "Azure"))
    assert (slow.status, slow.code, slow.retry, slow.busbw) == (FAIL, "allreduce_slow", True, 300.0)
    assert slow.message.endswith("below 460 GB/s (Azure) (NCCL warned: " + WARN + ")")
    # a run that reached its figure with a warning is still no clean pass; a warning alone, no result, says why
    fast = ar.judge_run(run_result(with_warning(at_busbw(470.0)), 0), "nvlink", ar.Figure(460, "Azure"))
    assert (fast.code, fast.busbw) == ("allreduce_nccl_warn", 470.0) and WARN in fast.message
    alone = ar.judge_run(run_result(f"{WARN}\n", 1), "nvlink", ar.Figure(460, "Azure"))
    assert (alone.code, alone.busbw) == ("allreduce_nccl_warn", None)
