"""The fleet job's pure parts: reading sinfo and the check step's output,
judging a node with its own settings, splitting measurement steps. The
job itself runs against real slurmctld/slurmd in test_slurm.py."""

import base64
import json

import pytest
import yaml
from test_checks import H100, healthy, port

from ccrhost.fleet.measure import HostMeasurement
from ccrhost.fleet.slurm_check import CheckOutput, check_script, judge, parse_check_task
from ccrhost.fleet.slurm_client import MAX_SCRIPT, _case_steps, parse_sinfo
from ccrhost.model.verdict import evaluate
from ccrhost.settings import validate_host

CONFIG = "verify_profile: hgx-h100-8x400\n"


def test_sinfo_nodes_once_each_reason_may_hold_bars():
    text = ("node1|198.18.0.11|idle|none\n"
            "node2|198.18.0.12|drained|ccrhost: port a|b is DOWN\n"
            "node1|198.18.0.11|idle|none\n"          # the same node in a second partition
            "node3|198.18.0.13|idle*|Not responding\n"
            "node4|198.18.0.14|draining|hw ticket 42\n"
            "node5|198.18.0.15|mixed|none\n")
    nodes = parse_sinfo(text)
    assert list(nodes) == ["node1", "node2", "node3", "node4", "node5"]
    assert nodes["node2"].reason == "ccrhost: port a|b is DOWN" and nodes["node1"].reason is None
    assert [n for n, v in nodes.items() if v.usable] == ["node1", "node5"]


def task_lines(node, doc_text, rc, config=CONFIG):
    if config is None:
        cfg = ["@@config -"]
    else:  # as base64 prints it: 76 characters a line
        text = base64.b64encode(config.encode()).decode()
        cfg = ["@@config", *(text[i:i + 76] for i in range(0, len(text), 76))]
    return [f"@@node {node}", *cfg, "@@check", *doc_text.splitlines(), f"@@rc {rc}"]


def test_a_config_longer_than_a_line_and_one_that_does_not_decode():
    from test_slurm_integration import EVERY_KEY

    from ccrhost.model.slurm import check_config_text

    config = check_config_text(validate_host("gpu07", EVERY_KEY))
    text = json.dumps(evaluate(healthy(), H100).to_dict(), default=str)
    out = parse_check_task(task_lines("gpu07", text, 0, config=config))
    assert out.config == config and len(config) > 2000
    verdict, settings = judge(out)
    assert settings.verify_required_nic_fw == "99.0.0" and verdict.status == "OK"
    broken = task_lines("gpu07", text, 0)
    broken[2] = broken[2][:-3]  # a line lost in transit
    verdict, settings = judge(parse_check_task(broken))
    assert settings is None and verdict.status == "UNKNOWN"
    assert verdict.reasons[0].message.startswith("gpu07: /etc/ccrhost/check.yaml: its base64 does not decode")


def test_a_config_nested_thousands_deep_is_unknown_not_a_traceback():
    # issue 45: the YAML loader recursed once per level; the controller raised RecursionError
    text = json.dumps(evaluate(healthy(), H100).to_dict(), default=str)
    config = CONFIG + "verify_workload: " + "[" * 5000 + "]" * 5000 + "\n"
    verdict, settings = judge(parse_check_task(task_lines("gpu07", text, 0, config=config)))
    assert settings is None and verdict.status == "UNKNOWN" and verdict.reasons[0].code == "check_config"
    assert verdict.reasons[0].message == "gpu07: /etc/ccrhost/check.yaml: nested too deep to read"


def test_check_output_is_judged_with_the_nodes_own_settings():
    ports = [port(i) for i in range(8)]
    ports[3] = port(3, state="DOWN", phys="Disabled")
    on_node = evaluate(healthy(ports=ports), H100)
    text = json.dumps(on_node.to_dict(), indent=2, default=str)
    out = parse_check_task(task_lines("gpu07", text, 2))
    assert (out.node, out.rc, out.config) == ("gpu07", 2, CONFIG)
    verdict, settings = judge(out)
    assert settings.verify_profile == "hgx-h100-8x400"
    assert verdict.to_dict() == json.loads(text)  # the controller reaches the node's own verdict


