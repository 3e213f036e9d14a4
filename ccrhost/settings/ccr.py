"""CCR keys: the declared hardware (verify_profile and its overrides), the
GPU compute F, the workload or beta, and how the CCR is judged."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from ccrhost.model import workload as wl
from ccrhost.model.gpus import PRECISIONS
from ccrhost.model.platform import builtin_names
from ccrhost.model.gpus import PeakUnknown, peak_tflops
from ccrhost.model.gpus import lookup as lookup_gpu
from ccrhost.model.verdict import Expectation
from ccrhost.settings.workload import Workload

Precision = Literal[PRECISIONS]  # type: ignore[valid-type]


class CcrSettings(BaseModel, defer_build=True):
    verify_profile: str | None = Field(
        None, min_length=1, max_length=4096,
        description=f"The node's platform: a built-in platform file (ccrhost/platforms/: {', '.join(builtin_names())}) "
        "or the path of a site's platform file on the controller, which may `extends:` one (docs/platforms.md). Sets the "
        "declared hardware (the verify_* expectations below), the active checks' figures, the NIC firmware "
        "profile and settings defaults; resolved and checked before any host is touched.",
    )
    verify_platform: dict | None = Field(
        None, description="The platform verify_profile resolved to, every figure with its source: the deploy "
        "writes it into the node's check.yaml so the node judges without the platform files. Not set by hand.",
    )
    verify_gpu_model: str | None = Field(None, max_length=128, description="Expected GPU name as NVML reports it; default: from verify_profile.")
    verify_gpu_count: int | None = Field(None, ge=1, le=64, description="Expected number of GPUs; default: from verify_profile.")
    verify_ports: int | None = Field(None, ge=0, le=64, description="Expected active compute ports; default: from verify_profile.")
    verify_port_gbps: float | None = Field(None, gt=0, le=3200, description="Expected rate of each compute port, Gb/s; default: from verify_profile.")
    verify_precision: Precision = Field("bf16", description="Precision of F, the GPU compute.")
    verify_beta: float | None = Field(None, gt=0, le=1e6, description="Bytes per FLOP; default 4 (the CCR guide's). Not with verify_workload.")
    verify_workload: Workload | None = Field(
        None, description="The training job the node is judged for: the CCR and its bands come from the workload "
        "model instead of beta (see the Workload keys). Not with verify_beta."
    )
    verify_bandwidth_model: Literal["bottleneck", "sum"] = Field("bottleneck", description="How B is summed: the slowest active port x their count (bottleneck), or the sum.")
    verify_min_ccr: float | None = Field(None, ge=0, description="Absolute CCR floor; below it a host FAILS.")
    verify_min_ccr_fraction: float = Field(0.9, ge=0, le=1, description="Fail below this share of the expected CCR.")
    verify_gpu_tflops: dict[Precision, float] | None = Field(
        None, description="Peak dense TFLOPS per GPU by precision, for a model the table lacks."
    )
    verify_fleet_tolerance: float | None = Field(
        None, gt=0, lt=1, description="Flag hosts whose CCR is this share below the fleet median (0.1 = 10%)."
    )
    verify_rail_local: bool | None = Field(
        None, description="Declared hardware has one NIC per GPU on its switch: a GPU whose NIC is across the "
        "CPU interconnect (SYS) FAILS. Default: from verify_profile.",
    )

    @field_validator("verify_platform")
    @classmethod
    def _resolved_platform(cls, value):
        if value is not None:
            from ccrhost.model.platform import PlatformError, from_resolved

            try:
                from_resolved(value)
            except PlatformError as exc:
                raise ValueError(f"{exc.key} = {exc.value!r}: {exc.allowed}") from None
        return value

    def platform(self):
        """The resolved platform (model/platform.py ``Platform``), or None where verify_profile names none."""
        from ccrhost.model.platform import from_resolved, resolve

        if self.verify_platform is not None:
            return from_resolved(self.verify_platform)
        return resolve(self.verify_profile) if self.verify_profile else None

    @field_validator("verify_gpu_tflops")
    @classmethod
    def _positive_tflops(cls, value):
        for precision, tflops in (value or {}).items():
            if not tflops > 0:
                raise ValueError(f"{precision}: TFLOPS must be positive")
        return value

    def _peak_rules(self) -> None:
        """The rules joining the GPU model, its peak figures and the precision (HostSettings.model_post_init)."""
        if self.verify_gpu_model and lookup_gpu(self.verify_gpu_model) is None and not self.verify_gpu_tflops:
            raise ValueError(
                f"[verify_gpu_model] {self.verify_gpu_model!r} is not in the peak-TFLOPS table; give its "
                "datasheet figures in verify_gpu_tflops, or use an NVML name such as 'NVIDIA H100 80GB HBM3'"
            )
        model = self.expectation().gpu_model
        if model and self.verify_gpu_tflops and self.verify_precision not in self.verify_gpu_tflops:
            try:
                peak_tflops(model, self.verify_precision)
            except PeakUnknown as exc:
                gave = ", ".join(self.verify_gpu_tflops)
                raise ValueError(
                    f"[verify_gpu_tflops/verify_precision] verify_gpu_tflops gives {gave} only, but "
                    f"verify_precision is {self.verify_precision} and {exc}: every host would be UNKNOWN; "
                    f"add its {self.verify_precision} figure to verify_gpu_tflops"
                ) from None

    def _workload_rules(self) -> None:
        """verify_beta or verify_workload (HostSettings.model_post_init)."""
        if self.verify_beta is not None and self.verify_workload is not None:
            raise ValueError("[verify_beta/verify_workload] set verify_beta or verify_workload, not both")

    def expectation(self) -> Expectation:
        platform = self.platform()
        hw = platform.hardware if platform else {}
        base = Expectation(hw.get("gpu_model"), hw.get("gpu_count"), hw.get("nic_count"), hw.get("nic_gbps"),
                           rail_local=bool(hw.get("rail_local")))
        return Expectation(
            gpu_model=self.verify_gpu_model or base.gpu_model,
            gpu_count=self.verify_gpu_count if self.verify_gpu_count is not None else base.gpu_count,
            ports=self.verify_ports if self.verify_ports is not None else base.ports,
            port_gbps=self.verify_port_gbps or base.port_gbps,
            rail_local=self.verify_rail_local if self.verify_rail_local is not None else base.rail_local,
        )

    def workload_problems(self) -> list[wl.Problem]:
        """The workload against the declared GPUs per node; when none is
        declared, the verification checks it against the GPUs it finds."""
        if self.verify_workload is None:
            return []
        if self.verify_workload.missing():
            return self.verify_workload.missing()
        spec, gpus = self.verify_workload.spec(), self.expectation().gpu_count
        peak = wl.peak_precision_problem(self.verify_precision, spec)
        return (wl.spec_problems(spec) + (wl.topology_problems(spec, gpus) if gpus else [])
                + ([peak] if peak else []))
