"""NCCL keys: what the node's /etc/nccl.conf and shell profile set."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints, field_validator

from ccrhost.settings.keys import bounds

# NCCL variables with a key of their own (or derived from ones): nccl_extra
# may not set them, or it would bypass their rules.
NCCL_TWINS = {
    "NCCL_IB_HCA": "nccl_ib_hca", "NCCL_SOCKET_IFNAME": "nccl_socket_ifname",
    "NCCL_IB_ADDR_FAMILY": "nccl_ib_addr_family", "NCCL_IB_ADDR_RANGE": "nccl_ib_addr_range",
    "NCCL_IB_GID_INDEX": "nccl_ib_gid_index", "NCCL_NET_GDR_LEVEL": "nccl_net_gdr_level",
    "NCCL_IB_QPS_PER_CONNECTION": "nccl_ib_qps_per_connection", "NCCL_IB_TIMEOUT": "nccl_ib_timeout",
    "NCCL_IB_RETRY_CNT": "nccl_ib_retry_cnt", "NCCL_CROSS_NIC": "nccl_cross_nic",
    "NCCL_IB_TC": "roce_dscp and roce_ecn_bits", "NCCL_IB_FIFO_TC": "nccl_fifo_dscp",
    "NCCL_IB_ROCE_VERSION_NUM": "roce_version",
}

# Kernel interface names (at most 15 characters, no '/', no white space),
# in NCCL's list syntax: an optional '=' (exact) or '^' (exclude) prefix.
IfnameList = Annotated[str, StringConstraints(pattern=r"^[=^]?[A-Za-z0-9_.:-]{1,15}(,[A-Za-z0-9_.:-]{1,15})*$")]
HcaList = Annotated[str, StringConstraints(
    pattern=r"^[=^]{0,2}[A-Za-z0-9_.-]{1,64}(:[0-9]{1,3})?(,[A-Za-z0-9_.-]{1,64}(:[0-9]{1,3})?)*$")]
NcclName = Annotated[str, StringConstraints(pattern=r"^NCCL_[A-Z0-9_]{1,64}$")]
# Values pass through to a file NCCL reads literally and to a shell profile:
# no newlines, '=', quotes, backslashes or shell metacharacters.
NcclValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,:/@%+^-]{0,255}$")]


class NcclSettings(BaseModel, defer_build=True):
    nccl_ib_hca: HcaList | None = Field(None, description="NCCL_IB_HCA as given, instead of the discovered active compute ports.")
    nccl_socket_ifname: IfnameList | None = Field(
        None, description="NCCL_SOCKET_IFNAME; default: exactly the interface of the default route."
    )
    nccl_fifo_dscp: int | None = Field(
        None, ge=0, le=63, description="DSCP of NCCL's control and credit-return messages (default: roce_dscp)."
    )
    nccl_ib_addr_family: Literal["AF_INET", "AF_INET6"] = Field(
        "AF_INET", description="NCCL_IB_ADDR_FAMILY: the address family of the GID NCCL selects (RoCE only).")
    nccl_ib_addr_range: str | None = Field(
        None, pattern=r"^[0-9a-fA-F:.]{2,39}/[0-9]{1,3}$", description="Fabric subnet (CIDR) for GID auto-selection."
    )
    nccl_ib_gid_index: int | None = Field(
        None, ge=0, le=255,
        description="Pin NCCL_IB_GID_INDEX; only if the RoCE v2 IPv4 GID sits there on every compute port.",
    )
    nccl_net_gdr_level: Literal["LOC", "PIX", "PXB", "PHB", "SYS"] | None = Field(
        None, description="NCCL_NET_GDR_LEVEL: the farthest GPU-NIC distance at which NCCL uses GPUDirect RDMA; "
        "null: NCCL's default (PXB).")
    nccl_ib_qps_per_connection: int | None = Field(
        None, ge=1, le=128, description="NCCL_IB_QPS_PER_CONNECTION: queue pairs per connection; null: not set.")
    nccl_ib_timeout: int | None = Field(
        None, ge=1, le=31, description="NCCL_IB_TIMEOUT: the InfiniBand Verbs timeout, 4.096 us x 2^value; null: not set.")
    nccl_ib_retry_cnt: int | None = Field(
        None, ge=0, le=7, description="NCCL_IB_RETRY_CNT: InfiniBand retry count; null: not set.")
    nccl_cross_nic: Literal[0, 1, 2] | None = Field(
        None, description="NCCL_CROSS_NIC, whether rings and trees may use different NICs on different nodes "
        "(0, 1 or 2 as NCCL's documentation defines them); null: not set.")
    nccl_extra: dict[NcclName, NcclValue] | None = Field(None, description="Other NCCL_* variables, passed through ({NCCL_DEBUG: WARN}); a variable with a key of its "
        "own (NCCL_IB_HCA, NCCL_IB_GID_INDEX, ...) is refused with a pointer to that key.")

    @field_validator("nccl_ib_addr_range")
    @classmethod
    def _cidr(cls, value):
        if value is not None:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError as exc:
                raise ValueError(f"allowed: an IPv4 or IPv6 network in CIDR form ({exc})") from None
        return value

    @field_validator("nccl_extra")
    @classmethod
    def _no_typed_twin(cls, value):
        for name in value or {}:
            if name in NCCL_TWINS:
                key = NCCL_TWINS[name]
                rule = bounds(key, cls) if key in cls.model_fields else None
                raise ValueError(f"{name} has its own key: set {key} instead"
                                 + (f" ({rule})" if rule else ""))
        return value

    def _nccl_rules(self) -> None:
        """The rules across the NCCL keys (HostSettings.model_post_init runs them)."""
        if self.nccl_ib_addr_range is not None:
            family = ipaddress.ip_network(self.nccl_ib_addr_range, strict=False).version
            if family != (6 if self.nccl_ib_addr_family == "AF_INET6" else 4):
                raise ValueError(f"[nccl_ib_addr_range] {self.nccl_ib_addr_range} is an IPv{family} network but "
                                 f"nccl_ib_addr_family is {self.nccl_ib_addr_family}")
        if self.nccl_ib_gid_index is not None and self.nccl_ib_addr_family == "AF_INET6":
            raise ValueError("[nccl_ib_gid_index] pins an IPv4 GID; it cannot go with nccl_ib_addr_family AF_INET6")
