"""Run a probe's snippet on this machine (``ccrhost check``, ``monitor``),
bounded in time.

``subprocess.run(timeout=)`` kills only the shell; a hung child (an
``nvidia-smi`` stuck in the driver) keeps the pipes open and the wait goes
on. The snippet runs in its own process group, and the whole group is
killed when the time is up, or when the command ends first (:func:`end_all`:
a check that exits early, on a usage error or a bad config, leaves no
nvidia-smi behind, re-parented to init, on a node whose driver is wedged).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading

_running: set = set()  # the Popen objects whose groups are still ours to end
_lock = threading.Lock()
_settled = threading.Condition(_lock)  # notified when a thread's Popen has returned
_spawning = 0  # threads inside Popen: their child may already run while its pid is not ours yet
_ended = False  # end_all ran: a snippet started after it is killed at once


class ProbeTimeout(RuntimeError):
    """The snippet did not finish in time; the message names what it reads."""


def run(command: str, timeout: float, what: str) -> str:
    """stdout of ``sh -c command``; raises ProbeTimeout after ``timeout`` s."""
    global _spawning
    with _lock:
        if _ended:  # the command is exiting: a child started now could outlive it
            raise ProbeTimeout(f"{what} was not started: the command is ending")
        _spawning += 1
    proc = None
    try:
        proc = subprocess.Popen(["sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    finally:
        with _lock:
            _spawning -= 1
            if proc is not None:
                _running.add(proc)
                if _ended:
                    _kill(proc)
            _settled.notify_all()
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        proc.communicate()
        raise ProbeTimeout(f"{what} did not answer within {timeout:g} s (killed)") from None
    finally:
        with _lock:
            _running.discard(proc)
    return out


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def end_all() -> None:
    """Kill the process group of every snippet still running (not yet
    reaped, so its group id is still its own): called as the command
    exits, however it exits (ccrhost.console; atexit otherwise)."""
    global _ended
    with _lock:
        _ended = True
        # a thread mid-Popen has a child that may already run (an nvidia-smi that hangs): wait for its
        # pid, or the process exits first and leaves the child to init (bounded: Popen returns once
        # the child has exec'd)
        _settled.wait_for(lambda: _spawning == 0, timeout=5)
        procs = list(_running)
        _running.clear()
    for proc in procs:
        _kill(proc)


atexit.register(end_all)
