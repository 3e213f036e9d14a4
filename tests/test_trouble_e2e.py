"""End to end: one node's odd output stays that node's.

On one shared lab (node1 and node2 MLNX_OFED, node3 upstream), the input of
each parser the deploy reads is corrupted on one node at a time: sysfs
values, GID tables, mlnx_qos, dcb, nvidia-smi, and the site's /etc/nccl.conf.
Each time the other nodes finish every stage and are verified, the bad node
fails with a message naming the file or command and the offending text (or
is UNKNOWN, for RDMA sysfs files and GPUs it cannot read: what nobody could
read is never a FAIL), and nothing prints a traceback or pyinfra's
"internal exception". The node is reset between cases.
"""

import json
import sys

import pytest
from conftest import (
    LAB_DIR,
    LAB_NAME,
    LAB_SUBNET,
    REPO,
    lab_inventory,
    lab_ssh,
    node_address,
    run_pyinfra,
)

pytestmark = pytest.mark.lab

IB = "/sys/class/infiniband"
RDMA_READ = f"cannot read {IB} and rdma_cm configfs: "
# the tuning stages run as one pyinfra operation (ccrhost.operations.tune)
QOS_STAGE = NCCL_STAGE = ROCE_STAGE = "Tune RDMA (modules, RoCE, boot unit, QoS, data path, NCCL)"
OFED_IFS = [f"ens{i}np0" for i in range(1, 9)]


@pytest.fixture(scope="module")
def lab():
    from ccrhost.lab.fleet import Lab

    lab = Lab(LAB_DIR)
    lab.down()
    lab.up(3, "hgx-h100-8x400", {}, name=LAB_NAME, subnet=LAB_SUBNET, profiles={"node3": "hgx-h100-8x400-upstream"})
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture
def deploy(lab, tmp_path):
    """Run the deploy once; afterwards reset every node this case touched."""
    touched = []

    def run(bad: str):
        touched.append(bad)
        return run_pyinfra("deploys/rdma.py", inventory=lab_inventory(tmp_path)), report(tmp_path)

    run.reset_later = touched.append  # a case that runs other deploys
    yield run
    for node in touched:
        for leftover in (lab.root(node) / "etc").glob("nccl.conf*"):
            leftover.unlink()
        lab.reboot(node)  # a fresh /sys, and /run without the garble rules


def report(tmp_path):
    return lambda: json.loads((tmp_path / "report/ccr-report.json").read_text())["hosts"]


def index(node: str) -> int:
    return int(node.removeprefix("node"))


def assert_contained(lab, run, hosts, bad: str, message: str, stage: str | None):
    """The bad node fails in ``stage`` with ``message``; the others finish every stage."""
    assert "Traceback" not in run.out and "internal exception" not in run.out, run.out
    address = node_address(index(bad))
    assert f"[{address}] {message}" in run.out, run.out
    verdicts = hosts()
    assert sorted(verdicts) == sorted(node_address(i) for i in (1, 2, 3))  # every host is in the report
    for good in {"node1", "node2", "node3"} - {bad}:
        verdict = verdicts[node_address(index(good))]
        codes = {r["code"] for r in verdict["reasons"]}
        # node3's inbox mlx5 and newer NVIDIA driver differ from the two OFED
        # nodes: whenever both of those are read, the fleet comparison WARNs it
        assert codes <= ({"mlx5_mismatch", "nvidia_mismatch"} if good == "node3" else set()), (good, verdict)
        assert verdict["status"] == ("WARN" if codes else "OK"), (good, verdict)
        root = lab.root(good)
        for path in ("etc/nccl.conf", "etc/ccrhost/boot-apply.sh", "etc/ccrhost/qos-interfaces"):
            assert (root / path).exists(), (good, path)
    if stage is not None:
        assert run.rc == 1
        (reason,) = verdicts[address]["reasons"]
        if message.startswith(RDMA_READ):
            # what could not be read is UNKNOWN, in the words and code of `ccrhost check`
            assert verdicts[address]["status"] == "UNKNOWN"
            assert reason == {"level": "UNKNOWN", "code": "rdma_unreadable", "message": message,
                              "action": "investigate", "scope": "node"}, reason
            return
        assert verdicts[address]["status"] == "FAIL"
        assert reason["message"].startswith(f"failed before verification: {stage}: "), reason
        assert message.split(": ")[-1] in reason["message"], reason


