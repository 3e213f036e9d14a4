"""The host baseline end to end on a 6-node lab, one host fault per node (set at `lab up`): the deploy's
verification, `ccrhost check` on the node (JSON, the health check's and `ccrhost slurm verify`'s reading)
and the prolog's run (`--format nhc`, the line it prints) each fail exactly the faulted node with its own
code; the healthy node stays OK. One lab serves the module."""

import json
import sys

import pytest
from conftest import REPO, lab_inventory, lab_ssh, node_address, run_pyinfra

from ccrhost.fleet.slurm_check import CheckOutput, judge
from ccrhost.lab import host as lab_host

pytestmark = pytest.mark.lab

# what the lab's nodes must have: every check the lab's files can answer
SETTINGS = {
    "baseline_cpus_all_online": True, "baseline_cpu_sockets": 1, "baseline_cpu_model": lab_host.CPU_MODEL,
    "baseline_memory_total_kib": lab_host.MEM_TOTAL_KIB, "baseline_swap_max_kib": 0,
    "baseline_hugepages": {"2048kB": 0},
    "baseline_mounts": {lab_host.SCRATCH: {"fstype": "tmpfs", "min_free_pct": 50, "min_free_inodes_pct": 50}},
    "baseline_modules": ["mlx5_core", "configfs"], "baseline_cmdline": ["iommu=pt"],
    "baseline_sysctl": {"kernel.ostype": "Linux"}, "baseline_clocksource": "tsc",
    "baseline_cuda_min": "12.4", "baseline_ofed_min": "23.10",  # /usr/local/cuda/version.json, ofed_info -s
}
CONFIG = "printf '%s\\n' " + "'" + json.dumps(SETTINGS) + "' > /tmp/check.yaml"  # JSON is YAML
CHECK = f"{CONFIG} && cd {REPO} && {sys.executable} -m ccrhost check --config /tmp/check.yaml " \
        "--profile hgx-h100-8x400"
# node -> (fault at lab up, status, reason codes, a piece of the first message)
FAULTS = {
    "node2": ("cpu_offline", "FAIL", {"host_cpus_offline"}, " are offline: "),
    "node3": ("memory_short", "FAIL", {"host_memory_short"}, "MemTotal 1715903616 kB is 12.5% below the expected "),
    "node4": ("swap_on", "FAIL", {"host_swap_on"}, "SwapTotal 8388604 kB (/swapfile), at most 0 kB allowed"),
    "node5": ("mount_readonly", "FAIL", {"host_mount_readonly"}, "/mnt/scratch (tmpfs scratch) is mounted read-only"),
    "node6": ("cmdline_wrong", "FAIL", {"host_cmdline"}, "the kernel command line has iommu=nopt, expected iommu=pt"),
}


@pytest.fixture(scope="module")
def fleet():
    from conftest import LAB_DIR, LAB_NAME, LAB_SUBNET

    from ccrhost.lab.fleet import Lab, parse_faults

    lab = Lab(LAB_DIR)
    lab.down(name=LAB_NAME)
    try:
        lab.up(6, "hgx-h100-8x400", parse_faults([f"{n}:{spec}" for n, (spec, *_) in FAULTS.items()]),
               name=LAB_NAME, subnet=LAB_SUBNET)
        yield lab
    finally:
        lab.down(name=LAB_NAME)


def check(lab, node: str, fmt: str) -> tuple[str, int]:
    run = lab_ssh(lab, node, f"{CHECK} --format {fmt}")
    assert run.returncode in (0, 1, 2, 3), run.stdout + run.stderr
    return run.stdout, run.returncode


def test_each_host_fault_fails_its_node_alone_on_every_path(fleet, tmp_path):
    report_dir = tmp_path / "report"
    run = run_pyinfra("deploys/verify.py", inventory=lab_inventory(tmp_path, verify_report_dir=str(report_dir),
                                                                   **SETTINGS), timeout=400)
    assert run.rc == 1 and "Traceback" not in run.out, run.out
    deployed = json.loads((report_dir / "ccr-report.json").read_text())["hosts"]
    for i in range(1, 7):
        node = f"node{i}"
        _, status, wanted, text = FAULTS.get(node, (None, "OK", set(), ""))
        host = deployed[node_address(i)]
        assert (host["status"], {r["code"] for r in host["reasons"]}) == (status, wanted), (node, host["reasons"])
        assert text in host["reasons"][0]["message"] if wanted else host["reasons"] == []

        out, rc = check(fleet, node, "json")  # the health check's run, and what `ccrhost slurm verify` judges
        doc = json.loads(out)
        assert (doc["status"], {r["code"] for r in doc["reasons"]}) == (status, wanted), (node, doc["reasons"])
        assert [r["message"] for r in doc["reasons"]] == [r["message"] for r in host["reasons"]]
        assert doc["readings"]["baseline"]["mem_total_kib"] is not None
        verdict, _ = judge(CheckOutput(node, None, out, rc))
        assert (verdict.status, {r.code for r in verdict.reasons}) == (status, wanted)

        line, prc = check(fleet, node, "nhc")  # the prolog's output
        assert prc == rc and all(code in line for code in wanted), (node, line)
        assert ("host_" in line) == bool(wanted), (node, line)

    # the fault changed the node's state, not an answer: the kernel's own files say it
    offline = lab_ssh(fleet, "node2", "cat /sys/devices/system/cpu/online /sys/devices/system/cpu/possible").stdout
    assert offline.split()[0] != offline.split()[1]
    assert "/swapfile" in lab_ssh(fleet, "node4", "cat /proc/swaps").stdout
    touch = lab_ssh(fleet, "node5", f"touch {lab_host.SCRATCH}/x")
    assert touch.returncode != 0 and "Read-only file system" in touch.stderr
    assert lab_ssh(fleet, "node1", f"touch {lab_host.SCRATCH}/x").returncode == 0
    assert lab_ssh(fleet, "node6", "cat /proc/cmdline").stdout.split()[-1] == "iommu=nopt"
    versions = json.loads(check(fleet, "node1", "json")[0])["readings"]["baseline"]
    assert (versions["cuda"], versions["ofed"]) == (lab_host.CUDA_VERSION, "23.10-1.1.9")
