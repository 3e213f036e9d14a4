"""probes/local.py: a snippet's process group ends with the command, also
when the command exits while a thread is still inside Popen (the child
already runs; its pid is not known yet)."""

import subprocess
import threading
import time

import pytest

from ccrhost.probes import local


def _alive(pid):
    # a zombie is gone for our purpose (killed, not yet reaped by its parent)
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped, also between the open and the read
        return False


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(local, "_ended", False)
    monkeypatch.setattr(local, "_running", set())
    monkeypatch.setattr(local, "_spawning", 0)


def test_end_all_waits_for_a_popen_in_flight_and_kills_its_child(fresh, monkeypatch, tmp_path):
    real = subprocess.Popen
    inside, release = threading.Event(), threading.Event()
    pidfile = tmp_path / "pid"

    def slow_popen(*args, **kwargs):
        proc = real(*args, **kwargs)  # the child runs from here on
        inside.set()
        release.wait(10)  # the thread is descheduled before Popen returns
        return proc

    monkeypatch.setattr(local.subprocess, "Popen", slow_popen)
    errors = []
    worker = threading.Thread(target=lambda: errors.append(
        local.run(f"echo $$ > {pidfile}; exec sleep 600", 60, "test snippet")), daemon=True)
    worker.start()
    assert inside.wait(10)
    threading.Timer(0.5, release.set).start()
    began = time.monotonic()
    local.end_all()  # returns only once the thread's Popen has returned and its group is killed
    assert time.monotonic() - began >= 0.4
    deadline = time.monotonic() + 5
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid)
    worker.join(10)


def test_a_snippet_asked_for_after_the_end_is_not_started(fresh, tmp_path):
    local.end_all()
    with pytest.raises(local.ProbeTimeout, match="test snippet was not started: the command is ending"):
        local.run(f"touch {tmp_path / 'ran'}", 5, "test snippet")
    assert not (tmp_path / "ran").exists()
