"""The inventory-driven lab and `ccrhost ci run`, as a merge request runs it:
the example workflows' own command, on inventories/example.py with the
profile captured from a lab node."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from conftest import LAB_DIR, LAB_NAME, LAB_SUBNET, REPO

from ccrhost.lab.ci import PyinfraRun, Step, changed_operations, junit, why_failed
from ccrhost.lab.fleet import Lab, LabError
from ccrhost.lab.from_inventory import plan, write_inventory

EXAMPLES = REPO / "examples/ci"
PROFILE = "inventories/profiles/hgx-h100-8x400.yaml"


# --- the workflows ------------------------------------------------------------

def workflow_commands() -> dict[str, list[str]]:
    """Every `ccrhost ci run` line of the two example workflows."""
    gh = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())
    gl = yaml.safe_load((EXAMPLES / "gitlab-ci.yml").read_text())
    gh_lines = [line for job in gh["jobs"].values() for step in job["steps"]
                for line in step.get("run", "").splitlines() if " ci run " in line]
    gl_lines = [line for job in gl.values() if isinstance(job, dict) for line in job.get("script", [])
                if " ci run " in line]
    return {"github": gh_lines, "gitlab": gl_lines}


def test_both_workflows_run_the_same_command_after_the_bootstrap_install():
    commands = workflow_commands()
    assert len(commands["github"]) == 1 and commands["github"] == commands["gitlab"]
    assert commands["github"][0].startswith("$CCRHOST ci run inventories/example.py --profile compute=" + PROFILE)
    gh = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())
    gl = yaml.safe_load((EXAMPLES / "gitlab-ci.yml").read_text())
    job = gh["jobs"]["lab"]
    assert job["container"]["image"].startswith("debian:") and "--privileged" in job["container"]["options"]
    assert job["env"]["CCRHOST"] == gl["ccrhost-lab"]["variables"]["CCRHOST"] == "/opt/ccrhost/.venv/bin/ccrhost"
    # installed with scripts/bootstrap itself, from the clone the command then runs
    assert "/opt/ccrhost/scripts/bootstrap" in job["steps"][0]["run"].splitlines()
    assert "/opt/ccrhost/scripts/bootstrap" in gl["ccrhost-lab"]["before_script"]
    assert gl["ccrhost-lab"]["artifacts"]["reports"]["junit"] == "ccrhost-ci/junit.xml"
    assert (REPO / PROFILE).is_file()


# --- pure pieces ---------------------------------------------------------------

def test_failure_lines_name_host_key_and_value():
    out = ("--> Loading config...\n"
           "ccrhost: inventory data rejected, no host was changed (2 problems):\n"
           "  gpu-001.cluster.example: roce_dscp = 99: allowed: integers 0 to 63\n"
           "  gpu-002.cluster.example: roce_dscp = 99: allowed: integers 0 to 63\n")
    assert why_failed(PyinfraRun(2, out)) == ("gpu-001.cluster.example: roce_dscp = 99: allowed: integers 0 to 63; "
                                              "gpu-002.cluster.example: roce_dscp = 99: allowed: integers 0 to 63")
    table = ("--> Results:\n"
             "    Operation                                       Hosts   Success   Error   No Change\n"
             "    Tune RDMA (modules, RoCE, boot unit, QoS, data path, NCCL)   2       1         -       1\n"
             "    Verify CCR                                      2       -         -       2\n"
             "    Grand total                                     4       1         -       3\n")
    assert changed_operations(PyinfraRun(0, table)) == ["Tune RDMA (modules, RoCE, boot unit, QoS, data path, NCCL) (1 hosts)"]


def test_junit_names_each_step_and_why():
    steps = [Step("lab up", "passed", 1.0), Step("deploy", "failed", 2.0, "h: k = v: allowed: x", "log <here>"),
             Step("verify")]
    root = ET.fromstring(junit(steps, "inv.py"))
    assert root.get("tests") == "3" and root.get("failures") == "1" and root.get("skipped") == "1"
    cases = root.findall("testcase")
    assert [c.get("name") for c in cases] == ["lab up", "deploy", "verify"]
    assert cases[1].find("failure").get("message") == "h: k = v: allowed: x"
    assert cases[1].find("failure").text == "log <here>"


def _site(tmp_path: Path) -> Path:
    """A copy of the example inventory and its group data, with one extra
    group and host data, in the layout a site's repository has."""
    site = tmp_path / "site"
    shutil.copytree(REPO / "inventories/group_data", site / "group_data")
    (site / "example.py").write_text((REPO / "inventories/example.py").read_text() + (
        "\nstorage = [('nfs-01.cluster.example', {'rdma_exclude_devices': ['rocep138s0'], 'ssh_port': 2222}),\n"
        "           'nfs-02.cluster.example']\n"))
    (site / "group_data" / "storage.py").write_text("roce_dscp = 24\n")
    return site


