"""Host health end to end on an 8-node Slurm lab (issue 47): each fault
changes its node's emulated state (lab/host_health.py and the shims
systemctl, chronyc, dmesg, nvidia-smi, the EDAC counters in its /sys), and
fails or warns exactly that node with its own code on the deploy's
verification, `ccrhost check` and a prolog-style run (inside the node, as
slurmd runs its prolog: SLURM_SCRIPT_CONTEXT=prolog_slurmd, under slurmd's
locked-memory limit); the healthy node stays OK. Slurm says the nodes are
IDLE, so a leftover GPU process is judged on every path."""

import json
import sys

import pytest
from conftest import REPO, in_node, lab_inventory, lab_ssh, node_address, run_pyinfra

from ccrhost.lab import slurm as lab_slurm
from ccrhost.lab.host_health import lab_memlock_kib
from ccrhost.lab.inventory import LAB_PLATFORM

pytestmark = pytest.mark.lab

SLURM_NODES = 8
SLURM_HEALTHCHECK_INTERVAL = 0  # its paths are the deploy, ccrhost check and the prolog: none is Slurm's health check
# node -> (fault, status, reason codes)
FAULTS = {
    "node1": ("unit_down=nvidia-fabricmanager", "FAIL", {"host_unit_inactive"}),
    "node2": ("unit_flapping=nvidia-fabricmanager", "WARN", {"host_unit_flapping"}),
    "node3": ("gpu_leftover=2", "FAIL", {"host_gpu_leftover"}),
    "node4": ("memlock_low=64", "FAIL", {"host_memlock_low"}),
    "node5": ("edac_uncorrected", "FAIL", {"host_edac_uncorrected"}),
    "node6": ("kernel_soft_lockup", "FAIL", {"host_kernel_soft_lockup"}),
    "node7": ("time_unsynced", "WARN", {"host_time_unsynced"}),
}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# what the lab machine can give slurmd (a sandboxed root cannot raise its own limit): the lab's settings expect it
MACHINE_KIB = lab_memlock_kib()
WANTED = "unlimited" if MACHINE_KIB is None else f"at least {MACHINE_KIB} KiB"


@pytest.fixture
def host_lab(slurm_lab):
    lab = slurm_lab
    for node, (fault, *_) in FAULTS.items():
        lab.fault(node, fault)
    try:
        yield lab
    finally:
        for node, (fault, *_) in FAULTS.items():
            lab.clear(node, fault.split("=")[0])
        for node in lab.load().nodes:
            lab_ssh(lab, node.name, "rm -f /run/ccrhost/host-health.json /tmp/host-check.yaml")


# the checks are off until a site turns them on (settings/host_health.py); slurmd as a Slurm site lists it
ON = "host_health_enable: true\\nhost_health_units: [slurmd]\\n"


def config(lab) -> str:
    conf = lab_slurm.conf_path(lab)
    memlock = "" if MACHINE_KIB is None else f"host_health_memlock_kib: {MACHINE_KIB}\\n"
    return (f"printf 'verify_profile: {LAB_PLATFORM}\\nslurm_conf: {conf}\\n{ON}{memlock}' > /tmp/host-check.yaml && "
            f"cd {REPO} && {sys.executable} -m ccrhost check --config /tmp/host-check.yaml --format json")


def check(lab, node: str) -> dict:
    run = lab_ssh(lab, node, config(lab))
    assert run.stdout.startswith("{"), run.stdout + run.stderr
    return json.loads(run.stdout)


def prolog(lab, node: str) -> dict:
    """`ccrhost check` as slurmd's prolog runs it: in the node, before the job's processes, under
    slurmd's LimitMEMLOCK (the node's lab systemctl says it)."""
    limit = lab_ssh(lab, node, "systemctl show -p LimitMEMLOCK slurmd").stdout.strip().split("=", 1)[1]
    ulimit = "unlimited" if limit == "infinity" else str(int(limit) // 1024)
    run = in_node(lab, node, "/bin/sh", "-c", f"ulimit -l {ulimit} 2>/dev/null; {config(lab)}",
                  env=(f"PATH={PATH}", "SLURM_SCRIPT_CONTEXT=prolog_slurmd", "SLURM_JOB_ID=7"))
    assert run.stdout.startswith("{"), run.stdout + run.stderr
    return json.loads(run.stdout)


def host_codes(reasons) -> set:
    return {r["code"] for r in reasons if r["code"].startswith("host_")}


def test_each_host_fault_is_its_nodes_reason_on_every_path_and_a_healthy_node_stays_ok(host_lab, tmp_path):
    lab = host_lab
    check(lab, "node2")  # a first reading of the restart counts: flapping is a rise between two
    report_dir = tmp_path / "report"
    memlock = {} if MACHINE_KIB is None else {"host_health_memlock_kib": MACHINE_KIB}
    run = run_pyinfra("deploys/verify.py", inventory=lab_inventory(
        tmp_path, verify_report_dir=str(report_dir), slurm_conf=str(lab_slurm.conf_path(lab)),
        host_health_enable=True, host_health_units=["slurmd"], **memlock), timeout=500)
    assert "Traceback" not in run.out, run.out[-4000:]
    deployed = json.loads((report_dir / "ccr-report.json").read_text())["hosts"]
    for i in range(1, SLURM_NODES + 1):
        node = f"node{i}"
        _, status, wanted = FAULTS.get(node, (None, "OK", set()))
        host = deployed[node_address(i)]
        for path, doc in (("deploy", host), ("check", check(lab, node)), ("prolog", prolog(lab, node))):
            assert (doc["status"], host_codes(doc["reasons"])) == (status, wanted), (node, path, doc["reasons"])
            if node == "node8":
                assert doc["reasons"] == [], (path, doc["reasons"])
    # each names what it saw
    leftover = next(r for r in deployed[node_address(3)]["reasons"] if r["code"] == "host_gpu_leftover")
    assert leftover["message"].startswith("GPU 2 holds 1024 MiB on an idle node (Slurm: State=IDLE")
    assert "pid 31337" in leftover["message"]
    low = [r["message"] for r in prolog(lab, "node4")["reasons"]]
    assert low == [f"the prolog's locked-memory limit (ulimit -l, what the job inherits) is 64 KiB; wanted {WANTED}",
                   f"slurmd's LimitMEMLOCK is 65536 (64 KiB), which its jobs inherit; wanted {WANTED}"]


def test_a_stopped_unit_fails_and_a_restart_is_counted(host_lab):
    lab = host_lab
    lab_ssh(lab, "node8", "systemctl stop slurmd")
    try:
        doc = check(lab, "node8")
        assert [(r["code"], r["message"]) for r in doc["reasons"]] == [
            ("host_unit_inactive", "systemd unit slurmd is not active: inactive/dead")]
    finally:
        lab_ssh(lab, "node8", "systemctl start slurmd")
    assert check(lab, "node8")["status"] == "OK"
