"""What deploys/slurm.py installs: the check settings, the prolog and the
health check (run here as slurmd runs them: no environment at all), and
the slurm.conf fragment. The same files run in the Slurm lab (test_slurm.py)."""

import subprocess

import pytest
import yaml

from ccrhost.model.managed import CHECK_CONFIG
from ccrhost.model.platform import resolve
from ccrhost.model.managed import SLURM_HEALTHCHECK as HEALTHCHECK
from ccrhost.model.managed import SLURM_PROLOG as PROLOG
from ccrhost.model.slurm import HEALTHCHECK_BUDGET, integration_files
from ccrhost.operations.files import MANAGED_HEADER
from ccrhost.settings import InventoryDataError, validate_host


def files_of(settings) -> dict[str, tuple[str, str]]:
    return {path: (content, mode) for path, content, mode in integration_files(settings)}


# A value other than the default for every key of the settings model: the
# check.yaml test below fails for a key added later until it is listed here.
EVERY_KEY = {
    "host_health_enable": True, "host_health_units": ["slurmd", "munge"], "host_health_units_warn": ["nvidia-imex"],
    "host_health_fabricmanager": "required", "host_health_unit_restarts_max": 2,
    "host_health_state": "/run/ccrhost/host.json", "host_health_time_sync": False,
    "host_health_edac_corrected_warn": 3, "host_health_edac_corrected_max": 20,
    "host_health_kernel_lookback_hours": None, "host_health_kernel_allow": ["EXT4-fs \\(sdz1\\)"],
    "host_health_idle_gpu_memory_mib": 64, "host_health_memlock_kib": 1048576,
    "imex_enable": True, "imex_unit": "imex-site", "imex_channel": "/dev/nvidia-caps-imex-channels/channel1",
    "imex_config": "/etc/nvidia-imex/site.cfg", "imex_rack": "nvl72-a",
    "verify_gpu_xid_lookback_hours": 6, "verify_gpu_xid_ignore": [13], "verify_gpu_ecc_correctable_max": 500,
    "verify_gpu_nvlink_errors_per_min": 5, "verify_gpu_pcie_replays_per_min": 2, "verify_gpu_hw_slowdown": "FAIL",
    "verify_gpu_state": "/run/ccrhost/gpu.json",
    "verify_history": "/var/lib/ccrhost/failures.json", "verify_history_entries": 20, "verify_replace_failures": 4,
    "verify_replace_window_hours": 72, "verify_evidence_dir": "/var/lib/ccrhost/bundles",
    "verify_evidence_max_age_days": 3, "verify_evidence_keep": 5, "verify_evidence_bug_report": True,
    "verify_link_flap_max": 2, "verify_link_flap_lookback_hours": 12,
    "rdma_modules": ["mlx5_core", "mlx5_ib"], "rdma_require_devices": False, "roce_version": 1, "roce_dscp": 24,
    "roce_ecn_bits": 1, "roce_force_traffic_class": True, "qos_enable": False, "qos_roce_priority": 4,
    "qos_cnp_dscp": 46, "qos_cnp_priority": 5, "qos_pfc_priorities": [4], "qos_cable_len": 10,
    "qos_buffer_size": [1024] * 8, "qos_prio2buffer": [0, 0, 0, 0, 1, 0, 0, 0], "qos_min_headroom": 4096,
    "qos_credit_threshold": 8, "qos_allow_ssh_interface": True, "ecn_priorities": [4, 5], "ecn_rp": False,
    "ecn_np": False, "dcqcn_params": {"rpg_ai_rate": 10}, "rdma_gpudirect": False, "rdma_acs_clear": False,
    "rdma_nic_pcie_optimize": True, "rdma_nic_max_read_req": 2048, "rdma_nic_relaxed_ordering": True,
    "roce_mtu": None, "rdma_exclude_devices": ["mlx5_bond_*"], "nccl_ib_hca": "=mlx5_0:1",
    "nccl_socket_ifname": "=eth0", "nccl_fifo_dscp": 30, "nccl_ib_addr_family": "AF_INET6",
    "nccl_ib_addr_range": "fd00::/64", "nccl_ib_gid_index": None, "nccl_net_gdr_level": "PXB",
    "nccl_ib_qps_per_connection": 2, "nccl_ib_timeout": 20, "nccl_ib_retry_cnt": 5, "nccl_cross_nic": 1,
    "nccl_extra": {"NCCL_DEBUG": "WARN"}, "verify_profile": "hgx-h100-8x400",
    # what the deploy resolved (here another platform than verify_profile's, so a dropped key shows)
    "verify_platform": resolve("hgx-h200-8x400").to_data(),
    "verify_gpu_model": "NVIDIA H100 80GB HBM3", "verify_gpu_count": 8, "verify_ports": 8, "verify_port_gbps": 200.0,
    "verify_precision": "fp8", "verify_beta": None,
    "verify_workload": {"grad_bytes_per_param": 2, "tokens_per_gpu_step": 4096, "dp_size": 64, "precision": "fp8"},
    "verify_bandwidth_model": "sum", "verify_min_ccr": 1e-5, "verify_min_ccr_fraction": 0.8,
    "verify_gpu_tflops": {"fp8": 1900.0}, "verify_fleet_tolerance": 0.2, "verify_measure": True,
    "verify_measure_seconds": 5, "verify_measure_retries": 1, "verify_measure_min_fraction": 0.8,
    "verify_measure_timeout": 30, "verify_measure_port": 20000, "monitor_seconds": 5.0, "monitor_interval": 2.0,
    "monitor_gpu_target": 80.0, "monitor_net_target": 70.0, "monitor_outlier_tolerance": 0.3,
    "verify_rail_local": False, "verify_window_max_age": 900.0, "verify_link_state": "/run/ccrhost/state",
    "verify_pause_share_max": 0.2, "verify_fabric_warn_per_hour": {"rx_discards_phy": 5.0},
    "verify_fabric_fail_per_hour": {"rnr_nak_retry_err": None},
    "verify_link_thresholds": {"symbol_error": 3}, "verify_required_nic_fw": "99.0.0",
    "verify_required_mlx5": "24.10", "verify_required_nvidia": "550.54", "verify_measure_gpudirect": True,
    "slurm_ccrhost": "/opt/ccrhost/bin/ccrhost", "slurm_path": "/opt/ccrhost/bin:/usr/bin:/bin",
    "slurm_conf": "/etc/slurm-llnl/slurm.conf", "slurm_fragment": "/etc/slurm/conf.d/ccrhost.conf",
    "slurm_prolog": False, "slurm_healthcheck": "nhc", "slurm_healthcheck_interval": 60, "slurm_healthcheck_node_state": "IDLE",
    "verify_report_dir": "reports/ccr", "verify_npd_warn_unhealthy": True,
    "slurm_drain_cap_nodes": 4, "slurm_drain_cap_share": 0.2, "slurm_drain_cap_unknown_share": 0.1,
    "slurm_drain_cap_window": 600, "slurm_drain_cap_textfile": "/var/lib/node_exporter/textfile/ccrhost-cap.prom",
    "slurm_mode": "observe", "slurm_log": "/var/log/ccrhost/slurm.log",
    "slurm_textfile": "/var/lib/node_exporter/textfile/ccrhost-slurm.prom",
    "ccrhost_install_dir": "/opt/ccrhost", "ccrhost_wheelhouse": "site/wheels",
    "ccrhost_index_url": "https://pypi.example.org/simple", "ccrhost_python": "/usr/bin/python3.11",
    "verify_allreduce": True, "verify_allreduce_modes": ("loopback",), "verify_allreduce_binary": "/opt/nt/all_reduce_perf",
    "verify_allreduce_min_busbw": {"nvlink": 450.0}, "verify_allreduce_retries": 1, "verify_allreduce_timeout": 120,
    "verify_allreduce_max_bytes": "8G", "verify_allreduce_iters": 10, "verify_allreduce_valid_for": 3600,
    "verify_allreduce_state": "/var/lib/ccrhost/nccl.json", "verify_allreduce_launcher": "mpirun",
    "verify_allreduce_mpirun": "/usr/lib64/openmpi/bin/mpirun", "verify_allreduce_port": 30500,
    "verify_nic_firmware": True, "verify_nic_valid_for": 3600, "verify_nic_max_acc_out_read": (0, 128),
    "verify_nic_ats_enabled": True, "verify_nic_link_type": 2, "verify_nic_optics": True,
    "verify_nic_raw_ber_max": 1e-5,
    "verify_dcgm": True, "verify_dcgm_level_deploy": 2, "verify_dcgm_level_prolog": 1, "verify_dcgm_level_sweep": 3,
    "verify_dcgm_exclude": ("Persistence Mode",), "verify_dcgm_binary": "/usr/bin/dcgmi",
    "verify_dcgm_engine_timeout": 20, "verify_dcgm_timeouts": {2: 900}, "verify_dcgm_valid_for": 7200,
    "verify_dcgm_state": "/var/lib/ccrhost/diag.json", "verify_nvbandwidth": True,
    "verify_nvbandwidth_binary": "/opt/nvbandwidth/nvbandwidth", "verify_nvbandwidth_timeout": 120,
    "verify_nvbandwidth_min_gbs": {"host_to_device_memcpy_ce": 50.0},
    "verify_gemm": True, "verify_gemm_seconds": 120, "verify_gemm_min_fraction": 0.5,
    "verify_active_when_busy": True, "rdma_tune_when_busy": True,
    "baseline_cpus_all_online": True, "baseline_cpu_sockets": 2, "baseline_cpu_cores": 96, "baseline_cpu_threads": 96,
    "baseline_cpu_model": "AMD EPYC 9V84 96-Core Processor", "baseline_memory_total_kib": 1961032704,
    "baseline_memory_tolerance_pct": 3.0, "baseline_swap_max_kib": 0, "baseline_hugepages": {"2048kB": 5128},
    "baseline_mounts": {"/mnt/nvme": {"fstype": "xfs", "min_free_pct": 10.0}}, "baseline_modules": ("ib_umad",),
    "baseline_cmdline": ("iommu=pt",), "baseline_sysctl": {"kernel.numa_balancing": "0"},
    "baseline_clocksource": "tsc", "baseline_kernel_min": "5.15.0-1061", "baseline_cuda_min": "12.4",
    "baseline_nccl_min": "2.21.5", "baseline_ofed_min": "24.10-1.1.4.0",
    "wiring_enable": True, "wiring_rails": ({"leaf": "leaf-r0-*", "ports": "1-32"}, {"leaf_guids": ("0xe41d2d03004bef70",)}),
    "wiring_distinct_leaves": False, "wiring_pkey": "0x8001", "wiring_gid_index": 3, "wiring_valid_for": 3600,
    "wiring_leaf_suspect_fraction": 0.75, "wiring_leaf_suspect_min_nodes": 3, "wiring_leaf_suspect_window_hours": 2,
    "wiring_spines": {"spine-1": ["leaf-r0-*"]},
    "accept_stages": ("check", "node", "pairs"), "accept_budgets": {"node": 7200}, "accept_soak_minutes": 15.0,
    "accept_dcgm_level": 3, "accept_mesh_group": 16, "accept_mesh_prune": 0.25, "accept_latency_max_p99_us": 5.0,
    "accept_mesh_timeout": 6,
    "accept_certificate": "/var/lib/ccrhost/cert.json", "accept_valid_for": 86400,
}
# Keys that exclude others of EVERY_KEY take their non-default value here.
EXCLUSIVE = {**EVERY_KEY, "nccl_ib_gid_index": 3, "nccl_ib_addr_family": "AF_INET", "nccl_ib_addr_range": None,
             "verify_beta": 2.0, "verify_workload": None}