def test_a_measurement_joins_the_nodes_readings():
    text = json.dumps(evaluate(healthy(), H100).to_dict(), default=str)
    out = parse_check_task(task_lines("gpu07", text, 0))
    slow = HostMeasurement(gbps={f"mlx5_{i}": 150.0 for i in range(8)}, note="slow with gpu08 and with known-good gpu01")
    verdict, _ = judge(out, slow)
    assert verdict.status == "FAIL"
    assert [r.code for r in verdict.reasons] == ["measured_slow", "ccr_below_expected"]
    assert "(slow with gpu08 and with known-good gpu01)" in verdict.reasons[0].message


def test_a_check_that_printed_no_verdict_is_unknown_with_what_it_said():
    said = "Error: --config /etc/ccrhost/check.yaml: [Errno 2] No such file or directory"
    verdict, settings = judge(parse_check_task(task_lines("gpu07", said, 3, config=None)))
    assert settings is None and verdict.status == "UNKNOWN"
    assert verdict.reasons[0].message == f"ccrhost check on gpu07 exited 3: {said}"
    missing = judge(CheckOutput("gpu08", None, "no result from the check step: srun: error: Unable to create step", None))[0]
    assert missing.status == "UNKNOWN" and "Unable to create step" in missing.summary()


def test_bad_settings_on_a_node_are_unknown_naming_the_key():
    text = json.dumps(evaluate(healthy(), H100).to_dict(), default=str)
    verdict, _ = judge(parse_check_task(task_lines("gpu07", text, 0, config="verify_min_ccr_fraction: 7\n")))
    assert verdict.status == "UNKNOWN" and "gpu07: verify_min_ccr_fraction = 7" in verdict.summary()


def test_check_script_quotes_its_paths():
    script = check_script("/opt/ccr host/bin/ccrhost", "/etc/ccrhost/check.yaml")
    assert 'then echo "@@config"; base64 < /etc/ccrhost/check.yaml; else echo "@@config -"; fi' in script
    assert "'/opt/ccr host/bin/ccrhost' check --config /etc/ccrhost/check.yaml --format json" in script
    assert script.startswith('echo "@@node $SLURMD_NODENAME"')


def test_measurement_steps_stay_under_the_argument_limit():
    branches = {f"gpu{i:05d}": "x" * 900 for i in range(1000)}
    steps = _case_steps(branches)
    assert len(steps) > 1
    assert sum(len(nodes) for nodes, _ in steps) == 1000
    assert all(len(script) < MAX_SCRIPT + 2048 for _, script in steps)
    nodes, script = steps[0]
    assert script.startswith('echo "@@node $SLURMD_NODENAME"\ncase "$SLURMD_NODENAME" in\n')
    assert f"{nodes[0]}) {'x' * 900} ;;" in script and script.endswith("esac\n")


def test_settings_for_the_check_round_trip_through_yaml():
    settings = validate_host("n", yaml.safe_load(CONFIG))
    assert settings.expectation().ports == 8


def test_the_nodes_data_path_reasons_survive_and_a_measurement_keeps_them():
    from ccrhost.model import datapath as dp
    from ccrhost.model.verdict import Readings

    # a node whose own check cannot read its data path: its ports and GPUs alone would be OK
    readings = Readings(healthy().ports, healthy().gpus, datapath=dp.unreadable("line 'role gpu': no BDF"))
    on_node = evaluate(readings, H100)
    assert [r.code for r in on_node.reasons] == ["pci_unreadable"]
    text = json.dumps(on_node.to_dict(), default=str)
    verdict, _ = judge(parse_check_task(task_lines("gpu07", text, 3)))
    assert verdict.status == "UNKNOWN" and verdict.reasons == on_node.reasons
    measured = HostMeasurement(gbps={f"mlx5_{i}": 390.0 for i in range(8)})
    again, _ = judge(parse_check_task(task_lines("gpu07", text, 3)), measured)
    assert again.status == "UNKNOWN" and [r.code for r in again.reasons] == ["pci_unreadable"]
    assert [p.measured_gbps for p in again.readings.ports] == [390.0] * 8


