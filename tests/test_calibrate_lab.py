"""`ccrhost baseline` on the lab (issue 47, items 3 and 4): calibrate over
the nodes' stored all-reduce and nvbandwidth results writes site figures a
slow node misses; capture on a healthy node (hardware and host baseline), then diff against
a faulted one names exactly its faults."""

import json
import sys

import pytest
import yaml
from conftest import REPO, lab_inventory, lab_ssh, node_address, run_pyinfra

from ccrhost.cli import main

pytestmark = pytest.mark.lab

CCRHOST = f"cd {REPO} && {sys.executable} -m ccrhost"
STATE = {"verify_allreduce_state": "/run/ccrhost/active.json", "verify_dcgm_state": "/run/ccrhost/dcgm.json"}
# H100 has no published device-to-device figure (the platform file will): one for the lab's run
CONFIG = yaml.safe_dump({**STATE, "verify_nvbandwidth_min_gbs": {"device_to_device_memcpy_read_ce": 300.0}})


def test_calibrate_over_the_labs_stored_results_writes_figures_a_slow_node_misses(make_lab, tmp_path):
    """Nine nodes, node9 with an NVLink down (slower all-reduce over NVLink and device-to-device copies):
    the deploy stores each node's all-reduce, `ccrhost dcgm --nvbandwidth` its copy bandwidths,
    deploys/baseline.py collects them, and the figures calibrated over all nine sit below every healthy
    node and above node9."""
    from click.testing import CliRunner

    lab = make_lab(nodes=9, faults=["node9:nvlink_down=2"])
    inventory = lab_inventory(tmp_path, verify_allreduce=True, verify_allreduce_modes=["nvlink"],
                              verify_allreduce_iters=5, **STATE)
    run = run_pyinfra("deploys/verify.py", inventory=inventory, timeout=500)
    assert "Traceback" not in run.out, run.out[-4000:]
    for i in range(1, 10):
        (lab.root(f"node{i}") / "run/ccrhost-cal.yaml").write_text(CONFIG)
        diag = lab_ssh(lab, f"node{i}", f"{CCRHOST} dcgm --config /run/ccrhost-cal.yaml --level 1 --nvbandwidth")
        assert diag.returncode in (0, 2), diag.stdout + diag.stderr
    run = run_pyinfra("deploys/baseline.py", inventory=inventory, timeout=300)
    assert run.rc == 0 and "Traceback" not in run.out, run.out[-4000:]
    folder = tmp_path / "report" / "baseline"
    docs = {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}
    assert set(docs) == {node_address(i) for i in range(1, 10)}
    one = docs[node_address(1)]
    assert one["versions"]["driver"] and one["versions"]["nic_firmware"] == "28.39.3560", one["versions"]
    assert {"allreduce/nvlink", "nvbandwidth/copy engine"} <= set(one["results"])
    # the node's own export reads the same results and versions
    own = json.loads(lab_ssh(lab, "node1", f"{CCRHOST} baseline results --config /run/ccrhost-cal.yaml").stdout)
    assert (own["results"], own["versions"]) == (one["results"], one["versions"])

    site = tmp_path / "site-h100.yaml"
    out = CliRunner().invoke(main, ["baseline", "calibrate", "--from", str(folder), "--output", str(site),
                                    "--extends", "hgx-h100-8x400"])
    assert out.exit_code == 0, out.output
    fleet = yaml.safe_load(site.read_text())["fleet"]
    assert {"allreduce.nvlink", "nvbandwidth.device_to_device_memcpy_read_ce",
            "nvbandwidth.host_to_device_memcpy_ce"} <= set(fleet)
    assert fleet["allreduce.nvlink"]["nodes"] == 9
    assert fleet["allreduce.nvlink"]["measured_under"]["driver"] == one["versions"]["driver"]

    def value(node, key):
        doc = docs[node_address(int(node.removeprefix("node")))]
        if key.startswith("allreduce."):
            return doc["results"]["allreduce/" + key.split(".", 1)[1]]["value"]
        return doc["results"]["nvbandwidth/copy engine"]["data"]["min_gbs"][key.split(".", 1)[1]]

    for key in ("allreduce.nvlink", "nvbandwidth.device_to_device_memcpy_read_ce"):
        assert value("node9", key) < fleet[key]["value"], key  # the slow node misses its fleet's figure
        for i in range(1, 9):
            assert value(f"node{i}", key) >= fleet[key]["value"], (key, i)


