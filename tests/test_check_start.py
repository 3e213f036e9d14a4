"""`ccrhost check` starts its node reads before the command line is parsed
(ccrhost.console), and reads nothing the verdict does not use."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccrhost.node import gather
from ccrhost.probes import rdma

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args, expected", [
    ([], 20.0),
    (["--probe-timeout", "5"], 5.0),
    (["--format", "json", "--probe-timeout=7.5"], 7.5),
    (["--probe-timeout", "abc"], 20.0),   # click refuses it: the usage error comes from there
    (["--probe-timeout", "0.5"], 20.0),   # outside click's 1-600
    (["--probe-timeout"], 20.0),
])
def test_the_early_reads_take_the_timeout_click_will_parse(args, expected):
    assert gather._timeout_given(args) == expected


def test_early_reads_are_taken_over_only_under_the_same_timeout(monkeypatch):
    made = []

    class FakeStarted:
        def __init__(self, timeout):
            self.timeout = timeout
            made.append(self)

    monkeypatch.setattr(gather, "Started", FakeStarted)
    gather.start_early(["--probe-timeout", "5"])
    assert gather.take_early(5.0) is made[0]
    assert gather.take_early(5.0) is None  # taken once
    gather.start_early([])
    assert gather.take_early(5.0) is None  # the command line said otherwise: start anew
    assert gather.take_early(20.0) is None  # and the guess is dropped


SCRIPT = """
import sys
from ccrhost.node import gather
Real = gather.Started
class Started(Real):
    def __init__(self, timeout, *args, **kwargs):
        sys.stderr.write(f"reads started, click loaded: {'click' in sys.modules}, timeout {timeout}\\n")
        super().__init__(timeout, *args, **kwargs)
gather.Started = Started
from ccrhost.console import entry
entry(sys.argv[1:])
"""


def run_check(tmp_path, *args):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    ip = bin_dir / "ip"
    ip.write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path / 'ip-calls'}\n")
    ip.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-c", SCRIPT, "check", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=60)


def test_the_check_starts_its_reads_before_click_and_uses_them(tmp_path):
    out = run_check(tmp_path, "--format", "json", "--probe-timeout", "9")
    # this machine has no RDMA: FAIL, printed whole through the early exit
    assert out.returncode == 2 and out.stdout.rstrip().endswith("}")
    assert out.stderr.splitlines() == ["reads started, click loaded: False, timeout 9.0"]
    # the management path (routes, addresses, the SSH session) is the deploy's guard's, not the verdict's
    assert not (tmp_path / "ip-calls").exists()


def test_a_guess_click_does_not_confirm_starts_the_reads_anew(tmp_path):
    # `--probe-timeout=3` is --exclude's value to click: the early reads ran under a 3 s guess,
    # the check's own start under the default 20 s
    out = run_check(tmp_path, "--format", "json", "--exclude", "--probe-timeout=3")
    assert out.returncode == 3  # and no such device name: the settings are refused
    assert out.stderr.splitlines()[:2] == ["reads started, click loaded: False, timeout 3.0",
                                           "reads started, click loaded: True, timeout 20.0"]
    assert out.stderr.splitlines()[2].startswith("ccrhost check: UNKNOWN: ")


def test_the_deploys_rdma_read_keeps_the_management_path():
    assert rdma.COMMAND == rdma.DEVICES_COMMAND + rdma.MANAGEMENT_COMMAND
    assert "ip -o -4 route show default" in rdma.MANAGEMENT_COMMAND and "ip -o" not in rdma.DEVICES_COMMAND


def test_reads_started_before_click_never_race_its_imports():
    # the reads' threads define dataclasses while the main thread imports click (and typing):
    # without typing loaded first, about one check in eight ended "internal error: partially
    # initialized module 'typing' has no attribute 'ClassVar'"
    outcomes = []
    for _ in range(40):
        out = subprocess.run([sys.executable, "-m", "ccrhost", "check", "--format", "nhc"], capture_output=True,
                             text=True, cwd=REPO, timeout=60)
        outcomes.append((out.returncode, out.stderr.strip()[-160:]))
    assert [o for o in outcomes if o[0] != 2] == []  # FAIL: this machine has no RDMA
