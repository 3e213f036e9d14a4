"""The lab itself: nodes are isolated, shims act like the real tools, and
nothing is left behind."""

import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import LAB_DIR, LAB_NAME, LAB_SUBNET, lab_ssh, tree_snapshot

from ccrhost.lab.fleet import Lab, LabError, parse_faults
from ccrhost.lab.profile import ProfileError, load_profile

pytestmark = pytest.mark.lab


def test_nodes_are_isolated_and_the_machine_etc_is_untouched(make_lab):
    before = tree_snapshot(Path("/etc"))
    lab = make_lab(nodes=2)
    assert lab_ssh(lab, "node1", "echo from-node1 > /etc/ccrhost-isolation; touch /tmp/node1-only").returncode == 0
    assert (lab.root("node1") / "etc/ccrhost-isolation").read_text() == "from-node1\n"
    assert not (lab.root("node2") / "etc/ccrhost-isolation").exists()
    assert not (lab.root("node2") / "tmp/node1-only").exists()
    assert not Path("/etc/ccrhost-isolation").exists()
    assert not Path("/tmp/node1-only").exists()
    # Each node sees its own emulated /sys, not the machine's.
    out = lab_ssh(lab, "node2", "ls /sys/class/infiniband").stdout.split()
    assert out == [f"mlx5_{i}" for i in range(8)]
    lab.down()
    assert tree_snapshot(Path("/etc")) == before


def test_modprobe_shim_resolves_dependencies_and_refuses_unknown_modules(make_lab):
    lab = make_lab(nodes=1)
    root = lab.root("node1")
    assert not (root / "sys/module/rdma_cm").exists()
    assert lab_ssh(lab, "node1", "modprobe rdma_ucm").returncode == 0
    for module in ("rdma_ucm", "rdma_cm", "ib_cm", "iw_cm", "ib_uverbs"):
        assert (root / f"sys/module/{module}/initstate").read_text() == "live\n"
    # rdma_cm registered its configfs subsystem, as the kernel module does.
    assert (root / "sys/kernel/config/rdma_cm").is_dir()
    bad = lab_ssh(lab, "node1", "modprobe mlx9_ib")
    import os
    assert bad.returncode == 1
    assert bad.stderr.strip() == f"modprobe: FATAL: Module mlx9_ib not found in directory /lib/modules/{os.uname().release}"
    assert not (root / "sys/module/mlx9_ib").exists()
    # configfs is built in: modprobe succeeds without creating anything
    assert lab_ssh(lab, "node1", "modprobe configfs").returncode == 0


def test_modprobe_fault(make_lab):
    lab = make_lab(nodes=1, faults=["node1:modprobe_fails=rdma_ucm"])
    bad = lab_ssh(lab, "node1", "modprobe rdma_ucm")
    assert bad.returncode == 1
    assert bad.stderr.strip() == "modprobe: ERROR: could not insert 'rdma_ucm': Operation not permitted"


def test_configfs_mkdir_only_for_real_devices(make_lab):
    lab = make_lab(nodes=1)
    assert lab_ssh(lab, "node1", "modprobe rdma_cm").returncode == 0
    bad = lab_ssh(lab, "node1", "mkdir /sys/kernel/config/rdma_cm/mlx5_42")
    assert bad.returncode == 1
    assert bad.stderr.strip() == "mkdir: cannot create directory '/sys/kernel/config/rdma_cm/mlx5_42': No such device"
    root = lab.root("node1")
    assert not (root / "sys/kernel/config/rdma_cm/mlx5_42").exists()
    assert lab_ssh(lab, "node1", "mkdir /sys/kernel/config/rdma_cm/mlx5_3").returncode == 0
    port = root / "sys/kernel/config/rdma_cm/mlx5_3/ports/1"
    assert (port / "default_roce_mode").read_text() == "IB/RoCE v1\n"
    assert (port / "default_roce_tos").read_text() == "0\n"
    again = lab_ssh(lab, "node1", "mkdir /sys/kernel/config/rdma_cm/mlx5_3")
    assert again.returncode == 1
    assert again.stderr.strip() == "mkdir: cannot create directory '/sys/kernel/config/rdma_cm/mlx5_3': File exists"
    assert lab_ssh(lab, "node1", "mkdir -p /sys/kernel/config/rdma_cm/mlx5_3").returncode == 0
    # relative to the working folder, and two groups in one call, alike
    assert lab_ssh(lab, "node1", "cd /sys/kernel/config/rdma_cm && mkdir mlx5_4 && "
                                 "mkdir /sys/kernel/config/rdma_cm/mlx5_5 /sys/kernel/config/rdma_cm/mlx5_6").returncode == 0
    for dev in ("mlx5_4", "mlx5_5", "mlx5_6"):
        assert (root / f"sys/kernel/config/rdma_cm/{dev}/ports/1/default_roce_mode").read_text() == "IB/RoCE v1\n"
    # plain mkdir elsewhere is untouched by the shim
    assert lab_ssh(lab, "node1", "mkdir /tmp/plain && test -d /tmp/plain").returncode == 0


