"""The fabric's wiring end to end on a 4-node Slurm lab whose NICs are cabled
to leaf switches running a real lldpd (lab/switches.py; issue 48): each
node's own lldpd learns its neighbours, `ccrhost check` reads them with
lldpctl and judges them against the fabric plan (leaf-r<i> for rail i), the
prolog judges the stored reading, and a cable swapped at the leaves, a
leaf port gone quiet and a stopped lldpd are each their node's own reason."""

import json
import sys

import pytest
from conftest import REPO, heal_slurm_lab, in_node, lab_ssh

from ccrhost.lab import slurm as lab_slurm
from ccrhost.lab import switches
from ccrhost.lab.inventory import LAB_PLATFORM

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


def test_each_wiring_fault_is_its_own_nodes_reason_on_the_check_and_the_prolog(wired):
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

    # as the health check drains: the swapped node is drained naming the code, the unreadable one is not
    for node in ("node1", "node3"):
        lab_ssh(lab, node, f"{config(lab)} && cd {REPO} && SLURM_CONF={lab_slurm.conf_path(lab)} "
                           f"{sys.executable} -m ccrhost check --config /tmp/wiring.yaml --format nhc --drain")
    states = lab_slurm.node_states(lab)
    assert "drain" in states["node1"][0] and "wiring_wrong_rail" in states["node1"][1], states["node1"]
    assert "drain" not in states["node3"][0], states["node3"]
