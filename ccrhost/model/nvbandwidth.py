"""nvbandwidth (NVIDIA/nvbandwidth): copy bandwidth between host and each
GPU and between GPU pairs, its thresholds per platform and the verdict of a
run. Pure: the probe (``ccrhost.probes.nvbandwidth``) fills
:class:`Matrix` records from the tool's text output.

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
    source: str


AZURE_H200 = "Azure azurehpc-health-checks conf/nd96isr_h200_v5.conf (issue 38)"
AZURE_H100 = "Azure azurehpc-health-checks conf/nd96isr_h100_v5.conf (issue 38)"
# GPU model (NVML's name, matched by substring) -> testcase -> FAIL-below figure per GPU (or pair).
PLATFORMS: dict[str, dict[str, Figure]] = {
    "H200": {H2D: Figure(48, AZURE_H200), D2H: Figure(48, AZURE_H200), D2D: Figure(335, AZURE_H200)},
    "H100": {H2D: Figure(52, AZURE_H100), D2H: Figure(52, AZURE_H100)},
}


def threshold(testcase: str, gpu_name: str | None, overrides: dict | None = None) -> Figure | None:
    if overrides and overrides.get(testcase) is not None:
        return Figure(float(overrides[testcase]), f"setting verify_nvbandwidth_min_gbs.{testcase}")
    name = (gpu_name or "").upper()
    platform = next((p for p in sorted(PLATFORMS, key=len, reverse=True) if p in name), None)
    return PLATFORMS.get(platform, {}).get(testcase) if platform else None


def judge(matrices: dict[str, Matrix], gpu_name: str | None, gpus: dict, overrides: dict | None = None,
          testcases=TESTCASES) -> tuple[str, list[Reason], str]:
    """(status, reasons, summary): each GPU (host testcases) or pair (device
    to device) below its figure a FAIL naming it; a testcase not reported
    UNKNOWN; one with no figure for this platform UNKNOWN, never a pass."""
    from ccrhost.model.dcgm import GpuId

    reasons: list[Reason] = []
    judged = 0
    for tc in testcases:
        m = matrices.get(tc)
        if m is None or not m.values:
            reasons.append(Reason(UNKNOWN, "nvbandwidth_failed", f"nvbandwidth {tc}: no result"))
            continue
        figure = threshold(tc, gpu_name, overrides)
        if figure is None:
            reasons.append(Reason(UNKNOWN, "nvbandwidth_no_threshold",
                                  f"nvbandwidth {TEXT[tc]}: no threshold is known for {gpu_name or 'this GPU'}: "
                                  f"set verify_nvbandwidth_min_gbs.{tc}"))
            continue
        judged += 1
        for (row, col), gbs in sorted(m.values.items()):
            if gbs >= figure.gbs:
                continue
            if tc == D2D:
                where = f"{gpus.get(row, GpuId(row)).text()} from {gpus.get(col, GpuId(col)).text()}"
            else:
                where = gpus.get(col, GpuId(col)).text()
            reasons.append(Reason(FAIL, "nvbandwidth_slow",
                                  f"nvbandwidth {TEXT[tc]}: {where} copies at {gbs:.2f} GB/s, below "
                                  f"{figure.gbs:g} GB/s ({figure.source})"))
    status = max((r.level for r in reasons), key=lambda s: {OK: 0, "WARN": 1, UNKNOWN: 2, FAIL: 3}[s], default=OK)
    if not reasons:
        return OK, [], f"nvbandwidth: {judged} testcase(s) at or above their figures"
    return status, reasons, "; ".join(r.message for r in reasons[:4])