def test_configfs_can_be_absent_and_mounted(make_lab):
    lab = make_lab(nodes=1, faults=["node1:configfs_unmounted"])
    assert lab_ssh(lab, "node1", "awk '$2==\"/sys/kernel/config\"' /proc/mounts").stdout == ""
    assert lab_ssh(lab, "node1", "modprobe rdma_cm && mount -t configfs none /sys/kernel/config").returncode == 0
    assert (lab.root("node1") / "sys/kernel/config/rdma_cm").is_dir()
    again = lab_ssh(lab, "node1", "mount -t configfs none /sys/kernel/config")
    assert again.returncode == 32 and "already mounted" in again.stderr


def test_faults_change_the_emulated_hardware(make_lab):
    lab = make_lab(nodes=2, faults=[
        "node1:port_down=mlx5_2", "node1:port_rate=mlx5_5:200", "node1:pcie_width=mlx5_6:8", "node2:rdma_missing=mlx5_7",
    ])
    ib = lab.root("node1") / "sys/class/infiniband"
    assert (ib / "mlx5_2/ports/1/state").read_text() == "1: DOWN\n"
    assert (ib / "mlx5_2/ports/1/phys_state").read_text() == "3: Disabled\n"
    assert (ib / "mlx5_5/ports/1/rate").read_text() == "200 Gb/sec (4X HDR)\n"
    assert (ib / "mlx5_6/device/current_link_width").read_text() == "8\n"
    assert (ib / "mlx5_6/device/max_link_width").read_text() == "16\n"
    assert (ib / "mlx5_0/ports/1/state").read_text() == "4: ACTIVE\n"
    names = sorted(p.name for p in (lab.root("node2") / "sys/class/infiniband").iterdir())
    assert names == [f"mlx5_{i}" for i in range(7)]


def test_reboot_resets_volatile_state_and_keeps_disk(make_lab):
    lab = make_lab(nodes=1)
    assert lab_ssh(lab, "node1", "modprobe rdma_ucm && mkdir /sys/kernel/config/rdma_cm/mlx5_0 && "
                                 "echo 'RoCE v2' > /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_mode && "
                                 "echo keep > /etc/ccrhost-disk && echo keep > /usr/local/bin/ccrhost-disk").returncode == 0
    lab.reboot("node1")
    root = lab.root("node1")
    assert not (root / "sys/module/rdma_ucm").exists()
    assert not (root / "sys/kernel/config/rdma_cm").exists()
    assert (root / "etc/ccrhost-disk").read_text() == "keep\n"
    # /usr/local is the node's own disk too (deploys/install.py's venv and link): kept, and not this machine's
    assert (root / "usr/local/bin/ccrhost-disk").read_text() == "keep\n"
    assert not Path("/usr/local/bin/ccrhost-disk").exists()
    assert lab_ssh(lab, "node1", "true").returncode == 0


def test_up_reuses_same_shape_and_refuses_another(make_lab):
    lab = make_lab(nodes=2)
    first = lab.load()
    again = lab.up(2, "hgx-h100-8x400", {}, name=LAB_NAME, subnet=LAB_SUBNET)
    assert [n.sshd_pid for n in again.nodes] == [n.sshd_pid for n in first.nodes]
    with pytest.raises(LabError, match="already running"):
        lab.up(3, "hgx-h100-8x400", {}, name=LAB_NAME, subnet=LAB_SUBNET)


