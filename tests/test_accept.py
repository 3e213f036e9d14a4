"""`ccrhost slurm accept` without a cluster: what a dry run says and leaves
alone, a refused reservation, bad options, and the check step's output in
base64 (the Slurm lab test is tests/test_accept_lab.py)."""

import io
from contextlib import contextmanager

import pytest

from ccrhost.cli import main as entry
from ccrhost.fleet import accept as acc
from ccrhost.fleet.slurm_check import check_script, parse_check_task
from ccrhost.fleet.slurm_client import SlurmError, SlurmNode


def cluster(monkeypatch, states: dict[str, str]):
    """Slurm faked: the nodes in ``states``; every Slurm command recorded, none run."""
    ran = []
    monkeypatch.setattr(acc, "list_nodes", lambda partition=None, nodelist=None: {
        n: SlurmNode(n, f"10.0.0.{i}", st, "new node" if "drain" in st else None)
        for i, (n, st) in enumerate(states.items(), 1)})

    def run_slurm(*args, **kw):
        ran.append(args)
        raise SlurmError("scontrol: error: Reservation request has invalid node list")

    monkeypatch.setattr(acc, "run_slurm", run_slurm)
    return ran


def test_a_dry_run_names_the_reservation_and_the_resume_and_runs_nothing(monkeypatch):
    ran = cluster(monkeypatch, {"gpu1": "drained", "gpu2": "drained", "gpu3": "allocated", "gpu4": "draining"})
    stream = io.StringIO()
    code, out = acc.run_accept(acc.AcceptOptions(nodelist="gpu[1-4]", dry_run=True, reservation="acc-1"), stream)
    said = stream.getvalue()
    assert code == 0 and ran == []
    assert out.untouched == {"gpu3": "allocated: running a job", "gpu4": "draining: running a job"}
    assert ("dry run: would run: scontrol create reservation ReservationName=acc-1 Nodes=gpu[1-2] StartTime=now "
            "Duration=UNLIMITED Users=") in said
    assert "dry run: would run: scontrol update NodeName=gpu[1-2] State=RESUME\n" in said
    assert "nothing changed" in said


def test_a_refused_reservation_changes_nothing_and_says_so(monkeypatch):
    ran = cluster(monkeypatch, {"gpu1": "drained", "gpu2": "idle"})
    with pytest.raises(acc.AcceptError) as refused:
        acc.run_accept(acc.AcceptOptions(nodelist="gpu[1-2]", reservation="acc-1"), io.StringIO())
    assert str(refused.value) == ("could not reserve gpu[1-2]: scontrol: error: Reservation request has invalid "
                                  "node list; nothing was changed")
    assert [a[:3] for a in ran] == [("scontrol", "create", "reservation")]  # no resume, no job


def test_a_partition_means_its_drained_nodes_and_none_is_an_error(monkeypatch):
    cluster(monkeypatch, {"gpu1": "idle", "gpu2": "allocated"})
    with pytest.raises(acc.AcceptError, match="no nodes to accept in partition gpu"):
        acc.run_accept(acc.AcceptOptions(partition="gpu", dry_run=True), io.StringIO())


@pytest.mark.parametrize("argv, words", [
    (["slurm", "accept"], "give --nodes or --partition"),
    (["slurm", "accept", "-w", "gpu1", "--stages", "check,burn"],
     "--stages 'check,burn': allowed a comma-separated list of check, node, mesh, pairs, scale, soak"),
    (["slurm", "accept", "-w", "gpu1", "--again", ""],
     "--again '': allowed a comma-separated list of check, node, mesh, pairs, scale, soak"),
])
def test_bad_options_are_refused_before_slurm_is_asked(argv, words, monkeypatch, capsys):
    monkeypatch.setattr(acc, "list_nodes", lambda *a, **k: pytest.fail("Slurm was asked"))
    with pytest.raises(SystemExit) as done:
        entry(argv)
    assert done.value.code == 2 and words in capsys.readouterr().err


def test_the_check_steps_output_travels_in_base64_and_a_long_line_survives():
    """srun cuts a long output line into several: the check's JSON (a long certificate or message) comes
    back whole because the node prints it in base64 lines."""
    import base64

    script = check_script("/usr/local/bin/ccrhost", "/etc/ccrhost/check.yaml")
    assert 'echo "@@check base64"; out=$(/usr/local/bin/ccrhost check' in script
    text = '{"status": "OK", "message": "' + "x" * 5000 + '"}'
    encoded = base64.encodebytes((text + "\n").encode()).decode().splitlines()
    lines = ["@@node gpu1", "@@config -", "@@check base64", *encoded, "@@rc 0"]
    out = parse_check_task(lines)
    assert out.text == text + "\n" and out.rc == 0
    broken = parse_check_task(["@@node gpu1", "@@config -", "@@check base64", "not base64!", "@@rc 0"])
    assert broken.text.startswith("the check's output does not decode as base64")


@contextmanager
def whole(self, nodes):
    """The run's allocation, faked: every node held."""
    yield self


