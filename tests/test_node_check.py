"""ccrhost check: output formats, exit codes and the Slurm drain rules."""

import json
import os
import stat
import subprocess
import sys
import time

import pytest
from test_checks import H100, gpu, healthy, port

from ccrhost.model import drain_reason as drain_text
from ccrhost.model.verdict import evaluate
from ccrhost.node import check as node_check
from ccrhost.node import drain as node_drain
from ccrhost.node import formats
from ccrhost.output import write_atomic
from ccrhost.settings import validate_host

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def failing():
    ports = [port(i) for i in range(8)]
    ports[3] = port(3, state="DOWN", phys="Disabled")
    return evaluate(healthy(ports=ports), H100)


def test_nhc_format_is_silent_when_healthy_and_one_line_when_not():
    assert formats.format_nhc(evaluate(healthy(), H100)) == ""
    line = formats.format_nhc(failing())
    assert line.startswith("ERROR: ccrhost: Health check failed: FAIL: port_down,port_count,ccr_below_expected: port mlx5_3/1 is DOWN/Disabled")
    assert line.count("\n") == 1


def test_prometheus_textfile():
    text = formats.format_prometheus(failing())
    assert "ccrhost_check_status 2\n" in text
    assert 'ccrhost_port_effective_gbps{device="mlx5_3",port="1",active="0"}' in text
    assert 'ccrhost_check_reason{level="FAIL",code="port_down",action="reseat_cable",scope="port"} 1' in text
    for line in text.splitlines():
        assert line.startswith("#") or line.split()[-1].replace(".", "").replace("e-", "").replace("e+", "").isdigit()


