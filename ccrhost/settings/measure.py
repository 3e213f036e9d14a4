"""Measurement keys: deploys/verify.py's ib_write_bw runs between host pairs."""

from __future__ import annotations

from pydantic import BaseModel, Field


class MeasureSettings(BaseModel, defer_build=True):
    verify_measure: bool = Field(False, description="Measure bandwidth with ib_write_bw between host pairs (deploys/verify.py).")
    verify_measure_seconds: int = Field(10, ge=1, le=3600, description="Sustained duration of each ib_write_bw run.")
    verify_measure_retries: int = Field(2, ge=0, le=10, description="Reruns of a slow pair before it counts as slow.")
    verify_measure_min_fraction: float = Field(
        0.9, gt=0, le=1, description="A port measured below this share of its effective rate FAILS."
    )
    verify_measure_timeout: int = Field(
        60, ge=5, le=7200, description="Seconds after which one ib_write_bw run is killed and counts as UNKNOWN; at least "
        "verify_measure_seconds + 5."
    )
    verify_measure_port: int = Field(18515, ge=1024, le=65000, description="First TCP port of the ib_write_bw servers.")
    verify_measure_gpudirect: bool = Field(
        False, description="deploys/verify.py measures each GPU-NIC pair through GPU memory (ib_write_bw "
        "--use_cuda, NUMA-pinned); UNKNOWN where ib_write_bw has no CUDA.",
    )

    def _measure_rules(self) -> None:
        """verify_measure_timeout against verify_measure_seconds (HostSettings.model_post_init)."""
        if self.verify_measure_timeout < self.verify_measure_seconds + 5:
            raise ValueError(
                f"[verify_measure_timeout] {self.verify_measure_timeout} must exceed verify_measure_seconds "
                f"({self.verify_measure_seconds}) by at least 5"
            )
