"""The fabric's wiring on an InfiniBand lab (issue 48): each port's first
hop answered by the lab's smpquery from the cabling it keeps, the P_Key
table and SM LID the lab's subnet manager writes into each node's /sys.
Two cables swapped, the site's P_Key dropped from a port and a second
master subnet manager are each found, on the node's check and the deploy's
verification alike, the second SM by the fleet view only."""

import json
import sys

import pytest
from conftest import REPO, lab_inventory, lab_ssh, run_pyinfra

from ccrhost.lab import switches
from ccrhost.lab.inventory import LAB_PLATFORM

pytestmark = pytest.mark.lab

STATE = "/run/ccrhost/active.json"


def plan(state) -> list[dict]:
    """The site's plan by the leaves' GUIDs (as ibnetdiscover lists them), rail i on leaf i."""
    return [{"leaf_guids": [switches.leaf_guid(state, i)]} for i in range(8)]


def check(lab, node: str) -> dict:
    (lab.root(node) / "tmp" / "wiring.yaml").write_text(
        f"verify_profile: {LAB_PLATFORM}\nverify_allreduce_state: {STATE}\nwiring_enable: true\n"
        f"wiring_rails: {json.dumps(plan(lab.load()))}\nwiring_pkey: '0x8001'\n")
    run = lab_ssh(lab, node, f"cd {REPO} && {sys.executable} -m ccrhost check --config /tmp/wiring.yaml "
                             "--format json --refresh-wiring")
    assert run.stdout.startswith("{"), run.stdout + run.stderr
    return json.loads(run.stdout)


def wiring(verdict: dict) -> list[tuple[str, str, str]]:
    return sorted((r["level"], r["code"], r["message"]) for r in verdict["reasons"] if r["code"].startswith("wiring_"))


def test_swapped_cables_a_missing_pkey_and_a_second_sm_on_an_infiniband_fabric(make_lab, tmp_path):
    lab = make_lab(nodes=2, profile="hgx-h100-8x400-ib", wiring=True)
    state = lab.load()
    assert [wiring(check(lab, n)) for n in ("node1", "node2")] == [[], []]
    # the node reads what the lab's subnet manager programmed
    assert lab_ssh(lab, "node2", "cat /sys/class/infiniband/mlx5_2/ports/1/pkeys/1").stdout == "0x8001\n"

    switches.swap(lab, "node1", "ibp1s0", "ibp2s0")
    switches.drop_pkey(lab, "node2", "ibp3s0")
    switches.second_sm(lab, "node2", "ibp4s0")
    guid = switches.leaf_guid
    assert wiring(check(lab, "node1")) == [
        ("FAIL", "wiring_wrong_rail", f"NIC mlx5_0 port 1 (ibp1s0) (rail 0) must reach leaf GUID {guid(state, 0)}; "
                                      "it reaches leaf-r1 port 1"),
        ("FAIL", "wiring_wrong_rail", f"NIC mlx5_1 port 1 (ibp2s0) (rail 1) must reach leaf GUID {guid(state, 1)}; "
                                      "it reaches leaf-r0 port 1"),
    ]
    second = check(lab, "node2")
    assert wiring(second) == [("FAIL", "wiring_pkey_missing", "NIC mlx5_2 port 1 (ibp3s0): the site's P_Key 0x8001 "
                                                              "is not in its P_Key table: 0xffff")]

    # the deploy: the same node verdicts, and the fleet view names the two masters
    path = lab_inventory(tmp_path, verify_allreduce_state=STATE, wiring_enable=True, wiring_rails=plan(state),
                         wiring_pkey="0x8001")
    run = run_pyinfra("deploys/verify.py", inventory=path)
    assert "Traceback" not in run.out, run.out
    doc = json.loads((tmp_path / "report" / "ccr-report.json").read_text())
    hosts = doc["hosts"]
    assert wiring(hosts[lab.node("node2").address]) == wiring(second)
    assert [c for _, c, _ in wiring(hosts[lab.node("node1").address])] == ["wiring_wrong_rail"] * 2
    sms = [f for f in doc["wiring"]["findings"] if f["kind"] == "several_sms"]
    assert len(sms) == 1, doc["wiring"]
    one, two = lab.node("node1").address, lab.node("node2").address  # the deploy's hosts are the lab's addresses
    assert sms[0]["message"] == (f"subnet fe80:0000:0000:0000: 2 master subnet managers: the SM at LID 1 "
                                 f"(0x0002c90300a00001) seen by {one}, {two}; the SM at LID 2 (0x0002c90300a00002) "
                                 f"seen by {two}"), sms
