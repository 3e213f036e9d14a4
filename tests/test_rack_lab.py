"""An NVLink rack's trays end to end (issue 49): a lab of GB200 NVL72-shaped
trays (lab/rack.py) whose GPUs share a clique and cluster UUID and whose
IMEX daemons form one domain. Each tray fault fails its tray with its own
code on the node's check, the prolog (the stored nothing: it reads the same
probes) and the deploy's verification; a tray at odds with the IMEX domain
fails itself and is only a WARN (never a drain) on the others."""

import json
import sys

import pytest
from conftest import REPO, in_node, lab_inventory, lab_ssh, run_pyinfra

from ccrhost.lab import rack as lab_rack
from ccrhost.lab import slurm_block

pytestmark = pytest.mark.lab

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TRAYS = [f"node{i}" for i in range(1, 7)]
# what a site running these trays sets beside the platform: the lab's channel device lives in the tray's /run
DATA = {"verify_profile": "gb200-nvl72", "imex_channel": lab_rack.CHANNEL, "imex_rack": "rack1"}
# the GPU faults, one tray each: (fault, code, a piece of its message)
GPU_FAULTS = {
    "node3": ("gpu_clique=1:7", "gpu_fabric_split", "clique 7: GPU 1"),
    "node4": ("fabric_degraded=2", "gpu_fabric_degraded_bw", "GPU 2 ("),
    "node5": ("nvlink_down=1:4", "gpu_nvlink_down", "GPU 1 ("),  # GPU health's, not repeated by the tray's count
}
TRAY_CODES = {"imex_", "gpu_fabric", "gpu_nvlink"}
WRITTEN: dict[str, str] = {}  # the deploy's topology-block.conf, for the test that loads it into slurmctld


def tray_reasons(verdict: dict) -> list[tuple[str, str]]:
    return sorted((r["level"], r["code"]) for r in verdict["reasons"] if r["code"].startswith(tuple(TRAY_CODES)))


def config(lab, node: str) -> None:
    text = "".join(f"{k}: {json.dumps(v)}\n" for k, v in DATA.items())
    (lab.root(node) / "tmp" / "rack.yaml").write_text(text)


def check(lab, node: str) -> dict:
    config(lab, node)
    run = lab_ssh(lab, node, f"cd {REPO} && {sys.executable} -m ccrhost check --config /tmp/rack.yaml --format json")
    assert run.stdout.startswith("{"), run.stdout + run.stderr
    return json.loads(run.stdout)


def prolog(lab, node: str) -> dict:
    config(lab, node)
    run = in_node(lab, node, sys.executable, "-m", "ccrhost", "check", "--config", "/tmp/rack.yaml", "--format",
                  "json", env=(f"PATH={PATH}", "SLURM_SCRIPT_CONTEXT=prolog_slurmd", "SLURM_JOB_ID=7",
                               f"PYTHONPATH={REPO}"))
    assert run.stdout.startswith("{"), run.stdout + run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def rack(request):
    from conftest import LAB_DIR, LAB_NAME, LAB_SUBNET

    from ccrhost.lab.fleet import Lab

    lab = Lab(LAB_DIR)
    lab.down(name=LAB_NAME)
    try:
        lab.up(len(TRAYS), "gb200-nvl72", {}, name=LAB_NAME, subnet=LAB_SUBNET)
        yield lab
    finally:
        lab.down(name=LAB_NAME)


def test_a_healthy_rack_is_ok_and_each_gpu_fault_fails_its_tray_alone_on_every_path(rack, tmp_path):
    lab = rack
    for node in TRAYS:
        verdict = check(lab, node)
        assert verdict["status"] == "OK", (node, verdict["reasons"])
    # the tray reads what a GB200 NVL72 tray shows
    q = lab_ssh(lab, "node1", "nvidia-smi -q -i 0").stdout
    # as a GB200's nvidia-smi -q prints them (tests/fixtures/gpu/fabric_clique_unhealthy_dra626.txt)
    assert f"        ClusterUUID                       : {lab_rack.cluster_uuid(lab.load().name, lab.load().subnet)}\n" in q
    assert "        CliqueId                          : 32766\n" in q
    for node, (fault, _, _) in GPU_FAULTS.items():
        lab.fault(node, fault)
    try:
        path = lab_inventory(tmp_path, **DATA)
        run = run_pyinfra("deploys/verify.py", inventory=path)
        assert "Traceback" not in run.out, run.out
        deployed = json.loads((tmp_path / "report" / "ccr-report.json").read_text())["hosts"]
        WRITTEN["block"] = (tmp_path / "report" / "topology-block.conf").read_text()
        for node in TRAYS:
            fault, code, text = GPU_FAULTS.get(node, (None, None, None))
            wanted = [("FAIL", code)] if code else []
            for path_name, verdict in (("check", check(lab, node)), ("prolog", prolog(lab, node)),
                                       ("deploy", deployed[lab.node(node).address])):
                assert tray_reasons(verdict) == wanted, (node, path_name, verdict["reasons"])
                # the deploy's rack view (fleet/rack.py) names the same tray, and no other
                rack_codes = {r["code"] for r in verdict["reasons"] if r["code"].startswith("rack_")}
                assert rack_codes == ({"rack_fabric_split"} if path_name == "deploy" and node == "node3" else set())
                assert verdict["status"] == ("FAIL" if code else "OK"), (node, path_name, verdict["reasons"])
                if text:
                    assert any(text in r["message"] for r in verdict["reasons"] if r["code"] == code)
    finally:
        for node, (fault, _, _) in GPU_FAULTS.items():
            lab.clear(node, fault.split("=")[0])


