"""The rolling tune of docs/tuning.md on a 3-node Slurm lab, step by step:
drain a batch (one node still runs a job: it drains once the job ends),
wait with the page's own command, tune and verify the batch with
``--limit``, resume it. The node outside the batch is not touched."""

import json
import time

import pytest
from conftest import heal_slurm_lab, lab_inventory, lab_ssh, node_address, run_pyinfra, tree_snapshot

from ccrhost.lab import slurm as lab_slurm

pytestmark = pytest.mark.lab

SLURM_NODES = 3
SLURM_HEALTHCHECK_INTERVAL = 0  # no test here waits on Slurm's periodic health check
OFED_IFS = [f"ens{i}np0" for i in range(1, 9)]


def qos_view(lab, node):
    out = lab_ssh(lab, node, "; ".join(f"mlnx_qos -i {i}" for i in OFED_IFS)).stdout
    return out, tree_snapshot(lab.root(node) / "sys/class/net")


def still_draining(lab) -> list[str]:
    """docs/tuning.md's wait (``sinfo -h -N -n LIST -o '%N %T' | grep -v ' drained$'``): the batch's
    nodes not yet DRAINED (a node whose job is completing reads draining, and not as -t draining)."""
    out = lab_slurm.run(lab, "sinfo", "-h", "-N", "-n", "node[2-3]", "-o", "%N %T").stdout
    return [line for line in out.splitlines() if not line.endswith(" drained")]


def test_a_rolling_tune_through_slurm(slurm_lab, tmp_path):
    lab = slurm_lab
    try:
        outside = qos_view(lab, "node1")
        job = lab_slurm.run(lab, "sbatch", "--parsable", "-w", "node2", "-o", "/dev/null", "--wrap", "sleep 600",
                            check=True).stdout.strip().split(";")[0]
        deadline = time.monotonic() + 30
        while lab_slurm.run(lab, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() != "RUNNING":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.3)
        # 1. drain the batch
        lab_slurm.run(lab, "scontrol", "update", "NodeName=node[2-3]", "State=DRAIN", "Reason=ccrhost tune",
                      check=True)
        # 2. the wait: node2 drains only once its job is gone
        assert still_draining(lab) == ["node2 draining"]
        lab_slurm.run(lab, "scancel", job, check=True)
        deadline = time.monotonic() + 60
        while still_draining(lab):
            assert time.monotonic() < deadline, lab_slurm.node_states(lab)
            time.sleep(0.5)
        states = lab_slurm.node_states(lab)
        assert [states[n][0] for n in ("node2", "node3")] == ["drained", "drained"], states
        # 3. tune, then verify, the batch alone
        batch = ["--limit", node_address(2), "--limit", node_address(3)]
        report = tmp_path / "report"
        inventory = lab_inventory(tmp_path, verify_report_dir=str(report))
        tuned = run_pyinfra("deploys/rdma.py", *batch, inventory=inventory, timeout=300)
        assert tuned.rc == 0, tuned.out[-4000:]
        assert "skipped the disruptive stages" not in tuned.out
        verified = run_pyinfra("deploys/verify.py", *batch, inventory=inventory, timeout=300)
        assert verified.rc == 0, verified.out[-4000:]
        hosts = json.loads((report / "ccr-report.json").read_text())["hosts"]
        assert {h: v["status"] for h, v in hosts.items()} == {node_address(2): "OK", node_address(3): "OK"}
        # 4. resume the batch
        lab_slurm.run(lab, "scontrol", "update", "NodeName=node[2-3]", "State=RESUME", check=True)
        deadline = time.monotonic() + 60  # "idle*" until slurmctld hears from the node again
        while [s for s, _ in lab_slurm.node_states(lab).values()] != ["idle"] * 3:
            assert time.monotonic() < deadline, (lab_slurm.node_states(lab), lab_slurm.run(
                lab, "scontrol", "show", "node", "node2").stdout)
            time.sleep(0.5)
        for node in ("node2", "node3"):
            assert "dscp" in lab_ssh(lab, node, "mlnx_qos -i ens1np0").stdout, node
        assert qos_view(lab, "node1") == outside  # outside the batch: untouched
    finally:
        heal_slurm_lab(lab)


def test_the_deploys_verification_skips_a_node_running_a_slurm_job_that_holds_no_gpu(slurm_lab, tmp_path):
    """Issue 46: the deploy's busy read saw only GPU processes, so a job between its GPU phases (here a
    sleep, no GPU process at all) got an all-reduce under it. With slurm_conf set, the read asks Slurm
    too: node2 is UNKNOWN node_busy naming the job, nothing runs there; the idle nodes are tested."""
    lab = slurm_lab
    job = lab_slurm.run(lab, "sbatch", "--parsable", "-J", "no-gpu", "-w", "node2", "-o", "/dev/null",
                        "--wrap", "sleep 600", check=True).stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 30
        while lab_slurm.run(lab, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() != "RUNNING":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.3)
        listed = lab_ssh(lab, "node2", "nvidia-smi --query-compute-apps=pid,process_name,used_memory "
                                       "--format=csv,noheader")
        assert listed.returncode == 0 and listed.stdout.strip() == ""  # no GPU process: only Slurm tells
        report = tmp_path / "report"
        inventory = lab_inventory(tmp_path, verify_report_dir=str(report), verify_allreduce=True,
                                  verify_allreduce_timeout=20, verify_allreduce_retries=0, verify_allreduce_iters=5,
                                  verify_allreduce_state="/run/ccrhost/active.json",
                                  slurm_conf=str(lab_slurm.conf_path(lab)))
        run = run_pyinfra("deploys/verify.py", inventory=inventory, timeout=400)
        assert run.rc == 0, run.out[-4000:]
        hosts = json.loads((report / "ccr-report.json").read_text())["hosts"]
        busy = hosts[node_address(2)]
        assert busy["status"] == "UNKNOWN" and [r["code"] for r in busy["reasons"]] == ["node_busy"], busy["reasons"]
        assert busy["reasons"][0]["message"] == (
            f"all-reduce not run: a Slurm job is running on the node (Slurm job {job} no-gpu (root, RUNNING)); "
            "drain the node first, or set verify_active_when_busy: true to run it anyway")
        assert not (lab.root("node2") / "run/ccrhost/active.json").exists()  # nothing ran, nothing stored
        for i in (1, 3):
            assert hosts[node_address(i)]["status"] == "OK", (i, hosts[node_address(i)]["reasons"])
    finally:
        lab_slurm.run(lab, "scancel", job)
        heal_slurm_lab(lab)
