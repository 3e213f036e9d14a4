"""Failure history keys: where a node keeps its failures and when it is
marked for replacement (model/history.py; issue 40)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class HistorySettings(BaseModel, defer_build=True):
    # a node's failure history (model/history.py; issue 40)
    verify_history: str | None = Field(
        None, pattern=r"^/[A-Za-z0-9_./-]{1,255}$",
        description="Where `ccrhost check` keeps the node's failure history (each failure: time, codes, action, "
        "GPU serials), bounded by verify_history_entries, for verify_replace_failures; it must survive a "
        "reboot, so not under /run: /var/lib/ccrhost/history.json, for instance. One check at a time, under a lock "
        "file beside it (<verify_history>.lock, never opened through a link). A reboot closes an open failure: "
        "a fault still there after it counts again. Default null: no history is kept and no node is marked "
        "for replacement.",
    )
    verify_history_entries: int = Field(
        50, ge=1, le=10000, description="Failures the history keeps, newest last; older ones are dropped.")
    verify_replace_failures: int = Field(
        3, ge=0, le=1000, description="Failures (a FAIL after a check that did not fail) within "
        "verify_replace_window_hours after which the node's action is replace (node_repeat_failures) and its "
        "drain reason leads with that code, which no automatic resume lifts (0: never).",
    )
    verify_replace_window_hours: float = Field(
        168, gt=0, le=8760, description="The window verify_replace_failures counts failures in (hours).")
