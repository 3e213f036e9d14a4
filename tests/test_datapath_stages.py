"""The data-path stages and checks as the deploy and `ccrhost check` use
them: planning from a node's PCI probe, the boot unit's lines, the new keys,
the link-health window kept between checks, the fleet's versions and the
measured GPUDirect bandwidth. No lab: readings are the lab capture
(fixtures/gdr/pci_dump_lab_hgx.txt) edited the way each fault changes it."""

import json
import shlex
from pathlib import Path

import pytest

from ccrhost.fleet.report import fleet_versions
from ccrhost.model.verdict import apply_fleet_rules
from ccrhost.model import datapath as dp
from ccrhost.model.boot import render_boot
from ccrhost.settings import validate_host
from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN
from ccrhost.model.verdict import Readings, evaluate
from ccrhost.node import check as node_check
from ccrhost.operations import datapath as stages
from ccrhost.operations.files import MANAGED_HEADER
from ccrhost.probes import pci, perftest
from ccrhost.probes.files import FileState
from ccrhost.probes.rdma import NodeNet, PciLink, RdmaDevice, RdmaPort, RdmaReading
from ccrhost.settings import InventoryDataError, validate_host

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURE = (FIXTURES / "gdr/pci_dump_lab_hgx.txt").read_text().splitlines()
H100 = validate_host("n", {"verify_profile": "hgx-h100-8x400"}).expectation()  # the built-in platform file
BRIDGE = "0000:16:01.0"  # the switch port above mlx5_0


def in_section(tag: str, old: str, new: list[str]):
    """Replace ``old`` within the section ``@@dev TAG`` only."""
    def edit(lines):
        start = lines.index(f"@@dev {tag}")
        at = lines.index(old, start)
        return lines[:at] + new + lines[at + 1:]
    return edit


def edited(*edits) -> pci.PciSnapshot:
    lines = list(CAPTURE)
    for edit in edits:
        lines = edit(lines)
    return pci.parse_pci_dump(lines)


def no_peer_memory(lines):
    start = lines.index("@@peermem")
    return lines[:start + 1] + lines[start + 4:]


HEALTHY = pci.parse_pci_dump(CAPTURE)
ACS_ON = edited(lambda lines: [f"{BRIDGE} 005f 001d" if x == f"{BRIDGE} 005f 0000" else x for x in lines])
NO_PEERMEM = edited(no_peer_memory)


def settings(**data):
    return validate_host("gpu-07", data)


def rdma_reading(ssh_dev="eth0", mtu_route="eth0") -> RdmaReading:
    devices = {}
    for i in range(8):
        port = RdmaPort(state="ACTIVE", state_id=4, phys_state="LinkUp", rate_gbps=400.0, lanes=4, speed="NDR",
                        link_layer="Ethernet", netdev=f"ens{i + 1}np0")
        devices[f"mlx5_{i}"] = RdmaDevice(pci=PciLink(32.0, 16, 32.0, 16), netdevs=[f"ens{i + 1}np0"],
                                          ports={1: port})
    return RdmaReading(devices, NodeNet(default_route_dev=mtu_route, default_route_devs=[mtu_route],
                                        ssh_server_ip="198.18.0.11", ssh_source="$SSH_CONNECTION", ssh_dev=ssh_dev))


# --- planning each stage ---------------------------------------------------------------

def test_peer_memory_is_planned_once_and_persisted_module_is_read_back():
    assert stages.peermem_module(HEALTHY, None) is None  # loaded at boot by the driver's loader
    assert stages.peermem_module(NO_PEERMEM, None) == "nvidia_peermem"
    ours = FileState("644", 0, 0, MANAGED_HEADER + "nvidia_peermem\n")
    assert stages.persisted_module(ours) == "nvidia_peermem"
    # after the deploy loaded it, the boot unit still names it: from the file
    assert stages.peermem_module(HEALTHY, ours) == "nvidia_peermem"
    site = FileState("644", 0, 0, "nvidia_peermem\n")  # not ours: not read as ours
    assert stages.persisted_module(site) is None
    assert stages.persisted_module(FileState("644", 0, 0, MANAGED_HEADER + "rm -rf\n")) is None


