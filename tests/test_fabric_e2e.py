"""End to end on a lab: one lossless-fabric fault per node, judged by the
deploy and by `ccrhost check` with their own codes; the deploy turns global
pause off, a reboot brings it back, the boot unit clears it again."""

import json
import subprocess
import sys
import time

import pytest
from conftest import LAB_DIR, REPO, lab_ssh, node_address, run_pyinfra

pytestmark = pytest.mark.lab

FAULTS = {"node2": "pfc_storm", "node3": "global_pause", "node4": "rx_discards", "node5": "rnr_retry"}
# what each node is judged once a window exists (node3's pause the deploy turned off)
JUDGED = {
    "node2": ("FAIL", {"pfc_pause_share", "pause_storm", "pause_storm_warning"}),
    "node4": ("WARN", {"netdev_rx_drops"}),
    "node5": ("FAIL", {"rdma_transport_failing"}),
}


def codes(doc) -> tuple[str, set[str]]:
    return doc["status"], {r["code"] for r in doc["reasons"]}


def check(lab, node, *args):
    return lab_ssh(lab, node, f"cd {REPO} && {sys.executable} -m ccrhost check --profile hgx-h100-8x400 "
                              + " ".join(args))


def test_each_fabric_fault_is_its_own_nodes_reason_and_global_pause_stays_off(make_lab, tmp_path):
    lab = make_lab(nodes=5, faults=[f"{n}:{f}" for n, f in FAULTS.items()])
    inventory = tmp_path / "inventory.py"
    inventory.write_text("from ccrhost.lab.inventory import lab_hosts\n"
                         f"nodes = [(n, {{**d, 'verify_report_dir': {str(tmp_path / 'report')!r}}}) "
                         "for n, d in lab_hosts()]\n")
    assert "RX:\t\ton" in lab_ssh(lab, "node3", "ethtool -a ens1np0").stdout
    # node5's fault counts once a second from its boot: the first reading must come after the first count,
    # or there is nothing since boot to judge yet (what a node that has shown no fault rightly reads)
    rnr = lab.root("node5") / "sys/class/infiniband/mlx5_0/ports/1/hw_counters/rnr_nak_retry_err"
    deadline = time.monotonic() + 10
    while int(rnr.read_text()) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert int(rnr.read_text()) > 0

    def report():
        doc = json.loads((tmp_path / "report/ccr-report.json").read_text())
        return {f"node{i}": doc["hosts"][node_address(i)] for i in range(1, 6)}

    first = run_pyinfra("deploys/rdma.py", inventory=str(inventory))
    assert f"[{node_address(3)}] QoS: 1 command" in first.out, first.out
    assert "RX:\t\toff\nTX:\t\toff" in lab_ssh(lab, "node3", "ethtool -a ens1np0").stdout
    # the first run has no stored reading: rates are judged since boot (issue 35), node3's pause is off now;
    # node2 had no PFC priority (so no pause-duration counter) until the run's QoS stage set one
    since_boot = {**JUDGED, "node2": ("FAIL", {"pause_storm", "pause_storm_warning"})}
    assert {n: codes(h) for n, h in report().items()} == {f"node{i}": since_boot.get(f"node{i}", ("OK", set()))
                                                         for i in range(1, 6)}, first.out
    assert "ethtool -A ens1np0 rx off tx off" in (lab.root("node3") / "etc/ccrhost/boot-apply.sh").read_text()

    time.sleep(2.5)
    verify = run_pyinfra("deploys/verify.py", inventory=str(inventory))
    assert verify.rc == 1, verify.out  # the FAIL nodes fail
    judged = {n: codes(h) for n, h in report().items()}
    assert judged == {n: JUDGED.get(n, ("OK", set())) for n in judged}, verify.out

    time.sleep(2.5)
    for node in judged:
        out = check(lab, node, "--format json")
        assert codes(json.loads(out.stdout)) == JUDGED.get(node, ("OK", set())), (node, out.stdout, out.stderr)

    # a reboot: global pause is back (its power-on state), the check FAILs it, the boot unit clears it
    env = {"CCRHOST_LAB_DIR": str(LAB_DIR), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    out = subprocess.run([sys.executable, "-m", "ccrhost", "lab", "reboot", "node3"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "RX:\t\ton" in lab_ssh(lab, "node3", "ethtool -a ens1np0").stdout
    failed = json.loads(check(lab, "node3", "--format json").stdout)
    assert codes(failed) == ("FAIL", {"global_pause_on"})
    assert [r["message"] for r in failed["reasons"]] == [
        "global pause on beside PFC on ens1np0 (ethtool -a: RX on, TX on): 802.3x pause stops every priority"]
    assert lab_ssh(lab, "node3", "/etc/ccrhost/boot-apply.sh").returncode == 0
    assert "RX:\t\toff\nTX:\t\toff" in lab_ssh(lab, "node3", "ethtool -a ens1np0").stdout
    assert codes(json.loads(check(lab, "node3", "--format json").stdout)) == ("OK", set())


def test_fabric_faults_are_live_and_a_bad_nic_is_refused(make_lab):
    from ccrhost.lab.profile import ProfileError

    lab = make_lab(nodes=1)

    def stat(name):
        out = lab_ssh(lab, "node1", "ethtool -S ens2np0").stdout
        return next(int(line.split(":")[1]) for line in out.splitlines() if line.strip().startswith(name + ":"))

    assert stat("rx_discards_phy") == 0 and "RX:\t\toff" in lab_ssh(lab, "node1", "ethtool -a ens2np0").stdout
    assert lab.fault("node1", "rx_discards=mlx5_1") == ["rx_discards=mlx5_1"]
    lab.fault("node1", "global_pause=mlx5_1")
    lab.fault("node1", "rnr_retry=mlx5_1")
    time.sleep(2.2)
    assert stat("rx_discards_phy") > 0 and "RX:\t\ton\nTX:\t\ton" in lab_ssh(lab, "node1", "ethtool -a ens2np0").stdout
    rnr = lab.root("node1") / "sys/class/infiniband/mlx5_1/ports/1/hw_counters/rnr_nak_retry_err"
    assert int(rnr.read_text()) > 0
    with pytest.raises(ProfileError, match="pfc_storm=mlx5_9: need a NIC of hgx-h100-8x400"):
        lab.fault("node1", "pfc_storm=mlx5_9")
    for kind in ("rx_discards", "global_pause", "rnr_retry"):
        lab.clear("node1", kind)
    assert stat("rx_discards_phy") == 0 and "RX:\t\toff" in lab_ssh(lab, "node1", "ethtool -a ens2np0").stdout


def test_the_reading_is_the_same_with_and_without_a_temporary_folder(make_lab):
    """The netdevs' ethtool reads run at once, each into a file of a
    temporary folder; where none can be made they run one after another,
    and the reading is the same (but for its time and uptime lines), left no file."""
    from ccrhost.probes.fabric import parse_fabric_dump, reading_command

    lab = make_lab(nodes=1)
    script = reading_command()
    before = lab_ssh(lab, "node1", "ls -A /tmp").stdout  # the controller's checkout, when it sits in /tmp
    parallel = lab_ssh(lab, "node1", script)
    assert lab_ssh(lab, "node1", "TMPDIR=/nonexistent mktemp -d").returncode != 0  # so the serial path runs
    serial = lab_ssh(lab, "node1", f"export TMPDIR=/nonexistent; {script}")
    assert parallel.returncode == serial.returncode == 0
    one, two = (sorted(x for x in r.stdout.splitlines() if not x.startswith(("@@t ", "@@uptime "))) for r in (parallel, serial))
    assert one == two and sum(x.startswith("@@stats ") for x in one) == 8
    dump = parse_fabric_dump(["@@previous", *parallel.stdout.splitlines()])
    assert len(dump.now.netdevs) == 8 and set(dump.now.pause) == set(dump.now.netdevs)
    assert lab_ssh(lab, "node1", "ls -A /tmp").stdout == before
