"""NCCL all-reduce (nccl-tests' ``all_reduce_perf``): its report as a typed
record, the three modes, their thresholds, and the verdict of a run.

Pure: the probe (``ccrhost.probes.nccl_tests``) fills :class:`AllReduceOutput`
from the tool's stdout; :func:`judge_run` decides one run; :func:`with_retries`
runs again below threshold only. Figures and sources: shared/reference/
active-checks.md §2; the figures are the platform files' (model/platform.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.model.status import FAIL, OK, UNKNOWN, Reason

# -- the report ----------------------------------------------------------------


@dataclass(frozen=True)
class Half:
    """One half of a size row (src/common.cu Reporter::result: "  %7s  %6.2f  %6.2f  %5li")."""
    time_us: float        # "time (us)": mean time of one collective over the iterations
    algbw: float          # "algbw (GB/s)": bytes / time
    busbw: float          # "busbw (GB/s)": algbw x 2(n-1)/n for all-reduce
    wrong: int | None     # "#wrong": elements that failed validation; None when not validated (N/A, -1)


@dataclass(frozen=True)
class SizeRow:
    """A size row (Reporter::parameters, then out-of-place, then in-place)."""
    size: int             # "size (B)"
    count: int            # "count (elements)"
    dtype: str            # "type": float, bfloat16, ...
    redop: str | None     # "redop": sum, ...; None where the build's header has no redop column
    out_of_place: Half
    in_place: Half

    @property
    def busbw(self) -> float:
        # both halves move the same bytes; the better is the node's figure (one slow half is noise)
        return max(self.out_of_place.busbw, self.in_place.busbw)

    @property
    def wrong(self) -> int:
        return sum(h.wrong or 0 for h in (self.out_of_place, self.in_place))


@dataclass(frozen=True)
class AllReduceOutput:
    """What rank 0 of ``all_reduce_perf`` printed (src/common.cu run())."""
    rows: tuple[SizeRow, ...]
    ranks: int                          # "#  Rank N Group ..." lines (one per GPU in the run)
    out_of_bounds: int | None           # "# Out of bounds values : N OK|FAILED"; None when not printed
    avg_busbw: float | None             # "# Avg bus bandwidth    : X" (mixes in latency-bound sizes: not judged)
    warnings: tuple[str, ...] = ()      # "NCCL WARN" lines (printed with NCCL_DEBUG=WARN)
    failures: tuple[str, ...] = ()      # "Test failure", "Test CUDA failure", "Test NCCL failure", "Test timeout"
    version: str | None = None          # "# nccl-tests version X" (2.14 and later)

    @property
    def largest(self) -> SizeRow | None:
        return max(self.rows, key=lambda r: r.size, default=None)

    @property
    def wrong(self) -> int:
        """Elements that failed validation, over every row; the summary line's count when larger."""
        return max(sum(r.wrong for r in self.rows), self.out_of_bounds or 0)


# -- modes and thresholds --------------------------------------------------------

