"""Evidence at the moment of failure (issue 40, layer 4): one bounded bundle
per failure, named in the drain reason and the report, removed by age."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

from test_actions import remap_pending_on_gpu2
from test_history import check

from ccrhost.model import drain_reason as drain_text
from ccrhost.model.gpu_health import Xid
from ccrhost.node import evidence
from ccrhost.node import formats

NOW = 1796458877.0  # 2026-12-05T08:21:17Z


def settings(folder, **kw):
    return SimpleNamespace(verify_evidence_dir=str(folder), verify_evidence_max_age_days=7, verify_evidence_keep=3,
                           verify_evidence_bug_report=False, **kw)


def fake_nvidia_smi(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text('#!/bin/sh\necho "==============NVSMI LOG=============="\necho "args: $*"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_failure_leaves_one_bundle_named_in_the_drain_reason_and_the_report(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch)
    v = remap_pending_on_gpu2()
    v.readings.gpu_health.xids = [Xid(48, "0000:38:00", 60.0, "pid=1, name=python, Ch 0000 DBE")]
    folder = tmp_path / "evidence"
    v.evidence = evidence.keep_evidence(settings(folder), v, NOW)
    assert v.evidence == str(folder / "20261205T082117Z")
    bundle = folder / "20261205T082117Z"
    assert sorted(p.name for p in bundle.iterdir()) == ["kernel-log.txt", "nvidia-smi-q-gpu2.txt", "verdict.json"]
    assert json.loads((bundle / "verdict.json").read_text())["reasons"][0]["code"] == "gpu_row_remap_pending"
    assert (bundle / "kernel-log.txt").read_text() == \
        "Xid 48 (PCI:0000:38:00) 60 s ago: pid=1, name=python, Ch 0000 DBE\n"
    assert (bundle / "nvidia-smi-q-gpu2.txt").read_text().endswith("args: -q -i 2\n")
    assert drain_text.drain_reason(v).endswith(" [evidence 20261205T082117Z] [action reset_gpu gpu 2]")
    assert drain_text.parse_drain_action(drain_text.drain_reason(v)) == ("reset_gpu", [2])
    assert f"  evidence: {bundle}\n" in formats.format_text(v)
    assert v.to_dict()["evidence"] == str(bundle)
    # the next check of the same failure, within the hour: no second bundle, the first still named
    again = remap_pending_on_gpu2()
    assert evidence.keep_evidence(settings(folder), again, NOW + 60) == str(bundle)
    assert len(evidence.bundles(str(folder))) == 1


def test_with_a_history_each_failure_gets_its_bundle_and_old_ones_go(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch)
    folder, history = tmp_path / "evidence", tmp_path / "history.json"
    made = []
    for n in range(5):
        t = NOW + n * 600
        failing = check(history, t, 2)           # a new failure: a bundle
        made.append(evidence.keep_evidence(settings(folder), failing, t))
        still = check(history, t + 60, 2)        # the same failure: none
        assert evidence.keep_evidence(settings(folder), still, t + 60) == made[-1]
        check(history, t + 120, None)            # repaired
    assert len(set(made)) == 5
    assert [str(b) for b in evidence.bundles(str(folder))] == made[-3:]  # verify_evidence_keep 3
    # eight days on, the next failing check removes every bundle older than the week
    late = NOW + 8 * 86400
    evidence.keep_evidence(settings(folder), check(history, late, 2), late)
    assert [b.name for b in evidence.bundles(str(folder))] == [time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(late))]


def test_evidence_is_off_by_default_and_never_for_a_pass(tmp_path):
    from ccrhost.settings import validate_host

    assert validate_host("n", {}).verify_evidence_dir is None
    v = remap_pending_on_gpu2()
    assert evidence.keep_evidence(SimpleNamespace(), v, NOW) is None
    ok = check(tmp_path / "h.json", NOW, None)
    assert evidence.keep_evidence(settings(tmp_path / "e"), ok, NOW) is None and not (tmp_path / "e").exists()


def test_a_bundle_stamped_while_the_clock_ran_ahead_is_never_named_and_is_pruned(tmp_path, monkeypatch):
    # issue 45 case 12: a bundle named a day ahead was "the newest" for every later failure and never aged out
    fake_nvidia_smi(tmp_path, monkeypatch)
    folder = tmp_path / "evidence"
    ahead = folder / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(NOW + 86400))
    ahead.mkdir(parents=True)
    named = evidence.keep_evidence(settings(folder), remap_pending_on_gpu2(), NOW)
    assert named == str(folder / "20261205T082117Z")
    assert [b.name for b in evidence.bundles(str(folder))] == ["20261205T082117Z"]


# --- issue 45 case 13: bounded in time, never in the prolog's path ----------------

def failing_gpus(*indexes):
    from dataclasses import replace

    v = remap_pending_on_gpu2()
    v.reasons = [replace(v.reasons[0], gpu=i) for i in indexes]
    return v


def test_the_gpus_are_queried_at_once_and_a_stuck_nvidia_smi_is_left_behind(tmp_path, monkeypatch):
    # one after another in the check's thread: 20 s per GPU, forever when nvidia-smi is stuck in the driver
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text('#!/bin/sh\n[ "$3" = 3 ] && exec sleep 20\nsleep 1\necho "GPU $3 log"\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(evidence, "SMI_BUDGET", 3.0)
    folder = tmp_path / "evidence"
    started = time.monotonic()
    bundle = evidence.collect(str(folder), failing_gpus(0, 1, 2, 3, 4, 5), NOW)
    took = time.monotonic() - started
    assert took < 5, took  # six queries of 1 s at once, the stuck one cut at the budget
    for i in (0, 1, 2, 4, 5):
        assert (bundle / f"nvidia-smi-q-gpu{i}.txt").read_text() == f"GPU {i} log\n"
    assert (bundle / "nvidia-smi-q-gpu3.txt").read_text() == (
        "nvidia-smi -q -i 3: not collected: no answer within the evidence's 3 s\n")


def test_a_prolog_keeps_no_bundle_and_the_next_health_check_keeps_the_failures(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch)
    folder, history = tmp_path / "evidence", tmp_path / "history.json"
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "prolog_slurmd")
    assert evidence.keep_evidence(settings(folder), check(history, NOW, 2), NOW) is None
    assert not folder.exists()
    monkeypatch.delenv("SLURM_SCRIPT_CONTEXT")
    later = check(history, NOW + 30, 2)  # the health check: the same failure, which has no bundle yet
    assert evidence.keep_evidence(settings(folder), later, NOW + 30) == str(folder / "20261205T082147Z")
    again = check(history, NOW + 60, 2)
    assert evidence.keep_evidence(settings(folder), again, NOW + 60) == str(folder / "20261205T082147Z")
    assert len(evidence.bundles(str(folder))) == 1
