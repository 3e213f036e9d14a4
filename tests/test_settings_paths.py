"""Settings that name a path refuse files ccrhost does not own, and a peak
figure that can never be used is refused where it is given (ccrhost/settings/)."""

from __future__ import annotations

import pytest

from ccrhost.model import managed
from ccrhost.settings import InventoryDataError, validate_host

OURS = "allowed: a file of ccrhost's own, such as "


def refused(data: dict) -> str:
    with pytest.raises(InventoryDataError) as info:
        validate_host("gpu01", data)
    return str(info.value)


@pytest.mark.parametrize("path, why", [
    ("/etc/slurm/slurm.conf", "is Slurm's own slurm.conf"),
    ("/etc/slurm-llnl/slurm.conf", "is Slurm's own slurm.conf"),
    ("/usr/local/etc/slurm.conf", "is Slurm's own slurm.conf"),
    ("/etc/slurm/cgroup.conf", "is Slurm's own cgroup.conf"),
    ("/etc/slurm/gres.conf", "is Slurm's own gres.conf"),
    ("/etc/nccl.conf", "is NCCL's own /etc/nccl.conf"),
    ("/etc/ccrhost/check.yaml", "is the check's settings (check.yaml)"),
    ("/etc/ccrhost/slurm-prolog.sh", "is ccrhost's Slurm prolog"),
    ("/etc/ccrhost/slurm-healthcheck.sh", "is ccrhost's Slurm health check"),
    ("/etc/ccrhost/boot-apply.sh", "is ccrhost's boot script"),
    ("/etc/ccrhost/qos-interfaces", "is ccrhost's QoS interface list"),
    ("/etc/profile.d/ccrhost-nccl.sh", "is ccrhost's NCCL environment profile"),
    ("/etc/modules-load.d/ccrhost-rdma.conf", "is ccrhost's RDMA module list"),
    ("/etc/systemd/system/ccrhost-boot.service", "is ccrhost's boot unit"),
    ("/etc/passwd", "is a system file directly in /etc"),
    ("/etc/shadow", "is a system file directly in /etc"),
    ("/etc/fstab", "is a system file directly in /etc"),
    ("/etc/sudoers.d/ccrhost", "is in /etc/sudoers.d, whose every file the system reads"),
    ("/etc/cron.d/ccrhost", "is in /etc/cron.d, whose every file the system reads"),
    ("/etc/profile.d/ccrhost.sh", "is in /etc/profile.d, whose every file the system reads"),
    ("/bin/sh", "is a system file (under /bin)"),
    ("/sbin/init", "is a system file (under /sbin)"),
    ("/lib/x86_64-linux-gnu/libc.so.6", "is a system file (under /lib)"),
    ("/lib64/ld-linux-x86-64.so.2", "is a system file (under /lib64)"),
    ("/usr/bin/python3", "is a system file (under /usr)"),
    ("/usr/local/bin/ccrhost", "is a system file (under /usr)"),
    ("/boot/grub/grub.cfg", "is a system file (under /boot)"),
    ("/dev/sda", "is a system file (under /dev)"),
    ("/proc/sys/kernel/panic", "is a system file (under /proc)"),
    ("/sys/class/infiniband/mlx5_0/ports/1/rate", "is a system file (under /sys)"),
])
@pytest.mark.parametrize("key, example", [("slurm_fragment", "/etc/slurm/ccrhost.conf"),
                                          ("verify_link_state", "/run/ccrhost/counters.json"),
                                          # issue 36: it accepted every one of these
                                          ("verify_gpu_state", "/run/ccrhost/counters.json")])
def test_a_written_file_may_not_be_one_ccrhost_does_not_own(key, example, path, why):
    assert refused({key: path}) == f"gpu01: {key} = {path!r}: {why}; {OURS}{example}"


@pytest.mark.parametrize("key", ["slurm_fragment", "verify_link_state", "verify_gpu_state"])
@pytest.mark.parametrize("path", ["/etc/slurm/../passwd", "/etc/slurm/./ccrhost.conf", "/etc//passwd",
                                  "/run/ccrhost/", "/run/../etc/shadow"])