def test_a_node_whose_check_judged_nothing_stays_unknown_also_with_a_measurement():
    from ccrhost.node.check import unknown

    said = unknown("rdma_unreadable", "cannot read /sys/class/infiniband and rdma_cm configfs: the RDMA probe "
                                      "(reading /sys/class/infiniband) did not answer within 20 s (killed)")
    text = json.dumps(said.to_dict(), default=str)
    for measured in (None, HostMeasurement(gbps={"mlx5_0": 100.0})):
        verdict, _ = judge(parse_check_task(task_lines("gpu07", text, 3)), measured)
        assert verdict.status == "UNKNOWN"  # never FAIL "no RDMA compute port found" for a read that timed out
        assert verdict.reasons == said.reasons and not verdict.evaluated


def test_a_sweep_asks_each_nodes_check_to_refresh_its_nic_readings():
    plain = check_script("/usr/local/bin/ccrhost", "/etc/ccrhost/check.yaml")
    sweep = check_script("/usr/local/bin/ccrhost", "/etc/ccrhost/check.yaml", refresh_nic=True)
    assert "--refresh-nic" not in plain
    assert "check --config /etc/ccrhost/check.yaml --format json --refresh-nic 2>&1" in sweep


def test_pair_batches_run_only_pairs_whose_nodes_the_batch_holds():
    """The all-reduce and bandwidth rounds share one batching: a pair runs in
    the batch that holds both its nodes, keeping its place in the group; a
    pair with a busy node is not run and says which node is busy."""
    from contextlib import contextmanager

    from ccrhost.fleet.slurm_client import SlurmNode
    from ccrhost.fleet.slurm_job import round_line, run_pair_batches

    class FakeBatches:
        cap = 4  # two pairs a batch
        lost: dict = {}
        busy = {"n3": SlurmNode("n3", "198.18.0.3", "allocated", None)}
        held = []

        @contextmanager
        def hold(self, nodes):
            self.held.append(nodes)
            yield f"job{len(self.held)}", [n for n in nodes if n not in self.busy]

    batches = FakeBatches()
    pairs = [("n1", "n2"), ("n3", "n4"), ("n5", "n6")]
    out = run_pair_batches(batches, pairs, lambda job, ok: [(job, k, p) for k, p in ok],
                           lambda a, b, why: ("not run", a, b, why))
    assert batches.held == [["n1", "n2", "n3", "n4"], ["n5", "n6"]]
    assert out == [("job1", 0, ("n1", "n2")), ("not run", "n3", "n4", "n3 allocated"), ("job2", 0, ("n5", "n6"))]
    assert round_line("measure", 2, pairs + [("n7", "n8"), ("n9", "n10")], "<->") == \
        "measure round 2: 5 pair(s): n1<->n2, n3<->n4, n5<->n6, n7<->n8 ..."


def test_sweep_json_is_one_document_of_each_nodes_verdict_and_the_exit_code(monkeypatch, capsys, tmp_path):
    # issue 46: sweep had no machine-readable output
    from ccrhost.cli import entry
    from ccrhost.fleet.slurm_client import SlurmNode
    from ccrhost.model.verdict import evaluate

    ports = [port(i) for i in range(8)]
    ports[3] = port(3, state="DOWN", phys="Disabled")
    verdicts = {"n2": evaluate(healthy(ports=ports), H100), "n1": evaluate(healthy(), H100)}
    seen = []

    def fake_verify(opts, stream=None):
        seen.append(opts)
        return 2, verdicts, {"json": tmp_path / "fleet.json"}
    monkeypatch.setattr("ccrhost.fleet.slurm.list_nodes", lambda p, n: {
        "n1": SlurmNode("n1", "10.0.0.1", "idle", None), "n2": SlurmNode("n2", "10.0.0.2", "idle", None)})
    monkeypatch.setattr("ccrhost.fleet.slurm.run_verify", fake_verify)
    with pytest.raises(SystemExit) as done:
        entry(["slurm", "sweep", "-p", "gpu", "--json"])
    assert done.value.code == 2 and seen[0].idle_only
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert list(doc["nodes"]) == ["n1", "n2"] and doc["exit_code"] == 2 and doc["partition"] == "gpu"
    assert doc["nodes"]["n1"] == {"status": "OK", "codes": [], "action": "none", "summary": verdicts["n1"].summary()}
    assert doc["nodes"]["n2"]["status"] == "FAIL" and doc["nodes"]["n2"]["codes"][0] == "port_down"
    assert doc["reports"] == {"json": str(tmp_path / "fleet.json")}
    assert "sweep of gpu: 2 nodes" in err


