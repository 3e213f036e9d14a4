"""all_reduce_perf's report as src/common.cu prints it, for tests that need a run with given figures."""


def report(rows, ranks=8, wrong=0, host="node1", gpu="NVIDIA H100 80GB HBM3"):
    """``rows``: [(size bytes, time us)] -> the text rank 0 prints; busbw = algbw x 2(n-1)/n."""
    lines = ["# nThread 1 nGpus %d minBytes %d maxBytes %d step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
             "validation: 1 graph: 0" % (ranks, rows[0][0], rows[-1][0]), "#", "# Using devices"]
    for r in range(ranks):
        lines.append("#  Rank %2d Group  0 Pid %6d on %10s device %2d [0000:%02x:00] %s" % (r, 1000 + r, host, r, r, gpu))
    lines += ["#", "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
              % ("", "", "", "", ""),
              "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
              % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
                 "#wrong"),
              "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
              % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")]
    total = 0.0
    for i, (size, time_us) in enumerate(rows):
        algbw = size / time_us / 1e3
        busbw = algbw * 2 * (ranks - 1) / ranks
        bad = wrong if i == len(rows) - 1 else 0
        half = "  %7s  %6.2f  %6.2f  %5li" % ("%7.1f" % time_us if time_us < 10000 else "%7.0f" % time_us,
                                             algbw, busbw, bad)
        lines.append("%12li  %12li  %8s  %6s  %6i" % (size, size // 4, "float", "sum", -1) + half + half)
        total += 2 * busbw
    lines += ["# Out of bounds values : %d %s" % (2 if wrong else 0, "FAILED" if wrong else "OK"),
              "# Avg bus bandwidth    : %g " % (total / (2 * len(rows))), "#", ""]
    return "\n".join(lines) + "\n"


def at_busbw(busbw, ranks=8, size=17179869184, **kw):
    """A one-size report whose busbw is ``busbw`` GB/s."""
    algbw = busbw * ranks / (2 * (ranks - 1))
    return report([(size, size / algbw / 1e3)], ranks=ranks, **kw)
