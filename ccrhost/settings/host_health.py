"""Host health keys: required systemd units and their restarts, time sync,
EDAC memory errors, the kernel log's fatal lines, leftover GPU work on an
idle node, and memlock as a job gets it (model/host_health.py;
docs/host-health.md)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints, field_validator

# a systemd unit name as `systemctl show` takes it (no shell metacharacters:
# the names go into the probe's command line)
UnitName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9:_.@-]{1,128}$")]


class HostHealthSettings(BaseModel, defer_build=True):
    # Host health (model/host_health.py; docs/host-health.md): anchors named there
    host_health_enable: bool = Field(
        False, description="Read and judge the host's health (every host_health_* check below). Off until a "
        "site (or its platform file's settings) turns it on: on a fleet that upgrades, a node without EDAC, "
        "chrony or timesyncd, or with a memlock limit, would otherwise read UNKNOWN or FAIL on every node at "
        "once; run it in observe mode first (docs/host-health.md).",
    )
    host_health_units: tuple[UnitName, ...] = Field(
        (), description="systemd units that must be active: one not active (failed, inactive, "
        "not found) FAILs the node (host_unit_inactive), e.g. [slurmd] on a Slurm node. A name without a "
        "suffix is a .service.",
    )
    host_health_units_warn: tuple[UnitName, ...] = Field(
        ("nvidia-persistenced", "nvidia-dcgm"), description="systemd units whose being not active WARNs "
        "(host_unit_inactive_warn): NVSentinel treats persistenced down as non-fatal.",
    )
    host_health_fabricmanager: Literal["auto", "required", "off"] = Field(
        "auto", description="nvidia-fabricmanager as a required unit: `auto` where the GPUs report an NVLink "
        "fabric state (NVSwitch systems), `required` always, `off` never (NVSentinel: FM down for 20 days "
        "went unseen).",
    )
    host_health_unit_restarts_max: int = Field(
        0, ge=0, le=1000, description="Restarts (systemd's NRestarts) of a watched unit between two readings "
        "above this WARN it as flapping (host_unit_flapping); the previous reading is kept in host_health_state.",
    )
    host_health_state: str = Field(
        "/run/ccrhost/host-health.json", pattern=r"^/[A-Za-z0-9_./-]{1,255}$", description="Where each reading keeps the units' restart counts for the "
        "next (under /run: afresh at boot, as NRestarts is). A file of ccrhost's own, by the rules of "
        "verify_link_state, and no other path setting's file.",
    )
    host_health_time_sync: bool = Field(
        True, description="Judge time synchronisation: chrony (`chronyc tracking` Leap status) or "
        "systemd-timesyncd (`timedatectl show` NTPSynchronized) not synchronised WARNs (host_time_unsynced); "
        "neither readable is UNKNOWN (host_time_unknown).",
    )
    host_health_edac_corrected_warn: int = Field(
        0, ge=0, description="Corrected memory errors (EDAC ce_count summed over memory controllers) above "
        "this WARN (host_edac_corrected).",
    )
    host_health_edac_corrected_max: int = Field(
        9, ge=0, description="Corrected memory errors above this FAIL (host_edac_corrected_high; LBNL NHC "
        "check_hw_mcelog: more than 9). Any uncorrected error (ue_count) FAILs (host_edac_uncorrected).",
    )
    host_health_kernel_lookback_hours: float | None = Field(
        24, ge=0, le=8760, description="Kernel-log fatal lines (soft lockup, hung task, OOM kill, I/O error, "
        "filesystem remounted read-only) logged longer ago than this are not judged; null: the whole boot.",
    )
    host_health_kernel_allow: tuple[str, ...] = Field(
        (), description="Regular expressions (Python re.search) of kernel-log lines never judged, as Imbue's "
        "dmesg whitelist.",
    )
    host_health_idle_gpu_memory_mib: int = Field(
        15, ge=0, description="GPU memory in use (MiB) above which a GPU of a node known idle (the prolog before "
        "the job's processes, a check while no job runs) holds a leftover process (gcm check_nvidia_smi: 15 MiB); "
        "any compute process on it FAILs too (host_gpu_leftover).",
    )
    host_health_memlock_kib: int | None = Field(
        None, ge=1, description="The least locked-memory limit (KiB) a job may get: the prolog's own "
        "RLIMIT_MEMLOCK and slurmd's LimitMEMLOCK below it FAIL (host_memlock_low); null: both must be "
        "unlimited (NCCL and verbs register memory; systemd's 8 MiB default breaks them).",
    )

    @field_validator("host_health_kernel_allow")
    @classmethod
    def _patterns_compile(cls, value):
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is no regular expression: {exc}") from None
        return value
