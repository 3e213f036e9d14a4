"""Property-based fuzzing of every parser of node output.

Each parser is fed real samples (the fixtures, the reference's verbatim
outputs, the lab's own output) with lines mutated, shuffled, cut and
mixed with hostile tokens. It must return a well-formed value or raise its
probe module's own parse error (a ValueError subclass defined there), never
anything else: one node's odd output must stay that node's failure, with a
message, never a traceback that aborts the fleet.

CI runs the "ci" profile; ``scripts/test -m fuzz --hypothesis-profile=deep``
the long one (see tests/conftest.py and bench/fuzz-results.md).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ccrhost.model import nccl as nccl_model
from ccrhost.operations.roce import global_tclass
from ccrhost.probes import (
    counters,
    files,
    gpu,
    kernel,
    node,
    pci,
    perftest,
    qos,
    rdma,
    sections,
    sysfs,
)

pytestmark = pytest.mark.fuzz

FIX = Path(__file__).parent / "fixtures"

# Words that have broken parsers, or would: out-of-range and signed numbers,
# Unicode digits int() accepts, nan/inf, separators, markers, names where
# numbers belong, non-ASCII text.
HOSTILE = ["", " ", "\t", ":", "=", ",", "/", "\\", "@@", "@@@", "@@if", "-1", "-5", "8", "9", "64", "255", "256",
           "65536", "4294967296", "99999999999999999999999999", "١", "²", "٣:٣", "७", "nan", "NaN", "inf", "-inf",
           "1e400", "1_000", "0x", "0xZZ", "0x10", "N/A", "[N/A]", "Not Supported", "Unknown", "fast", "CS3", "CS3:3",
           "-1:on", "8:on", "3:maybe", "on", "off", "4: ACTIVE", "é", "\x00", "%", "..", "Gb/sec", "(4X", "GT/s",
           "prio:8", "dscp:64", "1:", ":1", "ffff", "::", "fe80::1", "::ffff:198.18.0.11", "Kb", "10Kb", "1.5Mb",
           "-1Kb", "max_buffer_size=", "=x", "a\u200bb", "🙂"]


def lines_of(text: str) -> list[str]:
    return text.splitlines()


@st.composite
def mutated_line(draw, samples: list[str]):
    line = draw(st.sampled_from(samples))
    sep = draw(st.sampled_from([" ", ":", "/", ",", "\t"]))
    words = line.split(sep)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["replace", "insert", "delete", "cut", "char"]))
        i = draw(st.integers(0, max(len(words) - 1, 0)))
        token = draw(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=6)))
        if op == "replace" and words:
            words[i] = token
        elif op == "insert":
            words.insert(i, token)
        elif op == "delete" and words:
            words.pop(i)
        elif op == "cut" and words:
            words[i] = words[i][: draw(st.integers(0, len(words[i])))]
        elif op == "char" and words and words[i]:
            j = draw(st.integers(0, len(words[i]) - 1))
            words[i] = words[i][:j] + draw(st.sampled_from(HOSTILE)) + words[i][j + 1:]
    return sep.join(words)


def output(samples: list[str], max_size: int = 60, *extra):
    """Lists of lines: real ones, mutated ones, and noise, in any order."""
    return st.lists(st.one_of(st.sampled_from(samples), mutated_line(samples), st.sampled_from(HOSTILE),
                              st.text(max_size=30), *extra), max_size=max_size)


# hostile first: hypothesis draws the front of a sampled list more often
NUMBERS = ["\u00b2", "\u0661", "1", "-1", "8", "0", "3", "7", "255", "+1", "99999999999999999999999", "0x1", " 1", ""]


@st.composite
def grep_line(draw, leaves: list[str], values: list[str]):
    """A ``grep -H`` line of a sysfs tree with each path part drawn apart:
    numbers in paths are where Unicode digits hide."""
    dev = draw(st.sampled_from(["mlx5_0", "mlx5_1", "ibp12s0", "", "..", "é"]))
    kind = draw(st.sampled_from(["ports", "device", "tc", "ports/" + draw(st.sampled_from(NUMBERS))]))
    num = draw(st.sampled_from(NUMBERS))
    leaf = draw(st.sampled_from(leaves)).replace("N", draw(st.sampled_from(NUMBERS)))
    value = draw(st.one_of(st.sampled_from(values), st.sampled_from(HOSTILE)))
    return f"{dev}/{kind}/{leaf}:{value}" if draw(st.booleans()) else f"{dev}/{kind}/{num}/{leaf}:{value}"


def text_of(samples: list[str]):
    return output(samples).map("\n".join)


def owns(exc: BaseException, *errors: type) -> bool:
    """A probe's own parse error: a ValueError subclass, not ValueError itself."""
    return isinstance(exc, errors) and type(exc) is not ValueError


# --- samples -----------------------------------------------------------------

RDMA = (lines_of((FIX / "rdma_dump_roce.txt").read_text()) + lines_of((FIX / "rdma_dump_ib_ofed.txt").read_text()) + [
    "@@route", "default via 198.18.0.1 dev eth0 proto static",
    "default \\\tnexthop via 198.18.250.1 dev ens1np0 weight 1 \\\tnexthop via 198.18.251.1 dev ens2np0 weight 1 ",
    "default via fd00::1 dev eth0 metric 1024 pref medium",
    "@@links", "br0/lower_ens1np0", "ens1np0/upper_br0", "ens1np0.100/lower_ens1np0", "bond0/lower_ens2np0",
    "@@ssh", "198.18.0.1 51234 198.18.0.11 22", "::ffff:198.18.0.1 51234 ::ffff:198.18.0.11 22",
    "@@session", "pid 2811 sh", "pid 2790 sudo", "pid 2789 sshd", "pid 2702 sshd-session",
    "tcp 0B0012C6:0016 010012C6:D431", "tcp 0000000000000000FFFF00000B0012C6:0016 0000000000000000FFFF0000010012C6:D431",
    "@@addr", "2: eth0@if7    inet 198.18.0.11/24 scope global eth0\\       valid_lft forever preferred_lft forever",
    "5: ens1np0.100@ens1np0    inet 198.18.1.11/24 scope global ens1np0.100",
    "1: lo    inet6 ::1/128 scope host \\       valid_lft forever preferred_lft forever",
    "mlx5_0/ports/1/credit_threshold:1024", "mlx5_0/ports/1/cm",
])
CM = ["@@cm", "mlx5_0/ports/1/default_roce_mode:RoCE v2", "mlx5_0/ports/1/default_roce_tos:106",
      "@@configfs", "configfs configfs", "rdma_cm"]
