"""The fabric's wiring end to end on a 4-node Slurm lab whose NICs are cabled
to leaf switches running a real lldpd (lab/switches.py; issue 48): each
node's own lldpd learns its neighbours, `ccrhost check` reads them with
lldpctl and judges them against the fabric plan (leaf-r<i> for rail i), the
prolog judges the stored reading, and a cable swapped at the leaves, a
leaf port gone quiet and a stopped lldpd are each their node's own reason."""

import json
import subprocess
import sys
import time

import pytest
import yaml
from conftest import REPO, heal_slurm_lab, in_node, lab_inventory, lab_ssh, run_pyinfra

from ccrhost.lab import slurm as lab_slurm
from ccrhost.lab import switches
from ccrhost.lab.inventory import LAB_PLATFORM
from ccrhost.settings import validate_host

pytestmark = pytest.mark.lab

SLURM_NODES = 4
SLURM_HEALTHCHECK_INTERVAL = 0  # the health check is run here by hand, on the node
LAB_WIRING = True
STATE = "/run/ccrhost/active.json"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RAILS = "[" + ", ".join(f"{{leaf: leaf-r{i}}}" for i in range(8)) + "]"


def config(lab) -> str:
    """The site's plan: NIC i (mlx5_i, ens<i+1>np0) on leaf-r<i>, the RoCE v2 GID at index 3."""
    text = (f"verify_profile: {LAB_PLATFORM}\\nslurm_conf: {lab_slurm.conf_path(lab)}\\n"
            f"verify_allreduce_state: {STATE}\\nwiring_enable: true\\nwiring_rails: {RAILS}\\nwiring_gid_index: 3\\n")
    return f"printf '{text}' > /tmp/wiring.yaml"


def check(lab, node: str, *flags: str) -> dict:
    run = lab_ssh(lab, node, f"{config(lab)} && cd {REPO} && {sys.executable} -m ccrhost check "
                             f"--config /tmp/wiring.yaml --format json {' '.join(flags)}")
    assert run.stdout.startswith("{"), run.stdout + run.stderr
    return json.loads(run.stdout)


def prolog(lab, node: str) -> dict:
    """As slurmd runs the prolog: in the node, no refresh: the stored reading and its age."""
    lab_ssh(lab, node, config(lab))
    run = in_node(lab, node, sys.executable, "-m", "ccrhost", "check", "--config", "/tmp/wiring.yaml",
                  "--format", "json", env=(f"PATH={PATH}", "SLURM_SCRIPT_CONTEXT=prolog_slurmd", "SLURM_JOB_ID=7",
                                           f"PYTHONPATH={REPO}"))
    assert run.stdout.startswith("{"), run.stdout + run.stderr
    return json.loads(run.stdout)


def wiring_reasons(verdict: dict) -> list[tuple[str, str, str]]:
    return sorted((r["level"], r["code"], r["message"]) for r in verdict["reasons"]
                  if r["code"].startswith("wiring_"))


@pytest.fixture
def wired(slurm_lab):
    lab = slurm_lab
    switches.wait_learned(lab, ["node1", "node2", "node3", "node4"])
    try:
        yield lab
    finally:
        state = lab.load()
        if state.wiring["cables"]["node1"]["ens1np0"][0] != 0:
            switches.swap(lab, "node1", "ens1np0", "ens2np0")
        if state.wiring.get("silenced"):
            switches.unsilence(lab, "node2", "ens3np0")
        switches.start_node_lldpd(lab, lab.node("node3"))
        for node in ("node1", "node2", "node3", "node4"):
            lab_ssh(lab, node, f"rm -f {STATE} /tmp/wiring.yaml")
        heal_slurm_lab(lab)


