"""Bad inventory data never half-applies: every case stops the run before
any host is touched, names host, key, value and what is allowed, and
leaves the lab nodes byte-identical."""

import subprocess
import sys

import pytest
from conftest import REPO, node_address, run_pyinfra, tree_snapshot

from ccrhost.settings import InventoryDataError, validate_host

WORKLOAD = {"grad_bytes_per_param": 2, "tokens_per_gpu_step": 4096, "dp_size": 64}

# (key, bad value, a piece of the "allowed" text)
CASES = [
    ("roce_dcsp", 26, "unknown key; did you mean 'roce_dscp'?"),
    ("roce_dscp", 64, "integers 0 to 63"),
    ("roce_dscp", -1, "integers 0 to 63"),
    ("roce_dscp", "26", "valid integer"),
    ("roce_dscp", 26.5, "valid integer"),
    ("roce_ecn_bits", 4, "integers 0 to 3"),
    ("roce_version", 3, "allowed: 1 or 2"),
    ("roce_force_traffic_class", "yes", "valid boolean"),
    ("rdma_modules", "mlx5_ib", "valid tuple"),
    ("rdma_modules", ["x;reboot"], "must match"),
    ("rdma_modules", ["mlx5 ib"], "must match"),
    ("rdma_require_devices", 1, "valid boolean"),
    ("rdma_exclude_devices", ["mlx5;rm -rf /"], "must match"),
    ("qos_roce_priority", 8, "integers 0 to 7"),
    ("qos_cnp_priority", -1, "integers 0 to 7"),
    ("qos_cnp_dscp", 26, "CNPs need their own DSCP"),
    ("qos_pfc_priorities", [5], "no configured DSCP maps to it"),
    ("qos_pfc_priorities", [9], "less than or equal to 7"),
    ("qos_buffer_size", [1, 2, 3], "at least 8 items"),
    ("qos_buffer_size", [-1, 0, 0, 0, 0, 0, 0, 0], "greater than or equal to 0"),
    ("qos_prio2buffer", [0, 0, 0, 8, 0, 0, 0, 0], "less than or equal to 7"),
    ("qos_cable_len", 0, "integers 1 to 999"),
    ("qos_min_headroom", -5, "greater than 0"),
    ("qos_credit_threshold", 0, "greater than 0"),
    ("qos_allow_ssh_interface", "true", "valid boolean"),
    ("qos_tos", 106, "unknown key"),
    ("ecn_priorities", [8], "less than or equal to 7"),
    ("dcqcn_params", {"rpg_ai_ratee": 5}, "allowed: 'clamp_tgt_rate'"),
    ("dcqcn_params", {"rpg_ai_rate": -1}, "greater than or equal to 0"),
    ("nccl_socket_ifname", "eth0;reboot", "must match"),
    ("nccl_socket_ifname", "eth 0", "must match"),
    ("nccl_socket_ifname", "averyveryverylongname", "must match"),
    ("nccl_extra", {"NCCL_DEBUG": "INFO\nNCCL_X=1"}, "must match"),
    ("nccl_extra", {"NCCL_DEBUG": '"WARN"'}, "must match"),
    ("nccl_extra", {"nccl_debug": "WARN"}, "must match ^NCCL_"),
    ("nccl_extra", {"NCCL_X": "$(reboot)"}, "must match"),
    ("nccl_ib_hca", "mlx5_0;reboot", "must match"),
    ("nccl_ib_timeout", 32, "integers 1 to 31"),
    ("nccl_ib_retry_cnt", 8, "integers 0 to 7"),
    ("nccl_cross_nic", 3, "allowed: 0, 1 or 2"),
    ("nccl_net_gdr_level", "FOO", "allowed: 'LOC'"),
    ("nccl_ib_gid_index", 256, "integers 0 to 255"),
    ("nccl_ib_addr_range", "10.0.0.0", "must match"),
    ("verify_profile", "hgx-unknown", "allowed: a built-in platform (aws-p5-efa, azure-nd-h100-v5, azure-nd-h200-v5"),
    ("verify_gpu_model", "NVIDIA H999", "not in the peak-TFLOPS table; give its datasheet figures"),
    ("verify_precision", "int4", "allowed: 'fp64'"),
    ("verify_min_ccr_fraction", 1.5, "allowed: 0 to 1"),
    ("verify_beta", 0, "greater than 0"),
    ("verify_workload", {**WORKLOAD, "dp_size": 0}, "greater than or equal to 1"),
    ("verify_gpu_tflops", {"bf16": -1.0}, "TFLOPS must be positive"),
    ("verify_measure_timeout", 3, "allowed: integers 5 to 7200"),
    ("verify_report_dir", "../x;y", "must match"),
    ("verify_fleet_tolerance", 2, "less than 1"),
    # issue 14: typed rules nccl_extra could bypass, non-ASCII digits, impossible CIDRs, infinities
    ("nccl_extra", {"NCCL_IB_GID_INDEX": "7"}, "NCCL_IB_GID_INDEX has its own key: set nccl_ib_gid_index instead "
                                               "(allowed: integers 0 to 255)"),
    ("nccl_extra", {"NCCL_IB_TIMEOUT": "40"}, "set nccl_ib_timeout instead (allowed: integers 1 to 31)"),
    ("nccl_extra", {"NCCL_IB_HCA": "mlx5_0"}, "NCCL_IB_HCA has its own key: set nccl_ib_hca instead"),
    ("nccl_extra", {"NCCL_IB_TC": "106"}, "set roce_dscp and roce_ecn_bits instead"),
    ("nccl_ib_hca", "mlx5_0:\u0661", "must match"),
    ("nccl_ib_addr_range", "10.0.0.0/33", "an IPv4 or IPv6 network in CIDR form"),
    ("nccl_ib_addr_range", "::/999", "an IPv4 or IPv6 network in CIDR form"),
    ("nccl_ib_addr_range", "10.\u0661.0.0/8", "must match"),
    ("nccl_ib_addr_range", "fd00::/64", "is an IPv6 network but nccl_ib_addr_family is AF_INET"),
    ("verify_gpu_count", 0, "allowed: integers 1 to 64"),
    ("verify_gpu_tflops", {"bf16": float("inf")}, "finite number"),
    ("verify_gpu_tflops", {"bf16": float("nan")}, "finite number"),
    ("verify_workload", {**WORKLOAD, "grad_bytes_per_param": float("inf")}, "finite number"),
    ("verify_min_ccr", float("inf"), "finite number"),
    ("verify_port_gbps", float("nan"), "finite number"),
    ("roce_version", True, "allowed: 1 or 2 (a number, not true/false)"),  # found by the validator fuzz
    ("nccl_cross_nic", False, "allowed: 0, 1 or 2"),
    # issue 45 case 12: a folder to write bundles into, a textfile that was no file of ccrhost's own
    ("verify_evidence_dir", "/etc", "is a system folder (a top-level system folder); allowed: a folder of "
                                    "ccrhost's own, such as /var/lib/ccrhost/evidence"),
    ("verify_evidence_dir", "/usr/share/ccrhost", "is a system folder (under /usr)"),
    ("slurm_drain_cap_textfile", "/etc/passwd", "is a system file directly in /etc; allowed: a file of ccrhost's own"),
]


