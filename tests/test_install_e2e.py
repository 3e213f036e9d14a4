"""The install path of docs/check-and-slurm.md, followed on the Slurm lab as
a newcomer would: build the wheelhouse, deploys/install.py, then
deploys/slurm.py, then a job whose prolog runs the installed ccrhost.
deploys/slurm.py refuses a node without ccrhost, naming the path, and that
node keeps its files. Each lab node has its own /usr/local (the machine's
holds no ccrhost), so what runs there is what the install put there."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import REPO, in_node, lab_inventory, node_address, run_pyinfra, tree_snapshot

from ccrhost.lab import slurm as lab_slurm
from ccrhost.model.install import controller_version

pytestmark = pytest.mark.lab
SLURM_HEALTHCHECK_INTERVAL = 0  # no test here waits on Slurm's periodic health check

NODES = ("node1", "node2", "node3")
LINK = "/usr/local/bin/ccrhost"  # slurm_ccrhost's default, as the docs leave it
HOME = "/usr/local/lib/ccrhost"  # ccrhost_install_dir's default
VERSION = controller_version()



def slurm_files(lab) -> dict:
    return {n: tree_snapshot(lab.root(n) / "etc/ccrhost") | tree_snapshot(lab.root(n) / "etc/slurm") for n in NODES}


def test_install_then_slurm_then_a_prolog_that_runs_and_a_node_without_ccrhost_refused(slurm_lab, tmp_path):
    lab = slurm_lab
    assert not Path(LINK).exists(), f"this machine has a {LINK}: the test would not prove the install"
    assert all(not (lab.root(n) / LINK.lstrip("/")).exists() for n in NODES)

    # the docs' first step, on the controller, in the checkout
    wheels = tmp_path / "ccrhost-wheelhouse"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), str(REPO)],
                   check=True, capture_output=True, timeout=600)
    # the lab's own data points slurm_ccrhost at this checkout's venv; a site leaves the default
    inventory = lab_inventory(tmp_path, slurm_ccrhost=LINK, ccrhost_wheelhouse=str(wheels))
    before = slurm_files(lab)

    # deploys/slurm.py before the install: every node refused, naming the path, nothing written
    refused = run_pyinfra("deploys/slurm.py", inventory=inventory)
    assert refused.rc != 0, refused.out
    for i in (1, 2, 3):
        assert (f"[{node_address(i)}] slurm_ccrhost {LINK} is not there (exit 127: env: '{LINK}': No such file "
                "or directory): no prolog or health check written (install ccrhost on the node first: "
                "deploys/install.py)") in refused.out
    assert slurm_files(lab) == before

    # --dry lists the upload and the install, and changes nothing
    dry = run_pyinfra("--dry", "deploys/install.py", inventory=inventory)
    assert dry.rc == 0, dry.out
    wheel = next(wheels.glob(f"ccrhost-{VERSION}-*.whl"))
    assert f"[{node_address(1)}] would run: upload {wheel} to {HOME}/wheels.new/{wheel.name}" in dry.out
    assert f"[{node_address(3)}] would run: mkdir -p /usr/local/bin && ln -sfn {HOME}/venv/bin/ccrhost {LINK}\n" \
        in dry.out
    assert all(not (lab.root(n) / HOME.lstrip("/")).exists() for n in NODES)

    # install on two nodes; deploys/slurm.py then writes those two and refuses the third
    two = run_pyinfra("deploys/install.py", "--limit", node_address(1), "--limit", node_address(2),
                      inventory=inventory, timeout=600)
    assert two.rc == 0, two.out
    assert two.results()[f"Install ccrhost {VERSION} at {LINK}"] == \
        {"hosts": "2", "success": "2", "error": "-", "no_change": "-"}, two.out
    assert not Path(LINK).exists()  # it went onto the nodes, not this machine
    partial = run_pyinfra("deploys/slurm.py", inventory=inventory)
    assert partial.rc != 0, partial.out
    assert f"[{node_address(3)}] slurm_ccrhost {LINK} is not there (exit 127" in partial.out
    assert f"[{node_address(1)}] slurm_ccrhost" not in partial.out
    after = slurm_files(lab)
    assert after["node3"] == before["node3"]  # the refused node keeps its old prolog
    for node in ("node1", "node2"):
        assert f"\n{LINK} check --config" in (lab.root(node) / "etc/ccrhost/slurm-prolog.sh").read_text()

    # a wheelhouse that is not there stops the run before any host; a node whose step fails is that node's error
    (tmp_path / "bad").mkdir()
    nowhere = run_pyinfra("deploys/install.py", inventory=lab_inventory(
        tmp_path / "bad", slurm_ccrhost=LINK, ccrhost_wheelhouse=str(tmp_path / "none")))
    assert nowhere.rc == 2, nowhere.out
    assert (f"ccrhost_wheelhouse {tmp_path / 'none'} is not a folder; build it on the controller: "
            f"pip wheel --wheel-dir {tmp_path / 'none'} <ccrhost checkout or ccrhost=={VERSION}>") in nowhere.out
    broken = run_pyinfra("deploys/install.py", inventory=lab_inventory(
        tmp_path / "bad", per_node={"node3": {"ccrhost_python": "/usr/bin/python2.1"}}, slurm_ccrhost=LINK,
        ccrhost_wheelhouse=str(wheels)), timeout=600)
    assert broken.rc != 0
    assert f"[{node_address(3)}] ccrhost install: /usr/bin/python2.1 -m venv {HOME}/venv failed" in broken.out
    assert broken.results()[f"Install ccrhost {VERSION} at {LINK}"] == \
        {"hosts": "3", "success": "-", "error": "1", "no_change": "2"}, broken.out
    assert not (lab.root("node3") / LINK.lstrip("/")).exists()

    # the whole fleet: the two installed nodes unchanged, the third installed, its dependencies from a site
    # index (a shared folder in PEP 503 layout) and only ccrhost's wheel uploaded; a rerun changes nothing
    alone = tmp_path / "ccrhost-only"
    alone.mkdir()
    shutil.copy2(wheel, alone / wheel.name)
    # under /var/tmp (or the run's tmpfs there): the nodes see it, not /tmp
    index = Path(tempfile.mkdtemp(prefix="ccrhost-index-", dir=os.environ.get("CCRHOST_TEST_TMP") or "/var/tmp"))
    try:
        for dep in wheels.glob("*.whl"):
            if dep.name != wheel.name:
                project = re.sub(r"[-_.]+", "-", dep.name.split("-")[0]).lower()
                (index / project).mkdir(exist_ok=True)
                shutil.copy2(dep, index / project / dep.name)
                (index / project / "index.html").write_text(
                    "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in (index / project).glob("*.whl")))
        (tmp_path / "mirror").mkdir()
        everyone = run_pyinfra("deploys/install.py", inventory=lab_inventory(
            tmp_path / "mirror", per_node={"node3": {"ccrhost_wheelhouse": str(alone), "ccrhost_index_url": f"file://{index}"}},
            slurm_ccrhost=LINK, ccrhost_wheelhouse=str(wheels)), timeout=600)
    finally:
        shutil.rmtree(index, ignore_errors=True)
    assert everyone.rc == 0, everyone.out
    assert everyone.results()[f"Install ccrhost {VERSION} at {LINK}"] == \
        {"hosts": "3", "success": "1", "error": "-", "no_change": "2"}
    assert [p.name for p in (lab.root("node3") / HOME.lstrip("/") / "wheels").iterdir()] == [wheel.name]
    again = run_pyinfra("deploys/install.py", inventory=inventory)
    assert again.rc == 0 and not again.changed(), again.out
    done = run_pyinfra("deploys/slurm.py", inventory=inventory)
    assert done.rc == 0, done.out

    for node in NODES:
        # the node's own venv, from the uploaded wheels, not this checkout
        assert (lab.root(node) / LINK.lstrip("/")).is_symlink()
        where = in_node(lab, node, f"{HOME}/venv/bin/python", "-c", "import ccrhost; print(ccrhost.__file__)")
        assert where.stdout.startswith(f"{HOME}/venv/lib/"), where.stdout + where.stderr
        assert in_node(lab, node, LINK, "--version").stdout.strip() == f"ccrhost, version {VERSION}"
        prolog = (lab.root(node) / "etc/ccrhost/slurm-prolog.sh").read_text()
        assert LINK in prolog and lab_slurm.ccrhost_command() not in prolog
        run = in_node(lab, node, "/etc/ccrhost/slurm-prolog.sh")  # as slurmd runs it
        assert run.returncode == 0, run.stdout + run.stderr

    # a job on every node: slurmd runs that prolog (PrologFlags=Alloc) and the job runs; no node is drained
    job = lab_slurm.run(lab, "srun", "-N3", "-I30", "true", timeout=90)
    assert job.returncode == 0, job.stderr
    deadline = time.monotonic() + 30  # srun returns while the nodes still show the job completing
    while any(st == "completing" for st, _ in lab_slurm.node_states(lab).values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert lab_slurm.node_states(lab) == {n: ("idle", "none") for n in NODES}