def test_check_yaml_is_the_hosts_whole_settings_every_key_unchanged():
    from ccrhost.settings import HostSettings

    assert set(EVERY_KEY) == set(HostSettings.model_fields), "list a non-default value for every new key"
    both = [validate_host("gpu01", EVERY_KEY), validate_host("gpu01", EXCLUSIVE)]
    defaults = HostSettings()
    for key in HostSettings.model_fields:  # each key differs from its default in one of them, so a dropped key shows
        assert any(getattr(s, key) != getattr(defaults, key) for s in both), key
    # only the controller's report folder and how deploys/install.py installs stay behind: a key is marked
    # so on its field, never listed here
    controller = set(HostSettings.model_fields) - set(HostSettings.node_keys())
    assert controller == {"verify_report_dir", "ccrhost_install_dir", "ccrhost_wheelhouse", "ccrhost_index_url",
                          "ccrhost_python", "rdma_tune_when_busy"}
    for settings in both:
        content, mode = files_of(settings)[CHECK_CONFIG]
        assert mode == "644" and content.startswith(MANAGED_HEADER)
        loaded = yaml.safe_load(content)
        assert set(loaded) == set(HostSettings.model_fields) - controller
        on_node = validate_host("gpu01", loaded)  # what `ccrhost check --config` does with the file
        for key in HostSettings.node_keys():
            assert getattr(on_node, key) == getattr(settings, key), key
        assert on_node == settings.model_copy(update={k: getattr(defaults, k) for k in controller})