@pytest.mark.parametrize("key, value, allowed", CASES, ids=[f"{k}={v!r}"[:40] for k, v, _ in CASES])
def test_each_bad_value_is_named(key, value, allowed):
    with pytest.raises(InventoryDataError) as info:
        validate_host("gpu-07", {key: value})
    text = str(info.value)
    assert f"gpu-07: {key}" in text, text
    shown = [value, tuple(value) if isinstance(value, list) else value]
    shown += list(value) if isinstance(value, list) else list(value.items()) if isinstance(value, dict) else []
    shown += [k for k in value] if isinstance(value, dict) else []
    shown += [v for v in value.values()] if isinstance(value, dict) else []
    assert any(repr(x)[:30] in text for x in shown), text  # the bad value, or the bad item of it
    assert allowed in text, text


def test_cross_key_contradictions():
    with pytest.raises(InventoryDataError, match="set verify_beta or verify_workload, not both"):
        validate_host("gpu-07", {"verify_beta": 1.0, "verify_workload": WORKLOAD})
    with pytest.raises(InventoryDataError, match="cannot go with nccl_ib_addr_family AF_INET6"):
        validate_host("gpu-07", {"nccl_ib_gid_index": 3, "nccl_ib_addr_family": "AF_INET6"})


def test_the_table_covers_forty_distinct_inputs_and_every_key_family():
    assert len({(k, repr(v)) for k, v, _ in CASES}) >= 40
    assert {k.split("_")[0] for k, _, _ in CASES} >= {"roce", "rdma", "qos", "ecn", "dcqcn", "nccl", "verify"}