def test_acs_and_devctl_plans_touch_only_what_differs():
    assert dp.plan_acs(HEALTHY.pairs(), HEALTHY.acs_ctl()) == []
    assert dp.plan_acs(ACS_ON.pairs(), ACS_ON.acs_ctl()) == [["setpci", "-s", BRIDGE, "ECAP_ACS+0x6.w=0000:003d"]]
    # an excluded NIC's path is not a GPU-NIC pair of the compute fabric
    excluded = ACS_ON.pairs(("mlx5_0",))
    assert "mlx5_0" not in {p.nic.name for p in excluded}
    assert BRIDGE not in {c[2] for c in dp.plan_acs(excluded, ACS_ON.acs_ctl())}

    assert stages.devctl_plans(settings(), HEALTHY) == []  # opt-in: nothing by default
    optimized = stages.devctl_plans(settings(rdma_nic_pcie_optimize=True), HEALTHY)
    nics = sorted(f.bdf for f in HEALTHY.functions.values() if f.role == "nic")
    assert optimized == [["setpci", "-s", b, "CAP_EXP+0x8.w=5000:7000"] for b in nics]  # ConnectX: 4096
    relaxed_off = stages.devctl_plans(settings(rdma_nic_relaxed_ordering=False, rdma_nic_max_read_req=512), HEALTHY)
    assert relaxed_off == [["setpci", "-s", b, "CAP_EXP+0x8.w=2000:7010"] for b in nics]
    assert stages.devctl_plans(settings(rdma_nic_max_read_req=512), HEALTHY) == []  # 0x2930: 512 already
    # a NIC of another vendor gets no ConnectX default
    other = edited(in_section("0000:1a:00.0", "vendor 0x15b3", ["vendor 0x14e4"]))
    assert "0000:1a:00.0" not in {c[2] for c in stages.devctl_plans(settings(rdma_nic_pcie_optimize=True), other)}


def test_mtu_plan_and_the_mtu_qos_sizes_for():
    rdma = rdma_reading(ssh_dev="ens1np0", mtu_route="eth0")
    current = {f"ens{i + 1}np0": 1500 for i in range(8)}
    plan = stages.mtu_plan(settings(), rdma, current)
    assert plan.commands == [["ip", "link", "set", "dev", f"ens{i + 1}np0", "mtu", "4200"] for i in range(1, 8)]
    assert plan.skipped == ["ens1np0 carries this SSH connection (198.18.0.11, from $SSH_CONNECTION): MTU left at "
                            "1500"]
    # through a VLAN on it: the guard's notion, lower links included
    vlan = rdma_reading(ssh_dev="ens3np0.100", mtu_route="ens3np0.100")
    vlan.node.lowers = {"ens3np0.100": ["ens3np0"]}
    assert [c[4] for c in stages.mtu_plan(settings(), vlan, current).commands] == \
        [f"ens{i}np0" for i in (1, 2, 4, 5, 6, 7, 8)]
    # the SSH connection's interface unknown: nothing at all
    lost = rdma_reading(ssh_dev=None)
    assert stages.mtu_plan(settings(), lost, current).commands == []
    assert stages.planned_mtu(settings(), rdma.node, "ens2np0", 1500) == 4200
    assert stages.planned_mtu(settings(), rdma.node, "ens1np0", 1500) == 1500
    assert stages.planned_mtu(settings(roce_mtu=None), rdma.node, "ens2np0", 1500) == 1500
    assert stages.mtu_plan(settings(roce_mtu=9000), rdma, {"ens2np0": 9000}).commands == []