def test_atomic_write_leaves_no_temp_file(tmp_path):
    target = tmp_path / "ccrhost.prom"
    write_atomic(str(target), "x 1\n")
    assert target.read_text() == "x 1\n" and os.listdir(tmp_path) == ["ccrhost.prom"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_atomic_write_never_writes_through_a_link_at_its_temporary_name(tmp_path):
    import threading

    target, victim = tmp_path / "ccrhost.prom", tmp_path / "victim"
    victim.write_text("keep\n")
    # a link (or a dead writer's leftover) where this process's temporary file goes
    (tmp_path / f".ccrhost.prom.{os.getpid()}.{threading.get_ident()}.tmp").symlink_to(victim)
    write_atomic(str(target), "x 2\n")
    assert target.read_text() == "x 2\n" and victim.read_text() == "keep\n"
    assert sorted(os.listdir(tmp_path)) == ["ccrhost.prom", "victim"]


@pytest.fixture
def scontrol(tmp_path):
    """A stand-in scontrol that keeps the node's state in a file and logs updates."""
    state = tmp_path / "reason"
    log = tmp_path / "updates"
    script = tmp_path / "scontrol"
    script.write_text(f"""#!/bin/sh
if [ "$1" = show ]; then
  r=$(cat {state} 2>/dev/null); echo "NodeName=$3 Arch=x86_64 State=IDLE Reason=${{r:-(null)}}"
else
  echo "$@" >> {log}
fi
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, state, log


def test_drain_on_fail_with_our_prefix(scontrol):
    script, state, log = scontrol
    msg = node_drain.drain(failing(), node="gpu01", scontrol=str(script))
    assert msg.startswith("drained gpu01: ccrhost: port_down,port_count,ccr_below_expected: port mlx5_3/1 is DOWN/Disabled")
    assert log.read_text().startswith("update NodeName=gpu01 State=DRAIN Reason=ccrhost: port_down,port_count,ccr_below_expected: port mlx5_3/1")


def test_drain_never_touches_someone_elses_reason(scontrol):
    script, state, log = scontrol
    state.write_text("disk replacement [admin@2026-12-01T10:00:00]")
    msg = node_drain.drain(failing(), node="gpu01", scontrol=str(script))
    assert "set by someone else; left alone" in msg
    assert not log.exists()
    msg = node_drain.drain(evaluate(healthy(), H100), node="gpu01", scontrol=str(script))
    assert not log.exists()


def test_healthy_node_resumes_only_from_our_own_drain(scontrol):
    script, state, log = scontrol
    state.write_text("ccrhost: port mlx5_3/1 is DOWN/Disabled [root@2026-12-01T10:00:00]")
    assert node_drain.drain(evaluate(healthy(), H100), node="gpu01", scontrol=str(script)).startswith("resumed gpu01")
    assert log.read_text() == "update NodeName=gpu01 State=RESUME\n"


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "ccrhost", *args], capture_output=True, text=True, cwd=REPO)


def test_check_cli_bad_arguments_are_unknown_with_a_clear_message(tmp_path):
    bad = run_cli("check", "--profile", "hgx-h999")
    assert bad.returncode == 3
    assert "verify_profile = 'hgx-h999': allowed: a built-in platform (aws-p5-efa, azure-nd-h100-v5" in bad.stderr
    assert run_cli("check", "--no-such-flag").returncode == 3
    config = tmp_path / "check.yaml"
    config.write_text("verify_min_ccr_fraction: 1.5\n")
    out = run_cli("check", "--config", str(config))
    assert out.returncode == 3 and "verify_min_ccr_fraction = 1.5" in out.stderr
    config.write_text("verify_profile: [unclosed\n")
    assert run_cli("check", "--config", str(config)).returncode == 3


def test_check_cli_on_this_machine_has_no_rdma_and_fails():
    out = run_cli("check", "--format", "json")
    doc = json.loads(out.stdout)
    assert out.returncode == 2 and doc["status"] == "FAIL"
    assert any(r["code"] == "no_rdma" for r in doc["reasons"])


def test_calc_cli_worked_example():
    out = run_cli("calc", "--gpu", "H100 SXM", "--gpus", "8", "--nics", "8", "--nic-gbps", "400")
    assert out.returncode == 0
    assert "CCR = B / (beta x F) = 1.263e-05" in out.stdout
    assert "0.01263" in out.stdout


def test_settings_for_check_reuse_inventory_validation():
    s = validate_host("node", {"verify_profile": "hgx-h100-8x400", "rdma_exclude_devices": ["mlx5_bond_*"]})
    assert s.expectation().ports == 8 and s.rdma_exclude_devices == ("mlx5_bond_*",)


def fake_tools(tmp_path, **scripts):
    """A PATH folder of stand-in tools, first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        tool = bin_dir / name
        tool.write_text("#!/bin/sh\n" + body)
        tool.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_a_hung_probe_is_unknown_with_one_line_and_is_killed(tmp_path):
    pids = tmp_path / "pids"
    # awk reads the configfs mounts for the RDMA probe, and for nothing else the check runs
    env = fake_tools(tmp_path, awk=f"echo $$ >> {pids}\nexec sleep 600\n")
    out = subprocess.run([sys.executable, "-m", "ccrhost", "check", "--format", "nhc", "--probe-timeout", "1"],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert out.returncode == 3
    line = ("cannot read /sys/class/infiniband and rdma_cm configfs: the RDMA probe (reading /sys/class/infiniband) did not answer within 1 s "
            "(killed)")
    assert out.stdout == f"ERROR: ccrhost: Health check failed: UNKNOWN: rdma_unreadable: {line} [action investigate]\n"
    assert out.stderr == f"ccrhost check: UNKNOWN: {line}\n"
    for pid in pids.read_text().split():
        assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split(") ")[1][:1]


def test_a_hung_nvidia_smi_is_killed_at_the_probe_timeout(tmp_path):
    # the check runs nvidia-smi without `timeout` (the snapshot's own bound):
    # its process group is killed at --probe-timeout, both GPU reads say so
    pids = tmp_path / "pids"
    env = fake_tools(tmp_path, **{"nvidia-smi": f"echo $$ >> {pids}\nexec sleep 600\n"})
    out = subprocess.run([sys.executable, "-m", "ccrhost", "check", "--format", "json", "--probe-timeout", "1"],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    doc = json.loads(out.stdout)
    assert doc["gpu_error"].endswith("; nvidia-smi: nvidia-smi --query-gpu did not answer within 1 s (killed)")
    assert doc["readings"]["gpu_health"]["error"] == \
        "the GPU health probe (nvidia-smi -q) did not answer within 1 s (killed)"
    assert len(pids.read_text().split()) == 2
    for pid in pids.read_text().split():
        assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split(") ")[1][:1]


def test_a_failing_scontrol_under_drain_is_unknown_not_fail(tmp_path):
    env = fake_tools(tmp_path, scontrol="echo 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1\n")
    out = subprocess.run([sys.executable, "-m", "ccrhost", "check", "--format", "nhc", "--drain"],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert out.returncode == 3
    why = "--drain: scontrol show node failed: slurm_load_node error: Unable to contact slurm controller"
    assert out.stdout.startswith("ERROR: ccrhost: Health check failed: UNKNOWN: ") and out.stdout.endswith(why + " [action investigate]\n")
    assert out.stderr.splitlines()[-1] == f"ccrhost check: UNKNOWN: {why}"


def test_an_internal_error_is_unknown_with_one_line(tmp_path):
    # --output under a plain file: the write fails after the check ran
    (tmp_path / "file").write_text("")
    out = subprocess.run([sys.executable, "-m", "ccrhost", "check", "--output", str(tmp_path / "file" / "x.prom")],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 3
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("ccrhost check: UNKNOWN: internal error: ")
    assert "Traceback" not in out.stderr
def test_warn_lifts_our_own_drain_too(scontrol):
    script, state, log = scontrol
    state.write_text("ccrhost: port mlx5_3/1 is DOWN/Disabled [root@2026-12-01T10:00:00]")
    warn = evaluate(healthy(gpus=[gpu(i, reasons=8, clock=1188) for i in range(8)]), H100)
    assert warn.status == "WARN"
    assert node_drain.drain(warn, node="gpu01", scontrol=str(script)).startswith("resumed gpu01")
    assert log.read_text() == "update NodeName=gpu01 State=RESUME\n"


def test_unchanged_reason_is_not_rewritten(scontrol):
    script, state, log = scontrol
    verdict = failing()
    state.write_text(f"{drain_text.drain_reason(verdict)} [root@2026-12-01T10:00:00]")
    assert drain_text.drain_reason(verdict).endswith(" [action investigate]")
    assert node_drain.drain(verdict, node="gpu01", scontrol=str(script)).startswith("gpu01 stays drained")
    assert not log.exists()


def test_the_node_is_the_one_slurmd_names(scontrol, monkeypatch):
    script, state, log = scontrol
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-a17")
    assert node_drain.drain(failing(), scontrol=str(script)).startswith("drained gpu-a17: ccrhost: ")


def test_a_measured_drain_is_lifted_only_by_a_measurement(scontrol):
    from dataclasses import replace

    script, state, log = scontrol
    slow = evaluate(healthy(ports=[replace(port(i), measured_gbps=150.0) for i in range(8)]), H100)
    assert node_drain.drain(slow, node="gpu01", scontrol=str(script), measured=True).startswith(
        "drained gpu01: ccrhost: measured_slow,ccr_below_expected: ports mlx5_0/1, ")
    state.write_text(log.read_text().split("Reason=", 1)[1].strip() + " [root@2026-12-01T10:00:00]")
    log.unlink()
    ok = evaluate(healthy(), H100)
    # the node-local check (health check, prolog) cannot see a slow link: it leaves the drain alone
    assert "rests on a measurement" in node_drain.drain(ok, node="gpu01", scontrol=str(script))
    assert "rests on a measurement" in node_drain.drain(failing(), node="gpu01", scontrol=str(script))
    assert not log.exists()
    assert node_drain.drain(ok, node="gpu01", scontrol=str(script), measured=True).startswith("resumed gpu01")
    # an older ccrhost's measured drain named no code: its prefix still marks it
    state.write_text("ccrhost: measured: ports mlx5_0/1 measured below 90% [root@2026-12-01T10:00:00]")
    assert "rests on a measurement" in node_drain.drain(ok, node="gpu01", scontrol=str(script))


def test_a_blocking_nvml_call_is_abandoned_at_the_deadline():
    import threading
    import time

    from ccrhost.node.gather import Started

    release = threading.Event()

    class Wedged:  # nvmlInit() blocks in the driver, as on a GPU that stopped answering
        def nvmlInit(self):
            release.wait(120)

    started = time.monotonic()
    try:
        probe = Started(1, nvml=Wedged()).gpus_result()
    finally:
        release.set()
    assert probe.gpus == [] and probe.error == "the GPU probe (NVML) did not answer within 1 s (abandoned)"
    assert time.monotonic() - started < 10  # abandoned, not waited for (it would wait 120 s)


def test_check_with_a_wedged_nvml_returns_unknown_gpus_within_its_probe_timeout(tmp_path):
    # pynvml loads where libnvidia-ml.so.1 does: any real library under that name, and
    # a pynvml whose nvmlInit never returns, first on the path
    lib = tmp_path / "lib"
    lib.mkdir()
    libm = next(p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                            "/lib/aarch64-linux-gnu/libm.so.6", "/usr/lib/aarch64-linux-gnu/libm.so.6")
                if os.path.exists(p))
    (lib / "libnvidia-ml.so.1").symlink_to(libm)
    (tmp_path / "pynvml.py").write_text("import time\n\ndef nvmlInit():\n    time.sleep(600)\n")
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib), "PYTHONPATH": f"{tmp_path}:{REPO}"}
    out = subprocess.run([sys.executable, "-m", "ccrhost", "check", "--format", "json", "--probe-timeout", "2"],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=40)
    doc = json.loads(out.stdout)
    assert doc["gpu_error"] == "the GPU probe (NVML) did not answer within 2 s (abandoned)"
    assert {"level": "UNKNOWN", "code": "gpu_unreadable", "message": f"cannot read GPUs: {doc['gpu_error']}",
            "action": "investigate", "scope": "node"} in doc["reasons"]


def test_unknown_drains_only_where_asked_and_says_what_could_not_be_read(scontrol):
    script, state, log = scontrol
    unreadable = node_check.unknown("rdma_unreadable", "cannot read /sys/class/infiniband and rdma_cm configfs: "
                                    "/sys/class/infiniband/mlx5_0/ports/1/rate: expected '<n> Gb/sec (<w>X <SPEED>)', "
                                    "got 'garbage'")
    # the health check: the node's state is not known, so nothing changes
    assert node_drain.drain(unreadable, node="gpu01", scontrol=str(script)) == "no drain change"
    assert not log.exists()
    # the prolog: Slurm drains the node anyway; the reason says why
    msg = node_drain.drain(unreadable, node="gpu01", scontrol=str(script), unknown_drains=True)
    reason = ("ccrhost: rdma_unreadable: UNKNOWN: cannot read /sys/class/infiniband and rdma_cm configfs: "
              "/sys/class/infiniband/mlx5_0/ports/1/rate: expected '<n> Gb/sec (<w>X <SPEED>)', got 'garbage' "
              "[action investigate]")
    assert msg == f"drained gpu01: {reason}"
    assert log.read_text() == f"update NodeName=gpu01 State=DRAIN Reason={reason}\n"
    # once the node reads fine again, the health check lifts that drain as its own
    state.write_text(reason + " [root@2026-12-04T10:00:00]")
    assert node_drain.drain(evaluate(healthy(), H100), node="gpu01", scontrol=str(script)).startswith("resumed gpu01")


def test_prometheus_labels_are_bounded_and_the_fabric_is_shown():
    """The reason's free-text message is no label (a number in it made a new
    series every check); codes, devices, directions and priorities are."""
    from ccrhost.model.fabric import PauseSetting
    from ccrhost.probes import fabric

    before = {"eth0": {"tx_prio3_pause_duration": 0, "rx_discards_phy": 1},
              "mlx5_0/1": {"rnr_nak_retry_err": 0}}
    after = {"eth0": {"tx_prio3_pause_duration": 30_000_000, "rx_discards_phy": 4},
             "mlx5_0/1": {"rnr_nak_retry_err": 2}}
    dump = fabric.FabricDump(fabric.Counters(0.0, "b", before, {"eth0": "mlx5_0"}),
                             fabric.Counters(300.0, "b", after, {"eth0": "mlx5_0"},
                                             {"eth0": PauseSetting(False, True, False)}))
    verdict = failing()
    verdict.readings.fabric = fabric.fabric_reading(dump)
    text = formats.format_prometheus(verdict)
    assert "message=" not in text
    assert 'ccrhost_check_reason{level="FAIL",code="port_down",action="reseat_cable",scope="port"} 1' in text
    assert 'ccrhost_fabric_counter{device="eth0",counter="rx_discards_phy"} 4' in text
    assert 'ccrhost_fabric_counter{device="mlx5_0/1",counter="rnr_nak_retry_err"} 2' in text
    assert 'ccrhost_fabric_pause_share{device="eth0",direction="tx",priority="3"} 0.1' in text
    assert 'ccrhost_fabric_pause_seconds_total{device="eth0",direction="tx",priority="3"} 30' in text
    assert 'ccrhost_fabric_global_pause{device="eth0",direction="rx"} 1' in text
    assert 'ccrhost_fabric_global_pause{device="eth0",direction="tx"} 0' in text


def test_a_prolog_asks_slurmctld_nothing_when_the_node_is_fit(scontrol, monkeypatch):
    """A node whose prolog runs was just allocated, so it is not drained:
    an OK or WARN prolog makes no scontrol call (1,000 nodes, no RPCs at
    every job start); a FAIL still drains, and outside a prolog an OK asks."""
    script, state, log = scontrol
    calls = script.parent / "calls"
    script.write_text(f"#!/bin/sh\necho \"$1\" >> {calls}\n" + script.read_text().split("\n", 1)[1])
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "prolog_slurmd")
    msg = node_drain.drain(evaluate(healthy(), H100), node="gpu01", scontrol=str(script), unknown_drains=True)
    assert msg == "no drain change (a node starting a job is not drained)" and not calls.exists()
    assert node_drain.drain(failing(), node="gpu01", scontrol=str(script), unknown_drains=True).startswith("drained")
    assert calls.read_text() == "show\nupdate\n"
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "health_check")
    node_drain.drain(evaluate(healthy(), H100), node="gpu01", scontrol=str(script))
    assert calls.read_text() == "show\nupdate\nshow\n"  # the health check asks (and finds no drain of ours)


# --- issue 36: every process the check starts ends with it ---------------------

def _alive(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][:1] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("case", ["usage error", "bad config", "unreadable RDMA"])
def test_a_check_that_ends_early_leaves_no_nvidia_smi_behind(tmp_path, case):
    # nvidia-smi hangs (a wedged driver) far past the check: whichever way the
    # check ends first, the probes it started end with it, not re-parented to init
    pids = tmp_path / "pids"
    tools = {"nvidia-smi": f"echo $$ >> {pids}\nexec sleep 600\n"}
    args = ["check", "--format", "nhc", "--probe-timeout", "60"]
    if case == "usage error":
        args += ["--format-typo"]
    elif case == "bad config":
        (tmp_path / "check.yaml").write_text("verify_gpu_count: lots\n")
        args += ["--config", str(tmp_path / "check.yaml")]
    else:  # a sysfs value no kernel prints: the RDMA probe's format error
        tools["awk"] = "echo @@ib\necho 'mlx5_0/ports/1/rate:fast'\n"
    env = fake_tools(tmp_path, **tools)
    # the check starts its reads before it parses its arguments, so on a loaded
    # machine a usage error can end it before nvidia-smi is spawned: that run
    # proves nothing, so try again (a few times) until nvidia-smi ran
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-m", "ccrhost", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
        out, err = proc.communicate(timeout=50)
        assert proc.returncode == 3, (out, err)
        started = pids.read_text().split() if pids.exists() else []
        if started:
            break
    assert started, "nvidia-smi never ran: the test proves nothing"
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in started if _alive(p)]


