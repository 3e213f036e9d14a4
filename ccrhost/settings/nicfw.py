"""NIC firmware and optics audit keys (model/nicfw.py, node/nicfw.py; docs/nic-firmware.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field


class NicFwSettings(BaseModel, defer_build=True):
    verify_nic_firmware: bool = Field(
        False, description="Audit each compute NIC's firmware settings (`mlxconfig -e q`, or mstflint's "
        "`mstconfig`) against the profile: the deploy and the health check (`ccrhost check --refresh-nic`) "
        "query and store them in verify_allreduce_state, every check judges the stored reading and its age.",
    )
    verify_nic_optics: bool = Field(
        False, description="Read each compute NIC's transceiver and link with `mlxlink -m -c` (or mstflint's "
        "`mstlink`) where the firmware audit reads (the deploy, `ccrhost check --refresh-nic`): module state, "
        "per-lane fault flags, DDM values against the ranges mlxlink prints, effective BER (gcm's check_mlxlink).",
    )
    verify_nic_raw_ber_max: float | None = Field(
        None, gt=0, lt=1, description="Raw (pre-FEC) physical BER above which a NIC's link WARNs; None: the raw "
        "BER is not judged (no sourced figure; the effective BER is judged against the IBTA's 1e-12).",
    )
    verify_nic_valid_for: int = Field(
        86400, ge=60, le=30 * 86400, description="Seconds a stored NIC firmware reading holds; an older one is "
        "UNKNOWN as stale.",
    )
    verify_nic_max_acc_out_read: tuple[Annotated[int, Field(ge=0, le=255)], ...] | None = Field(
        None, min_length=1, description="MAX_ACC_OUT_READ values allowed; None: the platform's NIC firmware profile "
        "(the built-in connectx one: 0 = auto, or 44 or 128, after NVIDIA's NIC configuration operator and OCI's "
        "and DGX's Max ACC checks).",
    )
    verify_nic_ats_enabled: bool | None = Field(
        None, description="The ATS_ENABLED wanted; None: the platform's NIC firmware profile (the built-in "
        "connectx one: off for bare-metal GPUDirect, the operator's gpuDirectOptimized). On only where a VM's "
        "IOMMU needs it.",
    )
    verify_nic_link_type: Literal[1, 2] | None = Field(
        None, description="LINK_TYPE_P1 wanted (1 InfiniBand, 2 Ethernet) on NICs that have it (LINK_TYPE_P2 on a "
        "dual-port NIC's second PCI function); None: not judged.",
    )

    def nic_fw_profile(self) -> dict:
        """The NIC firmware profile's parameters: the platform's (its ``nic_firmware``), this host's settings
        over them; its CNP values are this host's QoS settings."""
        from ccrhost.model.nicfw import default_profile

        platform = self.platform()
        acc = self.verify_nic_max_acc_out_read
        return default_profile(self.qos_cnp_dscp, self.qos_cnp_priority, tuple(acc) if acc is not None else None,
                               self.verify_nic_link_type, self.verify_nic_ats_enabled,
                               platform.nic_firmware if platform is not None else None)

    def nic_fw_policy(self):
        """How a check judges the NICs' stored readings; None when neither the audit nor the optics is
        on (a check then never imports them)."""
        if not (self.verify_nic_firmware or self.verify_nic_optics):
            return None
        from ccrhost.model.nicfw import NicFwPolicy

        return NicFwPolicy(self.verify_nic_firmware, self.nic_fw_profile(), self.verify_nic_optics,
                           self.verify_nic_raw_ber_max)

    @property
    def nic_fw_state(self) -> str | None:
        """The state file whose NIC firmware readings a check judges; None when the audit is off."""
        return self.verify_allreduce_state if self.verify_nic_firmware or self.verify_nic_optics else None