def test_boot_unit_reapplies_the_data_path_quoted():
    rdma = rdma_reading()
    s = settings(rdma_nic_pcie_optimize=True)
    plan = stages.boot_plan(s, rdma, ACS_ON)
    acs = [c for c in plan if c[3].startswith("ECAP_ACS")]
    # forced: every ACS bridge of every pair (two switch ports each), cleared or not
    assert len(acs) == 16 and ["setpci", "-s", BRIDGE, "ECAP_ACS+0x6.w=0000:003d"] in acs
    assert sum(c[3].startswith("CAP_EXP") for c in plan) == 8
    assert [c for c in plan if c[0] == "ip"] == [["ip", "link", "set", "dev", f"ens{i + 1}np0", "mtu", "4200"]
                                                  for i in range(8)]
    assert stages.boot_plan(settings(rdma_acs_clear=False, roce_mtu=None), rdma, ACS_ON) == []
    script, _ = render_boot(s, rdma, {}, {}, plan, "nvidia_peermem")
    assert "for m in ib_uverbs mlx5_core mlx5_ib rdma_ucm nvidia_peermem; do" in script
    assert f"setpci -s {BRIDGE} ECAP_ACS+0x6.w=0000:003d || {{" in script
    # every line is plain words: nothing from the node reaches the shell unquoted
    for line in script.splitlines():
        if line.startswith(("setpci ", "ip link")):
            words = line.split(" || ")[0]
            assert shlex.join(shlex.split(words)) == words


# --- the new keys -----------------------------------------------------------------

BAD = [
    ("roce_mtu", 1500, "allowed: 4200 or 9000"),
    ("roce_mtu", "4200", "allowed: 4200 or 9000"),
    ("rdma_nic_max_read_req", 3000, "allowed: 128, 256, 512, 1024, 2048 or 4096"),
    ("rdma_nic_relaxed_ordering", "on", "valid boolean"),
    ("rdma_nic_pcie_optimize", 1, "valid boolean"),
    ("rdma_acs_clear", "no", "valid boolean"),
    ("rdma_gpudirect", None, "valid boolean"),
    ("rdma_acs_clean", True, "unknown key; did you mean 'rdma_acs_clear'?"),
    ("verify_link_window", 3, "removed: rates are now the change since the node's last stored reading"),
    ("verify_link_state", "counters.json", "must match ^/"),
    ("verify_link_state", "/run/x;reboot", "must match ^/"),
    ("verify_link_thresholds", {"link_down": 1}, "allowed: 'symbol_error'"),
    ("verify_link_thresholds", {"symbol_error": -1}, "allowed: integers 0 to 65535"),
    ("verify_required_nic_fw", "28.39;reboot", "must match"),
    ("verify_required_nvidia", "latest", "must match"),
    ("verify_rail_local", "yes", "valid boolean"),
    ("verify_measure_gpudirect", "true", "valid boolean"),
]


@pytest.mark.parametrize("key, value, allowed", BAD, ids=[f"{k}={v!r}" for k, v, _ in BAD])
def test_bad_values_of_the_new_keys_name_host_key_value_and_what_is_allowed(key, value, allowed):
    with pytest.raises(InventoryDataError) as info:
        validate_host("gpu-07", {key: value})
    assert len(info.value.errors) == 1
    error = info.value.errors[0]
    assert (error.where, error.key.split("[")[0]) == ("gpu-07", key)
    assert allowed in error.allowed, error.allowed
    assert str(error).startswith(f"gpu-07: {key}")


def test_defaults_and_good_values_reach_the_policy():
    s = settings()
    assert (s.rdma_gpudirect, s.rdma_acs_clear, s.rdma_nic_pcie_optimize, s.roce_mtu) == (True, True, False, 4200)
    assert s.nic_devctl(0x15b3) == (None, None)
    assert settings(rdma_nic_pcie_optimize=True).nic_devctl(0x15b3) == (4096, None)
    assert settings(rdma_nic_pcie_optimize=True).nic_devctl(0x14e4) == (None, None)
    assert settings(rdma_nic_max_read_req=1024, rdma_nic_relaxed_ordering=True).nic_devctl(0x14e4) == (1024, True)
    assert s.policy().link_thresholds == dp.LinkThresholds()
    tight = settings(verify_link_thresholds={"symbol_error": 0}, verify_required_nic_fw="28.39.3560")
    assert tight.policy().link_thresholds.symbol_error == 0 and tight.policy().link_thresholds.link_downed == 0
    assert tight.policy().required_versions == dp.RequiredVersions("28.39.3560", None, None)
    assert settings(verify_profile="hgx-h100-8x400").expectation().rail_local
    assert not settings().expectation().rail_local
    assert not settings(verify_profile="hgx-h100-8x400", verify_rail_local=False).expectation().rail_local