MLNX_QOS = lines_of((FIX / "mlnx_qos_sample1.txt").read_text()) + lines_of((FIX / "mlnx_qos_sample2.txt").read_text())
DCB = ["pfc-cap 8 macsec-bypass off delay 4096", "prio-pfc 0:off 1:off 2:off 3:off 4:off 5:off 6:on 7:on",
       "pg-pfc 0:off 1:on 2:off 3:off 4:off 5:off 6:off 7:on", "requests 0:0 1:217 2:0 3:0 4:0 5:0 6:0 7:28",
       "dscp-prio 0:0 24:2 24:3 48:6", "dscp-prio 0:0 CS3:2 CS3:3 CS6:6",
       "prio-buffer 0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7",
       "buffer-size 0:10Kb 1:10Kb 2:10Kb 3:10Kb 4:10Kb 5:10Kb 6:1Mb 7:10Kb", "total-size 1222Kb"]
OFED_BUFFER = ["Port buffer size = 4151520", "Spare buffer size = 3889504", "Buffer\tSize\txoff_threshold\txon_threshold",
               "0\t262016\t0\t\t0", "1\t131072\t100000\t95000", "7\t0\t0\t\t0"]
OFED_PRIO = ["Priority\tBuffer", "0\t\t0", "3\t\t1", "7\t\t0"]
QOS_DUMP = (["@@if ens1np0", "@@mtu", "4200", "@@mlnx_qos 0"] + MLNX_QOS[:20] + ["@@if ens2np0", "@@dcb_app 0"] + DCB[4:5]
            + ["@@dcb_pfc 0"] + DCB[:2] + ["@@dcb_buffer 0"] + DCB[6:] + ["@@dcb_pfc 1", "Error: Invalid argument",
            "@@ecn", "roce_rp/enable/3:1", "roce_np/cnp_dscp:48", "roce_np/enable/3:-1", "@@ofed_buffer"]
            + OFED_BUFFER + ["@@ofed_prio2buffer"] + OFED_PRIO
            + ["@@cc_params /sys/kernel/debug/mlx5/0000:17:00.0/cc_params", "rp_ai_rate:5", "np_cnp_dscp:48",
               "@@systemd", "running", "enabled"])
NVSMI = ["0, NVIDIA H100 80GB HBM3, GPU-5b3c, 1980, 1980, 5, 5, 16, 16, 0x0000000000000000",
         "1, NVIDIA H100 80GB HBM3, GPU-6c4d, 1188, 1980, 5, 5, 16, 16, 0x0000000000000008",
         "2, NVIDIA H100 80GB HBM3, , [N/A], 1980, N/A, 5, 16, 16, Not Supported"]
GPU_OUT = ["@@gpus", *NVSMI, "@@error", "nvidia-smi not found",
           "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."]
BW = lines_of((FIX / "ib_write_bw_roce.txt").read_text())
BW_RUNS = ["@@dev mlx5_0", *BW, "@@rc 0", "@@dev mlx5_1", "Couldn't connect to 198.18.0.12:18516", "@@rc 1",
           "@@dev mlx5_2", "@@rc 124", "@@missing"]
MODULES = ["@@loaded", "ib_core", "mlx5_core", "mlx5-ib", "@@builtin", "kernel/fs/configfs/configfs.ko",
           "kernel/drivers/infiniband/core/ib_uverbs.ko.zst"]
SAMPLES = ["@@t 1733130000.123456789", "mlx5_0/ports/1/counters/port_xmit_data:123",
           "mlx5_0/ports/1/counters/port_xmit_data_64:4294967300", "mlx5_0/ports/1/counters_ext/port_rcv_data_64:7",
           "mlx5_0/ports/1/hw_counters/np_cnp_sent:5", "mlx5_1/ports/1/counters/port_rcv_data:N/A (no PMA)",
           "@@gpu", "95", "[N/A]", "@@t 1733130001.2"]
FILES = ["/etc/nccl.conf\t644 0 0\tTkNDTF9JQl9IQ0E9bWx4NV8wCg==", "/etc/nccl.conf\t-",
         "/etc/ccrhost/boot-apply.sh\t755 0 0\tIyEvYmluL3NoCg==", "/etc/x\t600 1000 1000\t6Q==",
         "/etc/profile.d/ccrhost-nccl.sh\t644 0 0\t", "/etc/nccl.conf\t!\tis a symbolic link",
         "/etc/nccl.conf\t!\tcannot be read: base64: /etc/nccl.conf: Input/output error"]
TCLASS = ["Global tclass=106", "tclass=106", "Global tclass=١٠٦", "Global tclass=-1"]


# --- sections ------------------------------------------------------------------

@given(output(RDMA + QOS_DUMP + ["@@@ rdma", "@@@ qos"]))
def test_sections_split_never_raises_and_keeps_every_line(lines):
    found = sections.split(lines)
    first = next((i for i, line in enumerate(lines) if line.startswith("@@")), len(lines))
    assert sum(len(s.lines) for s in found) + len(found) == len(lines) - first
    assert all(isinstance(s.tag, str) for s in found)
    tags = sections.by_tag(lines)
    assert set(tags) == {s.tag for s in found}


# --- files ---------------------------------------------------------------------

@given(output(FILES))
def test_file_states(lines):
    try:
        states = files.parse_states(lines)
    except Exception as exc:
        assert owns(exc, files.FileFormatError), repr(exc)
        return
    for path, state in states.items():
        assert state is None or (state.content is None) == (state.error is not None)
        assert state is None or (state.mode.isascii() and state.uid >= 0 and state.gid >= 0)


# --- sysfs -----------------------------------------------------------------------