SYSFS_CASES = [
    ("rate", "mlx5_0/ports/1/rate", "fast",
     "/sys/class/infiniband/mlx5_0/ports/1/rate: expected '<n> Gb/sec (<w>X <SPEED>)', got 'fast'"),
    ("state", "mlx5_2/ports/1/state", "Unknown",
     "/sys/class/infiniband/mlx5_2/ports/1/state: expected '<n>: <NAME>', got 'Unknown'"),
    ("pcie", "mlx5_1/device/current_link_width", "x16",
     "/sys/class/infiniband/mlx5_1/device/current_link_width: expected a lane count 0 to 32 (or 255: unknown), "
     "got 'x16'"),
    ("gid", "mlx5_3/ports/1/gids/3", "fe80::zz::1",
     "/sys/class/infiniband/mlx5_3/ports/1/gids/3: expected an IPv6-form GID, got 'fe80::zz::1'"),
    ("gid type", "mlx5_4/ports/1/gid_attrs/types/3", "RoCE v9",
     "/sys/class/infiniband/mlx5_4/ports/1/gid_attrs/types/3: expected one of ('IB/RoCE v1', 'RoCE v2'), "
     "got 'RoCE v9'"),
]


@pytest.mark.parametrize("what, path, value, message", SYSFS_CASES, ids=[c[0] for c in SYSFS_CASES])
def test_a_corrupt_sysfs_value(lab, deploy, what, path, value, message):
    (lab.root("node2") / "sys/class/infiniband" / path).write_text(value + "\n")
    run, hosts = deploy("node2")
    assert_contained(lab, run, hosts, "node2", RDMA_READ + message, ROCE_STAGE)
    if what == "rate":  # ccrhost check on the node: UNKNOWN, one line, exit 3
        out = lab_ssh(lab, "node2", f"cd {REPO} && {sys.executable} -m ccrhost check --format nhc")
        assert out.returncode == 3, out
        assert out.stdout == f"ERROR: ccrhost: Health check failed: UNKNOWN: rdma_unreadable: cannot read /sys/class/infiniband and rdma_cm configfs: {message} [action investigate]\n"
        assert out.stderr == f"ccrhost check: UNKNOWN: cannot read /sys/class/infiniband and rdma_cm configfs: {message}\n"


def test_check_on_a_node_whose_nvidia_smi_hangs(lab):
    hang = lab.root("node2") / "run/ccrhost-lab/gpu_hang"
    hang.write_text("")
    try:
        out = lab_ssh(lab, "node2", f"cd {REPO} && {sys.executable} -m ccrhost check --profile hgx-h100-8x400 "
                                    "--format nhc --probe-timeout 2")
    finally:
        hang.unlink()
    assert out.returncode == 3, out
    assert out.stdout.startswith("ERROR: ccrhost: Health check failed: UNKNOWN: gpu_unreadable"), out
    assert ": cannot read GPUs: NVML: " in out.stdout, out
    assert out.stdout.endswith("nvidia-smi: nvidia-smi --query-gpu did not answer within 2 s (killed) [action investigate]\n"), out


TOOL_CASES = [
    ("mlnx_qos trust", "node2", "mlnx_qos", "Priority trust state: pcp", "Priority trust state: maybe",
     "QoS not changed: ens1np0: cannot read mlnx_qos -i ens1np0: line 'Priority trust state: maybe': "
     "trust state 'maybe' is not pcp or dscp", QOS_STAGE),
    ("mlnx_qos cable", "node2", "mlnx_qos", "Cable len: 7", "Cable len: -7",
     "QoS not changed: ens1np0: cannot read mlnx_qos -i ens1np0: line 'Cable len: -7': "
     "cable length '-7' is not an integer >= 0", QOS_STAGE),
    ("dcb pfc", "node3", "dcb-pfc", "", "pfc-cap 8 macsec-bypass off delay 7\nprio-pfc -1:on 0:off\n",
     "QoS not changed: enp26s0np0: cannot read dcb pfc show dev enp26s0np0: line 'prio-pfc -1:on 0:off': "
     "priority '-1' is not an integer 0..7", QOS_STAGE),
    ("dcb app", "node3", "dcb-app", "", "dscp-prio 0:0 CS3:3\n",
     "QoS not changed: enp26s0np0: cannot read dcb -N app show dev enp26s0np0 dscp-prio: line 'dscp-prio 0:0 CS3:3': "
     "DSCP 'CS3' by name: run dcb with -N", QOS_STAGE),
    ("dcb buffer", "node3", "dcb-buffer", "", "prio-buffer 0:8 1:0\nbuffer-size 0:10Kb\ntotal-size 1222Kb\n",
     "QoS not changed: enp26s0np0: cannot read dcb buffer show dev enp26s0np0: line 'prio-buffer 0:8 1:0': "
     "buffer '8' is not an integer 0..7", QOS_STAGE),
]


@pytest.mark.parametrize("what, bad, tool, find, replace, message, stage", TOOL_CASES,
                         ids=[c[0] for c in TOOL_CASES])
def test_odd_tool_output(lab, deploy, what, bad, tool, find, replace, message, stage):
    lab.garble(bad, tool, find, replace)
    run, hosts = deploy(bad)
    assert_contained(lab, run, hosts, bad, message, stage)