def test_verify_exits_with_the_worst_verdict_and_prints_no_json(monkeypatch, capsys):
    # the merge of sweep's --json left its lines in verify too: every `slurm verify` then
    # ended in a NameError (UNKNOWN) after its report
    from ccrhost.cli import entry

    monkeypatch.setattr("ccrhost.fleet.slurm.run_verify", lambda opts, stream=None: (2, {}, {}))
    with pytest.raises(SystemExit) as done:
        entry(["slurm", "verify", "-p", "gpu"])
    assert done.value.code == 2
    assert "internal error" not in capsys.readouterr().err


@pytest.mark.parametrize("include_busy", [False, True])
def test_verify_asks_only_for_idle_nodes_unless_told_to_wait_for_busy_ones(monkeypatch, include_busy):
    # issue 46: `slurm verify` asked for an exclusive job on every node of a busy partition and waited
    from slurm_fakes import asked_for  # here: slurm_fakes imports this module's task_lines

    from ccrhost.fleet.slurm_job import VerifyOptions

    asked, said = asked_for(monkeypatch, VerifyOptions("gpu", include_busy=include_busy))
    if include_busy:
        assert asked == [["n1", "n2", "n3"]] and "3 nodes, 3 can run the check\n" in said
    else:
        assert asked == [["n1"]] and "3 nodes, 1 can run the check; not checked: n2, n3\n" in said


