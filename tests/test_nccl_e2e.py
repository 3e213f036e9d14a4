"""End to end: the NCCL stage writes what each node's facts give."""

import sys

import pytest
from conftest import REPO, lab_inventory, lab_ssh, node_address, run_pyinfra

pytestmark = pytest.mark.lab

BLOCK_HEAD = ("# BEGIN ccrhost managed block: rerun the deploy instead of editing\n"
              "# Derived by ccrhost from this node's RDMA ports and inventory data.\n"
              "# NCCL keeps the first definition of a key: a line above this block wins,\n"
              "# and so does the environment.\n")




def test_files_follow_the_facts_and_site_lines_survive(make_lab, tmp_path):
    lab = make_lab(nodes=2, profiles={"node1": "hgx-h100-8x400-upstream", "node2": "hgx-h100-8x400-ib"})
    node1 = lab.root("node1")
    (node1 / "etc/nccl.conf").write_text("# site\nNCCL_DEBUG=WARN\n")
    inventory = lab_inventory(tmp_path)
    first = run_pyinfra("deploys/rdma.py", inventory=inventory)
    assert first.rc == 0, first.out

    devices = sorted((p.name for p in (node1 / "sys/class/infiniband").iterdir()), key=lambda n: int(n[5:-2]))
    expected_block = BLOCK_HEAD + (
        f"NCCL_IB_HCA=={','.join(d + ':1' for d in devices)}\n"
        "NCCL_IB_TC=106\nNCCL_IB_FIFO_TC=106\nNCCL_IB_ROCE_VERSION_NUM=2\nNCCL_IB_ADDR_FAMILY=AF_INET\n"
        "NCCL_SOCKET_IFNAME==eth0\n# END ccrhost managed block\n")
    assert (node1 / "etc/nccl.conf").read_text() == "# site\nNCCL_DEBUG=WARN\n" + expected_block
    profile = (node1 / "etc/profile.d/ccrhost-nccl.sh").read_text()
    assert f"export NCCL_IB_HCA=={','.join(d + ':1' for d in devices)}\n" in profile
    st = (node1 / "etc/profile.d/ccrhost-nccl.sh").stat()
    assert (oct(st.st_mode & 0o777), st.st_uid) == ("0o644", 0)
    # the profile, sourced by a login shell on the node, exports the values
    out = lab_ssh(lab, "node1", ". /etc/profile.d/ccrhost-nccl.sh; echo $NCCL_IB_TC $NCCL_SOCKET_IFNAME")
    assert out.stdout == "106 =eth0\n"

    ib = (lab.root("node2") / "etc/nccl.conf").read_text()
    assert "NCCL_IB_HCA==mlx5_0:1," in ib and "NCCL_IB_TC" not in ib and "ROCE" not in ib

    with open(node1 / "etc/nccl.conf", "a") as f:
        f.write("NCCL_TOPO_FILE=/opt/topo.xml\n")
    second = run_pyinfra("deploys/rdma.py", inventory=inventory)
    assert second.rc == 0 and not second.changed(), second.out
    assert (node1 / "etc/nccl.conf").read_text() == (
        "# site\nNCCL_DEBUG=WARN\n" + expected_block + "NCCL_TOPO_FILE=/opt/topo.xml\n")

    env = lab_ssh(lab, "node1", f"cd {REPO} && {sys.executable} -m ccrhost nccl-env --format conf")
    assert env.returncode == 0, env.stderr
    assert env.stdout == "".join(line + "\n" for line in expected_block.splitlines() if not line.startswith("#"))


def test_gid_index_conflict_fails_that_host_only(make_lab, tmp_path):
    lab = make_lab(nodes=2, faults=["node2:gid_index=mlx5_3:6"])
    run = run_pyinfra("deploys/rdma.py", inventory=lab_inventory(tmp_path, nccl_ib_gid_index=3))
    assert run.rc == 1
    assert (f"[{node_address(2)}] NCCL: nccl_ib_gid_index 3 does not hold the RoCE v2 IPv4 GID on every compute "
            "port (mlx5_3/1 at 6); leave it unset so NCCL selects the GID per port") in run.out
    assert "NCCL_IB_GID_INDEX=3\n" in (lab.root("node1") / "etc/nccl.conf").read_text()
    assert not (lab.root("node2") / "etc/nccl.conf").exists()