def test_slurmctld_24_11_loads_the_deploys_block_file_without_the_failing_trays(rack):
    """The file the deploy above wrote (the three GPU-fault trays FAIL), loaded by a real
    slurmctld 24.11 (the lab's 22.05 has no topology/block) whose nodes carry the inventory's
    names (the lab's inventory names each host by its address): its one block holds the passing
    trays only. A block without nodes, and a later block smaller than the first without
    ``BlockSizes=`` (what ccrhost wrote for such racks before it named the planning base), are
    refused: the check can fail; ccrhost's writer now makes of such racks a file slurmctld takes."""
    from ccrhost.fleet import rack as fleet_rack
    from ccrhost.fleet.slurm_client import hostlist

    why = slurm_block.unavailable()
    if why:
        pytest.skip(f"Slurm 24.11 slurmctld: {why}")
    if "block" not in WRITTEN:
        pytest.skip("the deploy's test did not write topology-block.conf in this run")
    lab, text = rack, WRITTEN["block"]
    names = [lab.node(n).address for n in TRAYS]
    passing = [lab.node(n).address for n in TRAYS if n not in GPU_FAULTS]
    line = f"BlockName=rack1 Nodes={hostlist(passing)}"
    assert f"\n{line}\n" in text, text
    shown = slurm_block.load(names, text)
    assert [(b.name, b.index, sorted(b.nodes), b.size, b.aggregated) for b in shown] == [
        ("rack1", 0, sorted(passing), 3, False)]
    with pytest.raises(slurm_block.Refused, match="block rack1 hasn't got nodes"):
        slurm_block.load(names, text.replace(line, "BlockName=rack1"))
    # a first rack larger than the next: without BlockSizes slurmctld refuses it; ccrhost's writer
    # names the smallest block as the planning base, and slurmctld takes both racks
    failing = [lab.node(n).address for n in GPU_FAULTS]
    before = f"BlockName=rack0 Nodes={hostlist([*failing, 'spare1'])}\n" + text
    with pytest.raises(slurm_block.Refused, match=r"fatal: Block configuration \(rack1\) children count lower"):
        slurm_block.load([*names, "spare1"], before)
    trays = [fleet_rack.tray(h, "rack0", None) for h in [*failing, "spare1"]]
    trays += [fleet_rack.tray(h, "rack1", None) for h in passing]
    written, _ = fleet_rack.block_topology(trays)
    assert "\nBlockSizes=3,6,12,24,48\n" in written, written
    shown = slurm_block.load([*names, "spare1"], written)
    assert [(b.name, sorted(b.nodes), b.aggregated) for b in shown] == [
        ("rack0", sorted([*failing, "spare1"]), False), ("rack1", sorted(passing), False),
        ("rack[0-1]", sorted([*names, "spare1"]), True)]


@pytest.mark.parametrize("fault, code", [("imex_peer_lost", "imex_peer_disconnected"),
                                         ("imex_nodemap", "imex_nodemap_mismatch"),
                                         ("imex_version", "imex_version_mismatch")])
def test_a_tray_at_odds_with_the_imex_domain_fails_itself_and_only_warns_the_others(rack, fault, code):
    lab = rack
    lab.fault("node2", fault)
    try:
        for node in TRAYS:
            for path_name, verdict in (("check", check(lab, node)), ("prolog", prolog(lab, node))):
                if node == "node2":
                    assert ("FAIL", code) in tray_reasons(verdict), (path_name, verdict["reasons"])
                    assert verdict["status"] == "FAIL"
                else:  # a peer's fault: said once, never drained
                    assert tray_reasons(verdict) == [("WARN", "imex_peer_down")], (node, path_name, verdict["reasons"])
                    message = next(r["message"] for r in verdict["reasons"] if r["code"] == "imex_peer_down")
                    assert lab.node("node2").address in message
                    assert verdict["status"] == "WARN"
        if fault == "imex_peer_lost":  # the domain is DEGRADED for every tray, the lost one UNAVAILABLE to the rest
            shown = lab_ssh(lab, "node1", "nvidia-imex-ctl -N -c /etc/nvidia-imex/config.cfg").stdout
            assert f"Node #1   - {lab.node('node2').address:<15} - UNAVAILABLE\n" in shown, shown
            assert shown.endswith("Domain State: DEGRADED\n")
    finally:
        lab.clear("node2", fault)


def test_the_imex_unit_down_fails_the_tray_and_its_ctl_cannot_answer(rack):
    lab = rack
    lab.fault("node6", "unit_down=nvidia-imex")
    lab.fault("node6", "unit_down=chronyd")  # a second unit down: the IMEX unit's fault still holds
    try:
        verdict = check(lab, "node6")
        assert ("FAIL", "imex_unit_inactive") in tray_reasons(verdict)
        assert ("UNKNOWN", "imex_unreadable") in tray_reasons(verdict)
        assert verdict["status"] == "FAIL"
    finally:
        lab.clear("node6", "unit_down")
