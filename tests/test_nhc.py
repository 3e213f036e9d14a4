"""ccrhost beside LBNL NHC (slurm_healthcheck: nhc, issue 46): the check file
ccrhost installs, run by NHC's own driver (tests/fixtures/nhc, vendored
unchanged) as NHC runs it on a node, and the slurm.conf fragment that then
leaves HealthCheckProgram to NHC."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccrhost.model.managed import CHECK_CONFIG, NHC_CHECK, SLURM_HEALTHCHECK
from ccrhost.model.slurm import HEALTHCHECK_BUDGET, NHC_BUDGET_MARGIN, NHC_CHECK_TIMEOUT, integration_files
from ccrhost.settings import validate_host

REPO = Path(__file__).resolve().parent.parent
NHC = REPO / "tests" / "fixtures" / "nhc"
TESTS = REPO / "tests"

# slurmd kills a HealthCheckProgram at 60 s (slurm.conf(5)); NHC's watchdog at TIMEOUT, 30 s by default (nhc)
SLURMD_HEALTHCHECK_LIMIT = 60
NHC_DEFAULT_TIMEOUT = 30

# A healthy node's readings in place of this machine's (which has no RDMA
# device and fails): everything else is the installed ccrhost as NHC runs it.
HEALTHY = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from test_checks import H100, healthy
from ccrhost.model.verdict import evaluate
from ccrhost.node import check
check.run_check = lambda settings, **kw: evaluate(healthy(), H100)
"""

# scontrol and sinfo as slurmctld answers them for one node, its reason kept in a file
SCONTROL = """#!/bin/sh
echo "scontrol $*" >> {dir}/calls
if [ "$1" = show ]; then
  r=$(cat {dir}/reason 2>/dev/null); echo "NodeName=$3 Arch=x86_64 State=IDLE Reason=${{r:-(null)}}"
  exit 0
fi
for a in "$@"; do
  case "$a" in
    State=RESUME) rm -f {dir}/reason ;;
    Reason=*) printf '%s' "${{a#Reason=}}" > {dir}/reason ;;
  esac
done
"""
SINFO = """#!/bin/sh
echo "sinfo $*" >> {dir}/calls
r=$(cat {dir}/reason 2>/dev/null)
case "$*" in
  *%t*) if [ -n "$r" ]; then echo "drain $r"; else echo "idle none"; fi ;;
  *) echo "gpu01|gpu|2026-12-06T10:00:00|${{r:-none}}"; cat {dir}/others 2>/dev/null || true ;;
esac
"""


def files(settings) -> dict[str, str]:
    return {path: content for path, content, _ in integration_files(settings)}