def test_sweep_dry_run_prints_every_command_of_every_batch_and_submits_nothing(monkeypatch, capsys):
    """Issue 46: `sweep --dry-run` still submitted its batches and ran the checks (only its drains were
    held back). Now it prints each batch's sbatch, steps and scancel with its nodes, and the drains, as
    the sweep builds them, and asks Slurm for nothing but the node list."""
    import shlex

    from ccrhost.cli import entry
    from ccrhost.fleet import slurm_client
    from ccrhost.fleet.slurm_check import check_script
    from ccrhost.fleet.slurm_client import SlurmNode

    asked = []
    monkeypatch.setattr("ccrhost.fleet.slurm.list_nodes", lambda p, n: {
        "n1": SlurmNode("n1", "10.0.0.1", "idle", None), "n2": SlurmNode("n2", "10.0.0.2", "idle", None),
        "n3": SlurmNode("n3", "10.0.0.3", "idle", None), "n4": SlurmNode("n4", "10.0.0.4", "allocated", None),
        "n5": SlurmNode("n5", "10.0.0.5", "drained", "disk swap")})
    monkeypatch.setattr(slurm_client.subprocess, "run", lambda *a, **k: asked.append(a) or pytest.fail(str(a)))
    monkeypatch.setattr(slurm_client.subprocess, "Popen", lambda *a, **k: asked.append(a) or pytest.fail(str(a)))
    monkeypatch.setattr("ccrhost.fleet.slurm.run_verify", lambda *a, **k: pytest.fail("the sweep ran"))
    with pytest.raises(SystemExit) as done:
        entry(["slurm", "sweep", "-p", "gpu", "--max-nodes", "2", "--max-percent", "100", "--dcgm-level", "1",
               "--dry-run"])
    assert done.value.code == 0 and asked == []
    check = shlex.quote(check_script("/usr/local/bin/ccrhost", "/etc/ccrhost/check.yaml"))
    diag = ('echo "@@dcgm"; /usr/local/bin/ccrhost dcgm --config /etc/ccrhost/check.yaml --level 1 --format json '
            '2>&1 | base64; echo "@@end"')
    sbatch = "would run: sbatch --parsable -J ccrhost-verify -N {n} -w {w} --exclusive -o /dev/null -e /dev/null " \
             "--nice=10000 -p gpu --wrap 'exec sleep 86400'   # prints JOB"
    srun = "would run: srun --jobid=JOB --overlap -J {j} -N {n} -n {n} --ntasks-per-node=1 -w {w} -l " \
           "--kill-on-bad-exit=0 /bin/sh -c "
    case = "$'echo \"@@node $SLURMD_NODENAME\"\\ncase \"$SLURMD_NODENAME\" in\\n{b}esac\\n'"
    drain = "would run: scontrol update NodeName={n} State=DRAIN 'Reason=ccrhost: <its FAIL codes>: <what failed> " \
            "[action <its action>]'"
    assert capsys.readouterr().out.splitlines() == [
        "# 5 node(s); 3 idle to check in 2 batch(es) of at most 2; not checked: n4 allocated, n5 drained (disk swap)",
        "# check: batch 1 of 2: n1,n2",
        sbatch.format(n=2, w="n1,n2"), srun.format(j="ccrhost-check", n=2, w="n1,n2") + check,
        "would run: scancel JOB",
        "# check: batch 2 of 2: n3",
        sbatch.format(n=1, w="n3"), srun.format(j="ccrhost-check", n=1, w="n3") + check,
        "would run: scancel JOB",
        "# DCGM diag level 1: batch 1 of 2: n1,n2",
        sbatch.format(n=2, w="n1,n2"),
        srun.format(j="ccrhost-dcgm", n=2, w="n1,n2") + case.format(b=f"n1) {diag} ;;\\nn2) {diag} ;;\\n"),
        "would run: scancel JOB",
        "# DCGM diag level 1: batch 2 of 2: n3",
        sbatch.format(n=1, w="n3"), srun.format(j="ccrhost-dcgm", n=1, w="n3") + case.format(b=f"n3) {diag} ;;\\n"),
        "would run: scancel JOB",
        "# then, after the last batch, for each node whose verdict is FAIL (within the drain cap: past it the node "
        "is held, not drained):",
        drain.format(n="n1"), drain.format(n="n2"), drain.format(n="n3"),
        "dry run: no job submitted, nothing drained or resumed"]


def test_a_dry_runs_step_line_is_the_steps_own_argv_to_the_shell():
    """The printed $'...' line is exact: bash reads it back into the argv the sweep runs."""
    import subprocess

    from ccrhost.fleet.slurm_client import step_argvs
    from ccrhost.fleet.sweep_plan import shell_line

    [argv] = step_argvs("JOB", {"n1": "echo 'a b' \\ \"$X\"", "n2": "true"}, "ccrhost-dcgm")
    back = subprocess.run(["bash", "-c", f"printf '%s\\0' {shell_line(argv)}"], capture_output=True, text=True)
    assert back.stdout.split("\0")[:-1] == argv


def test_sweep_dry_run_json_holds_the_same_lines(monkeypatch, capsys):
    from ccrhost.cli import entry
    from ccrhost.fleet.slurm_client import SlurmNode

    monkeypatch.setattr("ccrhost.fleet.slurm.list_nodes", lambda p, n: {
        "n1": SlurmNode("n1", "10.0.0.1", "idle", None)})
    monkeypatch.setattr("ccrhost.fleet.slurm.run_verify", lambda *a, **k: pytest.fail("the sweep ran"))
    with pytest.raises(SystemExit) as done:
        entry(["slurm", "sweep", "-p", "gpu", "--dcgm-level", "0", "--no-drain", "--dry-run", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert done.value.code == 0 and doc["dry_run"] is True and doc["exit_code"] == 0
    assert doc["would_run"][0] == "# 1 node(s); 1 idle to check in 1 batch(es) of at most 1"
    assert doc["would_run"][-1] == "would run: scancel JOB"  # --no-drain: no scontrol line
    assert [line.split()[2] for line in doc["would_run"] if line.startswith("would run:")] == [
        "sbatch", "srun", "scancel"]