def _with(verdict, *reasons):
    from dataclasses import replace

    from ccrhost.model.status import worst

    return replace(verdict, status=worst([verdict.status, *(r.level for r in reasons)]),
                   reasons=[*verdict.reasons, *reasons])


def test_an_unknown_that_is_only_a_missing_proof_never_drains(scontrol):
    """Issue 38: a hung DCGM host engine, or an active result past its validity, is UNKNOWN
    and drains nothing, in the prolog too (a sweep that fell behind must not drain the fleet)."""
    from ccrhost.model.status import UNKNOWN
    from ccrhost.model.verdict import Reason, only_unproven

    script, state, log = scontrol
    unproven = _with(evaluate(healthy(), H100),
                     Reason(UNKNOWN, "dcgm_hostengine", "DCGM host engine not responding to dcgmi discovery -l"),
                     Reason(UNKNOWN, "allreduce_stale", "the stored nvlink result is 90000 s old"))
    assert unproven.status == "UNKNOWN" and only_unproven(unproven)
    assert node_drain.drain(unproven, node="gpu01", scontrol=str(script), unknown_drains=True) == (
        "gpu01 not drained: UNKNOWN only for want of an active check's proof (dcgm_hostengine, allreduce_stale)")
    assert not log.exists()
    # beside an UNKNOWN of the node's own readings it drains as any UNKNOWN does
    unreadable = _with(unproven, Reason(UNKNOWN, "rdma_unreadable", "cannot read /sys/class/infiniband"))
    assert not only_unproven(unreadable)
    assert node_drain.drain(unreadable, node="gpu01", scontrol=str(script), unknown_drains=True).startswith(
        "drained gpu01: ccrhost: dcgm_hostengine,allreduce_stale,rdma_unreadable: UNKNOWN: ")
    # and a FAIL beside a missing proof is a FAIL
    assert not only_unproven(_with(failing(), Reason(UNKNOWN, "dcgm_stale", "old")))


