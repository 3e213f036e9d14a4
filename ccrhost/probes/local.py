"""Run a probe's snippet on this machine (``ccrhost check``, ``monitor``),
bounded in time.

``subprocess.run(timeout=)`` kills only the shell; a hung child (an
``nvidia-smi`` stuck in the driver) keeps the pipes open and the wait goes
on. The snippet runs in its own process group, and the whole group is
killed when the time is up.
"""

from __future__ import annotations

import os
import signal
import subprocess


class ProbeTimeout(RuntimeError):
    """The snippet did not finish in time; the message names what it reads."""


def run(command: str, timeout: float, what: str) -> str:
    """stdout of ``sh -c command``; raises ProbeTimeout after ``timeout`` s."""
    proc = subprocess.Popen(["sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise ProbeTimeout(f"{what} did not answer within {timeout:g} s (killed)") from None
    return out
