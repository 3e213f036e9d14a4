"""The verdict on one line: its reason codes, worst first, and a summary of
its reasons within a fixed size, the forms the NHC and NPD outputs and a
Slurm drain reason share.
"""

from __future__ import annotations

from ccrhost.model.status import FAIL, OK, RANK, UNKNOWN, WARN
from ccrhost.model.verdict import Verdict

# A node to replace because it failed too often (its history) or carries a
# board that failed elsewhere: no check, health check or remediation lifts
# this drain, since a passing check is what each repair gave before. Its
# codes lead the drain reason.
REPLACE_CODES = ("node_repeat_failures", "gpu_lemon")

# the one-line forms' size, whatever the log holds (Slurm keeps 255
# characters of a drain reason: model/drain_reason.py cuts to that)
SUMMARY_MAX = 1000


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def bounded_summary(verdict: Verdict, limit: int = SUMMARY_MAX) -> str:
    """The verdict's reasons on one line, worst first, within ``limit``
    characters; what does not fit is counted ("+N more")."""
    # what to replace leads (its serials must not be cut)
    bad = sorted((r for r in verdict.reasons if r.level != OK),
                 key=lambda r: (-RANK[r.level], r.code not in REPLACE_CODES))
    if not bad:
        return "all checks passed"
    out = ""
    for i, r in enumerate(bad):
        part = cut(r.message, 200)
        candidate = f"{out}; {part}" if out else part
        rest = len(bad) - i - 1
        if len(candidate) + len(f"; +{rest} more" if rest else "") > limit:
            if not out:  # the worst alone does not fit: cut it
                tail = f"; +{rest} more" if rest else ""
                return cut(part, limit - len(tail)) + tail
            return f"{out}; +{rest + 1} more"  # fits: checked when ``out`` was taken
        out = candidate
    return out


def reason_codes(verdict: Verdict) -> list[str]:
    """The codes of the verdict's non-OK reasons, each once, worst first
    (FAIL, UNKNOWN, WARN), in the order the reasons came (a code per port
    would hide the rest)."""
    codes: list[str] = []
    for level in (FAIL, UNKNOWN, WARN):
        for r in verdict.reasons:
            if r.level == level and r.code not in codes:
                codes.append(r.code)
    return sorted(codes, key=lambda c: c not in REPLACE_CODES)  # what to replace leads
