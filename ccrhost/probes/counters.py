"""One sample of the node's runtime figures: RDMA port counters and GPU
utilization. The same snippet serves ``ccrhost monitor`` on the node and
the fact that ``deploys/monitor.py`` runs remotely."""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost import numbers
from ccrhost.probes import local
from ccrhost.probes.rdma import IB_ROOT
from ccrhost.probes.sections import split
from ccrhost.probes.sysfs import split_dump

# ``port_xmit_data`` / ``port_rcv_data`` (and their ``_64`` variants, in
# ``counters/`` or, before kernel 4.5, ``counters_ext/``) count 4-byte words.
# The plain ones are 32-bit on some drivers and wrap. Unreadable counters
# (``N/A (no PMA)``, EINVAL) are skipped, not fatal.
# The congestion counters, then the RDMA transport errors (kernel mlx5
# hw_counters; ccrhost check judges them, the monitor shows their rise).
HW_COUNTERS = ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "out_of_sequence", "packet_seq_err",
               "local_ack_timeout_err", "rnr_nak_retry_err", "implied_nak_seq_err")
_DATA = {"port_xmit_data": "tx", "port_rcv_data": "rx"}


@dataclass
class PortCounters:
    tx_words: int | None = None  # counters/port_xmit_data[_64] (counters_ext/ before 4.5), 4-byte words
    rx_words: int | None = None  # counters/port_rcv_data[_64]
    wrap: int | None = None      # 2**32 when a plain 32-bit counter was read, None for 64-bit ones
    hw: dict[str, int] = field(default_factory=dict)  # hw_counters/<HW_COUNTERS>


@dataclass
class Sample:
    t: float                                   # date +%s.%N on the node
    ports: dict[tuple[str, int], PortCounters]  # (device, port) -> counters
    gpu_util: list[float] = field(default_factory=list)  # NVML, else nvidia-smi utilization.gpu, per GPU


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


class CountersFormatError(ValueError):
    """A sample's timestamp (``date +%s.%N``) is not a time."""


def parse_samples(lines: list[str]) -> list[Sample]:
    samples = []
    for section in split(lines):
        if section.tag == "t":
            t = numbers.decimal(section.arg, 0)
            if t is None:
                raise CountersFormatError(f"sample time {section.arg!r} (date +%s.%N) is not a time")
            samples.append(Sample(t, parse_counters(split_dump(section.lines))))
        elif section.tag == "gpu" and samples:
            # nvidia-smi utilization.gpu, percent; "[N/A]" and the like are no reading
            util = (numbers.integer(v, 0, 100) for v in section.lines)
            samples[-1].gpu_util = [float(u) for u in util if u is not None]
    return samples


def parse_counters(files: dict[str, list[str]]) -> dict[tuple[str, int], PortCounters]:
    """``{relative path: lines}`` under /sys/class/infiniband ->
    ``{(device, port): PortCounters}``. The 64-bit variant wins over the
    plain counter when both are present."""
    ports: dict[tuple[str, int], dict] = {}
    for path, lines in files.items():
        parts = path.split("/")
        port = numbers.integer(parts[2], 0) if len(parts) == 5 and parts[2][:1].isascii() else None
        if port is None or parts[1] != "ports" or parts[2][:1] in "+-":
            continue
        dev, group, name = parts[0], parts[3], parts[4]
        value = numbers.integer(" ".join(lines), 0)
        if value is None:
            continue  # "N/A (no PMA)" and the like
        entry = ports.setdefault((dev, port), {"tx_words": None, "rx_words": None, "wrap": None, "hw": {}, "_64": set()})
        if group in ("counters", "counters_ext"):
            base = name[:-3] if name.endswith("_64") else name
            if base not in _DATA:
                continue
            key = f"{_DATA[base]}_words"
            if name.endswith("_64"):
                entry[key] = value
                entry["_64"].add(key)
            elif key not in entry["_64"]:
                entry[key] = value
                entry["wrap"] = 2**32
        elif group == "hw_counters" and name in HW_COUNTERS:
            entry["hw"][name] = value
    for entry in ports.values():
        if len(entry.pop("_64")) == 2:
            entry["wrap"] = None
    return {key: PortCounters(**entry) for key, entry in ports.items()}


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


def sample_local(nvml_first: bool = True) -> Sample:
    out = local.run(SAMPLE, 20, "the counter sample")
    samples = parse_samples(out.splitlines())
    if not samples:
        raise CountersFormatError("the counter sample printed no '@@t' line")
    sample = samples[0]
    if nvml_first:
        util = gpu_utilization()
        if util is not None:
            sample.gpu_util = util
    return sample
