"""Lossless RoCE keys: the RoCE version and ToS, trust DSCP, PFC, buffers,
ECN and DCQCN (model/qos.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from ccrhost.model.qos import DCQCN_NP, DCQCN_RP, Wanted, tos_byte

Priority = Annotated[int, Field(ge=0, le=7)]
EightSizes = Annotated[tuple[Annotated[int, Field(ge=0, le=1 << 30)], ...], Field(min_length=8, max_length=8)]
EightBuffers = Annotated[tuple[Priority, ...], Field(min_length=8, max_length=8)]
DcqcnName = Literal[tuple(sorted({**DCQCN_RP, **DCQCN_NP}))]  # type: ignore[valid-type]


class QosSettings(BaseModel, defer_build=True):
    roce_version: Literal[1, 2] = Field(2, description="rdma_cm default RoCE mode: 2 writes `RoCE v2`, 1 writes `IB/RoCE v1`.")
    roce_dscp: int = Field(26, ge=0, le=63, description="DSCP of RoCE traffic (rdma_cm's default ToS, NCCL_IB_TC).")
    roce_ecn_bits: int = Field(
        2, ge=0, le=3, description="ECN bits of the ToS byte (2 = ECT(0), so DSCP 26 gives ToS 106)."
    )
    roce_force_traffic_class: bool = Field(
        False,
        description="Also write the OFED-only tc/<port>/traffic_class. It overrides the "
        "traffic class of every application on the port, hence opt-in.",
    )

    qos_enable: bool = Field(True, description="Run the QoS stage (trust, PFC, ECN, buffers) on RoCE ports.")
    qos_roce_priority: Priority = Field(3, description="Priority that roce_dscp maps to (trust DSCP).")
    qos_cnp_dscp: int = Field(48, ge=0, le=63, description="DSCP of congestion notification packets (CNP); must differ from roce_dscp.")
    qos_cnp_priority: Priority = Field(6, description="Priority that qos_cnp_dscp maps to, and CNPs' 802.1p priority.")
    qos_pfc_priorities: tuple[Priority, ...] | None = Field(
        None, max_length=8, description="Priorities with PFC on; each must be one a configured DSCP maps to (qos_roce_priority or "
        "qos_cnp_priority). Default: only qos_roce_priority."
    )
    qos_cable_len: int | None = Field(None, ge=1, le=999, description="Cable length in metres, for the xoff/xon thresholds; null: the driver's.")
    qos_buffer_size: EightSizes | None = Field(None, description="Receive buffer sizes in bytes, 8 values; null: the driver's. Each lossless buffer must "
                                              "hold xoff + MTU and all must fit the port buffer.")
    qos_prio2buffer: EightBuffers | None = Field(None, description="Buffer index of each priority, 8 values; null: the driver's.")
    qos_min_headroom: int | None = Field(
        None, gt=0, description="Bytes each lossless buffer must hold above xoff (checked on OFED's read-back)."
    )
    qos_credit_threshold: int | None = Field(
        None, gt=0, description="Written to a port's credit_threshold attribute, on drivers that have one."
    )
    qos_allow_ssh_interface: bool = Field(
        False, description="Allow QoS changes (which toggle the link) on the interface carrying SSH or the default route."
    )
    ecn_priorities: tuple[Priority, ...] | None = Field(
        None, max_length=8, description="Priorities with ECN (DCQCN) on; default: only qos_roce_priority."
    )
    ecn_rp: bool = Field(True, description="Enable the reaction point (roce_rp) on ecn_priorities.")
    ecn_np: bool = Field(True, description="Enable the notification point (roce_np) on ecn_priorities.")
    dcqcn_params: dict[DcqcnName, Annotated[int, Field(ge=0, le=1 << 31)]] | None = Field(
        None, description="DCQCN parameters by their MLNX_OFED names (rpg_ai_rate, min_time_between_cnps, ...); "
        "upstream drivers get the matching rp_*/np_* debugfs names."
    )

    def _qos_rules(self) -> None:
        """The rules across the QoS keys (HostSettings.model_post_init runs them)."""
        if self.roce_dscp == self.qos_cnp_dscp:
            raise ValueError(f"[qos_cnp_dscp] {self.qos_cnp_dscp} is also roce_dscp: CNPs need their own DSCP")
        mapped = {self.qos_roce_priority, self.qos_cnp_priority}
        for prio in self.qos_pfc_priorities or ():
            if prio not in mapped:
                raise ValueError(
                    f"[qos_pfc_priorities] PFC on priority {prio}, but no configured DSCP maps to it "
                    f"(roce_dscp {self.roce_dscp} -> {self.qos_roce_priority}, "
                    f"qos_cnp_dscp {self.qos_cnp_dscp} -> {self.qos_cnp_priority})"
                )

    def qos_wanted(self) -> Wanted:
        pfc = set(self.qos_pfc_priorities if self.qos_pfc_priorities is not None else (self.qos_roce_priority,))
        return Wanted(
            dscp_map={self.roce_dscp: self.qos_roce_priority, self.qos_cnp_dscp: self.qos_cnp_priority},
            pfc=tuple(int(p in pfc) for p in range(8)),
            ecn_priorities=tuple(self.ecn_priorities if self.ecn_priorities is not None else (self.qos_roce_priority,)),
            ecn_rp=self.ecn_rp, ecn_np=self.ecn_np,
            cnp_dscp=self.qos_cnp_dscp, cnp_802p_prio=self.qos_cnp_priority,
            dcqcn=dict(self.dcqcn_params or {}),
            cable_len=self.qos_cable_len,
            buffer_size=self.qos_buffer_size, prio2buffer=self.qos_prio2buffer,
        )

    @property
    def roce_tos(self) -> int:
        """The ToS byte: DSCP in the upper six bits, ECN in the lower two."""
        return tos_byte(self.roce_dscp, self.roce_ecn_bits)

    @property
    def roce_mode(self) -> str:
        return "RoCE v2" if self.roce_version == 2 else "IB/RoCE v1"
