"""What deploys/slurm.py installs: the check settings, the prolog and the
health check (run here as slurmd runs them: no environment at all), and
the slurm.conf fragment. The same files run in the Slurm lab (test_slurm.py)."""

import subprocess

import pytest
import yaml

from ccrhost.fleet.slurm import CHECK_CONFIG, HEALTHCHECK, PROLOG, integration_files
from ccrhost.operations.files import MANAGED_HEADER
from ccrhost.settings import InventoryDataError, validate_host


def files_of(settings) -> dict[str, tuple[str, str]]:
    return {path: (content, mode) for path, content, mode in integration_files(settings)}


def test_check_yaml_gives_the_node_the_hosts_own_expectation_and_policy():
    data = {"verify_profile": "hgx-h100-8x400", "rdma_exclude_devices": ["mlx5_bond_*"], "verify_min_ccr": 1e-5,
            "verify_workload": {"grad_bytes_per_param": 2, "tokens_per_gpu_step": 4096, "dp_size": 64},
            "qos_cnp_dscp": 46, "slurm_healthcheck_interval": 60}
    settings = validate_host("gpu01", data)
    content, mode = files_of(settings)[CHECK_CONFIG]
    assert mode == "644" and content.startswith(MANAGED_HEADER)
    loaded = yaml.safe_load(content)
    # only what `ccrhost check` reads; QoS and Slurm keys stay out
    assert set(loaded) == {"rdma_exclude_devices", "verify_bandwidth_model", "verify_measure_min_fraction",
                           "verify_min_ccr", "verify_min_ccr_fraction", "verify_precision", "verify_profile",
                           "verify_workload"}
    on_node = validate_host("gpu01", loaded)
    assert on_node.expectation() == settings.expectation()
    assert on_node.policy() == settings.policy()


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
    assert (fake_ccrhost / "args").read_text() == f"check --config {CHECK_CONFIG} --format nhc --drain\n"
    env = dict(line.split("=", 1) for line in (fake_ccrhost / "env").read_text().splitlines() if "=" in line)
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert env["SLURM_CONF"] == "/opt/slurm/etc/slurm.conf"


def test_prolog_without_ccrhost_keeps_the_job_off(tmp_path):
    prolog = installed(tmp_path, PROLOG)  # no ccrhost at that path
    assert run_as_slurmd(prolog) == 127


@pytest.mark.parametrize("check_rc", [0, 1, 2, 3])
def test_health_check_runs_the_check_with_drain(fake_ccrhost, check_rc):
    wrapper = installed(fake_ccrhost, HEALTHCHECK)
    (fake_ccrhost / "code").write_text(str(check_rc))
    assert run_as_slurmd(wrapper) == check_rc
    assert (fake_ccrhost / "args").read_text() == f"check --config {CHECK_CONFIG} --format nhc --drain\n"
    env = dict(line.split("=", 1) for line in (fake_ccrhost / "env").read_text().splitlines() if "=" in line)
    assert env["PATH"].startswith("/usr/local/sbin:") and "SLURM_CONF" not in env
