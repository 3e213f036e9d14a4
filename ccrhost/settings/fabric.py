"""Link and lossless-fabric keys: the counter window and its state file, PFC
pause, the fabric and link error counters, and link flaps (model/fabric.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from ccrhost.model import datapath as dp
from ccrhost.model import fabric

LinkCounter = Literal[dp.COUNTERS]  # type: ignore[valid-type]
FabricCounter = Literal[fabric.RATE_COUNTERS]  # type: ignore[valid-type]


class FabricSettings(BaseModel, defer_build=True):
    verify_window_max_age: float = Field(
        3600, ge=0, le=604800, description="Oldest stored counter reading (seconds) a rate is measured from; "
        "without one that serves (none, older, or from another boot) every rate is the counters' total over the "
        "time since boot (/proc/uptime), and a verify_link_thresholds count is per window of this length, on "
        "average since boot (0: rates are never judged). Replaces verify_link_window: nothing sleeps to measure "
        "a rate.",
    )
    verify_link_state: str = Field(
        "/run/ccrhost/counters", pattern=r"^/[A-Za-z0-9_./-]{1,255}$",
        description="Where the node keeps its last counter reading (the deploy's snapshot and `ccrhost check` "
        "both read it and replace it: each rate is the change since it); under /run it starts afresh at boot, "
        "as the counters do.",
    )
    verify_pause_share_max: float = Field(
        0.1, gt=0, le=1, description="Share of the window a PFC priority may be paused (ethtool's "
        "<rx|tx>_prioN_pause_duration, microseconds): a netdev that sent pause longer FAILS (it stalls the "
        "fabric), one paused longer WARNS. 0.1 stays well below the 21.7% global pause was seen to take "
        "(NVIDIA/daqiri PR #252).",
    )
    verify_fabric_warn_per_hour: dict[FabricCounter, Annotated[float, Field(ge=0)] | None] | None = Field(
        None, description="Rise per hour above which a lossless-fabric error counter WARNS (null: never). "
        "Default 0 (any rise) for every one, as counters.rst lists them as errors.",
    )
    verify_fabric_fail_per_hour: dict[FabricCounter, Annotated[float, Field(ge=0)] | None] | None = Field(
        None, description="Rise per hour above which it FAILS (null: never). Defaults (NVSentinel's NIC health "
        "monitor): rnr_nak_retry_err and tx_pause_storm_error_events any rise, rx_symbol_err_phy and "
        "rx_crc_errors_phy 120 an hour.",
    )
    verify_link_thresholds: dict[LinkCounter, Annotated[int, Field(ge=0, le=65535)]] | None = Field(
        None, description="Rise of an error counter within the window above which a port WARNS "
        "(link_downed: FAILS). Defaults: symbol_error 10, link_error_recovery 10, the others 0.",
    )
    # issue 35: link flaps from the kernel log, read once with the XIDs
    verify_link_flap_lookback_hours: float = Field(
        24, ge=0, le=720, description="How far back the kernel log's `Link down` lines of a compute netdev "
        "(mlx5e: `mlx5_core <pci> <netdev>: Link down`) count as flaps (Azure's link-flap check: 24 h); a line "
        "without a time counts since boot.",
    )
    verify_link_flap_max: int = Field(
        4, ge=0, le=100000, description="`Link down` lines of one compute netdev within the lookback above which "
        "the node FAILS link_flap (Azure's link-flap check fails a device at 5 in 24 h).",
    )


def limits(defaults: dict, given: dict | None) -> dict:
    """The per-hour limits in force: the defaults, with the host's values
    (a null removes that counter's limit)."""
    out = {**defaults, **(given or {})}
    return {k: v for k, v in out.items() if v is not None}
