"""The paths agree: for generated node states (probe outputs, odd and
partial ones included), the deploy's verification, `ccrhost check` with the
check.yaml that deploys/slurm.py writes, and `ccrhost slurm verify`'s
judgement of what that check printed give the same status and the same
reason codes. The same raw output feeds each path the way it reaches it: the
deploy parses it from its one node snapshot, the check runs its probes
locally (their shell commands answered with that output), slurm verify reads
the check's JSON with the node's check.yaml."""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from ccrhost.fleet.slurm_check import CheckOutput, judge
from ccrhost.model.managed import CHECK_CONFIG
from ccrhost.model.plain import plain
from ccrhost.model.slurm import integration_files
from ccrhost.node.check import run_check
from ccrhost.operations.verify import node_verdict
from ccrhost.probes import local
from ccrhost.probes.node import PROBE_MARK, parse_snapshot
from ccrhost.settings import validate_host

pytestmark = pytest.mark.fuzz

PCI = (Path(__file__).parent / "fixtures/gdr/pci_dump_lab_hgx.txt").read_text().splitlines()
H100 = "NVIDIA H100 80GB HBM3"
_STATE = itertools.count()

# What each port file may hold: every form the kernel prints, and what it never does.
RATES = ["400 Gb/sec (4X NDR)", "200 Gb/sec (4X HDR)", "100 Gb/sec (2X HDR)", "10 Gb/sec (4X)", None,
         "400 Gb/sec (4X", "", "fast", "४०० Gb/sec (4X NDR)"]
STATES = [("4: ACTIVE", "5: LinkUp"), ("1: DOWN", "3: Disabled"), ("2: INIT", "5: LinkUp"),
          ("4: ACTIVE", "7: Phy Test"), ("ACTIVE", "5: LinkUp"), None]
SPEEDS = ["32.0 GT/s PCIe", "16.0 GT/s PCIe", "8 GT/s", "Unknown", None, "fast", "32.0 GT/s PCIe x"]
WIDTHS = ["16", "8", "0", None, "x16", "-1"]


def value(draw, choices: list, odd: bool | None = None):
    """The first (healthy) choice, or any of them when ``odd`` (drawn here,
    one time in eight, when not given)."""
    odd = draw(st.integers(0, 7)) == 0 if odd is None else odd
    return draw(st.sampled_from(choices)) if odd else choices[0]


@st.composite
def rdma_lines(draw) -> list[str]:
    lines = ["@@ib"]
    nets = []
    for i in range(draw(st.sampled_from([8, 8, 8, 7, 9, 1, 0]))):
        dev = f"mlx5_{i}"
        odd = draw(st.integers(0, 15)) == 0  # an odd port: any of its files may hold anything
        state = value(draw, STATES, odd)
        if state is not None:
            lines += [f"{dev}/ports/1/state:{state[0]}", f"{dev}/ports/1/phys_state:{state[1]}"]
        rate = value(draw, RATES, odd)
        if rate is not None:
            lines.append(f"{dev}/ports/1/rate:{rate}")
        lines.append(f"{dev}/ports/1/link_layer:{value(draw, ['Ethernet', 'InfiniBand'], odd)}")
        for name, choices in (("current_link_speed", SPEEDS), ("max_link_speed", SPEEDS[:2]),
                              ("current_link_width", WIDTHS), ("max_link_width", WIDTHS[:1])):
            text = value(draw, choices, odd)
            if text is not None:
                lines.append(f"{dev}/device/{name}:{text}")
        nets.append(f"{dev}/device/net/eth{i}")
    return lines + ["@@net", *nets]