def test_odd_nvidia_smi_output_is_unknown_for_that_node_only(lab, deploy):
    lab.garble("node2", "nvidia-smi", ", 1980, 1980,", ", fast, 1980,")
    run, hosts = deploy("node2")
    assert run.rc == 0, run.out  # UNKNOWN is no failure: the node is not failed for what cannot be measured
    row = "0, NVIDIA H100 80GB HBM3"
    verdict = hosts()[node_address(2)]
    assert verdict["status"] == "UNKNOWN"
    assert verdict["gpu_error"].startswith(f"unexpected nvidia-smi --query-gpu output: line '{row}")
    assert verdict["gpu_error"].endswith(": clocks.sm 'fast' is not a number")
    assert_contained(lab, run, hosts, "node2", "verification UNKNOWN (CCR unknown): cannot read GPUs: ", None)


LATIN1 = b"# site: caf\xe9 pour NCCL\nNCCL_DEBUG=WARN\n"


def test_a_latin1_byte_in_nccl_conf_fails_that_host_and_leaves_the_file(lab, deploy):
    conf = lab.root("node2") / "etc/nccl.conf"
    conf.write_bytes(LATIN1)
    run, hosts = deploy("node2")
    message = ("/etc/nccl.conf left untouched: /etc/nccl.conf is not UTF-8: byte 0xe9 in line 1: "
               "# site: caf\\xe9 pour NCCL")
    assert_contained(lab, run, hosts, "node2", message, NCCL_STAGE)
    assert conf.read_bytes() == LATIN1 and not list(conf.parent.glob("nccl.conf.*"))


def test_a_block_without_end_is_refused_and_left(lab, deploy):
    from ccrhost.model.nccl import BEGIN, END

    conf = lab.root("node2") / "etc/nccl.conf"
    text = f"NCCL_DEBUG=WARN\n{BEGIN}\nNCCL_IB_TC=106\nNCCL_SITE_TUNING=1\n"
    conf.write_text(text)
    run, hosts = deploy("node2")
    message = (f"/etc/nccl.conf left untouched: line 2 opens ccrhost's block ({BEGIN!r}) but no {END!r} line "
               "closes it; fix the file (the lines after it may be the site's) and rerun")
    assert_contained(lab, run, hosts, "node2", message, NCCL_STAGE)
    assert conf.read_text() == text


def test_a_crlf_nccl_conf_keeps_its_lines_one_block_and_a_backup(lab, deploy):
    from ccrhost.model.nccl import BEGIN, END

    conf = lab.root("node2") / "etc/nccl.conf"
    site = "# edited on a desktop\r\nNCCL_DEBUG=WARN\r\n"
    old = f"{BEGIN}\r\nNCCL_IB_TC=98\r\n{END}\r\n"
    conf.write_text(site + old + "NCCL_SITE_TAIL=1\r\n")
    run, hosts = deploy("node2")
    assert run.rc == 0, run.out
    text = conf.read_bytes().decode()  # read_text() would turn CRLF into LF
    assert text.startswith(site) and text.endswith("NCCL_SITE_TAIL=1\r\n")
    assert text.split("\n").count(BEGIN) == 1 and "NCCL_IB_TC=106\n" in text and "NCCL_IB_TC=98" not in text
    (backup,) = conf.parent.glob("nccl.conf.ccrhost-bak.*")
    assert backup.read_bytes().decode() == site + old + "NCCL_SITE_TAIL=1\r\n"
    assert hosts()[node_address(2)]["status"] == "OK"


def test_the_measurement_and_the_monitor_keep_a_garbled_node_to_itself(lab, deploy, tmp_path):
    (lab.root("node2") / "sys/class/infiniband/mlx5_0/ports/1/rate").write_text("fast\n")
    deploy.reset_later("node2")
    inventory = lab_inventory(tmp_path, verify_measure=True, verify_measure_seconds=1, verify_measure_timeout=8,
                              verify_measure_retries=0, monitor_seconds=1)
    bad, why = node_address(2), ("unexpected sysfs content: /sys/class/infiniband/mlx5_0/ports/1/rate: "
                                 "expected '<n> Gb/sec (<w>X <SPEED>)', got 'fast'")
    verify = run_pyinfra("deploys/verify.py", inventory=inventory)
    assert "Traceback" not in verify.out and "internal exception" not in verify.out, verify.out
    hosts = report(tmp_path)()
    assert hosts[bad]["status"] == "FAIL" and hosts[bad]["reasons"][0]["message"] == f"failed before verification: {why}"
    for good in (1, 3):  # measured against each other, and judged
        assert hosts[node_address(good)]["status"] == "OK", hosts[node_address(good)]
    monitor = run_pyinfra("deploys/monitor.py", inventory=inventory)
    assert "Traceback" not in monitor.out and "internal exception" not in monitor.out, monitor.out
    window = json.loads((tmp_path / "report/monitor-report.json").read_text())["hosts"]
    assert window[bad] == {"verdict": "UNKNOWN", "reason": f"failed: {why}", "flags": []}
    assert all("gpu_util_mean" in window[node_address(i)] for i in (1, 3))