# node2's hardware faults and one host fault (its data mount read-only), and the keys (with the parts)
# `baseline diff` must name for them
DIFF_FAULTS = ["node2:gpu_missing", "node2:port_rate=mlx5_2:200", "node2:pcie_width=mlx5_1:8", "node2:mount_readonly"]
DIFFERS = {"hardware.gpu_count": (8, 7), "hardware.nic_gbps": (400.0, {"mlx5_2/1": 200.0}),
           "hardware.nic_pcie.width": (16, {"mlx5_1/1": 8})}
SCRATCH_READ = {"/mnt/scratch": {"fstype": "tmpfs", "rw": False}}  # beside the captured mounts, expected


def test_capture_on_a_good_node_then_diff_on_a_faulted_one_names_exactly_its_faults(make_lab, tmp_path):
    lab = make_lab(nodes=2, faults=DIFF_FAULTS)
    cap = lab_ssh(lab, "node1", f"{CCRHOST} baseline capture --output /run/ccrhost/good.yaml")
    assert cap.returncode == 0, cap.stdout + cap.stderr
    text = (lab.root("node1") / "run/ccrhost/good.yaml").read_text()
    hardware = yaml.safe_load(text)["hardware"]
    assert {k: hardware[k] for k in ("gpu_model", "gpu_count", "nic_count", "nic_gbps", "gpu_pcie", "nic_pcie")} == {
        "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nic_count": 8, "nic_gbps": 400.0,
        "gpu_pcie": {"gen": 5, "width": 16}, "nic_pcie": {"gen": 5, "width": 16}}
    assert hardware["numa_nodes"] == 2 and hardware["link_layer"] == "Ethernet"
    # the host baseline as the lab renders it (ccrhost/lab/host.py, docs/lab.md)
    settings = yaml.safe_load(text)["settings"]
    assert {k: settings[k] for k in ("baseline_cpus_all_online", "baseline_memory_total_kib", "baseline_swap_max_kib",
                                     "baseline_clocksource", "baseline_cuda_min", "baseline_cpu_sockets")} == {
        "baseline_cpus_all_online": True, "baseline_memory_total_kib": 1961032704, "baseline_swap_max_kib": 0,
        "baseline_clocksource": "tsc", "baseline_cuda_min": "12.4.1", "baseline_cpu_sockets": 1}
    assert settings["baseline_mounts"]["/mnt/scratch"] == {"fstype": "tmpfs", "rw": True}
    assert not [m for m in settings["baseline_mounts"] if m.startswith(("/proc", "/sys", "/run", "/dev"))]
    (lab.root("node2") / "run/ccrhost").mkdir(parents=True, exist_ok=True)
    (lab.root("node2") / "run/ccrhost/good.yaml").write_text(text)

    same = lab_ssh(lab, "node1", f"{CCRHOST} baseline diff --platform /run/ccrhost/good.yaml")
    assert (same.returncode, same.stdout) == (0, "OK: this node matches /run/ccrhost/good.yaml\n"), same.stderr
    faulted = lab_ssh(lab, "node2", f"{CCRHOST} baseline diff --platform /run/ccrhost/good.yaml --format json")
    assert faulted.returncode == 2, faulted.stdout + faulted.stderr
    doc = json.loads(faulted.stdout)
    mounts = {"settings.baseline_mounts": (settings["baseline_mounts"], SCRATCH_READ)}
    assert {d["key"]: (d["expected"], d["read"]) for d in doc["differences"]} == {**DIFFERS, **mounts}
    assert {d["where"] for d in doc["differences"]} == {"/run/ccrhost/good.yaml"}
    assert doc["status"] == "FAIL" and {d["level"] for d in doc["differences"]} == {"FAIL"}

    # through pyinfra: deploys/baseline.py captures each host's hardware as the node's own capture does
    run = run_pyinfra("deploys/baseline.py", inventory=lab_inventory(tmp_path, **STATE), timeout=300)
    assert run.rc == 0 and "Traceback" not in run.out, run.out[-4000:]
    captured = yaml.safe_load((tmp_path / "report/baseline" / f"{node_address(1)}.platform.yaml").read_text())
    assert {k: v for k, v in captured["hardware"].items() if k not in ("source", "date")} == \
        {k: v for k, v in hardware.items() if k not in ("source", "date")}
    assert captured["settings"]["baseline_mounts"]["/mnt/scratch"] == {"fstype": "tmpfs", "rw": True}
    assert {k: captured["settings"][k] for k in ("baseline_memory_total_kib", "baseline_cpu_threads")} == \
        {k: settings[k] for k in ("baseline_memory_total_kib", "baseline_cpu_threads")}
    other = yaml.safe_load((tmp_path / "report/baseline" / f"{node_address(2)}.platform.yaml").read_text())
    assert other["hardware"]["gpu_count"] == 7
    assert other["settings"]["baseline_mounts"]["/mnt/scratch"] == {"fstype": "tmpfs", "rw": False}
