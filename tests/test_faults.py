"""Faults across the fleet: a node lost mid-run, a device gone between
gather and write, failing tools and filesystems; and no way in through
inventory data."""

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LAB_DIR, LAB_NAME, LAB_SUBNET, REPO, lab_inventory, node_address, run_pyinfra

from ccrhost.settings import InventoryDataError, validate_host

pytestmark = pytest.mark.lab

MANAGED = ["etc/modules-load.d/ccrhost-rdma.conf", "etc/nccl.conf", "etc/profile.d/ccrhost-nccl.sh",
           "etc/ccrhost/boot-apply.sh", "etc/systemd/system/ccrhost-boot.service"]




def test_node_lost_mid_run_then_converges(make_lab, tmp_path):
    lab = make_lab(nodes=8)
    inventory = lab_inventory(tmp_path)
    env = {**os.environ, "CCRHOST_LAB_DIR": str(LAB_DIR), "PYINFRA_PROGRESS": "off", "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "pyinfra", "-y", inventory, "deploys/rdma.py"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    for line in proc.stdout:
        out.append(line)
        if line.strip().startswith(f"[{node_address(5)}] QoS:"):
            lab.kill_sshd("node5")  # half-way: modules and rdma_cm done, QoS planned, files not yet
            break
    out += proc.stdout.readlines()
    assert proc.wait(timeout=120) == 1
    text = "".join(out)
    (tmp_path / "run.log").write_text(text)
    lost = node_address(5)
    assert "An internal exception occurred" not in text  # the run went on (ccrhost.pyinfra_compat)
    assert "Traceback" not in text
    assert re.search(rf"\[{re.escape(lost)}\] .*(Error|error)", text), text
    results = {}
    for line in text.split("--> Results:")[1].splitlines()[2:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 5:
            results[cells[0]] = cells[1:]
    assert results["Tune RDMA (modules, RoCE, boot unit, QoS, data path, NCCL)"][1:3] == ["7", "1"], text  # 7 succeed, the lost host errors
    for i in (1, 2, 3, 4, 6, 7, 8):
        root = lab.root(f"node{i}")
        assert all((root / path).exists() for path in MANAGED), i
    assert not (lab.root("node5") / "etc/nccl.conf").exists()

    lab.restart_sshd("node5")
    again = run_pyinfra("deploys/rdma.py", inventory=inventory)
    assert again.rc == 0, again.out
    for path in MANAGED:
        text5 = (lab.root("node5") / path).read_text()
        assert text5 == (lab.root("node1") / path).read_text(), path
        if path.endswith(("boot-apply.sh", ".service")):
            continue  # a program and a unit: repeated lines there are syntax ("done")
        lines = [line for line in text5.splitlines() if line.strip() and not line.startswith("#")]
        assert len(lines) == len(set(lines)), path  # no duplicated settings
    assert (lab.root("node5") / "etc/nccl.conf").read_text().count("# BEGIN ccrhost") == 1


def test_per_host_failures_are_clear_and_the_others_finish(make_lab, tmp_path):
    lab = make_lab(nodes=5, faults=["node1:rdma_vanish=mlx5_3", "node2:etc_readonly", "node3:etc_full",
                                    "node4:modprobe_fails=rdma_ucm"])
    run = run_pyinfra("deploys/rdma.py", inventory=lab_inventory(tmp_path))
    assert run.rc == 1
    assert "Traceback" not in run.out
    expected = {
        1: "mkdir: cannot create directory '/sys/kernel/config/rdma_cm/mlx5_3': No such device",
        2: "sh: 1: cannot create /etc/modules-load.d/ccrhost-rdma.conf.ccrhost-new: Read-only file system",
        3: "base64: write error: No space left on device",
        4: "modprobe: ERROR: could not insert 'rdma_ucm': Operation not permitted",
    }
    for i, message in expected.items():
        assert f"[{node_address(i)}] {message}" in run.out, i
    assert not list((lab.root("node3") / "etc/modules-load.d").glob("*.ccrhost-new"))  # no half-written file left
    healthy = lab.root("node5")
    assert all((healthy / path).exists() for path in MANAGED)
    assert "Verify CCR" in run.results() and run.results()["Verify CCR"]["no_change"] == "1"


def test_files_have_deliberate_owners_and_modes_and_site_files_are_kept(make_lab, tmp_path):
    lab = make_lab(nodes=1)
    root = lab.root("node1")
    foreign = root / "etc/modules-load.d/ccrhost-rdma.conf"
    foreign.parent.mkdir(parents=True, exist_ok=True)
    foreign.write_text("site_module\n")
    run = run_pyinfra("deploys/rdma.py", inventory=lab_inventory(tmp_path))
    assert run.rc == 0, run.out
    backups = list(foreign.parent.glob("ccrhost-rdma.conf.ccrhost-bak.*"))
    assert len(backups) == 1 and backups[0].read_text() == "site_module\n"
    for path in MANAGED:
        st = (root / path).stat()
        want = 0o755 if path.endswith(".sh") and "boot" in path else 0o644
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, want), path
    for path in (root / "etc").rglob("*"):
        if path.is_file() and not path.is_symlink() and "ccrhost" in path.name + str(path.parent):
            assert not path.stat().st_mode & stat.S_IWOTH, path


PAYLOADS = ["x;touch /tmp/pwned", "$(touch /tmp/pwned)", "`touch /tmp/pwned`", "x\ntouch /tmp/pwned", "x' ; touch /tmp/pwned '"]
STRING_KEYS = ["rdma_modules", "rdma_exclude_devices", "nccl_socket_ifname", "nccl_ib_hca", "nccl_ib_addr_range",
               "nccl_ib_addr_family", "nccl_net_gdr_level", "nccl_extra", "verify_profile", "verify_gpu_model",
               "verify_precision", "verify_bandwidth_model", "verify_report_dir"]


def shaped(key, payload):
    if key in ("rdma_modules", "rdma_exclude_devices"):
        return [payload]
    if key == "nccl_extra":
        return {"NCCL_DEBUG": payload}
    return payload


def test_no_inventory_string_reaches_a_shell(make_lab, tmp_path):
    lab = make_lab(nodes=2)
    accepted = []
    for key in STRING_KEYS:
        for payload in PAYLOADS:
            try:
                validate_host("n", {key: shaped(key, payload), "verify_gpu_tflops": {"bf16": 989.5}})
                accepted.append((key, payload))
            except InventoryDataError:
                pass
    # only a free-text label survives validation, and it is never used in a command
    assert {k for k, _ in accepted} == {"verify_gpu_model"}
    for key, payload in [("rdma_modules", PAYLOADS[0]), ("nccl_extra", PAYLOADS[1]), ("nccl_socket_ifname", PAYLOADS[2]),
                         ("verify_gpu_model", PAYLOADS[0]), ("verify_gpu_model", PAYLOADS[3])]:
        extra = {key: shaped(key, payload), "verify_gpu_tflops": {"bf16": 989.5}}
        run = run_pyinfra("deploys/rdma.py", inventory=lab_inventory(tmp_path, **extra))
        assert run.rc in (1, 2), (key, run.out)
    for node in ("node1", "node2"):
        root = lab.root(node)
        for where in ("tmp", "root", "etc", ""):
            assert not (root / where / "pwned").exists(), (node, where)
    assert not Path("/tmp/pwned").exists()


def test_host_key_checking_stays_strict():
    import runpy

    example = runpy.run_path(str(REPO / "inventories/example.py"))
    hosts, data = example["compute"]
    assert data["ssh_strict_host_key_checking"] == "yes" and data["ssh_known_hosts_file"]
    from ccrhost.lab.fleet import Lab
    from ccrhost.lab.inventory import lab_hosts

    lab = Lab(LAB_DIR)
    lab.down()
    lab.up(1, "hgx-h100-8x400", {}, name=LAB_NAME, subnet=LAB_SUBNET)
    try:
        (_, node), = lab_hosts(LAB_DIR)
        assert node["ssh_strict_host_key_checking"] == "yes"
        assert node["ssh_known_hosts_file"] == str(LAB_DIR / "known_hosts")
        # a host key that does not match is refused, not trusted
        (LAB_DIR / "known_hosts").write_text(
            f"{node_address(1)} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFxRD0VZbDU4K1tbwAwTfUfvKnD2Cx4l6qk6tJyeQk2X\n")
        run = run_pyinfra("deploys/verify.py")
        assert run.rc != 0 and "verification" not in run.out
    finally:
        lab.down()
