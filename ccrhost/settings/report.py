"""Report keys: the controller's fleet report folder and the check's Node
Problem Detector exit status."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from ccrhost.settings.keys import CONTROLLER_ONLY
from ccrhost.settings.paths import ETC_DROPIN_FOLDERS, system_tree, within


class ReportSettings(BaseModel, defer_build=True):
    verify_npd_warn_unhealthy: bool = Field(
        False, description="`ccrhost check --format npd` exits 1 (Node Problem Detector: problem) on WARN too; "
        "default: only FAIL is a problem.",
    )
    verify_report_dir: str = Field(
        "ccrhost-report", pattern=r"^[A-Za-z0-9_./-]{1,255}$",
        description="Where the controller writes the fleet report (JSON, JUnit, text, HTML).",
        json_schema_extra=CONTROLLER_ONLY,
    )

    @field_validator("verify_report_dir")
    @classmethod
    def _report_dir(cls, value):
        # a folder the controller writes four report files into; relative
        # paths are the operator's working directory's business
        if not value.startswith("/"):
            return value
        plain = "/" + "/".join(p for p in value.split("/") if p)
        if any(p in (".", "..") for p in value.split("/")):
            raise ValueError("has a '.' or '..' component; allowed: a plain absolute path or a relative one")
        if plain == "/":
            raise ValueError("is the root folder; allowed: a folder of the reports' own, such as ccrhost-report")
        tree = system_tree(plain)
        folder = next((f for f in ETC_DROPIN_FOLDERS if within(plain, f)), None)
        if tree or folder or plain in ("/etc", "/var", "/run", "/home", "/root", "/opt", "/srv", "/tmp", "/mnt"):
            where = f"under {tree}" if tree else f"in {folder}" if folder else "a top-level system folder"
            raise ValueError(f"is a system folder ({where}); allowed: a folder of the reports' own, "
                             "such as ccrhost-report or /var/lib/ccrhost/report")
        return value
