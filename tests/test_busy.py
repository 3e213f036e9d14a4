"""Running GPU work: read from nvidia-smi's compute-apps list, judged as a
proof-missing UNKNOWN for the active tests skipped, and the tuning deploy's
disruptive stages held back on a busy node."""

import pytest
from test_checks import H100, healthy

from ccrhost.facts.busy import GpuWorkFact, parse_script
from ccrhost.model.busy import (
    BUSY,
    UNREADABLE,
    GpuProcess,
    GpuWork,
    SkippedTests,
    check_skipped,
    parse_compute_apps,
    skip_message,
)
from ccrhost.model.reasons import REGISTRY
from ccrhost.model.verdict import OK, UNKNOWN, evaluate, readings_from_dict

# nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader (lab shim, gpu_busy)
TWO = "4242, python3, 1024 MiB\n4243, /opt/conda/bin/python, 79000 MiB\n"


def test_compute_apps_are_read_one_process_a_line():
    work = parse_compute_apps(0, TWO)
    assert work.processes == [GpuProcess(4242, "python3", "1024 MiB"),
                              GpuProcess(4243, "/opt/conda/bin/python", "79000 MiB")]
    assert not work.idle and work.error is None
    assert work.describe() == "pid 4242 python3 (1024 MiB), pid 4243 /opt/conda/bin/python (79000 MiB)"


def test_no_process_is_idle():
    assert parse_compute_apps(0, "").idle
    assert parse_compute_apps(0, "\n").idle


def test_a_name_with_commas_keeps_its_commas():
    work = parse_compute_apps(0, "77, train,v2.py, [N/A]\n")
    assert work.processes == [GpuProcess(77, "train,v2.py", "[N/A]")]


