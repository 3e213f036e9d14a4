"""The rollout's loop against a fake Slurm: batches of at most K, a failure
count that stops the rollout before the next batch, a node that never comes
back counted as failed and left as Slurm has it."""

from ccrhost.fleet import rollout as ro


def fake(monkeypatch, bad=(), lost=()):
    calls, boots = [], {}

    def run_slurm(*args, **kw):
        calls.append(args)
        if args[:2] == ("scontrol", "reboot"):
            for n in args[-1].split(","):
                boots[n] = "after"

    monkeypatch.setattr(ro, "run_slurm", run_slurm)
    monkeypatch.setattr(ro, "show", lambda n: {"BootTime": "never" if n in lost else boots.get(n, "before"),
                                               "State": "DOWN+DRAIN+REBOOT_ISSUED" if n in lost else "DOWN"})
    monkeypatch.setattr(ro, "verify", lambda n, *a: ("FAIL", "stays drained") if n in bad else ("OK", "resumed"))
    monkeypatch.setattr(ro.time, "sleep", lambda s: None)
    return calls


def test_batches_of_k_and_a_stop_after_f_failures(monkeypatch):
    calls = fake(monkeypatch, bad={"n2", "n3"})
    out = ro.rollout([f"n{i}" for i in range(1, 8)], 2, 2, "fw", "ccrhost", "/etc/ccrhost/check.yaml", say=lambda m: None)
    reboots = [c[-1] for c in calls if c[:2] == ("scontrol", "reboot")]
    assert reboots == ["n1,n2", "n3,n4"]  # two failures after the second batch: no third
    assert [(o.node, o.status) for o in out] == [("n1", "OK"), ("n2", "FAIL"), ("n3", "FAIL"), ("n4", "OK"),
                                                ("n5", "NOT_DONE"), ("n6", "NOT_DONE"), ("n7", "NOT_DONE")]
    assert all(c[2:4] == ("ASAP", "nextstate=DOWN") and c[4] == "reason=ccrhost rollout: fw"
               for c in calls if c[:2] == ("scontrol", "reboot"))
    assert ro.exit_code(out) == 2 and ro.exit_code(out[:1]) == 0


def test_a_node_that_never_comes_back_counts_as_failed(monkeypatch):
    fake(monkeypatch, lost={"n1"})
    out = ro.rollout(["n1", "n2"], 2, 1, "fw", "ccrhost", "c", wait=0, say=lambda m: None)
    assert [(o.node, o.status) for o in out] == [("n2", "OK"), ("n1", "FAIL")]
    assert "did not come back within 0 s: left as Slurm has it (DOWN+DRAIN+REBOOT_ISSUED)" in out[1].note