SYSFS = {
    sysfs.parse_numbered_state: ["4: ACTIVE", "1: DOWN", "5: LinkUp", "3: Disabled", "Unknown"],
    sysfs.parse_rate: ["400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)", "25 Gb/sec (1X EDR)", "fast"],
    sysfs.parse_pcie_speed: ["32.0 GT/s PCIe", "8 GT/s", "Unknown", "2.5 GT/s PCIe"],
    sysfs.parse_int: ["16", "0x0", "0x10", "-1", "Unknown"],
    sysfs.parse_gid: ["fe80:0000:0000:0000:0e42:a1ff:fe40:29a0", "0000:0000:0000:0000:0000:ffff:0a6c:a424"],
    sysfs.parse_gid_type: ["IB/RoCE v1", "RoCE v2", "RoCE v3"],
}


@pytest.mark.parametrize("parse", list(SYSFS), ids=lambda f: f.__name__)
@given(data=st.data())
def test_sysfs_values(parse, data):
    text = data.draw(st.one_of(st.sampled_from(SYSFS[parse]), mutated_line(SYSFS[parse]), st.text(max_size=40)))
    try:
        value = parse(text)
    except Exception as exc:
        assert owns(exc, sysfs.SysfsFormatError), repr(exc)
        return
    if parse is sysfs.parse_rate:
        assert math.isfinite(value.gbps) and value.gbps >= 0 and value.lanes >= 0
    if parse is sysfs.parse_pcie_speed:
        assert value is None or (math.isfinite(value) and value >= 0)
    if parse is sysfs.parse_numbered_state:
        assert value[0] >= 0 and value[1] == value[1].strip() and "\n" not in value[1]


@given(output(list(SYSFS[sysfs.parse_rate]) + ["mlx5_0/ports/1/rate:400 Gb/sec (4X NDR)", "x:y:z"]))
def test_sysfs_split_dump(lines):
    out = sysfs.split_dump(lines)
    assert all(isinstance(v, list) for v in out.values())


# --- rdma ------------------------------------------------------------------------

RDMA_LEAVES = ["state", "phys_state", "rate", "link_layer", "credit_threshold", "gids/N", "gid_attrs/types/N",
               "gid_attrs/ndevs/N", "traffic_class", "current_link_speed", "max_link_width", "default_roce_tos",
               "default_roce_mode", "counters/port_xmit_data", "hw_counters/np_cnp_sent"]
RDMA_VALUES = ["4: ACTIVE", "400 Gb/sec (4X NDR)", "Ethernet", "fe80:0000:0000:0000:0e42:a1ff:fe40:29a0", "RoCE v2",
               "eth0", "Global tclass=106", "32.0 GT/s PCIe", "16", "106", "RoCE v2"]


@given(st.one_of(output(RDMA + CM, 80, grep_line(RDMA_LEAVES, RDMA_VALUES)),
                 st.tuples(st.sampled_from(["@@ib", "@@cm"]), st.lists(grep_line(RDMA_LEAVES, RDMA_VALUES)))
                 .map(lambda t: [t[0], *t[1]])))
def test_rdma_dump(lines):
    try:
        reading = rdma.parse_rdma_dump(lines)
    except Exception as exc:
        assert owns(exc, rdma.RdmaFormatError), repr(exc)
        return
    for dev in reading.devices.values():
        for num, port in dev.ports.items():
            assert num >= 0
            assert port.rate_gbps is None or (math.isfinite(port.rate_gbps) and port.rate_gbps >= 0)
            assert all(g.index >= 0 for g in port.gids)
            assert port.cm is None or port.cm.default_roce_tos is None or isinstance(port.cm.default_roce_tos, int)
    net = reading.node
    assert net.ssh_dev is None or net.ssh_dev in net.addresses
    assert all(isinstance(d, str) and d for d in net.default_route_devs)
    assert all(isinstance(low, list) for low in net.lowers.values())


# --- qos -------------------------------------------------------------------------

def _eight(values, top):
    return values is None or (len(values) == 8 and all(isinstance(v, int) and 0 <= v <= top for v in values))


@given(text_of(MLNX_QOS))
def test_mlnx_qos(text):
    try:
        out = qos.parse_mlnx_qos(text)
    except Exception as exc:
        assert owns(exc, qos.QosFormatError), repr(exc)
        return
    assert _eight(out["pfc"], 1) and _eight(out["prio2buffer"], 7) and _eight(out["buffer_size"], 1 << 62)
    assert all(0 <= d <= 63 and 0 <= p <= 7 for d, p in out["dscp2prio"].items())
    assert out["trust"] in ("pcp", "dscp")


@given(text_of(DCB))
def test_dcb_pfc(text):
    try:
        out = qos.parse_dcb_pfc(text)
    except Exception as exc:
        assert owns(exc, qos.QosFormatError), repr(exc)
        return
    assert _eight(out["prio_pfc"], 1)
    assert out["delay"] is None or out["delay"] >= 0


@given(text_of(DCB))
def test_dcb_app(text):
    try:
        out = qos.parse_dcb_app_dscp(text)
    except Exception as exc:
        assert owns(exc, qos.QosFormatError), repr(exc)
        return
    assert all(0 <= d <= 63 and 0 <= p <= 7 for d, p in out.items())


@given(text_of(DCB))
def test_dcb_buffer(text):
    try:
        out = qos.parse_dcb_buffer(text)
    except Exception as exc:
        assert owns(exc, qos.QosFormatError), repr(exc)
        return
    assert _eight(out["prio_buffer"], 7) and _eight(out["buffer_size"], 1 << 62)


@given(st.one_of(st.sampled_from(["10Kb", "1Mb", "512b", "1.5Mb"]), mutated_line(["10Kb", "1222Kb", "1.5Mb"]),
                 st.text(max_size=20)))
def test_dcb_size(text):
    try:
        assert qos.parse_size(text) >= 0
    except qos.QosFormatError:
        pass


@given(text_of(OFED_BUFFER))
def test_ofed_buffer_size(text):
    try:
        out = qos.parse_ofed_buffer_size(text)
    except Exception as exc:
        assert owns(exc, qos.QosFormatError), repr(exc)
        return
    assert all(0 <= b["buffer"] <= 7 and min(b["size"], b["xoff"], b["xon"]) >= 0 for b in out["buffers"])