@pytest.fixture
def node(tmp_path, request):
    """A node with NHC installed and ccrhost's check file in NHC's scripts folder."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, body in (("scontrol", SCONTROL), ("sinfo", SINFO)):
        (fake / name).write_text(body.format(dir=tmp_path))
        (fake / name).chmod(0o755)
    ccrhost = tmp_path / "ccrhost"  # the installed command: this checkout's, as `ccrhost` runs it
    ccrhost.write_text(f"#!/bin/sh\nexec {sys.executable} -m ccrhost \"$@\"\n")
    ccrhost.chmod(0o755)
    # host_health_enable: the test machine is no GPU node; its systemd, EDAC and memlock are not the subject
    settings = validate_host("gpu01", {"slurm_healthcheck": "nhc", "slurm_ccrhost": str(ccrhost), "host_health_enable": False,
                                       "slurm_path": f"{fake}:/usr/bin:/bin",
                                       # "{tmp}" in a parameter: this node's folder
                                       **{k: v.format(tmp=tmp_path) if isinstance(v, str) else v
                                          for k, v in getattr(request, "param", {}).items()}})
    made = files(settings)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "common.nhc").symlink_to(NHC / "scripts" / "common.nhc")
    (tmp_path / "check.yaml").write_text(made[CHECK_CONFIG])
    # the file as installed, its settings path where this test keeps check.yaml
    (scripts / "ccrhost.nhc").write_text(made[NHC_CHECK].replace(CHECK_CONFIG, str(tmp_path / "check.yaml")))
    (tmp_path / "nhc.conf").write_text("# the site's nhc.conf, with ccrhost's line added\n* || check_ccrhost\n")
    return tmp_path


def run_nhc(node: Path, healthy: bool) -> subprocess.CompletedProcess:
    # slurmd names the node to its health check (SLURMD_NODENAME); NHC passes its environment on
    env = {"SHELL": "/bin/bash", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "SLURMD_NODENAME": "gpu01"}
    if healthy:
        (node / "shim").mkdir(exist_ok=True)
        (node / "shim" / "sitecustomize.py").write_text(HEALTHY)
        env["PYTHONPATH"] = f"{node / 'shim'}:{REPO}"
    # NHC's own variables on its command line: its config, scripts and helpers here, Slurm as the
    # resource manager (its helpers drain and resume through the stand-in scontrol), output on stdout
    return subprocess.run(
        ["bash", str(NHC / "nhc"), "-c", str(node / "nhc.conf"), f"INCDIR={node / 'scripts'}",
         f"HELPERDIR={NHC / 'helpers'}", "LOGFILE=-", "NHC_RM=slurm", "HOSTNAME=gpu01", "TIMEOUT=30",
         f"PATH={node / 'bin'}:/usr/bin:/bin"],
        capture_output=True, text=True, env=env, cwd=node, timeout=120)


def test_nhc_runs_ccrhost_and_a_healthy_node_passes(node):
    out = run_nhc(node, healthy=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Health check failed" not in out.stdout
    assert not (node / "reason").exists()
    calls = (node / "calls").read_text()
    assert "scontrol show node gpu01 -o" in calls  # ccrhost --drain looked for its own drain to lift


def test_nhc_fails_with_ccrhosts_line_and_the_drain_reason_stays_ccrhosts(node):
    out = run_nhc(node, healthy=False)  # this machine has no RDMA device: FAIL no_rdma
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ERROR:  nhc:  Health check failed:  ccrhost: Health check failed: FAIL: " in out.stdout
    assert "no_rdma" in out.stdout.split("ERROR:  nhc:  Health check failed:  ", 1)[1].splitlines()[0]
    # ccrhost drained with its own reason; NHC's offline helper kept it (not its own "NHC:" one)
    reason = (node / "reason").read_text()
    assert reason.startswith("ccrhost: no_rdma") and "NHC:" not in reason
    # the next healthy run: ccrhost lifts its own drain, NHC's online helper leaves it to ccrhost
    assert run_nhc(node, healthy=True).returncode == 0
    assert not (node / "reason").exists()


def test_an_operators_reason_is_kept_by_ccrhost_and_by_nhc(node):
    (node / "reason").write_text("disk swap 1234")
    out = run_nhc(node, healthy=False)
    assert out.returncode == 1
    assert (node / "reason").read_text() == "disk swap 1234"


@pytest.mark.parametrize("node", [{"slurm_drain_cap_nodes": 1}], indirect=True)
def test_past_ccrhosts_drain_cap_nhc_does_not_drain_the_node_either(node):
    from datetime import datetime

    # another node of the partition drained for the same code a minute ago: the cap of 1 is reached
    when = datetime.fromtimestamp(datetime.now().timestamp() - 60).strftime("%Y-%m-%dT%H:%M:%S")
    (node / "others").write_text(f"gpu02|gpu|{when}|ccrhost: no_rdma,gpu_unreadable: no RDMA compute port found "
                                 "[action investigate]\n")
    out = run_nhc(node, healthy=False)
    assert out.returncode == 0, out.stdout
    assert "DRAIN CAP HELD for no_rdma" in out.stdout and "Health check failed:  " not in out.stdout
    assert not (node / "reason").exists()
    assert "State=DRAIN" not in (node / "calls").read_text()


def test_the_nhc_check_gives_ccrhost_a_budget_below_nhcs_timeout(node):
    text = (node / "scripts" / "ccrhost.nhc").read_text()
    assert f"--budget $((CCRHOST_TIMEOUT - {NHC_BUDGET_MARGIN}))" in text
    assert NHC_BUDGET_MARGIN < NHC_CHECK_TIMEOUT < NHC_DEFAULT_TIMEOUT
    assert HEALTHCHECK_BUDGET < SLURMD_HEALTHCHECK_LIMIT
    # a -t above NHC's own watchdog is refused by name, as NHC's check_cmd_output does
    (node / "nhc.conf").write_text("* || check_ccrhost -t 40\n")
    out = run_nhc(node, healthy=True)
    assert out.returncode == 1
    assert "check_ccrhost:  timeout 40 must be above 5 and at most NHC's timeout 30" in out.stdout


@pytest.mark.parametrize("mode", ["nhc", "none"])
def test_the_fragment_leaves_health_check_program_alone(mode):
    made = files(validate_host("gpu01", {"slurm_healthcheck": mode}))
    fragment = made["/etc/slurm/ccrhost.conf"]
    lines = [line for line in fragment.splitlines() if not line.startswith("#")]
    assert lines == ["Prolog=/etc/ccrhost/slurm-prolog.sh"]
    assert SLURM_HEALTHCHECK not in made
    assert (NHC_CHECK in made) == (mode == "nhc")
    if mode == "nhc":
        assert "#   * || check_ccrhost" in fragment


def test_the_default_keeps_ccrhosts_own_health_check_with_its_budget():
    made = files(validate_host("gpu01", {}))
    assert "HealthCheckProgram=/etc/ccrhost/slurm-healthcheck.sh" in made["/etc/slurm/ccrhost.conf"]
    assert NHC_CHECK not in made
    assert made[SLURM_HEALTHCHECK].rstrip().endswith(f"--format nhc --drain --budget {HEALTHCHECK_BUDGET}")


def test_a_bad_mode_is_refused():
    from ccrhost.settings import InventoryDataError

    with pytest.raises(InventoryDataError) as exc:
        validate_host("gpu01", {"slurm_healthcheck": "nhc2"})
    assert str(exc.value).startswith("gpu01: slurm_healthcheck = 'nhc2': ")


@pytest.mark.parametrize("node", [{"slurm_mode": "observe"}], indirect=True)
def test_in_observe_mode_a_fail_passes_nhc_and_nothing_is_drained(node):
    out = run_nhc(node, healthy=False)  # FAIL no_rdma, as above
    assert out.returncode == 0, out.stdout + out.stderr
    assert "nhc:  Health check failed" not in out.stdout  # ccrhost's own line is logged, NHC does not fail
    assert "--dry-run" in (node / "scripts" / "ccrhost.nhc").read_text()
    assert not (node / "reason").exists()
    assert "State=DRAIN" not in (node / "calls").read_text()



@pytest.mark.parametrize("node", [{"slurm_mode": "observe", "slurm_log": "{tmp}/log/ccrhost/slurm.log",
                                   "slurm_textfile": "{tmp}/textfile/ccrhost-slurm.prom"}], indirect=True)
def test_in_observe_mode_nhc_logs_the_would_be_drain_and_drains_nothing(node):
    """The observe mode through NHC's own driver: a FAIL node passes NHC, slurmctld is only read, and
    the drain it would have set is told in NHC's log, the slurm_log file and the textfile."""
    out = run_nhc(node, healthy=False)  # FAIL no_rdma
    assert out.returncode == 0, out.stdout + out.stderr
    assert not (node / "reason").exists()
    calls = (node / "calls").read_text().splitlines()
    assert calls and all(" show " in c or c.startswith("sinfo ") for c in calls), calls  # only read
    lines = out.stdout.splitlines()
    failed = [line for line in lines if line.startswith("check_ccrhost:  ERROR: ccrhost: Health check failed: FAIL: ")]
    assert len(failed) == 1 and "nhc:  Health check failed" not in out.stdout, out.stdout
    said = failed[0].split("FAIL: ", 1)[1]  # the verdict's line: the drain reason's text
    would = f"would run: scontrol update NodeName=gpu01 State=DRAIN 'Reason=ccrhost: {said}'"
    assert f"check_ccrhost:  dry run, nothing changed: drained gpu01: ccrhost: {said}; {would}" in lines
    logged = (node / "log/ccrhost/slurm.log").read_text().splitlines()
    assert len(logged) == 1 and " gpu01 check mode=observe FAIL no_rdma; " in logged[0], logged
    assert logged[0].endswith(f"; {would}"), logged
    prom = (node / "textfile/ccrhost-slurm.prom").read_text().splitlines()
    assert {"ccrhost_slurm_observe 1", 'ccrhost_slurm_would_drain{code="no_rdma"} 1',
            'ccrhost_slurm_check_status{status="FAIL"} 1'} <= set(prom), prom