def test_an_interrupted_run_drains_what_it_resumed_before_it_lets_the_reservation_go(monkeypatch):
    ran = []
    monkeypatch.setattr(acc, "list_nodes", lambda partition=None, nodelist=None: {
        n: SlurmNode(n, f"10.0.0.{i}", "drained", "new node") for i, n in enumerate(("gpu1", "gpu2"), 1)})
    monkeypatch.setattr(acc, "run_slurm", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(acc.time, "sleep", lambda s: None)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(acc, "_run_stages", interrupted)
    monkeypatch.setattr(acc.StageBatches, "whole", whole)
    with pytest.raises(KeyboardInterrupt):
        acc.run_accept(acc.AcceptOptions(nodelist="gpu[1-2]", reservation="acc-1"), io.StringIO())
    assert ran[0][:3] == ("scontrol", "create", "reservation")
    assert ran[-2] == ("scontrol", "update", "NodeName=gpu[1-2]", "State=DRAIN",
                       "Reason=ccrhost: accept_not_run: UNKNOWN: acceptance interrupted before its end "
                       "[action investigate]")
    assert ran[-1] == ("scontrol", "delete", "ReservationName=acc-1")


def test_the_stages_that_ended_are_kept_when_a_later_one_is_interrupted(monkeypatch, tmp_path):
    """The report directory's certificates are written as each stage ends: S0 ended, S1 was interrupted,
    and a second run would start from S0's results (model/certificate.to_run)."""
    import json

    from test_checks import H100, healthy

    from ccrhost.model import certificate as cm
    from ccrhost.model.verdict import evaluate
    from ccrhost.settings import HostSettings

    monkeypatch.setattr(acc, "list_nodes", lambda partition=None, nodelist=None: {
        n: SlurmNode(n, f"10.0.0.{i}", "idle", None) for i, n in enumerate(("gpu1", "gpu2"), 1)})
    monkeypatch.setattr(acc, "run_slurm", lambda *a, **k: None)

    def checked(fleet, names, held, vopts, say):
        for name in names:
            fleet.verdicts[name], fleet.settings[name] = evaluate(healthy(), H100), HostSettings()

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(acc.StageBatches, "whole", whole)
    monkeypatch.setattr(acc, "stage_check", checked)
    monkeypatch.setattr(acc, "stage_node", interrupted)
    with pytest.raises(KeyboardInterrupt):
        acc.run_accept(acc.AcceptOptions(nodelist="gpu[1-2]", reservation="acc-1",
                                         report_dir=str(tmp_path)), io.StringIO())
    for name in ("gpu1", "gpu2"):
        cert = cm.Certificate.from_dict(json.loads((tmp_path / "certificates" / f"{name}.json").read_text()))
        assert list(cert.stages) == ["check"] and cert.stages["check"].status == "OK"
        assert cm.to_run(cert, cm.STAGES, cert.stages["check"].at, {}) == cm.STAGES  # S0 always, then the rest


def passed_everything(node, at=1000.0, status="OK", last="soak"):
    from ccrhost.model import certificate as cm

    cert = None
    for stage in cm.STAGES:
        cert = cm.record(cert, node, cm.StageResult(stage, status if stage == last else "OK", at), 86400, {},
                         cm.STAGES)
    return cert


def test_the_report_copy_speaks_for_a_node_only_where_it_holds_a_failure(tmp_path):
    """A node that keeps no certificate of its own: a passing copy in the report directory (a reinstalled
    node, a new one under an old name) is not taken; a failing one (its prolog drained it before it could
    be given its copy) is."""
    import json

    from ccrhost.fleet.accept_stages import Fleet

    fleet = Fleet({"gpu1": "10.0.0.1"})
    (tmp_path / "certificates").mkdir()
    copy = tmp_path / "certificates" / "gpu1.json"
    copy.write_text(json.dumps(passed_everything("gpu1").to_dict()))
    assert acc._prior(fleet, "gpu1", str(tmp_path)) is None
    failing = passed_everything("gpu1", status="FAIL")
    copy.write_text(json.dumps(failing.to_dict()))
    assert acc._prior(fleet, "gpu1", str(tmp_path)) == failing
    copy.write_text(json.dumps(passed_everything("gpu2", status="FAIL").to_dict()))  # another node's
    assert acc._prior(fleet, "gpu1", str(tmp_path)) is None


def test_a_node_drained_by_ccrhost_runs_again_the_stages_its_codes_concern():
    assert acc._repair_stages(SlurmNode("gpu1", "a", "drained", "ccrhost: rdma_mesh_pruned: S2 ...")) == ("mesh",)
    assert acc._repair_stages(SlurmNode("gpu1", "a", "drained", "new node")) == ()
    assert acc._repair_stages(SlurmNode("gpu1", "a", "idle", None)) == ()


def test_nodes_left_alone_are_not_accepted_and_the_run_says_unknown(monkeypatch):
    ran = cluster(monkeypatch, {"gpu1": "allocated", "gpu2": "down*", "gpu3": "idle*"})
    code, out = acc.run_accept(acc.AcceptOptions(nodelist="gpu[1-3]", reservation="acc-1"), io.StringIO())
    assert code == 3 and ran == []  # nothing reserved, resumed or drained
    assert out.untouched == {"gpu1": "allocated: running a job", "gpu2": "down*: down",
                             "gpu3": "idle*: not responding"}


def test_the_mesh_takes_the_strictest_of_the_nodes_settings_and_says_where_they_differ():
    from ccrhost.fleet.accept_stages import mesh_options
    from ccrhost.settings.accept import AcceptSettings as Settings

    loose = Settings(accept_mesh_group=32, accept_mesh_prune=0.5, accept_latency_max_p99_us=4.2)
    strict = Settings(accept_mesh_group=8, accept_mesh_prune=0.5, accept_latency_max_p99_us=3.0)
    said = []
    opts = mesh_options([loose, strict, loose], 20, said.append)
    assert (opts.group, opts.prune, opts.max_p99_us, opts.timeout) == (8, 0.5, 3.0, 20)
    assert said == ["S2 mesh: the nodes ask for accept_mesh_group 8, 32: the mesh uses 8",
                    "S2 mesh: the nodes ask for accept_latency_max_p99_us 3.0, 4.2: the mesh uses 3.0"]
    said.clear()
    assert mesh_options([loose, loose], 5, said.append).group == 32 and said == []
