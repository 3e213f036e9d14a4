"""DCGM diagnostics (``dcgmi diag -r LEVEL -j``): the report as typed
records, the levels and their deadlines, and the verdict of one run.

Pure: the probe (``ccrhost.probes.dcgmi``) fills :class:`DiagOutput` from
either JSON shape (DCGM 3.x ``"DCGM GPU Diagnostic"``, DCGM 4.x ``"DCGM
Diagnostic"``); :func:`judge_diag` decides a run, after the host engine's
answer; :func:`check_dcgm` turns the stored result into the node's reasons.
Formats and figures: shared/reference/active-checks.md, docs/dcgm.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN, Reason

CHECK = "dcgm_diag"

# Levels (dcgmi-diag reference): 1 quick (seconds), 2 medium (about 2 min), 3 long (about 15 min),
# 4 extended (1-2 h). Deadlines: the longest documented or measured duration with room to spare:
# level 2 measured 2.5-10.5 min on 8 GPUs and level 4 45 min-2.25 h (AWS gpu-cluster-healthcheck);
# NVSentinel documents 1 about 30 s, 3 about 15 min.
LEVELS = (1, 2, 3, 4)
LEVEL_TEXT = {1: "quick", 2: "medium", 3: "long", 4: "extended"}
DEADLINES = {1: 300, 2: 1200, 3: 3600, 4: 10800}
DEADLINE_SOURCE = ("dcgmi-diag reference (1 seconds, 2 about 2 min, 3 about 15 min, 4 extended); "
                   "AWS gpu-cluster-healthcheck measured 2 at 2.5-10.5 min and 4 at 45 min-2.25 h on 8 GPUs")
ENGINE_DEADLINE = 10  # seconds for the host engine to answer `dcgmi discovery -l`


def mode(level: int) -> str:
    """The stored result's mode: one result per level."""
    return f"level {level}"


# -- the report ----------------------------------------------------------------


@dataclass(frozen=True)
class DiagResult:
    """One test's result on one entity (or on none: a test-wide result)."""
    category: str                 # "category": Deployment, Integration, Hardware, Stress
    test: str                     # "name": "GPU Memory" (3.x display name) or "memory" (4.x plugin name)
    status: str                   # "status", normalised: Pass, Fail, Warn, Skip, Not Run
    gpu: int | None               # 3.x "gpu_id" ("0"), "gpu_ids" ("0,1" gives one result each); 4.x "entity_id"
                                  # where "entity_group" is GPU; None: the result is for no one GPU
    warnings: tuple[str, ...] = ()  # "warnings"[].warning (3.x level-one results: .warnings), the tool's words
    error_ids: tuple[int, ...] = ()  # "warnings"[].error_id: DCGM's dcgmError_t code
    severities: tuple[int, ...] = ()  # "warnings"[].error_severity: DCGM's dcgmErrorSeverity_t, where given


# dcgmErrorSeverity_t (NVIDIA/DCGM dcgmlib/dcgm_errors.h): 0 NONE, 1 MONITOR "can perform workload, but
# needs to be monitored", 2 ISOLATE "cannot perform workload", 3 UNKNOWN, 4 TRIAGE, 5 CONFIG "can be
# configured", 6 RESET "drain and reset GPU". DCGM 4.x reports a MONITOR warning (a thermal violation,
# testing/python3/tests/test_dcgm_diag.py) as "Fail"; judged by severity, a result whose every error only
# asks to be monitored is a WARN, so the same warning is the same level on 3.x and 4.x. CONFIG stays a
# failure: persistence mode off is CONFIG on 4.x and "Fail" without a severity on 3.x.
SEVERITY_TEXT = {0: "none", 1: "monitor", 2: "isolate", 3: "unknown", 4: "triage", 5: "config", 6: "reset"}
WARN_SEVERITIES = frozenset({1})


def judged_status(result: DiagResult) -> str:
    """The result's status as judged: a Fail whose errors all carry the
    monitor severity is a Warn; any other stays as DCGM said."""
    if result.status == "Fail" and result.severities and all(s in WARN_SEVERITIES for s in result.severities):
        return "Warn"
    return result.status


@dataclass(frozen=True)
class DiagOutput:
    shape: str                              # "3.x" ("DCGM GPU Diagnostic") or "4.x" ("DCGM Diagnostic")
    results: tuple[DiagResult, ...]
    version: str | None = None              # 4.x "metadata".version; 3.x "DCGM GPU Diagnostic".version
    runtime_error: str | None = None        # "runtime_error": the diag could not run at all
    serials: dict[int, str] = field(default_factory=dict)  # 4.x "entity_groups" GPU entity_id -> serial_num