@st.composite
def gpu_lines(draw) -> list[str]:
    kind = value(draw, ["gpus", "error", "garbled"])
    if kind == "error":
        return ["@@error", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."]
    rows = []
    for i in range(draw(st.sampled_from([8, 8, 8, 7, 9, 0]))):
        odd = draw(st.integers(0, 15)) == 0
        name = value(draw, [H100, "NVIDIA A100-SXM4-80GB", "Mystery GPU"], odd)
        clock = value(draw, ["1980", "1188", "[N/A]"], odd)
        reasons = value(draw, ["0x0000000000000000", "0x0000000000000001", "0x0000000000000008"], odd)
        rows.append(f"{i}, {name}, GPU-{i:08d}, {clock}, 1980, 5, 5, 16, 16, {reasons}")
    if kind == "garbled" and rows:
        rows[-1] = rows[-1].rsplit(",", 2)[0]  # a row cut short
    return ["@@gpus", *rows]


@st.composite
def pci_lines(draw) -> list[str]:
    kind = value(draw, ["whole", "no_peermem", "garbled", "empty"])
    if kind == "no_peermem":
        i = PCI.index("@@peermem")
        return PCI[:i + 1] + PCI[i + 2:] if not PCI[i + 1].startswith("@@") else PCI
    if kind == "garbled":
        return [line.replace("28.39.3560", "28.39.35\x00") if line.startswith("mlx5_3/fw_ver") else line
                for line in PCI] + ["@@dev 0000:zz:00.0", "role gpu"]
    if kind == "empty":
        return []
    return PCI


QUERY = (Path(__file__).parent / "fixtures/gpu/nvsmi_q_a40_550.txt").read_text().splitlines()
GPU_BLOCK = QUERY[QUERY.index("GPU 00000000:4F:00.0"):]  # a verbatim -q block (driver 550)
XIDS = ["79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.", "48, pid=1, name=python, DBE",
        "13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception", "94, pid=2, name=x, Contained"]


@st.composite
def health_lines(draw) -> list[str]:
    """`ccrhost`'s GPU health snippet output: nvidia-smi -q blocks (the
    verbatim sample's, values drawn), nvlink -s/-e, the bus's GPUs, dmesg."""
    kind = value(draw, ["ok", "error", "garbled"])
    if kind == "error":
        return ["@@error", "nvidia-smi not found", "@@pcigpus", "@@dmesg 100.0"]
    out, status, errors, bdfs = ["@@query", *QUERY[:QUERY.index("GPU 00000000:4F:00.0")]], ["@@nvlinkstatus"], \
        ["@@nvlinkerrors"], []
    for i in range(draw(st.sampled_from([8, 8, 7, 0]))):
        bdf = f"{0x18 + i * 0x10:02X}:00.0"
        bdfs.append(f"0000:{bdf.lower()}")
        odd = draw(st.integers(0, 7)) == 0
        block = [line.replace("4F:00.0", bdf) for line in GPU_BLOCK]
        for find, choices in (("Pending                           : No", ["No", "Yes", "N/A"]),
                              ("Remapping Failure Occurred        : No", ["No", "Yes"]),
                              ("Replays Since Reset               : 0", ["0", "12", "N/A"]),
                              ("State                             : N/A", ["N/A", "Completed", "In Progress"])):
            got = value(draw, choices, odd)
            block = [line.replace(find, find[:-len(choices[0])] + got, 1) if line.strip() == find.strip() else line
                     for line in block]
        out += block
        status.append(f"GPU {i}: {H100} (UUID: GPU-{i:08d})")
        errors.append(f"GPU {i}: {H100} (UUID: GPU-{i:08d})")
        for n in range(value(draw, [18, 17, 0], odd)):
            status.append(f"\t Link {n}: {value(draw, ['26.562 GB/s', '<inactive>'], odd)}")
            errors += [f"\t Link {n}: Replay Errors: 0", f"\t Link {n}: Recovery Errors: 0",
                       f"\t Link {n}: CRC Errors: {value(draw, ['0', '7'], odd)}"]
    if kind == "garbled" and len(out) > 40:
        out[-30] = "        Pending                           : Maybe"
    extra = value(draw, [[], ["0000:f8:00.0"]])
    log = ["@@dmesg 9000.0"] + [f"[ {draw(st.sampled_from([100.0, 8990.5]))}] NVRM: Xid (PCI:{b[:10]}): "
                                 f"{draw(st.sampled_from(XIDS))}" for b in value(draw, [[], bdfs[:1], bdfs[-2:]])]
    return out + status + errors + ["@@pcigpus", *bdfs, *extra, "@@fabricmanager", value(draw, ["active", "failed"]),
                                    *value(draw, [log, ["@@dmesg 5.0", "dmesg: read kernel buffer failed: "
                                                                       "Operation not permitted"]])]


@st.composite
def fabric_lines(draw) -> list[str]:
    """The fabric probe: a stored reading (or none, or another boot's, or an
    old one), then the reading now: port error and transport counters,
    ethtool statistics and pause per netdev, odd output now and then."""
    def reading(t, boot, rising):
        lines = [f"@@t {t}", f"@@boot {boot}", "@@ib"]
        for i in range(2):
            lines += [f"mlx5_{i}/ports/1/counters/link_downed:{rising * draw(st.sampled_from([0, 0, 1]))}",
                      f"mlx5_{i}/ports/1/hw_counters/rnr_nak_retry_err:{rising * draw(st.sampled_from([0, 0, 2]))}",
                      f"mlx5_{i}/ports/1/hw_counters/out_of_sequence:{rising * draw(st.sampled_from([0, 5]))}"]
        for i in range(2):
            lines += [f"@@stats mlx5_{i} eth{i}", "NIC statistics:",
                      f"     rx_discards_phy: {rising * draw(st.sampled_from([0, 0, 9]))}",
                      f"     tx_prio3_pause_duration: {rising * draw(st.sampled_from([0, 10**6, 10**9]))}",
                      f"     tx_pause_storm_error_events: {rising * draw(st.sampled_from([0, 0, 1]))}"]
            if draw(st.integers(0, 15)) == 0:
                lines.append(draw(st.sampled_from(["     rx_symbol_err_phy: many", "garbage", ""])))
            pause = draw(st.sampled_from(["off", "off", "on", None, "odd"]))
            lines += [f"@@pause mlx5_{i} eth{i}", f"Pause parameters for eth{i}:"]
            if pause == "odd":
                lines.append("RX: sometimes")
            elif pause is None:
                lines.append("Cannot get device pause settings: Operation not supported")
            else:
                lines += ["Autonegotiate:\toff", f"RX:\t\t{pause}", f"TX:\t\t{pause}"]
        return lines

    kind = draw(st.sampled_from(["same", "same", "none", "other boot", "old"]))
    now = reading(5000.0, "b1", 2)
    if kind == "none":
        return ["@@previous", *now]
    then = 100.0 if kind == "old" else draw(st.sampled_from([4000.0, 4999.5]))
    before = reading(then, "b0" if kind == "other boot" else "b1", 1)
    return ["@@previous", *[f"={x}" for x in before], *now]


SETTINGS = st.fixed_dictionaries({}, optional={
    "verify_profile": st.just("hgx-h100-8x400"),
    "verify_required_nic_fw": st.sampled_from(["28.39.3560", "99.0.0"]),
    "verify_required_nvidia": st.sampled_from(["535", "999"]),
    "verify_rail_local": st.booleans(),
    "verify_gpu_count": st.integers(1, 8),
    "verify_min_ccr": st.sampled_from([1e-6, 1.0]),
    "rdma_exclude_devices": st.sampled_from([["mlx5_7"], ["mlx5_*"]]),
    "verify_gpu_hw_slowdown": st.just("FAIL"),
    "verify_gpu_xid_ignore": st.sampled_from([[48], [79, 13]]),
    "verify_gpu_xid_lookback_hours": st.sampled_from([0, 0.5, 24]),
    "qos_pfc_priorities": st.sampled_from([[], [3]]),
    "verify_pause_share_max": st.sampled_from([0.1, 0.5]),
})


def _unit(name, active="active", sub="running", restarts=0, memlock="infinity"):
    # systemctl show's order (the bus's), as tests/fixtures/host_health/systemctl_show.txt
    return [f"NRestarts={restarts}", f"LimitMEMLOCK={memlock}", f"Id={name}.service", "LoadState=loaded",
            f"ActiveState={active}", f"SubState={sub}", ""]


def host_lines():
    """The host health probe's output: healthy, or one fault each."""
    names = ("slurmd", "nvidia-persistenced", "nvidia-dcgm", "nvidia-fabricmanager")

    def output(units=None, leap="Normal", edac="mc0 0 0", memlock="unlimited", idle=None, rc="0"):
        units = units or {}
        lines = ["@@boot 0d3c", f"@@units {rc} {' '.join(names)}"]
        if rc == "0":
            for n in names:
                lines += _unit(n, *units.get(n, ()))
        else:
            lines.append("Failed to connect to bus: Host is down")
        lines += ["@@chrony", "Reference ID    : B869B610 (vps6.ctyme.com)", "Stratum         : 3",
                  f"Leap status     : {leap}", "@@chronyrc 0", "@@edac", edac, "@@memlock ", memlock]
        return lines + (idle or [])

    leftover = ["@@idle slurm State=IDLE", "@@gpumem", "0, 00000000:18:00.0, 2048", "@@gpumemrc 0", "@@gpuprocs",
                "00000000:18:00.0, 4242, python3, 2048 MiB", "@@gpuprocsrc 0"]
    return st.sampled_from([
        output(), output({"nvidia-fabricmanager": ("failed", "failed")}), output({"slurmd": ("inactive", "dead")}),
        output({"slurmd": ("active", "running", 0, "65536")}), output(leap="Not synchronised"),
        output(edac="mc0 12 1"), output(rc="1"), output(idle=leftover)])


def snapshot_lines(rdma, gpus, pci, health, fabric, host) -> list[str]:
    return [f"{PROBE_MARK} rdma", *rdma, f"{PROBE_MARK} gpus", *gpus, f"{PROBE_MARK} pci", *pci,
            f"{PROBE_MARK} gpu_health", *health, f"{PROBE_MARK} fabric", *fabric, f"{PROBE_MARK} host_health", *host]


def codes(verdict) -> tuple[str, list[str]]:
    return verdict.status, sorted(r.code for r in verdict.reasons)


def the_check(settings, rdma, gpus, pci, health, fabric, host, state: Path):
    """`ccrhost check` on a node whose probes print these lines."""
    split = health.index("@@pcigpus") if "@@pcigpus" in health else len(health)  # its two processes' parts
    # the check reads the counters now and joins them with the node's stored reading (a file)
    stored = [line[1:] for line in fabric if line.startswith("=")]
    now = [line for line in fabric[1:] if not line.startswith("=")]
    outputs = {"the RDMA probe": rdma, "nvidia-smi": gpus, "the PCI probe": pci,
               "the GPU health probe (nvidia-smi": health[:split], "the GPU health probe (kernel": health[split:],
               "the fabric probe": now, "the host health probe": host}

    def run(command, timeout, what):
        return "\n".join(next(lines for key, lines in outputs.items() if what.startswith(key))) + "\n"

    def no_nvml(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(local, "run", run)
        mp.setattr(ctypes, "CDLL", no_nvml)
        state.unlink(missing_ok=True)
        if stored:
            state.write_text("".join(line + "\n" for line in stored))
        Path(settings.verify_gpu_state).unlink(missing_ok=True)
        return run_check(settings, timeout=5)


@given(data=SETTINGS, rdma=rdma_lines(), gpus=gpu_lines(), pci=pci_lines(), health=health_lines(),
       fabric=fabric_lines(), host=host_lines())
def test_deploy_check_and_slurm_verify_give_one_verdict(tmp_path_factory, data, rdma, gpus, pci, health, fabric,
                                                        host):
    state = tmp_path_factory.getbasetemp() / f"counters-{next(_STATE)}"
    # rates: the fabric's from the stored reading its probe printed (the same on both paths), the GPUs'
    # from the check's own state file (fresh each time: none judged)
    settings = validate_host("gpu01", {**data, "verify_link_state": str(state), "verify_gpu_state": f"{state}.gpu"})
    config = next(content for path, content, _ in integration_files(settings) if path == CHECK_CONFIG)
    on_node = validate_host("gpu01", yaml.safe_load(config))  # what the prolog's check reads

    deployed = node_verdict(parse_snapshot(snapshot_lines(rdma, gpus, pci, health, fabric, host),
                                           ("rdma", "gpus", "pci", "gpu_health", "fabric", "host_health")), settings)
    checked = the_check(on_node, rdma, gpus, pci, health, fabric, host, state)
    printed = json.dumps(checked.to_dict(), indent=2, default=str)
    fleet, _ = judge(CheckOutput("gpu01", config, printed, checked.exit_code))

    assert codes(deployed) == codes(checked) == codes(fleet)
    assert [r.message for r in fleet.reasons] == [r.message for r in checked.reasons]
    # the reports' fast record-to-dict is asdict's result, on every shape of readings
    assert plain(checked.readings) == dataclasses.asdict(checked.readings)