# --- the verdict on each fault ------------------------------------------------------

def verdict(snap, link=None, **keys):
    from test_checks import healthy

    s = settings(verify_profile="hgx-h100-8x400", **keys)
    readings = healthy()
    readings.datapath = snap.datapath(link=link)
    return evaluate(readings, s.expectation(), s.policy())


def far_nic(lines):
    """mlx5_3 under a root port of the other socket, as nic_numa_far renders it."""
    start = lines.index("@@dev 0000:4a:00.0")
    out = list(lines)
    out[start + 2] = "path /sys/devices/pci0000:49/0000:49:01.0/0000:4a:00.0"
    out[start + 6] = "numa_node 1"
    return out


@pytest.mark.parametrize("snap, status, codes", [
    (HEALTHY, OK, set()),
    (ACS_ON, FAIL, {"acs_redirect"}),
    (NO_PEERMEM, FAIL, {"gpudirect_unavailable"}),
    (edited(far_nic), FAIL, {"nic_numa_far"}),
], ids=["healthy", "acs_redirect", "no_peermem", "nic_numa_far"])
def test_each_fault_is_its_own_reason(snap, status, codes):
    v = verdict(snap)
    assert v.status == status and {r.code for r in v.reasons if r.level != OK} == codes, v.summary()
    doc = v.to_dict()["datapath"]
    assert doc["topology"]["matrix"]["GPU0"]["mlx5_0"] == "PIX"
    assert set(doc["topology"]["matrix"]) == {f"GPU{i}" for i in range(8)}


def test_far_nic_names_both_numa_nodes_and_the_matrix_shows_sys():
    v = verdict(edited(far_nic))
    reason = next(r for r in v.reasons if r.code == "nic_numa_far")
    assert reason.message.startswith("GPU3 (0000:48:00.0, NUMA 0) is SYS to its nearest NIC mlx5_3 (0000:4a:00.0, NUMA 1)")
    assert v.to_dict()["datapath"]["topology"]["matrix"]["GPU3"]["mlx5_3"] == "SYS"
    assert verdict(edited(far_nic), verify_rail_local=False).status == OK  # not declared rail-local


def test_link_window_flap_fails_and_errors_warn():
    before = HEALTHY.compute_counters()
    after = json.loads(json.dumps(before))
    after["mlx5_2/1"]["link_downed"] = 3
    after["mlx5_5/1"]["symbol_error"] = 11
    v = verdict(HEALTHY, dp.LinkWindow(before, after, 5.2))
    assert [(r.level, r.code) for r in v.reasons] == [(FAIL, "link_flap"), (WARN, "link_symbol_error")]
    assert v.reasons[0].message == "port mlx5_2/1 link_downed rose by 3 in 5.2 s (0 -> 3): the link is flapping"
    assert verdict(HEALTHY, dp.LinkWindow(before, after, 5.2),
                   verify_link_thresholds={"link_downed": 5, "symbol_error": 20}).status == OK


def test_required_versions_fail_on_the_node_itself():
    v = verdict(HEALTHY, verify_required_nic_fw="28.41.1000", verify_required_nvidia="550")
    assert {(r.level, r.code) for r in v.reasons} == {(FAIL, "fw_required"), (FAIL, "nvidia_required")}
    assert verdict(HEALTHY, verify_required_nic_fw="28.39.3560", verify_required_mlx5="23.10").status == OK


def test_unreadable_pci_probe_is_unknown_not_ok():
    readings = Readings(ports=[], gpus=[], datapath=dp.unreadable("cannot read ...: bad line"))
    reasons = dp.check_datapath(readings.datapath)
    assert [(r.level, r.code) for r in reasons] == [(UNKNOWN, "pci_unreadable")]


# --- the fleet's versions -------------------------------------------------------------