@given(text_of(OFED_PRIO))
def test_ofed_prio2buffer(text):
    try:
        out = qos.parse_ofed_prio2buffer(text)
    except Exception as exc:
        assert owns(exc, qos.QosFormatError), repr(exc)
        return
    assert _eight(out, 7)


@given(output(QOS_DUMP, max_size=80))
def test_qos_dump_keeps_errors_per_interface(lines):
    reading = qos.parse_qos_dump(lines)  # never raises: errors stay with their interface
    for st_ in reading.interfaces.values():
        assert _eight(st_.pfc and list(st_.pfc), 1) and _eight(st_.prio2buffer and list(st_.prio2buffer), 7)
        assert all(isinstance(e, str) and e for e in st_.errors)
        assert st_.mtu is None or st_.mtu > 0


# --- gpu, perftest, kernel, counters -------------------------------------------------

@given(output(NVSMI))
def test_nvidia_smi_csv(lines):
    try:
        gpus = gpu.parse_nvsmi_csv(lines)
    except Exception as exc:
        assert owns(exc, gpu.GpuFormatError), repr(exc)
        return
    for g in gpus:
        for value in (g.index, g.sm_clock_mhz, g.max_sm_clock_mhz, g.pcie_gen, g.pcie_width, g.clock_reasons):
            assert value is None or value >= 0


@given(output(GPU_OUT))
def test_nvidia_smi_probe_output(lines):
    probe = gpu.parse_command_output(lines)  # never raises: an odd row is the probe's error
    assert probe.error is None or isinstance(probe.error, str)


@given(text_of(BW))
def test_ib_write_bw_report(text):
    try:
        out = perftest.parse_ib_write_bw(text)
    except Exception as exc:
        assert owns(exc, perftest.PerftestFormatError), repr(exc)
        return
    assert math.isfinite(out.average_gbps) and out.average_gbps >= 0 and math.isfinite(out.peak_gbps)


@given(output(BW_RUNS, max_size=80))
def test_ib_write_bw_runs(lines):
    runs = perftest.parse_client_runs(lines)
    for result in runs.values():
        gbps = result["gbps"]
        assert (gbps is None) != (result["error"] is None)
        assert gbps is None or (math.isfinite(gbps) and gbps >= 0)


@given(output(MODULES))
def test_kernel_modules(lines):
    mods = kernel.parse_modules(lines)
    assert mods.loaded == sorted(set(mods.loaded)) and all("-" not in m for m in mods.loaded)


COUNTER_LINE = grep_line(["counters/port_xmit_data", "counters_ext/port_rcv_data_64", "hw_counters/np_cnp_sent",
                          "counters/N"], ["123", "N/A (no PMA)"])


@given(st.one_of(output(SAMPLES, 60, COUNTER_LINE), st.lists(COUNTER_LINE).map(lambda ls: ["@@t 1.5", *ls])))
def test_counter_samples(lines):
    try:
        samples = counters.parse_samples(lines)
    except Exception as exc:
        assert owns(exc, counters.CountersFormatError), repr(exc)
        return
    for s in samples:
        assert math.isfinite(s.t) and all(0 <= u <= 100 for u in s.gpu_util)
        for c in s.ports.values():
            assert all(v is None or v >= 0 for v in (c.tx_words, c.rx_words))


@given(output(TCLASS))
def test_traffic_class(lines):
    value = global_tclass(lines)
    assert value is None or 0 <= value <= 255


PCI = [line for name in sorted((FIX / "gdr").iterdir()) if name.name != "nvidia_smi_topo_sglang30401.txt"
       for line in name.read_text().splitlines()]
PCI_LINE = grep_line(["counters/link_downed", "fw_ver", "board_id", "hca_type", "counters/N"], ["12", "28.39.2048"])


@given(st.one_of(output(PCI, 120, PCI_LINE), st.lists(PCI_LINE).map(lambda ls: ["@@ib", *ls])))
def test_pci_dump(lines):
    try:
        snap = pci.parse_pci_dump(lines)
    except Exception as exc:
        assert owns(exc, pci.PciFormatError), repr(exc)
        return
    assert all(f.numa_node is None or f.numa_node >= 0 for f in snap.functions.values())


# --- the node snapshot ------------------------------------------------------------

SNAPSHOT = (["@@@ rdma", *RDMA, *CM, "@@@ modules", *MODULES, "@@@ qos", *QOS_DUMP, "@@@ files", *FILES,
             "@@@ gpus", *GPU_OUT])


@given(output(SNAPSHOT, max_size=120))
def test_node_snapshot_never_raises(lines):
    snap = node.parse_snapshot(lines)
    assert set(snap.errors) <= {"rdma", "modules", "qos", "files", "gpus", "pci", "gpu_health", "fabric", "baseline",
                                "host_health"}
    for name in ("rdma", "modules", "qos", "files", "gpus", "pci", "gpu_health", "fabric", "baseline"):
        assert name in snap.errors or getattr(snap, name) is not None


# --- /etc/nccl.conf: the site's file, read back from the node ---------------------

NCCL_LINES = ["NCCL_DEBUG=WARN", "# site comment", "", "NCCL_IB_TC=98", nccl_model.BEGIN, nccl_model.END,
              nccl_model.BEGIN + "\r", nccl_model.END + "\r", "NCCL_IB_HCA==mlx5_0:1", " " + nccl_model.BEGIN, "é=1"]


