"""Evidence keys: the diagnostics bundle a check keeps when a failure starts."""

from __future__ import annotations

from pydantic import BaseModel, Field


class EvidenceSettings(BaseModel, defer_build=True):
    verify_evidence_dir: str | None = Field(
        None, pattern=r"^/[A-Za-z0-9_./-]{1,255}$",
        description="Where `ccrhost check` keeps a diagnostics bundle when a failure starts (verdict.json with "
        "its readings, the XID lines, `nvidia-smi -q -i N` of each failing GPU), one folder per failure named "
        "by its UTC time, which the drain reason and the report name: /var/lib/ccrhost/evidence, for instance. "
        "A folder of ccrhost's own: not a system folder (under /usr, /bin, /lib, /boot, /dev, /proc, /sys, "
        "an /etc drop-in folder) nor /etc, /var, /run, /tmp... itself, and no file setting's path. A bundle "
        "stamped later than the check's time (the clock ran ahead) is removed, never named. Default null: "
        "none is kept.",
    )
    verify_evidence_max_age_days: float = Field(
        7, gt=0, le=365, description="Bundles older than this are removed at the next failing check.")
    verify_evidence_keep: int = Field(10, ge=1, le=1000, description="Bundles kept at most, newest first.")
    verify_evidence_bug_report: bool = Field(
        False, description="Also run `nvidia-bug-report.sh --output-file` into the bundle where it is installed "
        "(it takes minutes: the check that collects waits for it).",
    )
