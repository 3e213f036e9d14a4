"""nvbandwidth (NVIDIA/nvbandwidth): copy bandwidth between host and each
GPU and between GPU pairs, its figures (the platform files', model/platform.py)
and the verdict of a run. Pure: the probe (``ccrhost.probes.nvbandwidth``)
fills :class:`Matrix` records from the tool's text output.

A GPU whose PCIe link reads x16 but copies at x4 speed shows here and
nowhere else: the link's width is what it trained at, the copy is what it
delivers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccrhost.model.status import FAIL, OK, UNKNOWN, Reason

CHECK = "nvbandwidth"
H2D, D2H, D2D = "host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce"
TESTCASES = (H2D, D2H, D2D)
TEXT = {H2D: "host to device", D2H: "device to host", D2D: "device to device (read)"}


@dataclass(frozen=True)
class Matrix:
    """One testcase's matrix (``Running TESTCASE.``, its description, the
    column header, the rows): ``values[(row, column)]`` in GB/s; a host
    testcase has one row (0, the CPU) and a column per GPU; ``N/A`` cells are left out."""
    testcase: str
    description: str
    columns: tuple[int, ...]
    values: dict[tuple[int, int], float]
    total: float | None = None   # "SUM TESTCASE X"


@dataclass(frozen=True)
class Figure:
    gbs: float     # FAIL below
    source: str    # which figure and its source, as a reason names it


def thresholds(testcase: str, gpu_name: str | None, overrides: dict | None = None, platform=None) -> list[Figure]:
    """The FAIL-below figures per GPU (or pair) for ``testcase``: the
    published one (a setting's override, else the platform file's), then the
    platform's fleet figure. ``platform``: the resolved platform; None: the
    built-in for ``gpu_name``. Empty: no figure."""
    from ccrhost.model.platform import for_gpu

    platform = platform if platform is not None else for_gpu(gpu_name)
    key = f"nvbandwidth.{testcase}"
    if overrides and overrides.get(testcase) is not None:
        out = [Figure(float(overrides[testcase]), f"setting verify_nvbandwidth_min_gbs.{testcase}")]
    else:
        published = platform.figure(key) if platform is not None else None
        out = [Figure(published.value, published.text())] if published is not None else []
    fleet = platform.fleet_figure(key) if platform is not None else None
    return out + ([Figure(fleet.value, fleet.text())] if fleet is not None else [])


def threshold(testcase: str, gpu_name: str | None, overrides: dict | None = None, platform=None) -> Figure | None:
    return next(iter(thresholds(testcase, gpu_name, overrides, platform)), None)


def judge(matrices: dict[str, Matrix], gpu_name: str | None, gpus: dict, overrides: dict | None = None,
          testcases=TESTCASES, platform=None) -> tuple[str, list[Reason], str]:
    """(status, reasons, summary): each GPU (host testcases) or pair (device
    to device) below its figure (the published and the fleet's, each named)
    a FAIL naming it; a testcase not reported UNKNOWN; one with no figure for
    this platform UNKNOWN, never a pass."""
    from ccrhost.model.dcgm import GpuId

    reasons: list[Reason] = []
    judged = 0
    for tc in testcases:
        m = matrices.get(tc)
        if m is None or not m.values:
            reasons.append(Reason(UNKNOWN, "nvbandwidth_failed", f"nvbandwidth {tc}: no result"))
            continue
        figures = thresholds(tc, gpu_name, overrides, platform)
        if not figures:
            reasons.append(Reason(UNKNOWN, "nvbandwidth_no_threshold",
                                  f"nvbandwidth {TEXT[tc]}: no threshold is known for {gpu_name or 'this GPU'} "
                                  f"(no figure nvbandwidth.{tc} in its platform file): "
                                  f"set verify_nvbandwidth_min_gbs.{tc}"))
            continue
        judged += 1
        slow = [(cell, gbs) for cell, gbs in sorted(m.values.items()) if any(gbs < f.gbs for f in figures)]
        # a pair names one GPU only where one GPU is in every slow pair (the history needs one)
        common = set.intersection(*({row, col} for (row, col), _ in slow)) if tc == D2D and slow else set()
        for (row, col), gbs in slow:
            if tc == D2D:
                where = f"{gpus.get(row, GpuId(row)).text()} from {gpus.get(col, GpuId(col)).text()}"
                gpu = next(iter(common)) if len(common) == 1 else None
            else:
                where, gpu = gpus.get(col, GpuId(col)).text(), col
            below = " and below ".join(f"{f.gbs:g} GB/s ({f.source})" for f in figures if gbs < f.gbs)
            reasons.append(Reason(FAIL, "nvbandwidth_slow",
                                  f"nvbandwidth {TEXT[tc]}: {where} copies at {gbs:.2f} GB/s, below {below}", gpu=gpu))
    status = max((r.level for r in reasons), key=lambda s: {OK: 0, "WARN": 1, UNKNOWN: 2, FAIL: 3}[s], default=OK)
    if not reasons:
        return OK, [], f"nvbandwidth: {judged} testcase(s) at or above their figures"
    return status, reasons, "; ".join(r.message for r in reasons[:4])