def test_fleet_report_warns_the_host_off_the_majority():
    odd = edited(lambda lines: [x.replace("mlx5_7/fw_ver:28.39.3560", "mlx5_7/fw_ver:28.38.1002") for x in lines])
    verdicts = {f"n{i}": verdict(HEALTHY) for i in range(4)}
    verdicts["n5"] = verdict(odd)
    apply_fleet_rules(verdicts)
    assert [h for h, v in verdicts.items() if v.status != OK] == ["n5"]
    assert [(r.level, r.code, r.message) for r in verdicts["n5"].reasons] == [
        (WARN, "fw_mismatch", "NIC mlx5_7 firmware 28.38.1002 differs from the fleet's MT_0000000838 28.39.3560")]
    assert fleet_versions(verdicts)["nic_fw"] == {"28.39.3560": 39, "28.38.1002": 1}


# --- the pre-job check's window, kept between runs -------------------------------------------

def _fabric_output(t: float, boot: str, link_downed: int, previous: list[str] | None = None) -> list[str]:
    """What the fabric probe prints: the stored reading (``previous``, as the
    last run printed it), then the reading now."""
    now = [f"@@t {t}", f"@@boot {boot}", "@@ib", f"mlx5_4/ports/1/counters/link_downed:{link_downed}"]
    return ["@@previous", *[f"={x}" for x in previous or []], *now]


def test_check_judges_link_health_since_the_stored_reading():
    from ccrhost.model.verdict import Readings, evaluate
    from ccrhost.probes.fabric import parse_fabric_dump

    s = settings()

    def judge(lines):
        reading = node_check.local_fabric(s, lambda: parse_fabric_dump(lines))
        return reading, [(r.level, r.code, r.message) for r in evaluate(Readings([], [], fabric=reading),
                                                                         s.expectation(), s.policy()).reasons
                         if r.code not in ("no_rdma", "gpu_none")]

    first_now = _fabric_output(1000.0, "boot-1", 0)
    first, reasons = judge(first_now)
    assert reasons == [] and first.window.note.startswith("no earlier reading")
    second, reasons = judge(_fabric_output(1300.0, "boot-1", 2, first_now[1:]))
    assert reasons == [(FAIL, "link_flap", "port mlx5_4/1 link_downed rose by 2 in 300 s (0 -> 2): the link is "
                                           "flapping")]
    # another boot: its counters started at zero again, no baseline
    rebooted, reasons = judge(_fabric_output(1400.0, "boot-2", 2, _fabric_output(1300.0, "boot-1", 2)[1:]))
    assert reasons == [] and rebooted.window.note.startswith("first reading since boot")


def test_run_check_reads_the_data_path_and_prints_the_matrix(tmp_path):
    from test_checks import healthy

    from ccrhost.probes.gpu import GpuProbe

    readings = healthy()
    s = settings(verify_profile="hgx-h100-8x400", verify_link_state=str(tmp_path / "c"))
    rdma = rdma_reading()
    v = node_check.run_check(s, gather=lambda: (rdma, GpuProbe(gpus=tuple(readings.gpus))), gather_pci=lambda: ACS_ON)
    assert v.status == FAIL and [r.code for r in v.reasons if r.level != OK] == ["acs_redirect"]
    assert v.to_dict()["datapath"]["topology"]["pairs"][0] == {
        "gpu": "GPU0", "gpu_bdf": "0000:18:00.0", "nic": "mlx5_0", "nic_bdf": "0000:1a:00.0", "level": "PIX",
        "shared": False}


# --- measured GPUDirect bandwidth ---------------------------------------------------------

def test_cuda_support_from_ib_write_bw_help():
    cuda_build = (FIXTURES / "gdr/ib_write_bw_help_cuda.txt").read_text()
    assert perftest.cuda_options(cuda_build) == (True, False)
    lab = (Path(__file__).parent.parent / "ccrhost/lab/shims/ib_write_bw").read_text()
    usage = lab.split('USAGE = """', 1)[1].split('"""', 1)[0]
    assert perftest.cuda_options(usage) == (False, False)
    assert perftest.cuda_options(cuda_build + "      --use_cuda_dmabuf Use CUDA DMA-BUF for GPUDirect RDMA "
                                              "testing\n") == (True, True)