def test_the_check_reads_check_yaml_through_its_own_loader(tmp_path):
    from ccrhost.cli import _settings

    settings = validate_host("gpu01", EVERY_KEY)
    path = tmp_path / "check.yaml"
    path.write_text(files_of(settings)[CHECK_CONFIG][0])
    controller = set(type(settings).model_fields) - set(settings.node_keys())
    assert _settings(str(path)).model_dump(exclude=controller) == settings.model_dump(exclude=controller)


def test_fragment_names_the_scripts_and_never_more():
    settings = validate_host("gpu01", {"slurm_healthcheck_interval": 120, "slurm_healthcheck_node_state": "IDLE,CYCLE"})
    content, mode = files_of(settings)["/etc/slurm/ccrhost.conf"]
    lines = [line for line in content.splitlines() if not line.startswith("#")]
    assert lines == [f"Prolog={PROLOG}", f"HealthCheckProgram={HEALTHCHECK}", "HealthCheckInterval=120",
                     "HealthCheckNodeState=IDLE,CYCLE"]
    assert "#   Include /etc/slurm/ccrhost.conf" in content and mode == "644"
    off = validate_host("gpu01", {"slurm_prolog": False, "slurm_fragment": "/etc/slurm/conf.d/ccrhost.conf"})
    other = files_of(off)
    assert "/etc/slurm/ccrhost.conf" not in other
    assert not any(line.startswith("Prolog=") for line in other["/etc/slurm/conf.d/ccrhost.conf"][0].splitlines())