def test_a_written_file_is_named_plainly(key, path):
    why = ("names a folder; allowed: the path of a file" if path.endswith("/") else
           "has an empty, '.' or '..' component; allowed: a plain absolute path")
    assert refused({key: path}) == f"gpu01: {key} = {path!r}: {why}"


@pytest.mark.parametrize("data", [
    {"slurm_fragment": "/etc/slurm/ccrhost.conf"},
    {"slurm_fragment": "/etc/slurm-llnl/ccrhost.conf"},
    {"slurm_fragment": "/etc/slurm/conf.d/ccrhost.conf"},
    {"slurm_fragment": "/usr/local/etc/ccrhost.conf"},
    {"slurm_fragment": "/etc/ccrhost.conf"},
    {"verify_link_state": "/run/ccrhost/counters.json"},
    {"verify_link_state": "/var/lib/ccrhost/counters.json"},
    {"verify_link_state": "/dev/shm/ccrhost-counters.json"},
    {"slurm_ccrhost": "/usr/local/bin/ccrhost"},
    {"slurm_ccrhost": "/opt/ccrhost/bin/ccrhost"},
    {"verify_report_dir": "ccrhost-report"},
    {"verify_report_dir": "../reports"},
    {"verify_report_dir": "/var/lib/ccrhost/report"},
    {"verify_report_dir": "/tmp/ccrhost-report"},
])
def test_the_defaults_and_sites_own_paths_are_accepted(data):
    settings = validate_host("gpu01", data)
    key, value = next(iter(data.items()))
    assert getattr(settings, key) == value


def test_the_fragment_may_not_be_the_slurm_conf_the_site_names():
    conf = "/opt/slurm/etc/main.conf"
    message = "/opt/slurm/etc/main.conf is Slurm's own slurm.conf (slurm_conf)"
    assert refused({"slurm_conf": conf, "slurm_fragment": conf}) == f"gpu01: slurm_fragment = {conf!r}: {message}"
    assert refused({"slurm_conf": conf, "verify_link_state": conf}) == (
        f"gpu01: verify_link_state = {conf!r}: {message}")


def test_the_two_state_files_are_never_one():
    # issue 36: the two writers overwrote each other and no rate was judged again
    path = "/run/ccrhost/state.json"
    assert refused({"verify_link_state": path, "verify_gpu_state": path}) == (
        f"gpu01: verify_link_state = {path!r}: {path} is also verify_gpu_state: each file has one use")
    assert refused({"verify_gpu_state": "/etc/slurm/ccrhost.conf"}) == (
        "gpu01: slurm_fragment = '/etc/slurm/ccrhost.conf': /etc/slurm/ccrhost.conf is also verify_gpu_state: "
        "each file has one use")


def test_every_path_setting_is_in_the_one_rule():
    from ccrhost.settings import PATH_SETTINGS, HostSettings

    # a new setting naming a file on the node joins the rule, or this fails
    named = {k for k in HostSettings.model_fields if k.startswith("verify_") and k.endswith("_state")}
    assert named == {"verify_link_state", "verify_gpu_state", "verify_allreduce_state", "verify_dcgm_state"}
    assert "verify_history" in PATH_SETTINGS  # issue 40's history: written on every failing check
    assert named <= set(PATH_SETTINGS)


def test_two_path_keys_never_name_one_file():
    path = "/var/lib/ccrhost/state"
    assert refused({"slurm_fragment": path, "verify_link_state": path}) == (
        f"gpu01: slurm_fragment = {path!r}: {path} is also verify_link_state: each file has one use")
    assert refused({"verify_link_state": "/opt/ccrhost/bin/ccrhost", "slurm_ccrhost": "/opt/ccrhost/bin/ccrhost"}) == (
        "gpu01: verify_link_state = '/opt/ccrhost/bin/ccrhost': /opt/ccrhost/bin/ccrhost is also slurm_ccrhost: "
        "each file has one use")