def test_gpudirect_runs_are_pinned_and_ordered_as_perftest_wants():
    pair = perftest.GdrPair("GPU2-mlx5_2", 2, "mlx5_2", 1)
    args = perftest.gdr_args(pair, 19015, 10, dmabuf=True)
    assert args == ["numactl", "--cpunodebind=1", "--membind=1", "ib_write_bw", "-d", "mlx5_2", "-p", "19015",
                    "-D", "10", "-F", "--report_gbits", "--use_cuda=2", "--use_cuda_dmabuf"]
    command = perftest.gdr_command([pair], 19015, 10, 60, dmabuf=False)
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID timeout 60 numactl --cpunodebind=1 --membind=1 ib_write_bw -d mlx5_2 " \
           "-p 19015 -D 10 -F --report_gbits --use_cuda=2 localhost" in command


def test_gpudirect_results_unknown_when_unmeasurable_and_fail_when_slow():
    report = (FIXTURES / "ib_write_bw_roce.txt").read_text().splitlines()
    out = ["@@pair GPU0-mlx5_0", *report, "@@rc 0", "@@pair GPU1-mlx5_1", "Couldn't allocate MR", "@@rc 1"]
    why, gbps, errors = perftest.parse_gdr_runs(out)
    assert (why, gbps) == (None, {"GPU0-mlx5_0": 92.40})
    assert errors == ["GPUDirect ib_write_bw on GPU1-mlx5_1 failed: Couldn't allocate MR"]
    bw = dp.GpuDirectBandwidth(True, gbps=gbps, expected={"GPU0-mlx5_0": 400.0, "GPU1-mlx5_1": 400.0}, errors=errors)
    assert [(r.level, r.code) for r in dp.check_gpudirect_bandwidth(bw, 0.9)] == [
        (UNKNOWN, "gpudirect_measure_failed"), (FAIL, "gpudirect_slow")]
    why, _, _ = perftest.parse_gdr_runs(["@@unmeasurable ib_write_bw has no CUDA support (--use_cuda is not in "
                                         "ib_write_bw --help)"])
    reasons = dp.check_gpudirect_bandwidth(dp.GpuDirectBandwidth(False, why=why), 0.9)
    assert [(r.level, r.code) for r in reasons] == [(UNKNOWN, "gpudirect_unmeasurable")]
    assert reasons[0].message.startswith("GPUDirect bandwidth not measurable: ib_write_bw has no CUDA support")


def fake_tools(folder: Path, help_text: str) -> dict:
    """A CUDA-built ib_write_bw and numactl standing in on PATH: --help
    prints ``help_text``, a client prints the reference's RoCE report, a
    server returns; numactl runs what follows its options."""
    import os
    import stat

    (folder / "help.txt").write_text(help_text)
    tools = {
        "ib_write_bw": f"""#!/bin/sh
for a in "$@"; do case "$a" in --help) cat {folder}/help.txt; exit 1;; esac; done
echo "$@" >> {folder}/calls
eval last=\\${{$#}}
[ "$last" = localhost ] && cat {FIXTURES}/ib_write_bw_roce.txt
exit 0
""",
        "numactl": """#!/bin/sh
while [ "${1#--}" != "$1" ]; do shift; done
exec "$@"
""",
    }
    for name, text in tools.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755 | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


def test_gpudirect_command_runs_each_pair_through_its_gpu(tmp_path):
    import subprocess

    pairs = [perftest.GdrPair("GPU0-mlx5_0", 0, "mlx5_0", 0), perftest.GdrPair("GPU5-mlx5_5", 5, "mlx5_5", 1)]
    env = fake_tools(tmp_path, (FIXTURES / "gdr/ib_write_bw_help_cuda.txt").read_text())
    out = subprocess.run(["sh", "-c", perftest.gdr_command(pairs, 19015, 2, 30, dmabuf=False)], env=env,
                         capture_output=True, text=True, timeout=30).stdout.splitlines()
    assert perftest.parse_gdr_runs(out) == (None, {"GPU0-mlx5_0": 92.40, "GPU5-mlx5_5": 92.40}, [])
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "-d mlx5_5 -p 19016 -D 2 -F --report_gbits --use_cuda=5 localhost" in calls
    # dma-buf wanted, but this build has no --use_cuda_dmabuf: not measurable, nothing run
    (tmp_path / "calls").unlink()
    out = subprocess.run(["sh", "-c", perftest.gdr_command(pairs, 19015, 2, 30, dmabuf=True)], env=env,
                         capture_output=True, text=True, timeout=30).stdout.splitlines()
    assert perftest.parse_gdr_runs(out)[0] == ("ib_write_bw has no --use_cuda_dmabuf, and dma-buf is the only "
                                               "GPUDirect path here")
    assert not (tmp_path / "calls").exists()
    # the lab's ib_write_bw, a build without CUDA
    lab_shims = Path(__file__).parent.parent / "ccrhost/lab/shims"
    out = subprocess.run(["sh", "-c", perftest.gdr_command(pairs, 19015, 2, 30, dmabuf=False)],
                         env={**env, "PATH": f"{lab_shims}:{env['PATH']}"}, capture_output=True, text=True,
                         timeout=30).stdout.splitlines()
    assert perftest.parse_gdr_runs(out)[0] == ("ib_write_bw has no CUDA support (--use_cuda is not in "
                                               "ib_write_bw --help)")


