"""End to end on the lab: a node whose GPUs hold a job's process (the
``gpu_busy`` fault: the lab's nvidia-smi lists the process, CUDA refuses the
GPUs) gets no active test from the deploy's verification and no disruptive
tuning from the rdma deploy; the idle nodes are tested and tuned."""

import json
import re

import pytest
from conftest import lab_inventory, lab_ssh, node_address, run_pyinfra, tree_snapshot

pytestmark = pytest.mark.lab

OFED_IFS = [f"ens{i}np0" for i in range(1, 9)]


def test_the_verification_skips_the_busy_nodes_tests_and_tests_the_others(make_lab, tmp_path):
    lab = make_lab(nodes=3, faults=["node2:gpu_busy"])
    listed = lab_ssh(lab, "node2", "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader")
    assert listed.stdout.splitlines()[:2] == ["4242, python3, 1024 MiB", "4243, python3, 1024 MiB"]
    report_dir = tmp_path / "report"
    inventory = lab_inventory(tmp_path, verify_report_dir=str(report_dir), verify_allreduce=True,
                              verify_allreduce_timeout=20, verify_allreduce_retries=0, verify_allreduce_iters=5,
                              verify_allreduce_state="/run/ccrhost/active.json", verify_allreduce_launcher="mpirun")
    run = run_pyinfra("deploys/verify.py", inventory=inventory, timeout=400)
    assert run.rc == 0, run.out[-4000:]  # UNKNOWN fails no host
    assert "Traceback" not in run.out
    hosts = json.loads((report_dir / "ccr-report.json").read_text())["hosts"]
    busy = hosts[node_address(2)]
    assert busy["status"] == "UNKNOWN" and [r["code"] for r in busy["reasons"]] == ["node_busy"], busy["reasons"]
    assert busy["reasons"][0]["message"].startswith(
        "all-reduce not run: GPU work is running (pid 4242 python3 (1024 MiB), pid 4243 python3 (1024 MiB), "
        "pid 4244 python3 (1024 MiB) and 5 more); drain the node first")
    assert f"[{node_address(2)}] verification UNKNOWN" in run.out
    # nothing ran on it, nothing was stored for it, and it is in no pair
    assert "all_reduce_perf" not in (lab.root("node2") / "run/ccrhost-lab/commands.log").read_text()
    assert not (lab.root("node2") / "run/ccrhost/active.json").exists()
    for i in (1, 3):
        host = hosts[node_address(i)]
        assert host["status"] == "OK", (i, host["reasons"])
        stored = json.loads((lab.root(f"node{i}") / "run/ccrhost/active.json").read_text())["results"]
        assert {k: v["status"] for k, v in stored.items()} == {
            "allreduce/nvlink": "OK", "allreduce/loopback": "OK", "allreduce/pair": "OK"}, i
    launched = (lab.root("node1") / "run/ccrhost-lab/commands.log").read_text()
    assert f"-H {node_address(1)}:8,{node_address(3)}:8" in launched  # node1 paired with node3, not node2


def stages_of(line: str) -> set[str]:
    """The stages a skip line names: only disruptive ones."""
    from ccrhost.operations.tune import DISRUPTIVE

    named = set(re.search(r"skipped the disruptive stages (.*?): ", line).group(1).split(", "))
    assert named <= DISRUPTIVE, line
    return named


def qos_view(lab, node):
    out = lab_ssh(lab, node, "; ".join(f"mlnx_qos -i {i}" for i in OFED_IFS)).stdout
    return out, tree_snapshot(lab.root(node) / "sys/class/net"), tree_snapshot(lab.root(node) / "sys/bus/pci")


def test_the_tuning_deploy_skips_the_disruptive_stages_on_the_busy_node(make_lab, tmp_path):
    lab = make_lab(nodes=2, faults=["node2:gpu_busy"])
    before = qos_view(lab, "node2")
    inventory = lab_inventory(tmp_path)
    dry = run_pyinfra("--dry", "deploys/rdma.py", inventory=inventory)
    node2 = [x for x in dry.out.splitlines() if f"[{node_address(2)}]" in x]
    dry_line = next((x for x in node2 if "would have skipped" in x), None)
    assert dry_line, "\n".join(node2)
    assert stages_of(dry_line) >= {"QoS"}, dry_line
    for i in (1, 2):  # the modules (a missing one loaded) are not disruptive
        assert f"[{node_address(i)}] would run: modprobe ib_uverbs" in dry.out, i
    assert f"[{node_address(2)}] would run: mlnx_qos" not in dry.out
    assert f"[{node_address(1)}] would run: mlnx_qos" in dry.out

    run = run_pyinfra("deploys/rdma.py", inventory=inventory)
    assert "Traceback" not in run.out
    line = next(x for x in run.out.splitlines() if f"[{node_address(2)}] skipped the disruptive stages" in x)
    assert stages_of(line) == stages_of(dry_line), line
    assert line.endswith("drain the node and rerun, or set rdma_tune_when_busy: true"), line
    assert "GPU work is running (pid 4242 python3 (1024 MiB)" in line
    assert qos_view(lab, "node2") == before  # no link, QoS, MTU or PCIe change on it
    # the non-disruptive stages still apply there
    assert (lab.root("node2") / "etc/nccl.conf").exists()
    assert (lab.root("node2") / "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos").read_text() == "106\n"
    # the idle node is tuned
    assert f"[{node_address(1)}] skipped" not in run.out
    tuned = lab_ssh(lab, "node1", "mlnx_qos -i ens1np0").stdout
    assert "dscp" in tuned
    # allowed explicitly: the busy node is tuned too
    allowed = run_pyinfra("deploys/rdma.py", inventory=lab_inventory(tmp_path, rdma_tune_when_busy=True))
    assert f"[{node_address(2)}] skipped" not in allowed.out
    assert qos_view(lab, "node2")[0] != before[0]