@dataclass(frozen=True)
class GpuId:
    """How a GPU is named in a reason: as the node's readings know it."""
    index: int
    pci: str | None = None
    uuid: str | None = None

    def text(self) -> str:
        parts = [f"GPU {self.index}"]
        if self.pci:
            parts.append(self.pci)
        if self.uuid:
            parts.append(self.uuid)
        return " ".join(parts[:1]) + (f" ({', '.join(parts[1:])})" if len(parts) > 1 else "")


# -- one run's verdict -------------------------------------------------------------


@dataclass(frozen=True)
class ToolAnswer:
    """What one dcgmi invocation gave, as the runner saw it."""
    rc: int | None = None             # None: killed at its deadline
    output: str = ""
    timed_out: bool = False
    missing: str | None = None        # dcgmi was not found


# dcgmi discovery's GPU line: "8 GPUs found." (3.x), "8 GPUs found (Active)." (4.6; dcgmi/Query.cpp)
_GPUS_FOUND = re.compile(r"^\s*([0-9]+) GPUs? found\b", re.M)


def engine_answered(engine: ToolAnswer) -> bool:
    """Whether the host engine answered ``dcgmi discovery -l``: exit 0, or
    its GPU list printed before a later section failed (dcgmi exits with
    the DCGM status, e.g. 223 for DCGM_ST_MODULE_NOT_LOADED, -33, when a
    module is denylisted): the engine is up and the diag can run."""
    if engine.missing or engine.timed_out:
        return False
    if engine.rc == 0:
        return True
    listed = _GPUS_FOUND.search(engine.output or "")
    return listed is not None and int(listed.group(1)) > 0


def judge_engine(engine: ToolAnswer, deadline: float) -> Reason | None:
    """The host engine's answer to ``dcgmi discovery -l``: a reason when it
    did not answer. Never a FAIL: a hung engine says nothing of the GPUs."""
    if engine.missing:
        return Reason(UNKNOWN, "dcgm_missing", f"DCGM diagnostics: {engine.missing}")
    if engine.timed_out:
        return Reason(UNKNOWN, "dcgm_hostengine",
                      f"DCGM host engine not responding: `dcgmi discovery -l` gave no answer in {deadline:g} s")
    if not engine_answered(engine):
        said = (engine.output.strip().splitlines() or ["no output"])[-1][:200]
        return Reason(UNKNOWN, "dcgm_hostengine", f"DCGM host engine not responding: `dcgmi discovery -l` "
                      f"exited {engine.rc}: {said}")
    return None


def _gpu_text(gpu: int | None, gpus: dict[int, GpuId]) -> str:
    if gpu is None:
        return "all GPUs"
    return gpus.get(gpu, GpuId(gpu)).text()


def judge_output(out: DiagOutput, level: int, gpus: dict[int, GpuId], exclude=()) -> list[Reason]:
    """The reasons of a parsed report: each failed test a FAIL naming the
    test and the GPU; a warning a WARN; an excluded test is not judged."""
    skipped = {e.lower() for e in exclude}
    reasons = []
    for r in out.results:
        status = judged_status(r)
        if r.test.lower() in skipped or r.category.lower() in skipped or status not in ("Fail", "Warn"):
            continue
        said = f": {r.warnings[0][:300]}" if r.warnings else ""
        codes = f" (DCGM error {', '.join(str(c) for c in r.error_ids)})" if r.error_ids else ""
        if status != r.status:
            codes += f" (DCGM said {r.status}, severity " \
                     f"{', '.join(f'{s} {SEVERITY_TEXT.get(s, s)}' for s in r.severities)})"
        text = f"DCGM diag level {level}: {r.category} test {r.test!r} {status.lower()}ed on " \
               f"{_gpu_text(r.gpu, gpus)}{said}{codes}"
        # the GPU's index: the history finds its serial, and a GPU that keeps failing is a lemon
        if status == "Fail":
            reasons.append(Reason(FAIL, "dcgm_test_failed", text, gpu=r.gpu))
        else:
            reasons.append(Reason(WARN, "dcgm_test_warn", text, gpu=r.gpu))
    return reasons