NVLINK, LOOPBACK, PAIR = "nvlink", "loopback", "pair"
MODES = (NVLINK, LOOPBACK, PAIR)
# the rack-level run over an NVLink rack's trays (fleet/rack_nvlink.py; docs/rack.md), not a --nccl-modes mode
RACK = "rack"
# What each mode sets for NCCL (shared/reference/active-checks.md §2).
MODE_ENV = {
    NVLINK: {},
    # every byte through the NICs: the anchors' "IB loopback"
    LOOPBACK: {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
    # two-node tree busbw can read above what the NICs carry (nccl #2409, #1576): judge the network on ring
    PAIR: {"NCCL_ALGO": "RING"},
    # across the trays over NVLink (multi-node NVLink), never a silent fall back to the NICs
    RACK: {"NCCL_MNNVL_ENABLE": "1"},
}
MODE_TEXT = {NVLINK: "single-node all-reduce over NVLink",
             LOOPBACK: "single-node all-reduce through the NICs (NVLink and shared memory off)",
             PAIR: "two-node ring all-reduce",
             RACK: "rack-level all-reduce over NVLink"}


@dataclass(frozen=True)
class Figure:
    busbw: float   # GB/s: FAIL below
    source: str    # which figure and its source, as a reason names it
    fleet: bool = False  # the platform's fleet figure (fleet:), not the published one


# Ring busbw per NIC: "For NDR @ 400Gbps you should see 46-48GB/s per NIC" (nccl-tests #290, maintainer);
# the low end, scaled by the NIC's rate. A rule per NIC rate, not a platform's figure: a platform file's
# allreduce.pair replaces it.
RING_GBS_PER_400G = 46.0
RING_SOURCE = "nccl-tests #290 (maintainer): 46-48 GB/s per 400G NIC on ring; the low end, scaled by rate"


def thresholds(mode: str, gpu_name: str | None, nic_gbps: list[float], overrides: dict[str, float] | None = None,
               platform=None) -> list[Figure]:
    """The FAIL-below busbw figures for ``mode``: the published one (a
    setting's override first, then the platform file's, then for the pair
    mode the figure from the node's own NICs), then the platform's fleet
    figure. ``platform``: the resolved platform (settings.platform()); None:
    the built-in for ``gpu_name`` (model/platform.py for_gpu). Empty: no figure."""
    from ccrhost.model.platform import for_gpu

    platform = platform if platform is not None else for_gpu(gpu_name)
    key = f"allreduce.{mode}"
    published = platform.figure(key) if platform is not None else None
    if overrides and overrides.get(mode) is not None:
        out = [Figure(float(overrides[mode]), f"setting verify_allreduce_min_busbw.{mode}")]
    elif published is not None:
        out = [Figure(published.value, published.text())]
    elif mode == PAIR and nic_gbps:
        busbw = sum(RING_GBS_PER_400G * g / 400 for g in nic_gbps)
        out = [Figure(round(busbw, 1), f"{len(nic_gbps)} NICs, {sum(nic_gbps):g} Gb/s in all; {RING_SOURCE}")]
    else:
        out = []
    fleet = platform.fleet_figure(key) if platform is not None else None
    return out + ([Figure(fleet.value, fleet.text(), True)] if fleet is not None else [])


def threshold(mode: str, gpu_name: str | None, nic_gbps: list[float],
              overrides: dict[str, float] | None = None, platform=None) -> Figure | None:
    """The first of :func:`thresholds` (the published figure where there is one); None: no figure."""
    return next(iter(thresholds(mode, gpu_name, nic_gbps, overrides, platform)), None)


def _figures(figure) -> list[Figure]:
    if figure is None:
        return []
    return [figure] if isinstance(figure, Figure) else list(figure)


# -- how long one run may take ---------------------------------------------------------

WARMUP_ITERS = 5         # nccl-tests' -w default
FALLBACK_TIMEOUT = 300   # seconds, when no figure says how fast the run should be
STARTUP_S = 60           # CUDA contexts, NCCL's bootstrap and buffers before the first collective
TIMEOUT_MARGIN = 3       # a run this many times slower than the figure is a hang, not a slow pass
TIMEOUT_MAX = 7200


def busbw_text(run) -> str:
    """A group run's busbw for a message (a run with ``busbw``, or None): "N.N GB/s" or "not measured"."""
    return f"{run.busbw:.1f} GB/s" if run is not None and run.busbw is not None else "not measured"


def size_bytes(text: str) -> int | None:
    """A -b/-e size as nccl-tests' parsesize reads it (K, M, G: powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    digits, unit = (text[:-1], units[text[-1].upper()]) if text[-1:].upper() in units else (text, 1)
    return int(digits) * unit if digits.isascii() and digits.isdigit() else None


def expected_seconds(figure, ranks: int, max_bytes: str, iters: int) -> float | None:
    """The collectives of one run at ``figure``'s busbw (the lowest of a
    list): warm-up and timed iterations plus the validation pass,
    out-of-place and in-place; each moves size x 2(n-1)/n bytes per rank.
    None without a figure."""
    figure = min(_figures(figure), key=lambda f: f.busbw, default=None)
    size = size_bytes(max_bytes)
    if figure is None or size is None or figure.busbw <= 0:
        return None
    n = max(ranks, 2)
    return size * 2 * (n - 1) / n / (figure.busbw * 1e9) * 2 * (WARMUP_ITERS + iters + 1)


def run_timeout(figure, ranks: int, max_bytes: str, iters: int, setting: int | None = None) -> int:
    """Seconds one run may take before it counts as a hang: the setting when
    given, else start-up plus ``TIMEOUT_MARGIN`` times the expected run at
    the platform's figure; ``FALLBACK_TIMEOUT`` where no figure is known."""
    if setting is not None:
        return int(setting)
    expected = expected_seconds(figure, ranks, max_bytes, iters)
    if expected is None:
        return FALLBACK_TIMEOUT
    return min(TIMEOUT_MAX, int(STARTUP_S + TIMEOUT_MARGIN * expected + 0.999))


