"""Runtime monitor keys: deploys/monitor.py's window and targets."""

from __future__ import annotations

from pydantic import BaseModel, Field


class MonitorSettings(BaseModel, defer_build=True):
    monitor_seconds: float = Field(10, gt=0, le=86400, description="Length of deploys/monitor.py's window.")
    monitor_interval: float = Field(1, ge=0.1, le=3600, description="Seconds between deploys/monitor.py's samples.")
    monitor_gpu_target: float = Field(90, ge=0, le=100, description="Mean GPU utilization target, %.")
    monitor_net_target: float = Field(80, ge=0, le=100, description="Network utilization target, % of effective rate.")
    monitor_outlier_tolerance: float = Field(
        0.2, gt=0, lt=1, description="Flag hosts this share below the fleet median (0.2 = 20%)."
    )