@given(st.lists(st.sampled_from(NCCL_LINES), max_size=12), st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_merge_block_never_drops_or_duplicates(lines, newline, last_newline):
    existing = newline.join(lines) + (newline if last_newline and lines else "")
    block = nccl_model.render_block({"NCCL_IB_TC": "106"})
    try:
        merged = nccl_model.merge_block(existing, block)
    except nccl_model.BlockError:
        bare = [line.removesuffix("\r") for line in existing.split("\n")]
        opened = [i for i, line in enumerate(bare) if line == nccl_model.BEGIN]
        assert opened and nccl_model.END not in bare[opened[-1]:], existing  # only an unclosed block is refused
        return
    assert merged.split("\n").count(nccl_model.BEGIN) == 1 and block in merged
    site = nccl_model.site_text(existing)
    assert nccl_model.site_text(merged).replace("\n", "") == site.replace("\n", "")  # every site line, in order
    assert nccl_model.merge_block(merged, block) == merged  # a rerun changes nothing


# --- the inventory validator ----------------------------------------------------------
# For each key, an independent predicate (plain Python, no regex and no
# pydantic) says which values the typed rule allows; validate_host must
# accept exactly those.

from ccrhost.settings import NCCL_TWINS, InventoryDataError, validate_host  # noqa: E402

DIGITS = "0123456789"
NAME = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" + DIGITS + "_.-")


def is_int(v, lo, hi=None):
    return type(v) is int and v >= lo and (hi is None or v <= hi)


def is_real(v, lo=None, hi=None, lo_open=False, hi_open=False):
    if type(v) not in (int, float) or not math.isfinite(v):
        return False
    return ((lo is None or (v > lo if lo_open else v >= lo)) and (hi is None or (v < hi if hi_open else v <= hi)))


def optional(pred):
    return lambda v: v is None or pred(v)


def hca_list(v):
    if type(v) is not str:
        return False
    body = v
    while body[:1] in ("=", "^") and len(v) - len(body) < 2:
        body = body[1:]
    for item in body.split(","):
        name, sep, port = item.partition(":")
        if not 1 <= len(name) <= 64 or any(c not in NAME for c in name):
            return False
        if sep and not (1 <= len(port) <= 3 and all(c in DIGITS for c in port)):
            return False
    return True


def ifname_list(v):
    if type(v) is not str:
        return False
    body = v[1:] if v[:1] in ("=", "^") else v
    return all(1 <= len(i) <= 15 and all(c in NAME | {":"} for c in i) for i in body.split(","))


def addr_range(v):
    import ipaddress

    if type(v) is not str:
        return False
    net, sep, bits = v.partition("/")
    if not sep or not 2 <= len(net) <= 39 or any(c not in "0123456789abcdefABCDEF:." for c in net):
        return False
    if not 1 <= len(bits) <= 3 or any(c not in DIGITS for c in bits):
        return False
    try:
        return ipaddress.ip_network(v, strict=False).version == 4  # the default family is AF_INET
    except ValueError:
        return False


def nccl_extra(v):
    if type(v) is not dict:
        return False
    for key, value in v.items():
        if type(key) is not str or not key.startswith("NCCL_") or not 1 <= len(key) - 5 <= 64:
            return False
        if any(c not in "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_" for c in key[5:]) or key in NCCL_TWINS:
            return False
        if type(value) is not str or len(value) > 255 or any(c not in NAME | set(",:/@%+^") for c in value):
            return False
    return True


def tflops(v):
    return type(v) is dict and all(k in ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8") and is_real(x, 0, lo_open=True)
                                   for k, x in v.items())


RULES = {
    "roce_dscp": lambda v: is_int(v, 0, 63) and v != 48,  # 48 is qos_cnp_dscp's default
    "roce_ecn_bits": lambda v: is_int(v, 0, 3),
    "roce_version": lambda v: type(v) is int and v in (1, 2),
    "qos_cnp_dscp": lambda v: is_int(v, 0, 63) and v != 26,
    "qos_cable_len": optional(lambda v: is_int(v, 1, 999)),
    "qos_min_headroom": optional(lambda v: is_int(v, 1)),
    "nccl_ib_gid_index": optional(lambda v: is_int(v, 0, 255)),
    "nccl_ib_timeout": optional(lambda v: is_int(v, 1, 31)),
    "nccl_fifo_dscp": optional(lambda v: is_int(v, 0, 63)),
    "verify_gpu_count": optional(lambda v: is_int(v, 1, 64)),
    "verify_port_gbps": optional(lambda v: is_real(v, 0, 3200, lo_open=True)),
    "verify_beta": optional(lambda v: is_real(v, 0, 1e6, lo_open=True)),
    "verify_min_ccr": optional(lambda v: is_real(v, 0)),
    "verify_min_ccr_fraction": lambda v: is_real(v, 0, 1),
    "verify_fleet_tolerance": optional(lambda v: is_real(v, 0, 1, lo_open=True, hi_open=True)),
    "verify_gpu_tflops": optional(tflops),
    "nccl_ib_hca": optional(hca_list),
    "nccl_socket_ifname": optional(ifname_list),
    "nccl_ib_addr_range": optional(addr_range),
    "nccl_extra": optional(nccl_extra),
}

TEXT = st.lists(st.sampled_from(list("abmlx5_0:=^,./-: 19") + ["\u0661", "\u00b2", "\u0967", "$", ";", "\n", "f", "d",
                                                              "NCCL_", "IB_", "TIMEOUT", "DEBUG"]), max_size=12).map("".join)
ANY = st.one_of(st.none(), st.booleans(), st.integers(-300, 300), st.integers(), st.floats(), TEXT,
                st.sampled_from(["mlx5_0:1", "=mlx5_0:1,mlx5_1:1", "^mlx5_2", "mlx5_0:\u0661", "eth0", "=eth0",
                                 "10.0.0.0/8", "10.0.0.0/33", "::/999", "fd00::/64", "198.19.0.0/16", "1.2.3.4/32"]),
                st.dictionaries(st.one_of(st.sampled_from(["NCCL_DEBUG", "NCCL_IB_TIMEOUT", "NCCL_IB_HCA", "NCCL_X1",
                                                           "bf16", "fp8", "int4", "NCCL_\u0661"]), TEXT),
                                st.one_of(TEXT, st.floats(), st.integers(-5, 5)), max_size=3))


@pytest.mark.parametrize("key", list(RULES))
@given(value=ANY)
def test_validator_accepts_exactly_what_the_typed_rule_allows(key, value):
    data = {key: value}
    if key == "verify_gpu_tflops" and value is not None:
        data["verify_gpu_model"] = "NVIDIA H100 80GB HBM3"
    try:
        validate_host("gpu-07", data)
        accepted = True
    except InventoryDataError as exc:
        accepted = False
        assert all(e.where == "gpu-07" and key in str(e) for e in exc.errors), str(exc)  # names host and key
    assert accepted == RULES[key](value), (key, value)


# --- issue 24: the whole shape of every record, and values that are no numbers -----
# (appended here to ease merging; imports local to this part)

from ccrhost.fleet.charts import histogram  # noqa: E402
from ccrhost.model import datapath as dp_model  # noqa: E402
from ccrhost.model.ports import natural_key  # noqa: E402
from ccrhost.model.status import FAIL as _FAIL  # noqa: E402
from ccrhost.model.status import UNKNOWN as _UNKNOWN  # noqa: E402

KERNEL_FORMS = {
    sysfs.parse_port_state: ["4: ACTIVE", "1: DOWN", "2: INIT", "3: ARMED", "0: NOP", "5: ACTIVE_DEFER",
                             "9: UNKNOWN"],
    sysfs.parse_phys_state: ["5: LinkUp", "3: Disabled", "2: Polling", "7: Phy Test", "0: <unknown>",
                             "4: PortConfigurationTraining"],
    sysfs.parse_rate: ["400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)", "10 Gb/sec (4X)", "14 Gb/sec (1X FDR)",
                       "100 Gb/sec (2X HDR)", "800 Gb/sec (4X XDR)", "168 Gb/sec (12X FDR)", "0 Gb/sec (4X NDR)"],
    sysfs.parse_pcie_speed: ["32.0 GT/s PCIe", "8 GT/s", "5 GT/s", "Unknown speed", "Unknown", "64.0 GT/s PCIe",
                             "0.0 GT/s PCIe"],
    sysfs.parse_pcie_width: ["16", "8", "0", "255", "32", "-1", "x16"],
    sysfs.parse_tos: ["106", "0", "255", "-1", "256"],
    sysfs.parse_link_layer: ["InfiniBand", "Ethernet", "Unknown", "ethernet"],
}


@pytest.mark.parametrize("parse", list(KERNEL_FORMS), ids=lambda f: f.__name__)
@given(data=st.data())
def test_sysfs_values_are_only_what_the_kernel_prints(parse, data):
    text = data.draw(st.one_of(st.sampled_from(KERNEL_FORMS[parse]), mutated_line(KERNEL_FORMS[parse]),
                               st.text(max_size=30)))
    try:
        value = parse(text)
    except Exception as exc:
        assert owns(exc, sysfs.SysfsFormatError), repr(exc)
        assert repr(text) in str(exc)  # the text seen is named
        return
    if parse is sysfs.parse_rate:
        assert value.lanes in sysfs.RATE_LANES and value.speed in sysfs.RATE_DECI_GBPS
        assert value.gbps == sysfs.RATE_DECI_GBPS[value.speed] * value.lanes / 10 > 0
    elif parse is sysfs.parse_pcie_speed:
        assert value is None or value in sysfs.PCIE_SPEEDS_GTS
    elif parse is sysfs.parse_pcie_width:
        assert value is None or (type(value) is int and 0 <= value <= 32)
    elif parse is sysfs.parse_tos:
        assert type(value) is int and 0 <= value <= 255
    elif parse is sysfs.parse_link_layer:
        assert value in sysfs.LINK_LAYERS
    else:
        names = sysfs.PORT_STATES if parse is sysfs.parse_port_state else sysfs.PHYS_STATES
        number, name = value
        assert number >= 0 and (name == names[number] if number < len(names) else name in ("UNKNOWN", "<unknown>"))


VERSIONS = ["28.39.3560", "23.10-1.1.9", "5.8-4.1.5", "535.104.05", "inbox 6.1.0-18-amd64", "N/A", "",
            "٥٣٥.١٨٣.٠١", "535.104.05²", "1_000", "28..39"]


@given(st.one_of(st.sampled_from(VERSIONS), mutated_line(VERSIONS), st.text(max_size=20)),
       st.one_of(st.sampled_from(VERSIONS), mutated_line(VERSIONS), st.text(max_size=20)))
def test_versions_compare_only_version_numbers(a, b):
    key = dp_model.version_key(a)
    assert key is None or (all(type(n) is int and n >= 0 for n in key) and key)
    order = dp_model.compare_versions(a, b)
    assert order is None or order == -(dp_model.compare_versions(b, a))
    if a.startswith("inbox "):
        assert order is None


# (an empty driver version is "not found", FAIL *_required: the probes never give one)
@given(st.one_of(st.sampled_from(VERSIONS), mutated_line(VERSIONS)).filter(bool),
       st.sampled_from(["23.10", "28.40.1000", "535", "5.8-4.1.5"]))
def test_a_required_version_never_passes_what_cannot_be_compared(have, need):
    host = dp_model.HostVersions(nic_fw={"mlx5_0": have}, mlx5=have, nvidia=have)
    out = dp_model.check_fleet_versions({"n": host}, dp_model.RequiredVersions(need, need, need))["n"]
    codes = {r.code: r.level for r in out}
    if dp_model.version_key(have) is None:
        assert codes["fw_version_unknown"] == _UNKNOWN and codes["nvidia_version_unknown"] == _UNKNOWN
        assert codes.get("mlx5_inbox", codes.get("mlx5_version_unknown")) in (_FAIL, _UNKNOWN)
        assert "mlx5_inbox" in codes if have.startswith("inbox ") else "mlx5_version_unknown" in codes
    else:
        assert set(codes) <= {"fw_required", "mlx5_required", "nvidia_required"}


@given(st.text(max_size=20))
def test_natural_key_sorts_any_name(name):
    key = natural_key(name)
    assert all(type(k) is int for k in key[1::2]) and all(type(k) is str for k in key[0::2])
    sorted([name, "eth0", "eth0²", "mlx5_10"], key=natural_key)


@given(output(["@@pair GPU0-mlx5_0", *BW, "@@rc 0", "@@pair GPU1-mlx5_1", "@@rc 124", "@@rc ²", "@@rc -١",
               "@@unmeasurable no CUDA"]))
def test_gdr_runs(lines):
    try:
        why, gbps, errors = perftest.parse_gdr_runs(lines)
    except Exception as exc:
        assert owns(exc, perftest.PerftestFormatError), repr(exc)
        return
    assert all(math.isfinite(v) and v >= 0 for v in gbps.values())
    assert all(isinstance(e, str) for e in errors)


EIGHT_RECORDS = {
    qos.parse_dcb_pfc: ("prio-pfc", "{i}:{v}", ["on", "off"]),
    qos.parse_dcb_buffer: ("prio-buffer", "{i}:{v}", ["0", "1", "7"]),
    qos.parse_ofed_prio2buffer: ("Priority\tBuffer\n", "{i}\t\t{v}\n", ["0", "1"]),
}


@pytest.mark.parametrize("parse", list(EIGHT_RECORDS), ids=lambda f: f.__name__)
@given(data=st.data())
def test_an_eight_entry_record_is_whole_or_refused(parse, data):
    head, entry, values = EIGHT_RECORDS[parse]
    indices = data.draw(st.lists(st.integers(0, 7), max_size=10))
    joiner = "" if head.endswith("\n") else " "
    text = head + joiner + joiner.join(entry.format(i=i, v=data.draw(st.sampled_from(values))) for i in indices)
    try:
        out = parse(text + "\n")
    except Exception as exc:
        assert owns(exc, qos.QosFormatError), repr(exc)
        assert sorted(indices) != list(range(8))  # only a partial or repeated record is refused
        return
    assert sorted(indices) == list(range(8))
    record = out if isinstance(out, list) else out.get("prio_pfc") or out.get("prio_buffer")
    assert _eight(record, 7)


@given(st.integers(0, len(MLNX_QOS) - 1), st.integers(0, len(MLNX_QOS)))
def test_mlnx_qos_cut_anywhere_is_whole_or_refused(start, stop):
    text = "\n".join(MLNX_QOS[start:stop])
    try:
        out = qos.parse_mlnx_qos(text)
    except Exception as exc:
        assert owns(exc, qos.QosFormatError), repr(exc)
        return
    assert _eight(out["pfc"], 1) and out["pfc"] is not None
    assert (out["buffer_size"] is None) == (out["prio2buffer"] is None)
    assert out["trust"] != "dscp" or out["dscp2prio"]


@given(st.lists(st.tuples(st.one_of(st.floats(), st.none()), st.sampled_from(["OK", "WARN", "FAIL", "UNKNOWN"])),
                max_size=20),
       st.lists(st.one_of(st.floats(), st.none()), max_size=3))
def test_the_histogram_takes_any_ccr(values, thresholds):
    svg = histogram([(v, s) for v, s in values], [t for t in thresholds])
    assert "nan" not in svg.lower().replace("span", "") and "inf" not in svg


# --- GPU health (probes/gpu_health.py): -q, nvlink, the kernel log, the whole snippet --------------------

from ccrhost.probes import gpu_health  # noqa: E402  (appended targets keep their imports with them)

_GPU_FIX = FIX / "gpu"
NVSMI_Q = lines_of((_GPU_FIX / "nvsmi_q_a40_550.txt").read_text()) + lines_of(
    (_GPU_FIX / "fabric_completed.txt").read_text())
NVLINK = lines_of((_GPU_FIX / "nvlink_status_h100pcie.txt").read_text()) + lines_of(
    (_GPU_FIX / "nvlink_status_a6000.txt").read_text())
NVLINK_E = lines_of((_GPU_FIX / "nvlink_errors_h100.txt").read_text())
KLOG = lines_of((_GPU_FIX / "dmesg_ctime_gpud.txt").read_text()) + lines_of(
    (_GPU_FIX / "syslog_old_driver.txt").read_text()) + lines_of(
    (_GPU_FIX / "xid_forms_open_modules.txt").read_text()) + lines_of(
    (_GPU_FIX / "xid_forms_driver_format.txt").read_text()) + [
    "[ 7000.250000] NVRM: Xid (PCI:0000:2a:00): 48, pid=1, name=python, An uncorrectable double bit error",
    "1733300000.500000 gpu01 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has "
    "fallen off the bus.", "dmesg: read kernel buffer failed: Operation not permitted", "No journal files were found."]
HEALTH_OUT = ["@@query", *NVSMI_Q, "@@nvlinkstatus", *NVLINK, "@@nvlinkerrors", *NVLINK_E, "@@pcigpus",
              "0000:4f:00.0", "@@fabricmanager", "active", "@@dmesg 9000.5", "@@journal 1733300600", *KLOG,
              "@@error", "nvidia-smi not found", "@@logerror", "@@nvml"]


@given(output(NVSMI_Q, 120))
def test_nvidia_smi_q(lines):
    try:
        gpus = gpu_health.parse_query(lines)
    except Exception as exc:
        assert owns(exc, gpu_health.GpuHealthFormatError), repr(exc)
        return
    for g in gpus:
        for value in (g.ecc_uncorrectable, g.ecc_correctable, g.remap_correctable, g.remap_uncorrectable,
                      g.pcie_replays):
            assert value is None or value >= 0
        assert g.pci is None or g.pci.count(":") == 2


@given(output(NVLINK), output(NVLINK_E))
def test_nvidia_smi_nvlink(status, errors):
    try:
        links = gpu_health.parse_nvlink(status, errors)
    except Exception as exc:
        assert owns(exc, gpu_health.GpuHealthFormatError), repr(exc)
        return
    for gpu_links in links.values():
        assert [n.link for n in gpu_links] == sorted({n.link for n in gpu_links})
        assert all(n.errors is None or n.errors >= 0 for n in gpu_links)


@given(st.sampled_from(["journal", "dmesg"]), st.sampled_from(["9000.5", "1733300600", "", "x", "nan"]),
       output(KLOG))
def test_kernel_log_xids(tag, arg, lines):
    xids, error = gpu_health.parse_log(tag, arg, lines)  # never raises: a cut line is no XID
    assert error is None or isinstance(error, str)
    for x in xids:
        assert x.code >= 0 and x.pci.count(":") == 2 and (x.age_s is None or x.age_s >= 0)


# Driver lines generated from the printers' own format strings (issue 36):
# krcReportXid's "NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, [pid=%s, name=%s, ]%s",
# older drivers' form without "PCI:" and with the function, and
# NVSWITCH_PRINT_SXID's "nvidia-%s: SXid (PCI:%04x:%02x:%02x.%x): %05d, <Fatal|Non-fatal>, ...",
# under a dmesg or journalctl stamp; the parser must give back what was printed.
_XID_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=80).filter(
    lambda t: "Xid (" not in t and "\x85" not in t)


