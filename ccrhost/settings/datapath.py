"""Data-path keys: the RDMA kernel modules and devices, GPUDirect, the NICs'
PCIe settings, the RoCE MTU, and the oldest firmware and drivers allowed."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints

from ccrhost.model import datapath as dp
from ccrhost.settings.keys import CONTROLLER_ONLY

ModuleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]

DEFAULT_MODULES = ("ib_uverbs", "mlx5_core", "mlx5_ib", "rdma_ucm")

# RDMA device names, or fnmatch patterns of them (mlx5_*, rocep*s0).
DevicePattern = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_*?\[\]-]{1,64}$")]
ReadReq = Literal[dp.READ_REQ_SIZES]  # type: ignore[valid-type]
RoceMtu = Literal[dp.NETDEV_MTUS]  # type: ignore[valid-type]
# A required version is a version number (datapath.version_key): numbers
# split by '.', '-' or '_'; a word in it could never be compared.
VersionText = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,9}([._-][0-9]{1,9}){0,15}$")]


class DatapathSettings(BaseModel, defer_build=True):
    rdma_modules: tuple[ModuleName, ...] = Field(
        DEFAULT_MODULES, description="Kernel modules to load now and at every boot."
    )
    rdma_require_devices: bool = Field(
        True, description="Fail the host when it has no RDMA device at all."
    )
    rdma_gpudirect: bool = Field(
        True, description="Load and persist a peer-memory module (nvidia_peermem, or nv_peer_mem where that is "
        "what the driver ships) unless one is loaded or dma-buf serves; never both.",
    )
    rdma_acs_clear: bool = Field(
        True, description="Clear ACS redirect and source validation on the PCIe bridges between each GPU and its "
        "NIC, now and at every boot. Set false where ACS must stay (virtual machine hosts).",
    )
    rdma_nic_pcie_optimize: bool = Field(
        False, description="Opt-in: MaxReadReq 4096 on ConnectX NICs (NVIDIA's pciPerformanceOptimized), "
        "now and at every boot.",
    )
    rdma_nic_max_read_req: ReadReq | None = Field(
        None, description="Opt-in: MaxReadReq in bytes on every compute NIC (overrides the ConnectX 4096).",
    )
    rdma_nic_relaxed_ordering: bool | None = Field(
        None, description="Opt-in: PCIe relaxed ordering on (true) or off (false) on every compute NIC; "
        "null leaves it.",
    )
    roce_mtu: RoceMtu | None = Field(
        4200, description="MTU of the RoCE netdevs: 4200 gives RDMA active_mtu 4096 (9000 too, with more "
        "memory); never changed on the SSH or default-route netdev; null leaves it.",
    )
    rdma_tune_when_busy: bool = Field(
        False, description="Let deploys/rdma.py apply its disruptive stages (MTU, QoS, PCIe ACS, NIC PCIe: link "
        "toggles and PCIe writes) on a node whose GPUs hold compute processes. Off: those stages are skipped "
        "there and the host says so; the rest still apply (docs/tuning.md).",
        json_schema_extra=CONTROLLER_ONLY,
    )

    rdma_exclude_devices: tuple[DevicePattern, ...] = Field(
        (), description="RDMA devices (names or fnmatch patterns) that are not compute fabric: storage, management."
    )
    verify_required_nic_fw: VersionText | None = Field(None, description="Oldest NIC firmware (fw_ver) allowed.")
    verify_required_mlx5: VersionText | None = Field(
        None, description="Oldest mlx5 driver allowed (MLNX_OFED's /sys/module/mlx5_core/version).")
    verify_required_nvidia: VersionText | None = Field(None, description="Oldest NVIDIA driver allowed.")

    def nic_devctl(self, vendor: int | None) -> tuple[int | None, bool | None]:
        """(MaxReadReq, relaxed ordering) wanted on a NIC of this PCI
        vendor; None: leave that field as it is."""
        read_req = self.rdma_nic_max_read_req
        if read_req is None and self.rdma_nic_pcie_optimize and vendor == dp.CONNECTX_VENDOR:
            read_req = dp.CONNECTX_MAX_READ_REQ
        return read_req, self.rdma_nic_relaxed_ordering