# --- the probe's batched register reads ----------------------------------------------

def test_acs_walk_and_devctl_sections():
    acs = pci.parse_acs_walk(["0000:15:00.0 none", "0000:16:01.0 005f 001d", "0000:14:01.0 unreadable",
                              "0000:24:01.0 error setpci: Unable to read"])
    assert acs["0000:15:00.0"] == pci.AcsControl(False, None, None)
    assert acs["0000:16:01.0"] == pci.AcsControl(True, 0x5f, 0x1d) and acs["0000:16:01.0"].redirect
    assert acs["0000:14:01.0"].error.startswith("the extended config space reads as all ones")
    assert acs["0000:24:01.0"].error == "setpci: Unable to read"
    with pytest.raises(pci.PciFormatError, match="not a PCI address"):
        pci.parse_acs_walk(["16:01.0 none"])
    with pytest.raises(pci.PciFormatError, match="ACS capability and control words"):
        pci.parse_acs_walk(["0000:16:01.0 005f"])
    devctl = pci.parse_devctl_batch(["0000:1a:00.0 5930", "0000:2a:00.0 setpci: 0000:2a:00.0: Instance #0 of "
                                     "Capability 0010 not found - there are no capabilities with that id."])
    assert devctl["0000:1a:00.0"].max_read_req == 4096 and devctl["0000:2a:00.0"].error


def test_the_probe_runs_on_a_rendered_node_with_the_lab_tools(tmp_path):
    """The snippet itself, against a lab node's /sys rendered into a folder
    (paths rewritten both ways) with the lab's setpci: the walk finds ACS on
    the switch ports and the root ports, none on the upstream ports."""
    import os
    import subprocess

    from ccrhost.lab.profile import load_profile, parse_fault, render_sysfs

    root = tmp_path / "sys"
    faults = [parse_fault(f"n:{f}")[1] for f in ("acs_redirect", "nic_numa_far")]
    render_sysfs(load_profile("hgx-h100-8x400"), faults, root, 1)
    shims = Path(__file__).parent.parent / "ccrhost/lab/shims"
    env = {**os.environ, "CCRHOST_LAB_SYSFS": str(root), "PATH": f"{shims}:{os.environ['PATH']}"}
    out = subprocess.run(["sh", "-c", pci.COMMAND.replace("/sys/", f"{root}/")], env=env, capture_output=True,
                         text=True, timeout=60)
    snap = pci.parse_pci_dump(out.stdout.replace(f"{root}/", "/sys/").splitlines())
    assert [(p.gpu.name, p.nic.name, p.level) for p in snap.pairs()][2:4] == [("GPU2", "mlx5_2", "PIX"),
                                                                             ("GPU3", "mlx5_3", "SYS")]
    ctl = snap.acs_ctl()
    assert ctl[BRIDGE] == 0x1d and ctl["0000:14:01.0"] == 0 and "0000:15:00.0" not in ctl  # upstream: no ACS
    assert [r.code for r in dp.check_acs(snap.pairs(), ctl)] == ["acs_redirect"]
    assert set(snap.devctl().values()) == {0x2930}
