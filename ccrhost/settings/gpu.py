"""GPU health keys: XIDs, ECC, NVLink and PCIe error rates, clock slowdown,
and the GPU counters' state file (model/gpu_health.py; docs/gpu-health.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field


class GpuHealthSettings(BaseModel, defer_build=True):
    # GPU health (model/gpu_health.py; docs/gpu-health.md): defaults from the anchors named there
    verify_gpu_xid_lookback_hours: float = Field(
        2, ge=0, le=720, description="XIDs logged longer ago than this are not judged (Azure check_gpu_xid: 2 h); "
        "a log line without a time counts since boot. Those whose action is a reboot (Xid 79 fell off the bus, "
        "151, 168, an Xid 154 naming Node Reboot Required) count for the whole boot.",
    )
    verify_gpu_xid_ignore: tuple[Annotated[int, Field(ge=1, le=65535)], ...] = Field(
        (), description="XID codes never judged (still shown in the readings).",
    )
    verify_gpu_ecc_correctable_max: int = Field(
        10000, ge=0, description="Correctable volatile ECC errors of a GPU above which it WARNS "
        "(Azure check_gpu_ecc: 10,000 correctable SRAM errors).",
    )
    verify_gpu_nvlink_errors_per_min: float = Field(
        1, ge=0, description="NVLink CRC, replay and recovery errors of a GPU rising faster than this per minute "
        "since the last check (else since boot) WARN (DCGM_LIMIT_MAX_LWLINK_ERROR).",
    )
    verify_gpu_pcie_replays_per_min: float = Field(
        8, ge=0, description="PCIe replays of a GPU rising faster than this per minute since the last check (else "
        "since boot) WARN (DCGM_LIMIT_MAX_PCIREPLAY_RATE).",
    )
    verify_gpu_hw_slowdown: Literal["WARN", "FAIL"] = Field(
        "WARN", description="Level of a GPU whose clocks are held down by HW slowdown, HW thermal or power-brake "
        "slowdown: WARN (gpu_throttled says it) or FAIL (gpu_hw_slowdown). SW power capping is never judged.",
    )
    verify_gpu_state: str = Field(
        "/run/ccrhost/gpu-counters.json", pattern=r"^/[A-Za-z0-9_./-]{1,255}$",
        description="Where `ccrhost check` keeps the GPU error counters (NVLink, PCIe replay) between runs, for "
        "their rates; under /run it starts afresh at boot, as the counters do. A file of ccrhost's own, by the "
        "rules of verify_link_state, and no other path setting's file; replaced through a new temporary file "
        "and a rename, never written through a link. A stored reading that is corrupt or out of range is "
        "discarded and replaced, with a note. `ccrhost reset-gpu` keeps the time of each GPU reset beside it, "
        "in <verify_gpu_state>.resets (this boot only), and the checks judge a reset GPU only on the XIDs "
        "logged since.",
    )