def test_each_wiring_fault_is_its_own_nodes_reason_on_the_check_the_prolog_and_the_deploy(wired, tmp_path):
    lab = wired
    healthy = {n: check(lab, n, "--refresh-wiring") for n in ("node1", "node2", "node3", "node4")}
    for node, verdict in healthy.items():
        assert wiring_reasons(verdict) == [], (node, verdict["reasons"])
        assert verdict["status"] == "OK", (node, verdict["reasons"])

    switches.swap(lab, "node1", "ens1np0", "ens2np0")  # two cables crossed at the leaves
    switches.silence(lab, "node2", "ens3np0")          # its leaf port no longer announces itself
    switches.stop_lldpd(lab, "node3")                  # systemctl stop lldpd
    switches.wait_learned(lab, ["node1", "node2"])

    got = {n: check(lab, n, "--refresh-wiring") for n in ("node1", "node2", "node3", "node4")}
    assert got["node1"]["status"] == "FAIL"
    assert wiring_reasons(got["node1"]) == [
        ("FAIL", "wiring_wrong_rail", "NIC mlx5_0 port 1 (ens1np0) (rail 0) must reach leaf leaf-r0; it reaches "
                                      "leaf-r1 port swp1"),
        ("FAIL", "wiring_wrong_rail", "NIC mlx5_1 port 1 (ens2np0) (rail 1) must reach leaf leaf-r1; it reaches "
                                      "leaf-r0 port swp1"),
    ]
    assert got["node2"]["status"] == "FAIL"
    assert wiring_reasons(got["node2"]) == [
        ("FAIL", "wiring_no_neighbour", "NIC mlx5_2 port 1 (ens3np0) (rail 2): lldpd has no LLDP neighbour on it")]
    assert got["node3"]["status"] == "UNKNOWN"
    unread = wiring_reasons(got["node3"])
    assert [c for _, c, _ in unread] == ["wiring_unreadable"] * 8
    assert all("(is lldpd running?)" in m for _, _, m in unread), unread
    assert got["node4"]["status"] == "OK" and wiring_reasons(got["node4"]) == []

    # the prolog never reads anew: it judges the stored readings, to the same verdicts
    for node, verdict in got.items():
        again = prolog(lab, node)
        assert (again["status"], wiring_reasons(again)) == (verdict["status"], wiring_reasons(verdict)), node

    # the deploy's verification reads the wiring itself (a fact over SSH) and judges it the same way
    path = lab_inventory(tmp_path, verify_profile=LAB_PLATFORM, verify_allreduce_state=STATE, wiring_enable=True,
                         wiring_rails=[{"leaf": f"leaf-r{i}"} for i in range(8)], wiring_gid_index=3)
    run = run_pyinfra("deploys/verify.py", inventory=path)
    assert run.rc == 1 and "Traceback" not in run.out, run.out  # node1 and node2 fail
    hosts = json.loads((tmp_path / "report" / "ccr-report.json").read_text())["hosts"]
    for node, verdict in got.items():
        deployed = hosts[lab.node(node).address]
        assert (deployed["status"], wiring_reasons(deployed)) == (verdict["status"], wiring_reasons(verdict)), node

    # as the health check drains: the swapped node is drained naming the code, the unreadable one is not
    for node in ("node1", "node3"):
        lab_ssh(lab, node, f"{config(lab)} && cd {REPO} && SLURM_CONF={lab_slurm.conf_path(lab)} "
                           f"{sys.executable} -m ccrhost check --config /tmp/wiring.yaml --format nhc --drain")
    # and as the prolog runs (--drain --drain-unknown): an unreadable wiring says nothing against the node
    run = in_node(lab, "node3", sys.executable, "-m", "ccrhost", "check", "--config", "/tmp/wiring.yaml", "--format",
                  "nhc", "--drain", "--drain-unknown",
                  env=(f"PATH={PATH}", "SLURM_SCRIPT_CONTEXT=prolog_slurmd", "SLURM_JOB_ID=7", f"PYTHONPATH={REPO}",
                       f"SLURM_CONF={lab_slurm.conf_path(lab)}"))
    assert run.returncode == 0, run.stdout + run.stderr  # the job starts
    states = lab_slurm.node_states(lab)
    assert "drain" in states["node1"][0] and "wiring_wrong_rail" in states["node1"][1], states["node1"]
    assert "drain" not in states["node3"][0], states["node3"]


NODES = ("node1", "node2", "node3", "node4")