# -- one run's verdict -------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    """What one launch gave, as the runner saw it (before judging)."""
    output: AllReduceOutput | None      # None: nothing parseable was printed
    rc: int | None = None               # the launcher's exit status; None when it was killed
    timed_out: bool = False             # killed at its deadline (a hang)
    missing: str | None = None          # the binary or launcher was not found: what was looked for
    error: str | None = None            # the launch failed before the tool ran: what was said
    tail: str = ""                      # the output's last lines, for the message
    missing_on: tuple[str, ...] = ()    # the nodes the launcher said lack the program (where it says)


@dataclass(frozen=True)
class RunVerdict:
    reason: Reason | None     # None: passed
    busbw: float | None = None
    retry: bool = False       # below threshold: another run may pass
    passed: str = ""          # what a pass says

    @property
    def status(self) -> str:
        return self.reason.level if self.reason else OK

    @property
    def code(self) -> str | None:
        return self.reason.code if self.reason else None

    @property
    def message(self) -> str:
        return self.reason.message if self.reason else self.passed


def judge_run(run: RunResult, mode: str, figure, what: str = "") -> RunVerdict:
    """One run: wrong results FAIL before anything else (never retried);
    a run that could not measure is UNKNOWN naming why; then the busbw at
    the largest size against ``figure`` (a Figure, or a list: the published
    and the fleet's), FAIL below any, naming each figure missed."""
    figures = _figures(figure)
    label = f"{MODE_TEXT[mode]}{f' ({what})' if what else ''}"
    out = run.output
    if run.missing:
        return RunVerdict(Reason(UNKNOWN, "allreduce_missing", f"{label}: {run.missing}"))
    if out is not None and out.wrong:
        return RunVerdict(Reason(FAIL, "allreduce_wrong",
                                 f"{label}: wrong results ({out.wrong} elements failed validation; "
                                 "'Out of bounds values' FAILED)"))
    if run.timed_out:
        return RunVerdict(Reason(UNKNOWN, "allreduce_hang", f"{label}: no result before its deadline (killed)"))
    if run.error:
        return RunVerdict(Reason(UNKNOWN, "allreduce_failed", f"{label}: could not launch: {run.error}"))
    if out is not None and out.failures:
        return RunVerdict(Reason(UNKNOWN, "allreduce_failed", f"{label}: {out.failures[0]}"))
    if out is None or out.largest is None or run.rc not in (0, None):
        if out is not None and out.warnings:  # no measurement: the warning is the best account of why
            return RunVerdict(Reason(UNKNOWN, "allreduce_nccl_warn", f"{label}: {out.warnings[0]}"))
        said = run.tail.strip().splitlines()[-1:] or ["no output"]
        return RunVerdict(Reason(UNKNOWN, "allreduce_failed",
                                 f"{label}: no result rows (exit {run.rc}): {said[0][:200]}"))
    row = out.largest
    # a warning does not undo a measurement: a slow run is judged slow, and says what NCCL warned
    warned = f" (NCCL warned: {out.warnings[0][:200]})" if out.warnings else ""
    if not figures:
        return RunVerdict(Reason(UNKNOWN, "allreduce_no_threshold",
                                 f"{label}: busbw {row.busbw:.1f} GB/s at {row.size} B, but no threshold is known "
                                 f"for this platform (no figure allreduce.{mode} in its platform file): set "
                                 f"verify_allreduce_min_busbw{warned}"), row.busbw)
    missed = [f for f in figures if row.busbw < f.busbw]
    if missed:
        below = " and below ".join(f"{f.busbw:g} GB/s ({f.source})" for f in missed)
        return RunVerdict(Reason(FAIL, "allreduce_slow",
                                 f"{label}: busbw {row.busbw:.1f} GB/s at {row.size} B, below {below}{warned}"),
                          row.busbw, retry=True)
    if out.warnings:  # fast enough, but NCCL took a path it warned about: not a clean pass
        return RunVerdict(Reason(UNKNOWN, "allreduce_nccl_warn",
                                 f"{label}: busbw {row.busbw:.1f} GB/s at {row.size} B, but {out.warnings[0]}"),
                          row.busbw)
    return RunVerdict(None, row.busbw, passed=f"{label}: busbw {row.busbw:.1f} GB/s at {row.size} B "
                      f"(threshold {max(f.busbw for f in figures):g} GB/s)")