def test_down_removes_everything_and_is_safe_twice():
    lab = Lab(LAB_DIR)
    lab.down()
    lab.up(2, "hgx-h100-8x400", {}, name=LAB_NAME, subnet=LAB_SUBNET)
    pids = [p for n in lab.load().nodes for p in (n.holder_pid, n.sshd_pid)]
    lab.down()
    assert lab.down() == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ccr{LAB_NAME}-" not in netns
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"ccr{LAB_NAME}" not in links
    assert not LAB_DIR.exists()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(") ")[1][:1]


def test_down_by_name_removes_a_labs_leftovers_whose_state_is_gone(make_lab):
    """A namespace and links of this lab's name with no state file (the CI
    once found ccrv-node1 left so) are swept, and the next lab starts."""
    subprocess.run(["ip", "netns", "add", f"ccr{LAB_NAME}-node1"], check=True)
    subprocess.run(["ip", "link", "add", f"ccr{LAB_NAME}br", "type", "bridge"], check=True)
    subprocess.run(["ip", "link", "add", f"ccr{LAB_NAME}1h", "type", "veth", "peer", "name", f"ccr{LAB_NAME}1x"],
                   check=True)
    lab = Lab(LAB_DIR)
    assert lab.load() is None
    assert lab.down() == []  # without the name: the state file is all it knows
    assert sorted(lab.down(name=LAB_NAME)) == [f"ccr{LAB_NAME}-node1", f"ccr{LAB_NAME}br"]
    assert f"ccr{LAB_NAME}-" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"ccr{LAB_NAME}" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert lab_ssh(make_lab(nodes=1), "node1", "true").returncode == 0


