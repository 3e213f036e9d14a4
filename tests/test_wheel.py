"""The built wheel works without the checkout: templates ship inside the
package, and a site's own two-line deploy file runs the packaged stages."""

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from conftest import LAB_DIR, REPO, lab_ssh

pytestmark = pytest.mark.lab

USER_DEPLOY = "from ccrhost.deploys import rdma\nrdma()\n"
USER_INVENTORY = "from ccrhost.lab.inventory import lab_hosts\n\nnodes = lab_hosts()\n"


@pytest.fixture(scope="module")
def wheel_venv():
    # not /tmp: lab nodes keep a private /tmp (the run's tmpfs under /var/tmp, scripts/test)
    work = Path(tempfile.mkdtemp(prefix="ccrhost-wheel-", dir=os.environ.get("CCRHOST_TEST_TMP") or "/var/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(REPO)],
                       check=True, capture_output=True, timeout=300)
        wheel = next((work / "dist").glob("ccrhost-*.whl"))
        base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
        subprocess.run([base, "-m", "venv", "--without-pip", str(work / "venv")], check=True, timeout=120)
        # from another folder, no PYTHONPATH: pip would take the checkout's own ccrhost for this one
        clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        subprocess.run([sys.executable, "-m", "pip", "--python", str(work / "venv/bin/python"), "install", "-q",
                        "--no-deps", "--disable-pip-version-check", str(wheel)],
                       check=True, capture_output=True, timeout=600, cwd=work, env=clean)
        # The dependencies are this environment's, by one plain path in a .pth file written after the install
        # (pip would take the editable ccrhost there for this one): the folder's own .pth files, that editable
        # finder among them, are not read, so ccrhost comes only from the wheel (asserted below).
        # Installing the dependencies anew cost some 20 CPU seconds a run (bench/suite-time.md).
        purelib = subprocess.run([str(work / "venv/bin/python"), "-c", "import sysconfig; "
                                  "print(sysconfig.get_paths()['purelib'])"], check=True, capture_output=True,
                                 text=True).stdout.strip()
        Path(purelib, "ccrhost-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_installed_wheel_renders_and_plans_without_the_checkout(wheel_venv, make_lab):
    work = wheel_venv
    site = work / "site"
    site.mkdir()
    (site / "deploy.py").write_text(USER_DEPLOY)
    (site / "inventory.py").write_text(USER_INVENTORY)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(CCRHOST_LAB_DIR=str(LAB_DIR), PYINFRA_PROGRESS="off", COLUMNS="200")

    where = subprocess.run([str(work / "venv/bin/python"), "-c", "import ccrhost.render as r; print(r.TEMPLATES)"],
                           cwd=site, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(work / "venv")), where.stdout  # not the checkout's copy
    # the reason catalogue ships as data (ccrhost/model/catalogue/): explain reads the installed files
    explain = subprocess.run([str(work / "venv/bin/ccrhost"), "explain", "port_down"], cwd=site, env=env,
                             capture_output=True, text=True, timeout=60)
    assert explain.returncode == 0 and explain.stdout.startswith("port_down (FAIL)\n"), explain.stderr
    # the platform files ship as data (ccrhost/platforms/): the installed package resolves every built-in
    platforms = subprocess.run([str(work / "venv/bin/python"), "-c", "from ccrhost.model import platform as p; "
                                "print(p.builtin_names(), p.resolve('hgx-h100-8x400').figure('allreduce.nvlink').value)"],
                               cwd=site, env=env, capture_output=True, text=True, check=True)
    assert "'hgx-h100-8x400-ib'" in platforms.stdout and platforms.stdout.strip().endswith("460.0"), platforms.stdout

    lab = make_lab(nodes=1)
    # on the node, the installed command reads that node's emulated sysfs
    conf = lab_ssh(lab, "node1", f"{work}/venv/bin/ccrhost nccl-env --format conf")
    assert conf.returncode == 0, conf.stderr
    assert conf.stdout.splitlines()[0] == "NCCL_IB_HCA=" + "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    assert "NCCL_IB_TC=106" in conf.stdout.splitlines()

    before = subprocess.run(["find", str(lab.root("node1") / "etc"), "-newer", str(site / "deploy.py")],
                            capture_output=True, text=True).stdout
    dry = subprocess.run([str(work / "venv/bin/python"), "-m", "pyinfra", "inventory.py", "deploy.py", "--dry"],
                         cwd=site, env=env, capture_output=True, text=True, timeout=300)
    out = dry.stdout + dry.stderr
    assert dry.returncode == 0, out
    assert "Traceback" not in out
    # the templates rendered from the installed package: the NCCL block and the boot unit
    assert "would run: write /etc/nccl.conf" in out
    assert "would run: write /etc/ccrhost/boot-apply.sh" in out
    assert "would run: write /etc/systemd/system/ccrhost-boot.service" in out
    assert "ccrhost rdma | Tune RDMA (modules, RoCE, boot unit, QoS, data path, NCCL)" in out
    # --dry changed nothing on the node
    assert not (lab.root("node1") / "etc/nccl.conf").exists()
    after = subprocess.run(["find", str(lab.root("node1") / "etc"), "-newer", str(site / "deploy.py")],
                           capture_output=True, text=True).stdout
    assert after == before