@st.composite
def driver_line(draw, tag: str):
    pci = "%04x:%02x:%02x" % (draw(st.integers(0, 0xFFFF)), draw(st.integers(0, 255)), draw(st.integers(0, 31)))
    code = draw(st.integers(0, 99999))
    text = draw(_XID_TEXT)
    if draw(st.booleans()):  # an NVSwitch SXid
        fatal = draw(st.sampled_from(["Fatal", "Non-fatal"]))
        body = f"nvidia-nvswitch{draw(st.integers(0, 15))}: SXid (PCI:{pci}.{draw(st.integers(0, 7))}): " \
               f"{code:05d}, {fatal}, {text}"
        key = (True, pci, None, code)
    else:
        mig = draw(st.sampled_from(["", "gi", "gi+ci"]))
        gi, ci = draw(st.integers(0, 99)), draw(st.integers(0, 99))
        instance = {"": None, "gi": f"GPU-I:{gi:02d}", "gi+ci": f"GPU-I:{gi:02d} GPU-CI:{ci:02d}"}[mig]
        prefix, function = draw(st.sampled_from([("PCI:", ""), ("", ""), ("", ".0")])) if not mig else ("PCI:", "")
        code = code % 65536
        proc = draw(st.sampled_from(["", "pid=4242, name=python, ", "pid='<unknown>', name=<unknown>, "]))
        body = f"NVRM: Xid ({prefix}{pci}{function}{' ' + instance if instance else ''}): {code}, {proc}{text}"
        key = (False, pci, instance, code)
    seconds = draw(st.floats(0, 9000, allow_nan=False))
    stamp = f"[{seconds:12.6f}] " if tag == "dmesg" else f"{1733300000 + seconds:.6f} gpu01 kernel: "
    return stamp + body, key