# An earlier mode of the same run that ended so is not followed by the later modes on that node:
# a hang would wait out another deadline, a missing binary stays missing, wrong data poisons a pair.
ENDS_THE_RUN = ("allreduce_hang", "allreduce_missing", "allreduce_wrong")


def skipped(mode: str, earlier: str, code: str, what: str = "") -> RunVerdict:
    """A later mode not run on a node whose ``earlier`` mode ended ``code`` (one of ENDS_THE_RUN)."""
    label = f"{MODE_TEXT[mode]}{f' ({what})' if what else ''}"
    return RunVerdict(Reason(UNKNOWN, "allreduce_skipped",
                             f"{label}: not run: the {earlier} mode of this run ended {code}"))


def with_retries(run_once, retries: int) -> tuple[RunVerdict, int]:
    """``run_once() -> RunVerdict`` until one is not a retryable shortfall,
    at most ``1 + retries`` times: a healthy node that falls short once
    passes on its first good run; wrong results and UNKNOWN are final at once.
    Returns (verdict, runs made)."""
    verdict = run_once()
    runs = 1
    while verdict.retry and runs <= retries:
        verdict = run_once()
        runs += 1
    return verdict, runs


# -- the node's reading and its reasons -----------------------------------------------


@dataclass
class AllReduceReading:
    """The all-reduce results of one node (the state file's, or the fleet
    run's just made), one per mode, and when they were read."""
    read_at: float                                           # seconds since the epoch
    results: dict[str, dict] = field(default_factory=dict)  # mode -> ActiveResult.to_dict()
    error: str | None = None                                 # the state file could not be read


def pair_busbw(reading: AllReduceReading | None) -> float | None:
    """The node's delivered bandwidth from its fresh pair result (GB/s busbw), if one was measured."""
    from ccrhost.model.active import ActiveResult

    data = reading.results.get(PAIR) if reading is not None else None
    if data is None:
        return None
    result = ActiveResult.from_dict(data)
    if result.stale(reading.read_at) or result.value is None or result.code not in (None, "allreduce_slow"):
        return None
    return result.value


def check_allreduce(reading: AllReduceReading | None) -> list[Reason]:
    """Reasons from the results (``ccrhost.model.active.ActiveResult``
    dicts): a result past its validity is UNKNOWN as stale, never its old pass."""
    from ccrhost.model.active import fresh_reasons, readable_results

    if reading is None:
        return []
    reasons, good = readable_results(reading, "allreduce_unreadable", "all-reduce")
    for mode, result in good:
        reasons += fresh_reasons(result, reading.read_at, "allreduce_stale", MODE_TEXT.get(mode, mode))
    return reasons