@pytest.mark.lab
def test_bad_input_through_the_pyinfra_cli_changes_no_node(make_lab, tmp_path):
    """Every case of the table in one pyinfra run: one inventory host per case,
    all reaching node2 (``ssh_hostname``), next to the good node1. Each bad
    host is named with its key and what is allowed, and no node changes."""
    lab = make_lab(nodes=2)
    before = {n: (tree_snapshot(lab.root(n) / "sys"), tree_snapshot(lab.root(n) / "etc")) for n in ("node1", "node2")}
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        "from ccrhost.lab.inventory import lab_hosts\n"
        "inf, nan = float('inf'), float('nan')  # repr() of the infinite cases\n"
        "def _nodes():  # every top-level list of an inventory is a group\n"
        f"    cases = {[(key, value) for key, value, _ in CASES]!r}\n"
        "    good, bad = lab_hosts()\n"
        "    return [good] + [(f'case{i:02d}', {**bad[1], 'ssh_hostname': bad[0], key: value})\n"
        "                     for i, (key, value) in enumerate(cases)]\n"
        "nodes = _nodes()\n")
    run = run_pyinfra("deploys/rdma.py", inventory=str(inventory), timeout=120)
    assert run.rc == 2, run.out
    assert "no host was changed" in run.out
    for i, (key, _, allowed) in enumerate(CASES):
        line = next((x for x in run.out.splitlines() if x.strip().startswith(f"case{i:02d}: ")), "")
        assert line.strip().startswith(f"case{i:02d}: {key}") and allowed in line, (i, key, run.out)
    assert f"{node_address(1)}:" not in run.out  # the good host is not blamed
    after = {n: (tree_snapshot(lab.root(n) / "sys"), tree_snapshot(lab.root(n) / "etc")) for n in ("node1", "node2")}
    assert after == before


@pytest.mark.lab
def test_empty_inventory_is_refused(tmp_path):
    inventory = tmp_path / "empty.py"
    inventory.write_text("from ccrhost.inventory import require_hosts\nnodes = require_hosts('nodes', [])\n")
    run = run_pyinfra("deploys/rdma.py", inventory=str(inventory))
    assert run.rc == 2
    assert "ccrhost: inventory group 'nodes' has no hosts; nothing would be checked" in run.out


def run_ccrhost(*args):
    return subprocess.run([sys.executable, "-m", "ccrhost", *args], capture_output=True, text=True, cwd=REPO)


@pytest.mark.parametrize("args, message", [
    (["calc", "--gpu", "H100 SXM", "--gpus", "0"], "Invalid value for '--gpus': 0 is out of range: allowed from 1 to 1024"),
    (["calc", "--gpu", "H100 SXM", "--nic-gbps", "-400"], "-400"),
    (["calc", "--gpu", "H100 SXM", "--grad-bytes", "2"], "a workload needs --tokens and --dp"),
    (["calc", "--gpu", "H100 SXM", "--beta", "4", "--grad-bytes", "2", "--tokens", "1", "--dp", "2"], "not both"),
    (["lab", "up", "--nodes", "0"], "0 is not in the range"),
    (["lab", "up", "--fault", "node1"], "expected NODE:KIND[=VALUE]"),
    (["lab", "up", "--fault", "node1:melt"], "unknown fault 'melt'"),
    (["lab", "up", "--node-profile", "node1"], "expected NODE=PROFILE"),
    (["lab", "up", "--profile", "hgx-nope"], "unknown profile 'hgx-nope'"),
    (["lab", "up", "--name", "Bad Name"], "use 1-6 lowercase letters"),
    (["nccl-env", "--format", "yaml"], "'yaml' is not one of"),
])
def test_cli_arguments_are_checked(args, message, tmp_path):
    out = subprocess.run([sys.executable, "-m", "ccrhost", *args], capture_output=True, text=True, cwd=REPO,
                         env={"CCRHOST_LAB_DIR": str(tmp_path / "lab"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    assert out.returncode != 0
    assert message in out.stderr, out.stderr
    assert not (tmp_path / "lab").exists()  # a refused `lab up` creates nothing


def test_malformed_profile_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    for text, message in [("nics: [\n", "not valid YAML"), ("- just\n- a list\n", "expected a mapping"),
                          ("name: x\nofed: maybe\n", "ofed"), ("name: x\nofed: true\nnics: []\n", "modules")]:
        bad.write_text(text)
        out = run_ccrhost("lab", "up", "--profile", str(bad), "--dir", str(tmp_path / "lab"))
        assert out.returncode != 0 and message in out.stderr, (text, out.stderr)
        assert not (tmp_path / "lab").exists()


@pytest.mark.parametrize("key, value, message", [
    ("roce_version", 1.0, "allowed: 1 or 2 (a whole number, not 1.0)"),
    ("nccl_cross_nic", 2.0, "allowed: 0, 1 or 2 (a whole number, not 2.0)"),
])
def test_a_literal_number_key_refuses_a_float_that_equals_one_of_its_values(key, value, message):
    # found by the deep fuzz run: Literal[1, 2] took 1.0, since 1.0 == 1
    from ccrhost.settings import InventoryDataError, validate_host

    with pytest.raises(InventoryDataError) as exc:
        validate_host("gpu01", {key: value})
    assert str(exc.value) == f"gpu01: {key} = {value!r}: {message}"