def judge_diag(engine: ToolAnswer | None, diag: ToolAnswer | None, parsed: DiagOutput | str | None, level: int,
               gpus: dict[int, GpuId], exclude=(), engine_deadline: float = ENGINE_DEADLINE,
               deadline: float | None = None) -> tuple[str, list[Reason], str]:
    """One run to (status, reasons, summary): the host engine first (not
    answering is UNKNOWN, the diag is not run); a diag killed at its
    deadline is UNKNOWN; a report that is not one is UNKNOWN; then the
    report's failed tests. ``parsed`` is the probe's record, or the text of
    its format error."""
    from ccrhost.model.status import worst

    if engine is not None and (why := judge_engine(engine, engine_deadline)):
        return why.level, [why], why.message
    if diag is None:
        r = Reason(UNKNOWN, "dcgm_failed", f"DCGM diag level {level}: not run")
        return UNKNOWN, [r], r.message
    if diag.missing:
        r = Reason(UNKNOWN, "dcgm_missing", f"DCGM diag level {level}: {diag.missing}")
        return UNKNOWN, [r], r.message
    if diag.timed_out:
        r = Reason(UNKNOWN, "dcgm_hang", f"DCGM diag level {level}: no result before its deadline "
                   f"({(deadline or DEADLINES[level]):g} s; killed)")
        return UNKNOWN, [r], r.message
    if not isinstance(parsed, DiagOutput):
        said = (diag.output.strip().splitlines() or ["no output"])[-1][:200]
        r = Reason(UNKNOWN, "dcgm_failed", f"DCGM diag level {level}: no report (exit {diag.rc}): "
                   f"{parsed or said}")
        return UNKNOWN, [r], r.message
    if parsed.runtime_error:
        r = Reason(UNKNOWN, "dcgm_failed", f"DCGM diag level {level}: {parsed.runtime_error[:300]}")
        return UNKNOWN, [r], r.message
    reasons = judge_output(parsed, level, gpus, exclude)
    if not reasons:
        skipped = {e.lower() for e in exclude}
        ran = len({r.test for r in parsed.results if r.status == "Pass"
                   and r.test.lower() not in skipped and r.category.lower() not in skipped})
        if not ran:
            r = Reason(UNKNOWN, "dcgm_failed", f"DCGM diag level {level}: no test passed or failed "
                       "(every test skipped or excluded)")
            return UNKNOWN, [r], r.message
        return OK, [], f"DCGM diag level {level}: {ran} test(s) passed"
    status = worst(r.level for r in reasons)
    return status, reasons, "; ".join(r.message for r in reasons)


# -- the node's stored result and its reasons ------------------------------------------


def level_of(result) -> int:
    """A stored diag result's level, from its mode ("level 3"); 0 when it names none."""
    tail = result.mode.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def check_dcgm(reading) -> list[Reason]:
    """Reasons from the stored diag results (an ``ActiveReading``): a result
    past its validity is UNKNOWN as stale, never its old pass; otherwise the
    reasons the run gave, as it gave them (never judged again). The newest
    run speaks for the GPUs, and a FAIL at level N stands beside it until a
    later run at level N or above passes: a quick level 1 (the prolog's) or
    a host engine that did not answer never hides a level 3 FAIL. Where the
    node's settings do not ask for the diag (``reading.required`` False), a
    stale pass says nothing; what another path stored is still judged."""
    from dataclasses import replace

    from ccrhost.model.active import fresh_reasons, readable_results

    if reading is None:
        return []
    now = reading.read_at
    required = getattr(reading, "required", True)
    reasons, good = readable_results(reading, "dcgm_unreadable", "DCGM diag")

    def passed(result) -> bool:
        return result.status in (OK, WARN)

    def judged(result, code, what) -> list[Reason]:
        if not required and passed(result) and result.stale(now):
            return []
        return fresh_reasons(result, now, code, what)

    results = []
    for _, result in good:
        if result.check == CHECK:
            results.append(result)
        elif result.check == "nvbandwidth":  # stored beside the diag, by the same runs (node/nvbandwidth.py)
            reasons += judged(result, "nvbandwidth_stale", f"{result.check} ({result.mode})")
        elif result.check == "gemm":  # likewise (node/gemm.py)
            reasons += judged(result, "gemm_stale", f"GEMM ({result.mode})")
    results.sort(key=lambda r: r.measured_at)
    if not results:
        return reasons
    newest = results[-1]
    for result in results[:-1]:
        if result.status == FAIL and not any(
                passed(p) and level_of(p) >= level_of(result) and p.measured_at > result.measured_at
                for p in results):
            stands = f" (stands until a level {level_of(result)} or higher diag passes)"
            reasons += [replace(r, message=r.message + stands)
                        for r in judged(result, "dcgm_stale", f"DCGM diag {result.mode}")]
    return reasons + judged(newest, "dcgm_stale", f"DCGM diag {newest.mode}")