@pytest.mark.parametrize("key", ["slurm_ccrhost", "slurm_conf"])
@pytest.mark.parametrize("path, why", [
    ("/", "names a folder; allowed: the path of a file"),
    ("/usr/local/bin/", "names a folder; allowed: the path of a file"),
    ("/usr/local/bin/../ccrhost", "has an empty, '.' or '..' component; allowed: a plain absolute path"),
    ("/usr/./bin/ccrhost", "has an empty, '.' or '..' component; allowed: a plain absolute path"),
])
def test_a_program_or_conf_path_names_a_file(key, path, why):
    assert refused({key: path}) == f"gpu01: {key} = {path!r}: {why}"


@pytest.mark.parametrize("path, why", [
    ("/", "is the root folder; allowed: a folder of the reports' own, such as ccrhost-report"),
    ("//", "is the root folder; allowed: a folder of the reports' own, such as ccrhost-report"),
    ("/etc", "is a system folder (a top-level system folder)"),
    ("/tmp", "is a system folder (a top-level system folder)"),
    ("/usr/bin", "is a system folder (under /usr)"),
    ("/sys/class", "is a system folder (under /sys)"),
    ("/boot", "is a system folder (under /boot)"),
    ("/etc/cron.d", "is a system folder (in /etc/cron.d)"),
    ("/var/lib/../../etc", "has a '.' or '..' component; allowed: a plain absolute path or a relative one"),
])
def test_the_report_dir_is_not_the_root_or_a_system_folder(path, why):
    if why.startswith("is a system folder"):
        why += "; allowed: a folder of the reports' own, such as ccrhost-report or /var/lib/ccrhost/report"
    assert refused({"verify_report_dir": path}) == f"gpu01: verify_report_dir = {path!r}: {why}"


def test_the_refusal_names_every_bad_key_at_once():
    message = refused({"slurm_fragment": "/etc/slurm/slurm.conf", "verify_link_state": "/etc/passwd",
                       "slurm_ccrhost": "/"})
    assert message.splitlines() == [  # in the model's field order
        f"gpu01: verify_link_state = '/etc/passwd': is a system file directly in /etc; {OURS}"
        "/run/ccrhost/counters.json",
        "gpu01: slurm_ccrhost = '/': names a folder; allowed: the path of a file",
        f"gpu01: slurm_fragment = '/etc/slurm/slurm.conf': is Slurm's own slurm.conf; {OURS}/etc/slurm/ccrhost.conf",
    ]


def test_every_managed_file_is_refused_as_a_fragment():
    """A file added to ccrhost's managed list is refused without a new rule."""
    for path in (*managed.FILES, managed.CHECK_CONFIG, managed.SLURM_PROLOG, managed.SLURM_HEALTHCHECK):
        assert path in managed.WHAT
        assert f"is {managed.WHAT[path]}; " in refused({"slurm_fragment": path})


# --- a peak figure that can never be used ----------------------------------------

def test_tflops_for_other_precisions_of_an_unknown_model_is_refused_naming_both_keys():
    message = refused({"verify_gpu_model": "Acme X1", "verify_gpu_tflops": {"fp16": 500.0, "fp8": 1000.0}})
    assert message == (
        "gpu01: verify_gpu_tflops/verify_precision = {'verify_gpu_tflops': {'fp16': 500.0, 'fp8': 1000.0}, "
        "'verify_precision': 'bf16'}: verify_gpu_tflops gives fp16, fp8 only, but verify_precision is bf16 and "
        "model 'Acme X1' is not in the peak-TFLOPS table: every host would be UNKNOWN; add its bf16 figure to "
        "verify_gpu_tflops")


def test_tflops_for_a_table_model_lacking_the_precision_is_refused():
    message = refused({"verify_gpu_model": "NVIDIA A100-SXM4-80GB", "verify_precision": "fp8",
                       "verify_gpu_tflops": {"fp16": 312.0}})
    assert message.endswith(": verify_gpu_tflops gives fp16 only, but verify_precision is fp8 and A100 SXM has no "
                            "dense fp8 figure: every host would be UNKNOWN; add its fp8 figure to verify_gpu_tflops")