@pytest.mark.parametrize("data, message", [
    ({"slurm_healthcheck_node_state": "IDLE;reboot"}, "a comma list of ALLOC, ANY, CYCLE, IDLE, MIXED, NONDRAINED_IDLE"),
    ({"slurm_ccrhost": "ccrhost"}, "must match"),
    ({"slurm_path": "/usr/bin:$(reboot)"}, "must match"),
    ({"slurm_conf": "/etc/slurm/slurm.conf; reboot"}, "must match"),
    ({"slurm_healthcheck_interval": 90000}, "allowed: integers 0 to 86400"),
    ({"slurm_healthcheck_intervall": 60}, "unknown key; did you mean 'slurm_healthcheck_interval'?"),
])
def test_bad_slurm_keys_are_refused_naming_host_key_and_value(data, message):
    with pytest.raises(InventoryDataError) as exc:
        validate_host("gpu01", data)
    (key, value), = data.items()
    assert str(exc.value).startswith(f"gpu01: {key} = {value!r}: ")
    assert message in str(exc.value)


@pytest.fixture
def fake_ccrhost(tmp_path):
    """A stand-in ccrhost that records its arguments and environment and exits with a chosen code."""
    script = tmp_path / "ccrhost"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\nenv > {tmp_path}/env\n"
                      f"exit $(cat {tmp_path}/code)\n")
    script.chmod(0o755)
    return tmp_path