@given(st.sampled_from(["dmesg", "journal"]).flatmap(
    lambda tag: st.tuples(st.just(tag), st.lists(driver_line(tag), max_size=40))))
def test_xid_parser_reads_every_driver_form_it_is_given(case):
    from collections import Counter

    from ccrhost.model.gpu_health import GpuHealthPolicy, check_gpu_health
    from ccrhost.model.xids import XIDS

    tag, generated = case
    now = "9000.5" if tag == "dmesg" else "1733309000.5"
    xids, error = gpu_health.parse_log(tag, now, [line for line, _ in generated])
    assert error is None
    want = Counter(key for _, key in generated)
    assert {(x.sxid, x.pci, x.instance, x.code): x.count for x in xids} == dict(want)
    assert all(x.age_s is not None and x.age_s >= 0 for x in xids)
    reasons = check_gpu_health(gpu_health.GpuHealthReading(xids=xids), [], GpuHealthPolicy(xid_lookback_s=1e9))
    # one reason per device, instance and code, never none; a FAIL code of the table always FAILs
    lost = {k[1] for k in want if k[3] == 79 and not k[0]}  # a lost GPU is named once, whatever its instances
    assert len(reasons) == len([k for k in want if not (k[3] == 79 and not k[0])]) + len(lost)
    failing = {(x.pci, x.instance, x.code) for x in xids if not x.sxid and x.code in XIDS
               and XIDS[x.code].level == "FAIL" and x.code != 154}
    assert len([r for r in reasons if r.level == "FAIL"]) >= len(failing)


