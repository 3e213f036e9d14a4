"""Issue 40 on the Slurm lab: a node whose NIC fails keeps the NIC's board
serial (read from its PCI VPD) in its history and an evidence bundle, and
``ccrhost slurm verify`` copies that bundle into the report directory
through an srun step, the report naming where. One 2-node lab."""

import json

import pytest
import yaml
from test_slurm import slurm, verify, wait_started

from ccrhost.lab import slurm as lab_slurm
from ccrhost.lab.profile import nic_serial

pytestmark = pytest.mark.lab
SLURM_NODES = 2
SLURM_HEALTHCHECK_INTERVAL = 0  # no test here waits on Slurm's periodic health check


def test_a_nic_failure_names_the_nic_serial_and_verify_collects_its_bundle(slurm_lab, tmp_path):
    lab = slurm_lab
    config = lab.root("node2") / "etc/ccrhost/check.yaml"
    original = config.read_text()
    settings = yaml.safe_load(original)
    settings.update(verify_history="/etc/ccrhost/history.json", verify_evidence_dir="/etc/ccrhost/evidence")
    config.write_text(yaml.safe_dump(settings))
    job = None
    try:
        job = slurm(lab, "sbatch", "--parsable", "-N2", "--exclusive", "-o", "/dev/null",
                    "--wrap", "sleep 300").stdout.strip()
        wait_started(lab, job)
        lab.fault("node2", "port_down")
        run = verify(lab, tmp_path, "--no-drain", env={"SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": "node[1-2]"})
        assert run.returncode == 2, run.stdout + run.stderr
        report = tmp_path / "report"
        doc = json.loads((report / "ccr-report.json").read_text())
        named = doc["hosts"]["node2"]["evidence"]
        name = named.rsplit("/", 1)[1]
        assert named == f"/etc/ccrhost/evidence/{name}" and doc["hosts"]["node1"]["evidence"] is None
        copy = report / "evidence" / "node2" / name
        fetched = doc["evidence"]
        assert fetched == {"node2": {"bundle": name, "path": str(copy), "bytes": fetched["node2"]["bytes"]}}
        assert f"evidence of node2: {copy}" in run.stderr
        on_node = lab.root("node2") / "etc/ccrhost/evidence" / name
        assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in on_node.iterdir())
        judged = json.loads((copy / "verdict.json").read_text())
        assert "port_down" in [r["code"] for r in judged["reasons"]]
        # the history names the failing NIC by the serial its VPD holds
        history = json.loads((lab.root("node2") / "etc/ccrhost/history.json").read_text())
        assert [e["nics"] for e in history["episodes"]] == [[nic_serial(lab.node("node2").index, 0)]]
        assert history["episodes"][0]["gpus"] == []
    finally:
        config.write_text(original)
        lab.clear("node2", "port_down")
        if job:
            slurm(lab, "scancel", job)
        for node in ("node1", "node2"):  # the health check may have drained node2 meanwhile
            if "drain" in lab_slurm.node_states(lab)[node][0]:
                slurm(lab, "scontrol", "update", f"NodeName={node}", "State=RESUME")
        lab_slurm.wait_idle(lab, lab.load(), ["node1", "node2"], timeout=60)