def installed(tmp_path, path: str, **data) -> str:
    settings = validate_host("gpu01", {"slurm_ccrhost": str(tmp_path / "ccrhost"), **data})
    content, mode = files_of(settings)[path]
    target = tmp_path / path.rsplit("/", 1)[1]
    target.write_text(content)
    target.chmod(int(mode, 8))
    return str(target)


def run_as_slurmd(script: str) -> int:
    # slurmd runs prologs and health checks with no PATH and no SLURM_CONF
    return subprocess.run([script], env={"SLURMD_NODENAME": "gpu01"}, capture_output=True, timeout=10).returncode


@pytest.mark.parametrize("check_rc, prolog_rc", [(0, 0), (1, 0), (2, 2), (3, 3)])
def test_prolog_lets_ok_and_warn_through_and_stops_fail_and_unknown(fake_ccrhost, check_rc, prolog_rc):
    prolog = installed(fake_ccrhost, PROLOG, slurm_conf="/opt/slurm/etc/slurm.conf")
    (fake_ccrhost / "code").write_text(str(check_rc))
    assert run_as_slurmd(prolog) == prolog_rc
    assert (fake_ccrhost / "args").read_text() == f"check --config {CHECK_CONFIG} --format nhc --drain --drain-unknown --hold\n"
    env = dict(line.split("=", 1) for line in (fake_ccrhost / "env").read_text().splitlines() if "=" in line)
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert env["SLURM_CONF"] == "/opt/slurm/etc/slurm.conf"


def test_prolog_without_ccrhost_lets_the_job_run(tmp_path):
    # ccrhost's own installation at fault (issue 46): told in syslog, no job failed, no node drained
    prolog = installed(tmp_path, PROLOG)  # no ccrhost at that path
    assert run_as_slurmd(prolog) == 0


@pytest.mark.parametrize("check_rc", [0, 1, 2, 3])
def test_observe_mode_runs_the_checks_as_dry_runs_and_every_job_starts(fake_ccrhost, check_rc):
    data = {"slurm_mode": "observe", "slurm_log": "/var/log/ccrhost/slurm.log",
            "slurm_textfile": "/var/lib/node_exporter/textfile/ccrhost-slurm.prom"}
    told = " --log /var/log/ccrhost/slurm.log --textfile /var/lib/node_exporter/textfile/ccrhost-slurm.prom"
    (fake_ccrhost / "code").write_text(str(check_rc))
    assert run_as_slurmd(installed(fake_ccrhost, PROLOG, **data)) == 0
    assert (fake_ccrhost / "args").read_text() == (f"check --config {CHECK_CONFIG} --format nhc --drain "
                                                   f"--drain-unknown --hold --dry-run{told}\n")
    run_as_slurmd(installed(fake_ccrhost, HEALTHCHECK, **data))
    assert (fake_ccrhost / "args").read_text() == (f"check --config {CHECK_CONFIG} --format nhc --drain "
                                                   f"--budget {HEALTHCHECK_BUDGET} --dry-run{told}\n")


@pytest.mark.parametrize("check_rc", [0, 1, 2, 3])
def test_health_check_runs_the_check_with_drain(fake_ccrhost, check_rc):
    wrapper = installed(fake_ccrhost, HEALTHCHECK)
    (fake_ccrhost / "code").write_text(str(check_rc))
    assert run_as_slurmd(wrapper) == check_rc
    assert (fake_ccrhost / "args").read_text() == f"check --config {CHECK_CONFIG} --format nhc --drain --budget 45\n"
    env = dict(line.split("=", 1) for line in (fake_ccrhost / "env").read_text().splitlines() if "=" in line)
    assert env["PATH"].startswith("/usr/local/sbin:") and "SLURM_CONF" not in env
