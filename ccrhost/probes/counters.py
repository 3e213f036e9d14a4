"""One sample of the node's runtime figures: RDMA port counters and GPU
utilization. The same snippet serves ``ccrhost monitor`` on the node and
the fact that ``deploys/monitor.py`` runs remotely."""

from __future__ import annotations

import subprocess
import time

from ccrhost.counters import HW_COUNTERS, parse_counters
from ccrhost.probes.rdma import IB_ROOT
from ccrhost.sysfs import split_dump

_FILES = " ".join(
    [f"*/ports/*/{group}/{name}" for group in ("counters", "counters_ext")
     for name in ("port_xmit_data", "port_rcv_data", "port_xmit_data_64", "port_rcv_data_64")]
    + [f"*/ports/*/hw_counters/{name}" for name in HW_COUNTERS]
)
SAMPLE = (
    f"echo \"@@t $(date +%s.%N)\"; (cd {IB_ROOT} 2>/dev/null && grep -Hs '' {_FILES}); "
    "echo @@gpu; nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits 2>/dev/null; true"
)


def sampler_command(count: int, interval: float) -> str:
    """``count`` samples ``interval`` seconds apart, in one remote command."""
    return (f"i=0; while [ $i -lt {int(count)} ]; do {SAMPLE}; i=$((i+1)); "
            f"[ $i -lt {int(count)} ] && sleep {float(interval)}; done; true")


def parse_samples(lines: list[str]) -> list[dict]:
    samples, current, in_gpu = [], None, False
    for line in lines:
        if line.startswith("@@t "):
            current = {"t": float(line[4:]), "lines": [], "gpu_util": []}
            samples.append(current)
            in_gpu = False
        elif line == "@@gpu":
            in_gpu = True
        elif current is not None:
            if in_gpu:
                value = line.strip()
                if value.isdigit():
                    current["gpu_util"].append(float(value))
            else:
                current["lines"].append(line)
    for s in samples:
        s["ports"] = parse_counters(split_dump(s.pop("lines")))
    return samples


def gpu_utilization(nvml=None) -> list[float] | None:
    """Per-GPU utilization through NVML; None when NVML cannot load."""
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        return [float(nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(i)).gpu)
                for i in range(nvml.nvmlDeviceGetCount())]
    finally:
        nvml.nvmlShutdown()


def sample_local(nvml_first: bool = True) -> dict:
    out = subprocess.run(["sh", "-c", SAMPLE], capture_output=True, text=True, timeout=20)
    sample = parse_samples(out.stdout.splitlines())[0]
    if nvml_first:
        util = gpu_utilization()
        if util is not None:
            sample["gpu_util"] = util
    return sample


def sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)