def verify(lab, tmp_path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`ccrhost slurm verify` from the controller: each node's check in a Slurm job, as a site runs it."""
    return subprocess.run(
        [sys.executable, "-m", "ccrhost", "slurm", "verify", "--ccrhost", lab_slurm.ccrhost_command(),
         "--config", "/tmp/wiring.yaml", "--report-dir", str(tmp_path / "report"), *args],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, env={**lab_slurm.client_env(lab), **(env or {})})


def topology(lab) -> list[str]:
    """What slurmctld loaded, once told to read its files again."""
    lab_slurm.run(lab, "scontrol", "reconfigure", check=True)
    return lab_slurm.run(lab, "scontrol", "show", "topology", check=True).stdout.split("\n")


def test_topology_conf_from_the_leaves_is_loaded_by_slurmctld_and_follows_a_swapped_cable(wired, tmp_path):
    lab = wired
    for node in NODES:  # each node reads its wiring (as its health check does when the reading is due)
        assert check(lab, node, "--refresh-wiring")["status"] == "OK"
    conf = lab_slurm.topology_path(lab)
    run = verify(lab, tmp_path, "--topology-conf", str(conf))
    assert run.returncode == 0, run.stdout + run.stderr
    assert [line.split(" ", 1)[1] for line in topology(lab) if line] == [
        "Level=0 LinkSpeed=1 Nodes=node[1-4]"]
    assert topology(lab)[0].startswith("SwitchName=leaf-r0 ")
    assert (tmp_path / "report" / "cabling.csv").read_text() == "node,nic,rail,expected_leaf,found_leaf_port\n"
    # the plan this known-good fleet shows: each rail's leaf by its LLDP chassis id, ready for the inventory
    plan = yaml.safe_load((tmp_path / "report" / "wiring-plan.yaml").read_text())
    assert plan == {"wiring_rails": [{"leaf_guids": [switches.leaf_mac(lab.load(), i)]} for i in range(8)]}
    assert validate_host("node1", plan).wiring_policy().rails[0].guids == (switches.leaf_mac(lab.load(), 0),)

    switches.swap(lab, "node1", "ens1np0", "ens2np0")
    switches.wait_learned(lab, ["node1"])
    assert check(lab, "node1", "--refresh-wiring")["status"] == "FAIL"  # read again after the recabling
    run = verify(lab, tmp_path, "--topology-conf", str(conf))
    assert run.returncode == 2, run.stdout + run.stderr
    # node1's two lowest rails are crossed: it is placed by its first good one, leaf-r2, under a root
    assert [line for line in topology(lab) if line] == [
        "SwitchName=leaf-r0 Level=0 LinkSpeed=1 Nodes=node[2-4]",
        "SwitchName=leaf-r2 Level=0 LinkSpeed=1 Nodes=node1",
        "SwitchName=fabric Level=1 LinkSpeed=1 Nodes=node[1-4] Switches=leaf-r[0,2]",
    ]
    # the technician's list: exactly the two crossed NICs, where each should go and where it goes
    assert (tmp_path / "report" / "cabling.csv").read_text() == (
        "node,nic,rail,expected_leaf,found_leaf_port\n"
        "node1,mlx5_0/1,0,leaf leaf-r0,leaf-r1:swp1\n"
        "node1,mlx5_1/1,1,leaf leaf-r1,leaf-r0:swp1\n")


def test_three_nodes_failing_on_one_leaf_make_one_leaf_suspect_and_drain_as_ever(wired, tmp_path):
    lab = wired
    for node in NODES:
        assert check(lab, node, "--refresh-wiring")["status"] == "OK"
    # a job holds the four nodes (their prologs passed), then leaf-r0's ports to three of them go down
    job = lab_slurm.run(lab, "sbatch", "--parsable", "-N4", "--exclusive", "-o", "/dev/null", "--wrap",
                        "sleep 300", check=True).stdout.strip()
    deadline = time.monotonic() + 30
    while lab_slurm.run(lab, "squeue", "-h", "-j", job, "-o", "%T|%r").stdout.strip() != "RUNNING|None":
        assert time.monotonic() < deadline, f"job {job} did not start"
        time.sleep(0.1)
    for node in ("node1", "node2", "node3"):
        lab.fault(node, "port_down=mlx5_0")
    run = verify(lab, tmp_path, "--drain", env={"SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": "node[1-4]"})
    assert run.returncode == 2, run.stdout + run.stderr
    suspects = [line for line in run.stderr.splitlines() if "] wiring: leaf_suspect" in line]
    assert len(suspects) == 1, run.stderr
    assert "leaf leaf-r0: 3 of its 4 nodes failed port_down" in suspects[0], suspects
    assert suspects[0].endswith("node1, node2, node3"), suspects
    report = json.loads((tmp_path / "report" / "ccr-report.json").read_text())
    assert [f["kind"] for f in report["wiring"]["findings"]] == ["leaf_suspect"]
    states = lab_slurm.node_states(lab)
    for node in ("node1", "node2", "node3"):  # each one's verdict points at the switch
        reasons = {r["code"]: r["message"] for r in report["hosts"][node]["reasons"]}
        assert {"port_down", "leaf_suspect"} <= set(reasons), (node, reasons)
        assert reasons["leaf_suspect"].endswith("check the leaf switch leaf-r0"), reasons["leaf_suspect"]
    # drained under the drain cap as ever (one node of four per code): the first, naming the switch's code
    assert "drain" in states["node1"][0] and "leaf_suspect" in states["node1"][1], states["node1"]
    for node in ("node2", "node3"):
        assert "drain" not in states[node][0], states[node]
        assert f"{node} not drained: DRAIN CAP HELD for port_down" in run.stderr
    assert "leaf_suspect" not in {r["code"] for r in report["hosts"]["node4"]["reasons"]}
    assert "drain" not in states["node4"][0], states["node4"]