def test_plan_places_hosts_by_group_and_refuses_before_starting(tmp_path):
    site = _site(tmp_path)
    inv = str(site / "example.py")
    placed = plan(inv, {"compute": "hgx-h100-8x400", "storage": "hgx-h100-8x400-upstream"}, per_group=1)
    assert [(p.host, p.groups, p.profile) for p in placed] == [
        ("gpu-001.cluster.example", ["compute"], "hgx-h100-8x400"),
        ("nfs-01.cluster.example", ["storage"], "hgx-h100-8x400-upstream")]
    assert len(plan(inv, {"all": "hgx-h100-8x400"})) == 6
    with pytest.raises(LabError) as err:
        plan(inv, {"compute": "hgx-h100-8x400"})
    assert str(err.value) == (
        "cannot place every host on a lab node:\n"
        "  nfs-01.cluster.example (groups: storage): no --profile for any of its groups (give GROUP=FILE, "
        "or all=FILE for every host)\n"
        "  nfs-02.cluster.example (groups: storage): no --profile for any of its groups (give GROUP=FILE, "
        "or all=FILE for every host)")
    with pytest.raises(LabError, match=r"--profile gpus=\.\.\.: the inventory has no group 'gpus'; "
                                       r"groups: compute, storage"):
        plan(inv, {"gpus": "hgx-h100-8x400"})
    bad = tmp_path / "new.yaml"
    bad.write_text("format_version: 7\n")
    with pytest.raises(LabError, match=r"--profile all=.*new.yaml.* has format_version 7; this ccrhost reads "
                                       r"format versions 1 to 2"):
        plan(inv, {"all": str(bad)})


def test_the_lab_inventory_keeps_the_sites_names_groups_and_data(tmp_path):
    """pyinfra's own view of the written lab inventory (no lab needed): the
    site's host names, groups, host data and group_data/, with only the
    connection pointing at lab addresses."""
    site = _site(tmp_path)
    placed = plan(str(site / "example.py"), {"all": "hgx-h100-8x400"}, per_group=1)
    for i, p in enumerate(placed, start=1):
        p.node, p.address = f"node{i}", f"198.18.{LAB_SUBNET}.{10 + i}"
    lab = Lab(tmp_path / "lab")
    path = write_inventory(lab, str(site / "example.py"), placed)
    assert path.name == "example.py"  # the file group keeps its name
    out = subprocess.run([sys.executable, "-m", "pyinfra", str(path), "debug-inventory"], cwd=tmp_path,
                         capture_output=True, text=True, env={**os.environ, "PYINFRA_PROGRESS": "off"})
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    blocks = {b.split("]", 1)[0]: b for b in text.split("\n[")[1:]}
    assert sorted(blocks) == ["gpu-001.cluster.example", "nfs-01.cluster.example"]
    gpu, nfs = blocks["gpu-001.cluster.example"], blocks["nfs-01.cluster.example"]
    assert "--> Groups: compute, example" in gpu and "--> Groups: storage, example" in nfs
    gpu_data, nfs_data = (json.loads(b.split("--> Data:", 1)[1].split("\n-->")[0]) for b in (gpu, nfs))
    assert gpu_data["roce_dscp"] == 26 and gpu_data["verify_profile"] == "hgx-h100-8x400"  # group_data/compute.py
    assert nfs_data["roce_dscp"] == 24 and nfs_data["rdma_exclude_devices"] == ["rocep138s0"]  # group_data + host data
    for data, i in ((gpu_data, 1), (nfs_data, 2)):
        assert data["ssh_hostname"] == f"198.18.{LAB_SUBNET}.{10 + i}" and data["ssh_port"] == 22
        assert data["ssh_known_hosts_file"] == str(lab.dir / "known_hosts")
        assert data["ssh_strict_host_key_checking"] == "yes" and data["lab_node"] == f"node{i}"


