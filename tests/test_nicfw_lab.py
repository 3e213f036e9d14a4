"""The NIC firmware audit, the transceiver and BER (mlxlink) and mlx5_core's fatal kernel-log lines end
to end on an 8-node lab: the lab's mlxconfig and
mstconfig over each NIC's emulated firmware. Each fault is exactly its node's
reason on the deploy's verification, the health check (`ccrhost check
--refresh-nic`, which queries and stores), the prolog's check (which judges
the stored reading only) and `ccrhost slurm verify`'s judgement of what the
check printed; a set writes Next Boot, a reboot makes it Current, a refused
set changes nothing."""

import json
import re
import sys

import pytest
from conftest import REPO, lab_inventory, lab_ssh, node_address, run_pyinfra

from ccrhost.fleet.slurm_check import CheckOutput, judge
from ccrhost.lab import nicfw as lab_nicfw
from ccrhost.probes import nicfw as probe

pytestmark = pytest.mark.lab

STATE = "/run/ccrhost/active.json"  # the node's own /run: each lab node keeps its own results
CONFIG = f"printf 'verify_nic_firmware: true\\nverify_nic_optics: true\\nverify_allreduce_state: {STATE}\\n' > /tmp/check.yaml"
CHECK = f"{CONFIG} && cd {REPO} && {sys.executable} -m ccrhost check --config /tmp/check.yaml " \
        "--profile hgx-h100-8x400 --format json"
NICS = 8
# node -> (fault at lab up, status, reason codes, reasons, a piece of the first message)
FAULTS = {
    "node2": ("nicfw_wrong", "FAIL", {"nic_fw_wrong"}, 1, "MAX_ACC_OUT_READ is 64, the profile wants 0 or 44 or 128"),
    "node3": ("nicfw_pending=mlx5_3:ATS_ENABLED=1", "WARN", {"nic_fw_pending"}, 1,
              "firmware setting pending reboot: ATS_ENABLED is False(0), True(1) at the next boot"),
    "node4": ("mlx_tools_missing", "UNKNOWN", {"nic_fw_tool_missing", "nic_link_unreadable"}, 2 * NICS,
              " is installed"),
    "node5": ("mlx5_fatal=mlx5_2:cmd_exec_timeout", "FAIL", {"nic_fatal_log"}, 1,
              "): mlx5_core logged a fatal error (cmd_exec_timeout) N s ago: wait_func:964:(pid 112): ENABLE_HCA"),
    "node6": ("module_fault=mlx5_1", "FAIL", {"nic_module_fault"}, 1, "): transceiver Rx LOS set on lane 2"),
    "node7": ("ddm_out_of_range", "WARN", {"nic_module_ddm"}, 1,
              "): transceiver Temperature [C] 85 outside its range [-10..80]"),
    "node8": ("high_ber=mlx5_7", "FAIL", {"nic_ber_high"}, 1, "): effective physical BER 1e-10 above 1e-12"),
}
FIRMWARE_FAULTS = ("node2", "node3", "node4")


@pytest.fixture
def fleet(make_lab):
    return make_lab(nodes=8, faults=[f"{node}:{spec}" for node, (spec, *_) in FAULTS.items()])


def check(lab, node: str, refresh: bool = False) -> tuple[dict, int]:
    run = lab_ssh(lab, node, CHECK + (" --refresh-nic" if refresh else ""))
    assert run.returncode in (0, 1, 2, 3) and run.stdout.startswith("{"), run.stdout + run.stderr
    return json.loads(run.stdout), run.returncode


def aged(message: str) -> str:
    """A message with a logged line's age (which grows between reads) left out."""
    return re.sub(r"\b\d+ s ago", "N s ago", message)


def codes(reasons) -> tuple[set, int]:
    return {r["code"] for r in reasons}, len(reasons)