@pytest.mark.parametrize("rc, text, error", [
    (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
     "nvidia-smi exit 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
    (2, "", "nvidia-smi exit 2: no output"),
    (None, "", "nvidia-smi did not answer before its deadline"),
    (0, "No devices were found\n", "nvidia-smi printed 'No devices were found', not PID, NAME, MEMORY"),
])
def test_what_cannot_be_read_is_not_idle(rc, text, error):
    work = parse_compute_apps(rc, text)
    assert work.error == error and not work.idle and work.processes == []


def test_a_half_readable_list_is_unreadable_not_shorter():
    work = parse_compute_apps(0, "4242, python3, 1024 MiB\ngarbage\n")
    assert work.error is not None and work.processes == []


def test_the_fact_script_output():
    assert parse_script(["@@none"]).idle  # no nvidia-smi: no GPU work to disturb
    assert parse_script(["4242, python3, 1024 MiB", "@@rc 0"]).processes[0].pid == 4242
    assert parse_script(["@@rc 124"]).error == "nvidia-smi did not answer before its deadline"
    assert parse_script([]).error == "the query's exit status was not printed"
    command = GpuWorkFact().command()
    assert "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader" in command


def test_skipped_tests_are_a_proof_missing_unknown_that_drains_nothing():
    busy = GpuWork([GpuProcess(4242, "python3", "1024 MiB")])
    [reason] = check_skipped(SkippedTests(busy, ["all-reduce", "DCGM diag"]))
    assert reason.level == UNKNOWN and reason.code == BUSY
    assert reason.message == ("all-reduce and DCGM diag not run: GPU work is running (pid 4242 python3 (1024 MiB)); "
                              "drain the node first, or set verify_active_when_busy: true to run it anyway")
    [unread] = check_skipped(SkippedTests(GpuWork(error="nvidia-smi exit 9: x"), ["all-reduce"]))
    assert unread.code == UNREADABLE and "cannot tell whether GPU work is running (nvidia-smi exit 9: x)" \
        in unread.message
    for code in (BUSY, UNREADABLE):  # proof: the prolog and health check never drain or hold for it
        assert REGISTRY[code].proof and REGISTRY[code].level == UNKNOWN
    assert check_skipped(None) == [] and check_skipped(SkippedTests(GpuWork(), ["all-reduce"])) == []


def test_the_verdict_of_a_busy_node_is_unknown_and_round_trips():
    assert evaluate(healthy(), H100).status == OK
    readings = healthy()
    readings.busy = SkippedTests(GpuWork([GpuProcess(4242, "python3", "1024 MiB")]), ["all-reduce"])
    verdict = evaluate(readings, H100)
    assert verdict.status == UNKNOWN and [r.code for r in verdict.reasons] == [BUSY]
    assert verdict.ccr is not None  # the rest is still judged
    again = readings_from_dict(readings.to_dict())
    assert evaluate(again, H100).reasons == verdict.reasons


def test_skip_message_names_the_stages():
    work = GpuWork([GpuProcess(1, "a", "1 MiB"), GpuProcess(2, "b", "1 MiB"), GpuProcess(3, "c", "1 MiB"),
                    GpuProcess(4, "d", "1 MiB")])
    assert skip_message(work, ["MTU", "QoS"], "rdma_tune_when_busy") == (
        "skipped the disruptive stages MTU, QoS: GPU work is running (pid 1 a (1 MiB), pid 2 b (1 MiB), "
        "pid 3 c (1 MiB) and 1 more); drain the node and rerun, or set rdma_tune_when_busy: true")
    assert skip_message(GpuWork(), ["MTU"], "x") is None and skip_message(work, [], "x") is None


class FakeHost:
    def __init__(self, work):
        self.work, self.reads = work, 0

    def get_fact(self, fact, **kwargs):
        assert fact is GpuWorkFact
        self.reads += 1
        return self.work


class Settings:
    def __init__(self, allowed=False):
        self.rdma_tune_when_busy = allowed


def hold_for(monkeypatch, work, allowed=False):
    from ccrhost.operations import tune

    fake = FakeHost(work)
    monkeypatch.setattr(tune.fact_cache, "_real", lambda host: fake)
    return tune.BusyHold(Settings(allowed)), fake


def test_busy_node_holds_only_the_disruptive_stages(monkeypatch):
    held, fake = hold_for(monkeypatch, GpuWork([GpuProcess(4242, "python3", "1024 MiB")]))
    assert held("RoCE")(["x"]) is False and fake.reads == 0  # not disruptive: no read at all
    assert held("MTU")(["x"]) is True and held("QoS")(["x"]) is True and held("NCCL")(["x"]) is False
    assert held("PCIe ACS")(["x"]) is True
    assert fake.reads == 1  # read once, at the first disruptive stage
    assert held.skipped == ["MTU", "QoS", "PCIe ACS"]
    assert held.message().startswith("skipped the disruptive stages MTU, QoS, PCIe ACS: GPU work is running")


def test_idle_or_allowed_node_holds_nothing(monkeypatch):
    held, _ = hold_for(monkeypatch, GpuWork())
    assert held("MTU")(["x"]) is False and held.skipped == [] and held.message() is None
    held, fake = hold_for(monkeypatch, GpuWork([GpuProcess(1, "a", "1 MiB")]), allowed=True)
    assert held("MTU")(["x"]) is False and fake.reads == 0


def test_unreadable_work_holds_too(monkeypatch):
    held, _ = hold_for(monkeypatch, GpuWork(error="nvidia-smi exit 9: x"))
    assert held("QoS")(["x"]) is True
    assert "cannot tell whether GPU work is running (nvidia-smi exit 9: x)" in held.message()


def test_settings_default_to_safe_and_the_tuning_key_stays_on_the_controller():
    from ccrhost.settings import HostSettings

    s = HostSettings()
    assert s.verify_active_when_busy is False and s.rdma_tune_when_busy is False
    assert HostSettings.model_fields["rdma_tune_when_busy"].json_schema_extra == {"controller_only": True}


class Tool:
    def __init__(self, rc=0, output="", timed_out=False, missing=None):
        self.rc, self.output, self.timed_out, self.missing = rc, output, timed_out, missing


def test_the_node_reads_its_own_gpu_work():
    from ccrhost.node.busy import read_local

    seen = []

    def run(argv, deadline, env):
        seen.append((argv, deadline))
        return Tool(0, TWO)

    assert [p.pid for p in read_local(run).processes] == [4242, 4243]
    assert seen == [(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
                     30)]
    assert read_local(lambda *a: Tool(None, "", missing="nvidia-smi not found")).idle
    assert read_local(lambda *a: Tool(None, "", timed_out=True)).error == \
        "nvidia-smi did not answer before its deadline"


def test_ccrhost_dcgm_runs_nothing_and_stores_nothing_on_a_busy_node(monkeypatch, tmp_path):
    import json

    from click.testing import CliRunner

    from ccrhost.cli import main
    from ccrhost.node import busy, dcgm

    state = tmp_path / "active.json"
    config = tmp_path / "check.yaml"
    config.write_text(f"verify_dcgm: true\nverify_dcgm_state: {state}\n")
    monkeypatch.setattr(busy, "read_local", lambda **kw: GpuWork([GpuProcess(4242, "python3", "1024 MiB")]))
    ran = []
    monkeypatch.setattr(dcgm, "run_and_store", lambda *a, **k: ran.append(a))
    out = CliRunner().invoke(main, ["dcgm", "--config", str(config), "--level", "2", "--format", "json"])
    assert out.exit_code == 3, out.output
    [result] = json.loads(out.output)
    assert (result["check"], result["mode"], result["status"], result["code"]) == ("dcgm_diag", "level 2", "UNKNOWN",
                                                                                   "node_busy")
    assert result["message"].startswith("DCGM diag level 2 not run: GPU work is running (pid 4242 python3")
    assert ran == [] and not state.exists()
    # told explicitly: it runs
    config.write_text(f"verify_dcgm: true\nverify_dcgm_state: {state}\nverify_active_when_busy: true\n")
    from ccrhost.model.active import ActiveResult

    monkeypatch.setattr(dcgm, "run_and_store", lambda s, level: ran.append(level) or ActiveResult(
        "dcgm_diag", f"level {level}", "OK", None, "passed", 0.0, 60))
    out = CliRunner().invoke(main, ["dcgm", "--config", str(config), "--level", "2"])
    assert out.exit_code == 0 and ran == [2], out.output


def test_a_failed_read_is_not_an_idle_node(monkeypatch):
    held, _ = hold_for(monkeypatch, None)
    assert held("MTU")(["x"]) is True
    assert "cannot tell whether GPU work is running (the read failed)" in held.message()


# -- issue 46: on Slurm, the node's jobs too (a job between its GPU phases holds no GPU process) --

SQUEUE = ["squeue", "-h", "-w", "node3", "-t", "CONFIGURING,RUNNING,SUSPENDED,COMPLETING", "-o", "%i|%j|%u|%T"]


def _node(squeue: Tool, gpus: Tool | None = None):
    seen = []

    def run(argv, deadline, env):
        seen.append((argv, deadline, env))
        return squeue if argv[0] == "squeue" else (gpus or Tool(0, ""))
    return run, seen


def test_a_slurm_job_without_a_gpu_process_makes_the_node_busy():
    from ccrhost.model.busy import SlurmJob, busy_reason
    from ccrhost.node.busy import read_local

    run, seen = _node(Tool(0, "17|train|alice|RUNNING\n"))
    work = read_local(run, slurm_conf="/etc/slurm/lab.conf", environ={"SLURMD_NODENAME": "node3"})
    assert seen[1] == (SQUEUE, 15, {"SLURM_CONF": "/etc/slurm/lab.conf"})
    assert not work.idle and work.processes == [] and work.jobs == [SlurmJob("17", "train", "alice", "RUNNING")]
    reason = busy_reason(work, "DCGM diag level 2", "verify_active_when_busy")
    assert (reason.level, reason.code, reason.message) == (UNKNOWN, BUSY, (
        "DCGM diag level 2 not run: a Slurm job is running on the node (Slurm job 17 train (alice, RUNNING)); "
        "drain the node first, or set verify_active_when_busy: true to run it anyway"))
    # GPU processes and jobs: both named, the GPU work first
    both = read_local(_node(Tool(0, "17|train|alice|RUNNING\n"), Tool(0, TWO))[0], environ={"SLURMD_NODENAME": "node3"})
    assert busy_reason(both, "x", "verify_active_when_busy").message.startswith(
        "x not run: GPU work is running (pid 4242 python3 (1024 MiB), pid 4243 /opt/conda/bin/python (79000 MiB); "
        "Slurm job 17 train (alice, RUNNING))")


def test_the_job_that_asks_is_not_busy_work_and_slurm_conf_from_the_environment_wins():
    from ccrhost.node.busy import read_local

    # the sweep's own batch job runs the diag as its step: its id is SLURM_JOB_ID there
    run, seen = _node(Tool(0, "17|ccrhost-verify|root|RUNNING\n"))
    assert read_local(run, slurm_conf="/etc/slurm/lab.conf",
                      environ={"SLURM_JOB_ID": "17", "SLURMD_NODENAME": "node3", "SLURM_CONF": "/s.conf"}).idle
    assert seen[1][2] is None  # SLURM_CONF already set: not replaced
    # an array task's id as squeue prints it
    run, _ = _node(Tool(0, "12_3|a|bob|RUNNING\n"))
    assert read_local(run, environ={"SLURMD_NODENAME": "node3", "SLURM_JOB_ID": "15", "SLURM_ARRAY_JOB_ID": "12",
                                    "SLURM_ARRAY_TASK_ID": "3"}).idle


@pytest.mark.parametrize("squeue, error", [
    (Tool(1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"),
     "squeue exit 1: slurm_load_jobs error: Unable to contact slurm controller (connect failure)"),
    (Tool(None, "", timed_out=True), "squeue did not answer before its deadline"),
    (Tool(None, "", missing="squeue not found"), "Slurm is in use here but squeue not found"),
    (Tool(0, "17 train alice RUNNING\n"), "squeue printed '17 train alice RUNNING', not ID|NAME|USER|STATE"),
])
def test_slurm_jobs_that_cannot_be_read_are_node_busy_unreadable(squeue, error):
    from ccrhost.model.busy import busy_reason
    from ccrhost.node.busy import read_local

    work = read_local(_node(squeue)[0], environ={"SLURMD_NODENAME": "node3"})
    assert work.error == error and not work.idle
    assert busy_reason(work, "x", "verify_active_when_busy").code == UNREADABLE


def test_a_job_name_with_a_bar_keeps_it_and_no_slurm_no_squeue(monkeypatch, tmp_path):
    from ccrhost.model.busy import SlurmJob, parse_squeue
    from ccrhost.node import busy

    assert parse_squeue(0, "9|a|b|carol|RUNNING\n").jobs == [SlurmJob("9", "a|b", "carol", "RUNNING")]
    monkeypatch.setattr(busy, "SLURM_CONF", str(tmp_path / "absent.conf"))
    run, seen = _node(Tool(0, "17|train|alice|RUNNING\n"))
    assert busy.read_local(run, environ={}).idle  # no Slurm here (a Kubernetes node): squeue is never asked
    assert [argv[0] for argv, _, _ in seen] == ["nvidia-smi"]
    (tmp_path / "absent.conf").write_text("")  # Slurm's default slurm.conf: Slurm is in use, over ssh too
    monkeypatch.setattr(busy.os, "uname", lambda: type("U", (), {"nodename": "node3.cluster"})())
    run, seen = _node(Tool(0, "17|train|alice|RUNNING\n"))
    assert not busy.read_local(run, environ={}).idle and seen[1][0] == SQUEUE


@pytest.mark.parametrize("when_busy", [False, True])
def test_check_refresh_nic_skips_the_nic_queries_on_a_busy_node_unless_told(monkeypatch, tmp_path, when_busy):
    """`ccrhost check --refresh-nic` (the health check's mlxconfig, mlxlink) was not gated: now a busy node
    (a Slurm job here) gets no query, its stored readings stay, and the verdict says why (proof-missing
    UNKNOWN node_busy, which drains nothing); verify_active_when_busy queries anyway."""
    from ccrhost.model.busy import SlurmJob
    from ccrhost.model.gpus import GpuProbe
    from ccrhost.model.rdma import RdmaReading
    from ccrhost.node import check as node_check
    from ccrhost.node import nicfw
    from ccrhost.settings import validate_host

    s = validate_host("n1", {"verify_nic_firmware": True, "verify_allreduce_state": str(tmp_path / "active.json"),
                             "verify_active_when_busy": when_busy}).check_settings()
    queried = []
    monkeypatch.setattr(nicfw, "run_and_store", lambda *a, **k: queried.append(a))
    busy = GpuWork(jobs=[SlurmJob("17", "train", "alice", "RUNNING")])
    v = node_check.run_check(s, gather=lambda: (RdmaReading(), GpuProbe([], None)), refresh_nic=True,
                             read_busy=lambda: busy)
    busy_reasons = [(r.level, r.code, r.message) for r in v.reasons if r.code.startswith("node_busy")]
    if when_busy:
        assert len(queried) == 1 and busy_reasons == []
        return
    assert queried == []
    assert busy_reasons == [(UNKNOWN, BUSY, "the NIC firmware query (--refresh-nic) not run: a Slurm job is running "
                             "on the node (Slurm job 17 train (alice, RUNNING)); drain the node first, or set "
                             "verify_active_when_busy: true to run it anyway")]
    idle = node_check.run_check(s, gather=lambda: (RdmaReading(), GpuProbe([], None)), refresh_nic=True,
                                read_busy=lambda: GpuWork())
    assert len(queried) == 1 and not any(r.code.startswith("node_busy") for r in idle.reasons)
    # without --refresh-nic (the prolog) nothing is read: the stored readings are judged as ever
    node_check.run_check(s, gather=lambda: (RdmaReading(), GpuProbe([], None)),
                         read_busy=lambda: pytest.fail("read without --refresh-nic"))


def test_check_active_when_busy_is_the_settings_override_on_the_command_line(monkeypatch, tmp_path):
    """`ccrhost check --refresh-nic --active-when-busy` (what slurm rollout asks a node) queries a busy
    node's NICs as verify_active_when_busy does; without it the check.yaml's setting decides."""
    from ccrhost.cli import entry
    from ccrhost.model.busy import SlurmJob
    from ccrhost.node import busy as node_busy
    from ccrhost.node import check as node_check
    from ccrhost.node import nicfw

    config = tmp_path / "check.yaml"
    config.write_text(f"verify_nic_firmware: true\nverify_allreduce_state: {tmp_path / 'active.json'}\n")
    queried, real = [], node_check.run_check
    monkeypatch.setattr(nicfw, "run_and_store", lambda *a, **k: queried.append(a))
    monkeypatch.setattr(node_busy, "read_local",
                        lambda **kw: GpuWork(jobs=[SlurmJob("17", "train", "alice", "RUNNING")]))
    from ccrhost.model.gpus import GpuProbe
    from ccrhost.model.rdma import RdmaReading
    monkeypatch.setattr(node_check, "run_check", lambda s, **kw: real(
        s, gather=lambda: (RdmaReading(), GpuProbe([], None)), refresh_nic=kw["refresh_nic"]))
    for extra, runs in (([], 0), (["--active-when-busy"], 1)):
        with pytest.raises(SystemExit):
            entry(["check", "--config", str(config), "--format", "json", "--refresh-nic", *extra])
        assert len(queried) == runs, extra


def test_the_deploys_fact_reads_the_slurm_jobs_where_slurm_is_in_use(tmp_path):
    """The deploy's read (pyinfra, over SSH) asks Slurm too: the fact's own shell line, run by sh with a
    stand-in nvidia-smi (no process) and squeue (a job that holds no GPU), gives a busy node."""
    import shutil
    import subprocess

    from ccrhost.model.busy import SlurmJob

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (bin_ / "squeue").write_text(f"#!/bin/sh\necho \"$SLURM_CONF $*\" > {tmp_path}/asked\necho '17|train|alice|RUNNING'\n")
    (bin_ / "hostname").write_text("#!/bin/sh\necho node3\n")
    for tool in bin_.iterdir():
        tool.chmod(0o755)
    (bin_ / "timeout").symlink_to(shutil.which("timeout"))
    env = {"PATH": str(bin_)}  # only these: this machine's own squeue must not answer
    command = GpuWorkFact().command(attempt=1, slurm_conf="/etc/slurm/lab.conf")
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env)
    work = parse_script(out.stdout.splitlines())
    assert work.jobs == [SlurmJob("17", "train", "alice", "RUNNING")] and not work.idle, out.stdout
    assert (tmp_path / "asked").read_text() == ("/etc/slurm/lab.conf -h -w node3 -t CONFIGURING,RUNNING,SUSPENDED,"
                                                "COMPLETING -o %i|%j|%u|%T\n")
    (bin_ / "squeue").unlink()  # Slurm named but its client missing: not known to be idle
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env)
    assert parse_script(out.stdout.splitlines()).error == "Slurm is in use here but squeue not found"


def test_the_fact_script_output_with_slurm():
    assert parse_script(["@@none", "@@slurm", "@@src 0"]).idle
    assert parse_script(["@@rc 0", "@@slurm", "9|x|bob|SUSPENDED", "@@src 0"]).jobs[0].state == "SUSPENDED"
    assert parse_script(["@@rc 0", "@@slurm", "@@src 124"]).error == "squeue did not answer before its deadline"
    assert parse_script(["@@rc 0", "@@slurm"]).error == "squeue's exit status was not printed"
    # both unreadable: both said
    assert parse_script(["@@rc 124", "@@slurm", "@@src missing"]).error == (
        "nvidia-smi did not answer before its deadline; Slurm is in use here but squeue not found")