@given(output(HEALTH_OUT, 150))
def test_gpu_health_probe_output(lines):
    from ccrhost.model.gpu_health import GpuHealthPolicy, check_gpu_health

    reading = gpu_health.parse_command_output(lines)  # never raises: odd output is the probe's error
    assert reading.error is None or isinstance(reading.error, str)
    for reason in check_gpu_health(reading, [], GpuHealthPolicy()):
        assert reason.code.startswith("gpu_") and reason.message


@given(output(["@@@ gpus", *GPU_OUT, "@@@ gpu_health", *HEALTH_OUT], max_size=150))
def test_node_snapshot_with_gpu_health_never_raises(lines):
    snap = node.parse_snapshot(lines, ("gpus", "gpu_health"))
    assert set(snap.errors) <= {"gpus", "gpu_health"}
    assert snap.gpu_health is not None


# --- the lossless-fabric probe (issue 29) -------------------------------------

FABRIC_FIX = Path(__file__).parent / "fixtures" / "fabric"
FABRIC = [
    "@@previous", "=@@t 1000.25", "=@@boot 6d1c-4e", "=@@ib", "=mlx5_0/ports/1/counters/link_downed:0",
    "@@t 1300.5", "@@boot 6d1c-4e", "@@ib", "mlx5_0/ports/1/counters/link_downed:1",
    "mlx5_0/ports/1/hw_counters/rnr_nak_retry_err:3", "mlx5_0/ports/1/hw_counters/out_of_sequence:N/A",
    "@@stats mlx5_0 ens1np0", "NIC statistics:", "     tx_prio3_pause_duration: 500000",
    *(FABRIC_FIX / "ethtool-S-cx4lx-pause.txt").read_text().splitlines(),
    "@@pause mlx5_0 ens1np0", *(FABRIC_FIX / "ethtool-a-global-on.txt").read_text().splitlines(),
    "Cannot get device pause settings: Operation not supported", "@@noethtool", "@@unkept cannot write /run/x",
]


@given(output(FABRIC))
def test_fabric_probe_output_is_read_or_refused_never_a_crash(lines):
    """Any output: a reading (odd ethtool lines recorded as unreadable, a
    stored reading that cannot be read ignored) or the probe's own error."""
    from ccrhost.model.fabric import check_fabric
    from ccrhost.probes import fabric

    try:
        dump = fabric.parse_fabric_dump(lines)
    except Exception as exc:
        assert owns(exc, fabric.FabricFormatError), repr(exc)
        return
    assert isinstance(dump.now.time, float)
    reading = fabric.fabric_reading(dump, None, (), 3600)
    for values in reading.window.after.values():
        assert all(type(v) is int for v in values.values())
    check_fabric(reading)  # judging any reading never raises