def test_the_proof_codes_are_catalogued_unknown_codes_and_explain_says_they_never_drain():
    from click.testing import CliRunner

    from ccrhost.cli import main
    from ccrhost.model.reasons import PROOF_CODES, REGISTRY, is_proof

    assert PROOF_CODES <= REGISTRY.keys()
    assert all(REGISTRY[c].level == "UNKNOWN" and is_proof(c) for c in PROOF_CODES)
    assert not is_proof("rdma_unreadable") and not is_proof("gpu_unreadable") and not is_proof("no_such_code")
    out = CliRunner().invoke(main, ["explain", "dcgm_hostengine"]).output
    assert "Drains: never; a job still starts" in out
    assert "Drains:" not in CliRunner().invoke(main, ["explain", "gpu_unreadable"]).output


def test_the_prolog_lets_a_job_start_where_only_a_proof_is_missing(monkeypatch, tmp_path):
    """`ccrhost check --drain --drain-unknown` (the prolog) exits 0 for such an UNKNOWN, as any non-zero exit
    makes slurmd drain the node; without the prolog's flags it is UNKNOWN, exit 3, as everywhere."""
    from click.testing import CliRunner

    from ccrhost.cli import main
    from ccrhost.model.status import UNKNOWN
    from ccrhost.model.verdict import Reason

    unproven = _with(evaluate(healthy(), H100), Reason(UNKNOWN, "dcgm_stale", "the stored diag is 2 days old"))
    monkeypatch.setattr(node_check, "run_check", lambda settings, **kw: unproven)
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol: nothing could be drained either way
    config = tmp_path / "check.yaml"
    config.write_text("verify_gpu_count: 8\n")
    prolog = CliRunner().invoke(main, ["check", "--config", str(config), "--format", "nhc", "--drain",
                                       "--drain-unknown", "--hold"], standalone_mode=False)
    assert prolog.return_value == 0, prolog.output
    assert prolog.stdout == "ERROR: ccrhost: Health check failed: UNKNOWN: dcgm_stale: the stored diag is 2 days old [action none]\n"
    assert "UNKNOWN only for want of an active check's proof; exit 0" in prolog.stderr
    plain = CliRunner().invoke(main, ["check", "--config", str(config), "--format", "nhc", "--drain"],
                               standalone_mode=False)
    assert plain.return_value == 3 and "exit 0" not in plain.stderr