@pytest.mark.parametrize("data", [
    {"verify_gpu_model": "Acme X1", "verify_gpu_tflops": {"bf16": 500.0}},
    {"verify_gpu_model": "Acme X1", "verify_precision": "fp16", "verify_gpu_tflops": {"fp16": 500.0, "bf16": 1.0}},
    # a table model: the table has the figure the run uses
    {"verify_gpu_model": "NVIDIA H100 80GB HBM3", "verify_gpu_tflops": {"fp16": 900.0}},
])
def test_tflops_that_the_run_can_use_are_accepted(data):
    assert validate_host("gpu01", data).verify_gpu_tflops == data["verify_gpu_tflops"]


# --- issue 45 case 12: every path ccrhost writes, by one rule ---------------------

def test_the_drain_cap_textfile_is_a_written_file_of_its_own():
    # it overwrote a stored DCGM FAIL whenever the cap held
    path = "/run/ccrhost/dcgm.json"
    assert refused({"slurm_drain_cap_textfile": path, "verify_dcgm_state": path}) == (
        f"gpu01: verify_dcgm_state = {path!r}: {path} is also slurm_drain_cap_textfile: each file has one use")
    assert refused({"slurm_drain_cap_textfile": "/run/ccrhost/gpu-counters.json"}) == (
        "gpu01: verify_gpu_state = '/run/ccrhost/gpu-counters.json': /run/ccrhost/gpu-counters.json is also "
        "slurm_drain_cap_textfile: each file has one use")


EVIDENCE_OURS = "allowed: a folder of ccrhost's own, such as /var/lib/ccrhost/evidence"


@pytest.mark.parametrize("path, why", [
    ("/etc", "is a system folder (a top-level system folder)"),
    ("/var", "is a system folder (a top-level system folder)"),
    ("/tmp", "is a system folder (a top-level system folder)"),
    ("/usr/share/ccrhost", "is a system folder (under /usr)"),
    ("/boot", "is a system folder (under /boot)"),
    ("/proc/ccrhost", "is a system folder (under /proc)"),
    ("/sys/kernel", "is a system folder (under /sys)"),
    ("/dev", "is a system folder (under /dev)"),
    ("/bin", "is a system folder (under /bin)"),
    ("/etc/cron.d/ccrhost", "is a system folder (in /etc/cron.d)"),
])
def test_the_evidence_dir_is_not_a_system_folder(path, why):
    # verify_evidence_dir=/etc was accepted: bundles were made and pruned in it
    assert refused({"verify_evidence_dir": path}) == f"gpu01: verify_evidence_dir = {path!r}: {why}; {EVIDENCE_OURS}"


@pytest.mark.parametrize("path", ["//", "/var/lib/../../etc", "/var//lib"])
def test_the_evidence_dir_is_named_plainly(path):
    assert refused({"verify_evidence_dir": path}) == (
        f"gpu01: verify_evidence_dir = {path!r}: is the root folder or has an empty, '.' or '..' component; "
        "allowed: a plain absolute path of a folder of ccrhost's own, such as /var/lib/ccrhost/evidence")


def test_the_evidence_dir_and_the_files_kept_beside_a_setting_are_no_others():
    assert refused({"verify_evidence_dir": "/run/ccrhost/gpu-counters.json"}) == (
        "gpu01: verify_gpu_state = '/run/ccrhost/gpu-counters.json': /run/ccrhost/gpu-counters.json is also "
        "verify_evidence_dir: each file has one use")
    # the history's lock and the GPU resets' times are files ccrhost writes too
    assert refused({"verify_history": "/var/lib/ccrhost/history.json",
                    "verify_link_state": "/var/lib/ccrhost/history.json.lock"}) == (
        "gpu01: verify_link_state = '/var/lib/ccrhost/history.json.lock': /var/lib/ccrhost/history.json.lock is "
        "verify_history's .lock file: each file has one use")
    assert refused({"verify_dcgm_state": "/run/ccrhost/gpu-counters.json.resets"}) == (
        "gpu01: verify_dcgm_state = '/run/ccrhost/gpu-counters.json.resets': /run/ccrhost/gpu-counters.json.resets "
        "is verify_gpu_state's .resets file: each file has one use")
    for folder in ("/var/lib/ccrhost/evidence", "/etc/ccrhost/evidence", "/run/ccrhost/evidence"):
        assert validate_host("gpu01", {"verify_evidence_dir": folder}).verify_evidence_dir == folder