def test_each_fault_is_its_nodes_reason_on_every_path(fleet, tmp_path):
    for node in FIRMWARE_FAULTS:  # before any reading is stored, the prolog's check cannot judge the NICs
        doc, _ = check(fleet, node)
        assert codes(doc["reasons"]) == ({"nic_fw_never_read"}, NICS), doc["reasons"]

    report_dir = tmp_path / "report"
    run = run_pyinfra("deploys/verify.py", inventory=lab_inventory(
        tmp_path, verify_report_dir=str(report_dir), verify_nic_firmware=True, verify_nic_optics=True,
        verify_allreduce_state=STATE),
        timeout=400)
    assert run.rc == 1 and "Traceback" not in run.out, run.out
    deployed = json.loads((report_dir / "ccr-report.json").read_text())["hosts"]
    for i in range(1, 9):
        node = f"node{i}"
        _, status, wanted, count, text = FAULTS.get(node, (None, "OK", set(), 0, ""))
        host = deployed[node_address(i)]
        assert (host["status"], *codes(host["reasons"])) == (status, wanted, count), (node, host["reasons"])
        assert all(text in aged(r["message"]) for r in host["reasons"]), host["reasons"]

        prolog, _ = check(fleet, node)  # judges what the deploy stored on the node, never queries
        health, rc = check(fleet, node, refresh=True)  # queries and stores again
        for doc in (prolog, health):
            assert (doc["status"], *codes(doc["reasons"])) == (status, wanted, count), (node, doc["reasons"])
            assert [aged(r["message"]) for r in doc["reasons"]] == [aged(r["message"]) for r in host["reasons"]]
        verdict, _ = judge(CheckOutput(node, None, json.dumps(health), rc))  # ccrhost slurm verify
        assert (verdict.status, {r.code for r in verdict.reasons}) == (status, wanted)

    # the wrong value names its NIC by its PCI function
    first = deployed[node_address(2)]["reasons"][0]["message"]
    assert first.startswith("NIC mlx5_0 (0000:") and "): MAX_ACC_OUT_READ is 64" in first
    fatal = deployed[node_address(5)]["reasons"][0]["message"]
    bdf = json.loads((fleet.node_dir("node5") / "node.json").read_text())["nics"][2]["pci"]
    assert fatal.startswith(f"NIC mlx5_2 ({bdf}): mlx5_core logged"), fatal
    assert deployed[node_address(6)]["reasons"][0]["message"].startswith("NIC mlx5_1 (")
    assert deployed[node_address(8)]["reasons"][0]["message"].startswith("NIC mlx5_7 (")


def test_set_writes_next_boot_a_reboot_makes_it_current_and_a_refused_set_changes_nothing(fleet, tmp_path):
    bdf = json.loads((fleet.node_dir("node2") / "node.json").read_text())["nics"][0]["pci"]
    before = lab_nicfw.read_state(fleet.node_dir("node2"), bdf)
    for bad, said in (("FOO=1", "-E- Unknown Parameter FOO"),
                      ("MAX_ACC_OUT_READ=300", "-E- Cannot set the value 300 for the parameter MAX_ACC_OUT_READ"),
                      ("ATS_ENABLED=maybe", "-E- Cannot set the value maybe for the parameter ATS_ENABLED")):
        refused = lab_ssh(fleet, "node2", f"mlxconfig -d {bdf} -y set MAX_ACC_OUT_READ=0 {bad}")
        assert refused.returncode == 1 and said in refused.stdout, refused.stdout
    assert lab_nicfw.read_state(fleet.node_dir("node2"), bdf) == before

    applied = lab_ssh(fleet, "node2", f"mstconfig -d {bdf[5:]} -y set MAX_ACC_OUT_READ=0")
    assert applied.returncode == 0 and "-I- Please reboot machine to load new configurations." in applied.stdout
    doc, _ = check(fleet, "node2", refresh=True)
    assert [(r["code"], r["level"]) for r in doc["reasons"]] == [("nic_fw_wrong", "FAIL"), ("nic_fw_pending", "WARN")]
    assert doc["reasons"][1]["message"].endswith("MAX_ACC_OUT_READ is 64, 0 at the next boot")

    fleet.reboot("node2")
    doc, rc = check(fleet, "node2", refresh=True)
    assert (doc["status"], rc, doc["reasons"]) == ("OK", 0, [])
    query = lab_ssh(fleet, "node2", f"mlxconfig -d {bdf} -e q")
    # printed as mlxconfig prints it: one space after a value that fills its column (PCI_ATOMIC_MODE's)
    atomic = "PCI_ATOMIC_DISABLED_EXT_ATOMIC_ENABLED(0)"
    assert f"{atomic} {atomic} {atomic}" in query.stdout
    table = probe.parse_query(query.stdout)
    assert [v.text for v in (table["MAX_ACC_OUT_READ"].default, table["MAX_ACC_OUT_READ"].current,
                             table["MAX_ACC_OUT_READ"].next_boot)] == ["0", "0", "0"]
    assert table["PCI_ATOMIC_MODE"].current.text == atomic

    off = lab_ssh(fleet, "node1", f"mlxconfig -d {bdf} -y set ADVANCED_PCI_SETTINGS=0")
    assert off.returncode == 0, off.stdout
    fleet.reboot("node1")
    doc, _ = check(fleet, "node1", refresh=True)  # MAX_ACC_OUT_READ hidden now: its own reason
    assert [r["code"] for r in doc["reasons"]] == ["nic_fw_wrong", "nic_fw_pci_hidden"], doc["reasons"]
    hidden = lab_ssh(fleet, "node1", f"mlxconfig -d {bdf} -y set MAX_ACC_OUT_READ=0")
    assert hidden.returncode == 1 and "-E- The Device doesn't support MAX_ACC_OUT_READ parameter" in hidden.stdout

    # the firmware stage writes the hidden one together with ADVANCED_PCI_SETTINGS, then nothing until the reboot
    inventory = lab_inventory(tmp_path, verify_allreduce_state=STATE)
    run_pyinfra("deploys/nic_firmware.py", inventory=inventory, timeout=300)
    state = lab_nicfw.read_state(fleet.node_dir("node1"), bdf)
    assert (state["next"]["ADVANCED_PCI_SETTINGS"], state["next"]["MAX_ACC_OUT_READ"]) == (1, 0)
    stamp = lab_nicfw.state_path(fleet.node_dir("node1"), bdf).stat().st_mtime_ns
    again = run_pyinfra("deploys/nic_firmware.py", inventory=inventory, timeout=300)
    assert "NIC firmware: reboot required (mlx5_0: ADVANCED_PCI_SETTINGS)" in again.out, again.out
    assert lab_nicfw.state_path(fleet.node_dir("node1"), bdf).stat().st_mtime_ns == stamp
    fleet.reboot("node1")
    doc, _ = check(fleet, "node1", refresh=True)
    assert (doc["status"], doc["reasons"]) == ("OK", []), doc["reasons"]


