"""End to end: an 8-node lab, one GPU health fault per node (set at `lab up`); exactly those nodes are
non-OK, each with its own code, on the deploy's verification, `ccrhost check` on the node and `ccrhost
slurm verify`'s judgement of what that check printed; live faults come and go (`lab fault` / `clear`)."""

import json
import sys

import pytest
from conftest import REPO, lab_inventory, lab_ssh, node_address, run_pyinfra

from ccrhost.fleet.slurm_check import CheckOutput, judge

pytestmark = pytest.mark.lab

CHECK = f"cd {REPO} && {sys.executable} -m ccrhost check --profile hgx-h100-8x400 --format json"
# node -> (fault at lab up, status, reason codes, a piece of the message)
FAULTS = {
    "node2": ("xid=48:3", "FAIL", {"gpu_xid_critical"}, "GPU 3 (0000:"),
    "node3": ("gpu_fell_off", "FAIL", {"gpu_count", "gpu_fell_off_bus"}, "fell off the bus: Xid 79"),
    "node4": ("row_remap_pending=1", "FAIL", {"gpu_row_remap_pending"}, "has a row remapping pending"),
    "node5": ("row_remap_failure=2", "FAIL", {"gpu_row_remap_failure"}, "failed a row remapping"),
    "node6": ("ecc_uncorrectable=0", "FAIL", {"gpu_ecc_uncorrectable"}, "has 2 uncorrectable volatile ECC errors"),
    "node7": ("nvlink_down=5:7", "FAIL", {"gpu_nvlink_down"}, "GPU 5 ("),
    "node8": ("fabric_not_ready", "FAIL", {"gpu_fabric_not_ready"}, "fabric not ready: state In Progress"),
}


@pytest.fixture
def fleet(make_lab):
    return make_lab(nodes=8, faults=[f"{node}:{spec}" for node, (spec, *_) in FAULTS.items()])


def check(lab, node: str) -> tuple[dict, int]:
    run = lab_ssh(lab, node, CHECK)
    assert run.returncode in (0, 1, 2, 3) and run.stdout.startswith("{"), run.stdout + run.stderr
    return json.loads(run.stdout), run.returncode


def test_each_fault_fails_its_node_alone_on_every_path(fleet, tmp_path):
    report_dir = tmp_path / "report"
    run = run_pyinfra("deploys/verify.py", inventory=lab_inventory(tmp_path, verify_report_dir=str(report_dir)),
                      timeout=400)
    assert run.rc == 1 and "Traceback" not in run.out, run.out
    deployed = json.loads((report_dir / "ccr-report.json").read_text())["hosts"]
    for i in range(1, 9):
        node = f"node{i}"
        _, status, wanted, text = FAULTS.get(node, (None, "OK", set(), ""))
        host = deployed[node_address(i)]
        assert (host["status"], {r["code"] for r in host["reasons"]}) == (status, wanted), (node, host["reasons"])
        assert text in " ".join(r["message"] for r in host["reasons"])

        doc, rc = check(fleet, node)  # the node's own check (the prolog and health check run it)
        assert (doc["status"], {r["code"] for r in doc["reasons"]}) == (status, wanted), (node, doc["reasons"])
        assert [r["message"] for r in doc["reasons"]] == [r["message"] for r in host["reasons"]]
        assert doc["gpu_health"]["log_source"] == "dmesg" and len(doc["gpu_health"]["pci_gpus"]) == 8
        verdict, _ = judge(CheckOutput(node, None, json.dumps(doc), rc))  # ccrhost slurm verify
        assert (verdict.status, {r.code for r in verdict.reasons}) == (status, wanted)
        assert verdict.readings.gpu_health is not None

    # the fallen GPU (the last) is named by its PCI address, the one its Xid 79 line gives
    fell = next(r["message"] for r in deployed[node_address(3)]["reasons"] if r["code"] == "gpu_fell_off_bus")
    last = json.loads(json.dumps(check(fleet, "node1")[0]["gpu_health"]["pci_gpus"]))[-1]
    assert fell.startswith(f"GPU at {last[:10]} fell off the bus: Xid 79"), fell


def test_live_faults_come_and_go_and_rates_come_from_the_last_check(fleet):
    fleet.fault("node1", "xid=13:2")
    doc, rc = check(fleet, "node1")
    assert (doc["status"], rc, [r["code"] for r in doc["reasons"]]) == ("WARN", 1, ["gpu_xid"])
    assert doc["reasons"][0]["message"].startswith("GPU 2 (0000:") and "Xid 13" in doc["reasons"][0]["message"]
    fleet.fault("node1", "xid=95:1:5:0")  # an uncontained ECC error in a MIG instance (main read no such line)
    mig, rc = check(fleet, "node1")
    assert (mig["status"], rc, {r["code"] for r in mig["reasons"]}) == ("FAIL", 2, {"gpu_xid", "gpu_xid_critical"})
    critical = next(r["message"] for r in mig["reasons"] if r["code"] == "gpu_xid_critical")
    assert critical.startswith("GPU 1 (0000:") and " GPU-I:05 GPU-CI:00 Xid 95 (Uncontained memory error)" in critical

    fleet.fault("node1", "pcie_replay=4")  # the check above stored GPU 4's replays (0) with its time and boot id
    rising, _ = check(fleet, "node1")
    replay = [r for r in rising["reasons"] if r["code"] == "gpu_pcie_replay"]
    assert len(replay) == 1 and replay[0]["message"].startswith("GPU 4 (0000:"), rising["reasons"]
    assert "PCIe replays rose by" in replay[0]["message"] and "threshold 8/min" in replay[0]["message"]
    (fleet.root("node1") / "run/ccrhost/gpu-counters.json").unlink()  # no stored reading: judged since boot
    first, _ = check(fleet, "node1")
    [since_boot] = [r["message"] for r in first["reasons"] if r["code"] == "gpu_pcie_replay"]
    assert " since boot (" in since_boot, since_boot
    again, _ = check(fleet, "node1")  # from the reading just stored
    [narrowed] = [r["message"] for r in again["reasons"] if r["code"] == "gpu_pcie_replay"]
    assert "since boot" not in narrowed, narrowed

    fleet.clear("node1", "xid")
    fleet.clear("node1", "pcie_replay")
    fleet.clear("node8", "fabric_not_ready")
    for node in ("node1", "node8"):
        doc, rc = check(fleet, node)
        assert (doc["status"], rc, doc["reasons"]) == ("OK", 0, []), node

    metrics = lab_ssh(fleet, "node6", CHECK.replace("--format json", "--format prometheus")).stdout
    assert 'ccrhost_gpu_ecc_uncorrectable{gpu="0"} 2' in metrics and 'ccrhost_gpu_nvlinks_up{gpu="7"} 18' in metrics


def test_a_fault_value_the_node_cannot_have_changes_nothing(fleet):
    from ccrhost.lab.profile import ProfileError

    before = fleet.node("node1").faults
    for spec in ("xid=48:9", "nvlink_down=0:18", "row_remap_pending=x", "xid=0", "xid=48:3:100", "xid=48:3:1:x"):
        with pytest.raises(ProfileError, match=r"fault .*: need "):
            fleet.fault("node1", spec)
    assert fleet.node("node1").faults == before