def test_bad_profile_and_fault_change_nothing(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: x\nnics: [\n")
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_profile(str(bad))
    with pytest.raises(ProfileError, match="unknown profile 'hgx-nope'"):
        load_profile("hgx-nope")
    with pytest.raises(ProfileError, match="unknown fault 'port_gone'"):
        parse_faults(["node1:port_gone"])
    lab = Lab(LAB_DIR)
    lab.down()
    with pytest.raises(ProfileError):
        lab.up(2, str(bad), {}, name=LAB_NAME, subnet=LAB_SUBNET)
    assert not LAB_DIR.exists()
    assert f"ccr{LAB_NAME}-" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_live_faults_change_a_running_node_and_clear_restores_it(make_lab):
    lab = make_lab(nodes=1)
    root = lab.root("node1")
    port = root / "sys/class/infiniband/mlx5_3/ports/1"
    pci = root / "sys/class/infiniband/mlx5_3/device"
    pristine = tree_snapshot(root / "sys/devices")
    assert lab_ssh(lab, "node1", "hostname").stdout == "node1\n"  # its own UTS namespace

    assert lab.fault("node1", "port_down=mlx5_3") == ["port_down=mlx5_3"]
    assert (port / "state").read_text() == "1: DOWN\n" and (port / "phys_state").read_text() == "3: Disabled\n"
    assert (root / "sys/class/net/ens4np0/operstate").read_text() == "down\n"
    lab.fault("node1", "port_rate=mlx5_5:200")
    lab.fault("node1", "port_rate=mlx5_5:100")  # the same port again: replaced, not added
    lab.fault("node1", "pcie_width=mlx5_3:8")
    lab.fault("node1", "gpu_missing")
    assert (root / "sys/class/infiniband/mlx5_5/ports/1/rate").read_text() == "100 Gb/sec (4X EDR)\n"
    assert (pci / "current_link_width").read_text() == "8\n"
    assert len(lab_ssh(lab, "node1", "nvidia-smi -L").stdout.splitlines()) == 7
    assert lab.node("node1").faults == ["port_down=mlx5_3", "port_rate=mlx5_5:100", "pcie_width=mlx5_3:8", "gpu_missing"]

    with pytest.raises(LabError, match="can only be set at `ccrhost lab up`"):
        lab.fault("node1", "rdma_missing")
    with pytest.raises(ProfileError, match="port_rate=mlx5_9:200: need a NIC"):
        lab.fault("node1", "port_rate=mlx5_9:200")
    with pytest.raises(LabError, match="node1 has no fault gpu_throttled"):
        lab.clear("node1", "gpu_throttled")
    assert len(lab.node("node1").faults) == 4  # refused changes left everything as it was

    for kind in ("port_down", "port_rate", "pcie_width", "gpu_missing"):
        lab.clear("node1", kind)
    assert tree_snapshot(root / "sys/devices") == pristine
    assert len(lab_ssh(lab, "node1", "nvidia-smi -L").stdout.splitlines()) == 8
    assert lab.node("node1").faults == []


def test_served_shims_answer_as_the_shim_itself_does(make_lab):
    """ethtool, nvidia-smi, the kernel log and setpci run in a fork of the
    node's labsysfsd (no interpreter start per call): stdout, stderr and
    exit code are the Python shim's own, and without the server the client
    runs the shim itself."""
    lab = make_lab(nodes=1, faults=["node1:pfc_storm"])
    calls = ["ethtool -S ens1np0", "ethtool -a ens1np0", "ethtool -x ens1np0", "ethtool -S nosuchdev",
             "nvidia-smi -q", "nvidia-smi --query-gpu=nosuch --format=csv", "nvidia-smi nvlink -e", "dmesg",
             "journalctl -b", "setpci -s 0000:00:00.0 0.l"]
    script = "; ".join(f"{c} >/tmp/o 2>/tmp/e; echo \"rc=$?\"; cat /tmp/o; echo @@err; cat /tmp/e; echo @@end"
                       for c in calls)
    served = lab_ssh(lab, "node1", script)
    direct = lab_ssh(lab, "node1", "; ".join(
        f"/usr/local/sbin/{c.partition(' ')[0]}.py {c.partition(' ')[2]} >/tmp/o 2>/tmp/e; "
        "echo \"rc=$?\"; cat /tmp/o; echo @@err; cat /tmp/e; echo @@end" for c in calls))
    assert served.returncode == 0 and direct.returncode == 0
    # the pause counters advance with time (pfc_storm): compare all but their values
    import re

    def shape(text):
        return re.sub(r"(pause_duration|pause|storm_\w+_events|pause_transition): \d+", r"\1: N", text)

    assert shape(served.stdout) == shape(direct.stdout)
    rcs = re.findall(r"rc=(\d+)", served.stdout)
    assert rcs == ["0", "0", "1", "1", "0", "2", "0", "0", "1", "0"]
    assert "netlink error: no device matches name" in served.stdout
    # the server is a fork of labsysfsd: stop it and the client still answers, by itself
    # (nodes share the machine's PID namespace: only this node's daemon, by its mount namespace)
    pkill = lab_ssh(lab, "node1", "for p in $(pgrep -f '[l]absysfsd.py'); do "
                    "[ \"$(readlink /proc/$p/ns/mnt)\" = \"$(readlink /proc/self/ns/mnt)\" ] && kill $p; done; "
                    "sleep 0.2; ethtool -a ens1np0; echo rc=$?")
    assert "Pause parameters for ens1np0:" in pkill.stdout and "rc=0" in pkill.stdout


def test_a_served_tool_that_hangs_stalls_only_its_caller_and_goes_with_the_node(make_lab):
    """nvidia-smi (gpu_hang: an hour's sleep) runs in a fork of the tool
    server; the tools answered in the server itself go on meanwhile, each
    reading the node afresh, and the hung fork ends with the lab."""
    lab = make_lab(nodes=1, faults=["node1:gpu_hang"])
    out = lab_ssh(lab, "node1", "timeout 1 nvidia-smi -L; echo rc=$?; ethtool -a ens1np0; "
                                "ethtool -A ens1np0 rx on tx on; ethtool -a ens1np0")
    assert "rc=124" in out.stdout, out
    before, after = out.stdout.split("Pause parameters for ens1np0:")[1:]
    assert "RX:\t\toff" in before and "RX:\t\ton" in after and "TX:\t\ton" in after
    mnt = os.readlink(f"/proc/{lab.load().nodes[0].holder_pid}/ns/mnt")
    hung = [p for p in os.listdir("/proc") if p.isdigit() and _in_mnt(p, mnt) and b"labsysfsd" in _cmdline(p)]
    assert len(hung) == 2  # the daemon and its fork in the hung nvidia-smi
    lab.down()
    deadline = time.monotonic() + 5
    while [p for p in hung if os.path.exists(f"/proc/{p}")] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in hung if os.path.exists(f"/proc/{p}")]


def _in_mnt(pid, mnt):
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt") == mnt
    except OSError:
        return False


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""