def test_a_live_mlx5_fatal_line_comes_and_goes(fleet):
    fleet.fault("node1", "mlx5_fatal")
    doc, rc = check(fleet, "node1", refresh=True)
    assert (doc["status"], rc, [r["code"] for r in doc["reasons"]]) == ("FAIL", 2, ["nic_fatal_log"])
    assert "(health_poll_failed)" in doc["reasons"][0]["message"]
    fleet.clear("node1", "mlx5_fatal")
    doc, rc = check(fleet, "node1")
    assert (doc["status"], rc, doc["reasons"]) == ("OK", 0, [])
    with pytest.raises(Exception, match="mlx5_fatal=mlx5_0:meltdown"):
        fleet.fault("node1", "mlx5_fatal=mlx5_0:meltdown")


def test_the_firmware_stage_writes_only_what_differs_never_reboots_and_says_a_reboot_is_owed(fleet, tmp_path):
    inventory = lab_inventory(tmp_path, verify_allreduce_state=STATE)
    bdf = json.loads((fleet.node_dir("node2") / "node.json").read_text())["nics"][0]["pci"]
    boot = lab_ssh(fleet, "node2", "cat /proc/uptime").stdout.split()[0]
    run = run_pyinfra("deploys/nic_firmware.py", inventory=inventory, timeout=300)
    assert run.rc == 1 and "Traceback" not in run.out, run.out  # node4 has no mlxconfig: it alone fails
    assert "NIC firmware: cannot read mlx5_0: neither mlxconfig nor mstconfig is installed" in run.out
    state = lab_nicfw.read_state(fleet.node_dir("node2"), bdf)
    assert (state["current"]["MAX_ACC_OUT_READ"], state["next"]["MAX_ACC_OUT_READ"]) == (64, 0)
    assert "NIC firmware: reboot required (mlx5_0: MAX_ACC_OUT_READ)" in run.out
    # node3's pending ATS_ENABLED=1 is written back to the profile's 0: nothing left owed on that NIC
    node3 = json.loads((fleet.node_dir("node3") / "node.json").read_text())["nics"][3]["pci"]
    assert lab_nicfw.read_state(fleet.node_dir("node3"), node3)["next"]["ATS_ENABLED"] == 0
    # never reboots: node2's clock since boot ran on
    assert float(lab_ssh(fleet, "node2", "cat /proc/uptime").stdout.split()[0]) > float(boot)

    flash = [p for i in (1, 2, 3) for p in (fleet.node_dir(f"node{i}") / "firmware").glob("*.marshal")]
    written = {p: p.stat().st_mtime_ns for p in flash}
    again = run_pyinfra("deploys/nic_firmware.py", inventory=inventory, timeout=300)
    assert again.rc == 1 and "NIC firmware: reboot required (mlx5_0: MAX_ACC_OUT_READ)" in again.out  # still owed
    assert len(written) == 24 and {p: p.stat().st_mtime_ns for p in written} == written  # idempotent: no set ran
    fleet.reboot("node2")
    doc, _ = check(fleet, "node2", refresh=True)
    assert (doc["status"], doc["reasons"]) == ("OK", []), doc["reasons"]