# --- on lab nodes ---------------------------------------------------------------

def run_workflow_command(cwd: Path, report_dir: Path, inventory: str | None = None) -> subprocess.CompletedProcess:
    """The workflows' `ccrhost ci run` line, run by the shell as the CI job
    runs it (inventory and report folder swapped when given)."""
    (line,) = workflow_commands()["github"]
    if inventory:
        line = line.replace("inventories/example.py", inventory)
    line = line.replace("--report-dir ccrhost-ci", f"--report-dir {report_dir}")
    env = {**os.environ, "CCRHOST": str(Path(sys.executable).parent / "ccrhost"),
           "CCRHOST_LAB_DIR": str(LAB_DIR), "CCRHOST_LAB_SUBNET": str(LAB_SUBNET)}
    return subprocess.run(["sh", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.lab
def test_ci_run_passes_the_example_and_fails_a_bad_group_value(tmp_path):
    good = run_workflow_command(REPO, tmp_path / "good")
    assert good.returncode == 0, good.stdout + good.stderr
    last = good.stdout.strip().splitlines()[-1]
    assert last == ("ccrhost ci: PASS: 4 lab nodes for inventories/example.py: deployed, second run changed "
                    "nothing, verified")
    root = ET.parse(tmp_path / "good" / "junit.xml").getroot()
    assert [(c.get("name"), list(c)) for c in root.findall("testcase") if c.find("failure") is not None] == []
    assert root.get("tests") == "4" and root.get("skipped") == "0"
    # reports name the inventory's hosts, not lab nodes
    report = json.loads((tmp_path / "good" / "ccr" / "ccr-report.json").read_text())
    assert sorted(report["hosts"]) == [f"gpu-{n:03d}.cluster.example" for n in range(1, 5)]
    # group_data/compute.py declares deepseek-v3: at the kernel share its published GPU hours imply, a healthy
    # HGX H100 has network to spare for it, compute-underused, a WARN that fails no step (issue 45)
    assert {v["status"] for v in report["hosts"].values()} == {"WARN"}
    assert {r["code"] for v in report["hosts"].values() for r in v["reasons"] if r["level"] != "OK"} == {"ccr_high"}
    assert "No Change" in (tmp_path / "good" / "deploy-again.log").read_text()
    assert not (LAB_DIR / "lab.json").exists()  # torn down

    # A merge request that puts a bad value in group_data/compute.py
    site = tmp_path / "site"
    (site / "inventories").mkdir(parents=True)
    shutil.copy(REPO / "inventories/example.py", site / "inventories/example.py")
    shutil.copytree(REPO / "inventories/group_data", site / "inventories/group_data")
    shutil.copytree(REPO / "inventories/profiles", site / "inventories/profiles")
    compute = site / "inventories/group_data/compute.py"
    compute.write_text(compute.read_text().replace("roce_dscp = 26", "roce_dscp = 99"))
    bad = run_workflow_command(site, tmp_path / "bad")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    last = bad.stdout.strip().splitlines()[-1]
    assert last.startswith("ccrhost ci: FAIL at deploy: gpu-001.cluster.example: roce_dscp = 99: "
                           "allowed: integers 0 to 63; gpu-002.cluster.example: roce_dscp = 99")
    root = ET.parse(tmp_path / "bad" / "junit.xml").getroot()
    status = {c.get("name"): ("failed" if c.find("failure") is not None else
                              "skipped" if c.find("skipped") is not None else "passed")
              for c in root.findall("testcase")}
    assert status == {"lab up": "passed", "deploy": "failed", "deploy again changes nothing": "skipped",
                      "verify": "skipped"}
    assert not (LAB_DIR / "lab.json").exists()  # torn down after the failure too


@pytest.mark.lab
def test_lab_from_inventory_measures_between_the_sites_hosts(tmp_path):
    """`lab up --inventory --per-group`, then pyinfra on the lab inventory:
    ib_write_bw reaches the lab nodes by ssh_hostname and every report
    names the site's hosts."""
    site = _site(tmp_path)
    compute = site / "group_data" / "compute.py"
    compute.write_text(compute.read_text() + "verify_measure = True\nverify_measure_seconds = 1\n")
    lab = Lab(LAB_DIR)
    lab.down()
    try:
        up = subprocess.run(
            [sys.executable, "-m", "ccrhost", "lab", "up", "--inventory", str(site / "example.py"),
             "--profile", f"compute={REPO / PROFILE}", "--profile", "storage=hgx-h100-8x400-upstream",
             "--per-group", "2", "--dir", str(LAB_DIR), "--name", LAB_NAME, "--subnet", str(LAB_SUBNET)],
            capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert up.returncode == 0, up.stderr
        lines = up.stdout.splitlines()
        assert lines[0] == (f"node1  198.18.{LAB_SUBNET}.11  gpu-001.cluster.example  (compute)  {REPO / PROFILE}")
        assert lines[3] == f"node4  198.18.{LAB_SUBNET}.14  nfs-02.cluster.example  (storage)  hgx-h100-8x400-upstream"
        assert lines[4] == f"lab inventory: {LAB_DIR / 'inventory' / 'example.py'}"
        run = subprocess.run(
            [sys.executable, "-m", "pyinfra", "-y", str(LAB_DIR / "inventory" / "example.py"),
             str(REPO / "deploys/verify.py"), "--data", f"verify_report_dir={tmp_path / 'report'}"],
            capture_output=True, text=True, cwd=tmp_path, timeout=300,
            env={**os.environ, "PYINFRA_PROGRESS": "off", "COLUMNS": "200"})
        assert run.returncode == 0, run.stdout + run.stderr
    finally:
        lab.down()
    hosts = json.loads((tmp_path / "report" / "ccr-report.json").read_text())["hosts"]
    assert sorted(hosts) == ["gpu-001.cluster.example", "gpu-002.cluster.example",
                             "nfs-01.cluster.example", "nfs-02.cluster.example"]
    for name in ("gpu-001.cluster.example", "gpu-002.cluster.example"):
        measured = [p["measured_gbps"] for p in hosts[name]["ports"]]
        assert len(measured) == 8 and all(m and m > 300 for m in measured), (name, measured, hosts[name])
    assert all(p["measured_gbps"] is None for p in hosts["nfs-01.cluster.example"]["ports"])
    # the host's own data reached it: its excluded device is not counted
    assert [len(hosts[h]["ports"]) for h in ("nfs-01.cluster.example", "nfs-02.cluster.example")] == [7, 8]
    assert "rocep138s0" not in {p["device"] for p in hosts["nfs-01.cluster.example"]["ports"]}


def test_ci_refuses_a_running_lab_and_leaves_it_alone(tmp_path):
    """Someone's lab in the same folder is neither reused (its nodes are not
    fresh) nor torn down."""
    from ccrhost.lab.ci import Ci
    from ccrhost.lab.fleet import LabState, Node

    lab = Lab(tmp_path / "lab")
    lab.dir.mkdir()
    lab.save(LabState("lab", 0, [Node("node1", 1, "198.18.0.11", "ccrlab-node1", "hgx-h100-8x400")]))
    job = Ci(str(REPO / "inventories/example.py"), {"compute": str(REPO / PROFILE)}, tmp_path / "report",
             lab_dir=str(lab.dir))
    passed, summary = job.run()
    assert not passed
    assert summary == (f"ccrhost ci: FAIL at lab up: a lab is already running in {lab.dir} (1 nodes); "
                       "run `ccrhost lab down` first")
    assert lab.state_file.exists()
    cases = ET.parse(tmp_path / "report" / "junit.xml").getroot().findall("testcase")
    assert [c.find("failure") is not None for c in cases] == [True, False, False, False]
