"""The node's failure history on disk (``verify_history``): read before the
check judges, the verdict recorded in it after (model/history.py judges
and records), one check at a time.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ccrhost.model.status import FAIL
from ccrhost.model.verdict import Verdict, gpu_serials
from ccrhost.output import write_state


class locked:
    """An exclusive flock on ``<path>.lock`` while the block runs; a lock
    that cannot be had (a read-only folder, a link planted at its name: it
    is never followed, whatever fs.protected_symlinks says) is no lock, and
    the history's own write says why."""

    def __init__(self, path: str):
        self.path, self.fd = path + ".lock", None

    def __enter__(self):
        import fcntl

        try:
            os.makedirs(os.path.dirname(self.path) or "/", exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError:
            self.fd = None
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)


def read_history(path: str, now: float | None = None, boot: str | None = None):
    """The stored history (``verify_history``); none yet, or one that is not
    ours, starts afresh, saying why in its ``error``. ``boot``: this boot's
    id (an episode another boot left open is closed: model.history.after_boot)."""
    from ccrhost.model.history import History, after_boot, from_dict

    now = time.time() if now is None else now
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return History(now=now, boot=boot)
    except OSError as exc:
        return History(now=now, error=f"cannot read {path}: {exc.strerror or exc}", boot=boot)
    try:
        history = from_dict(json.loads(text))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return History(now=now, error=f"{path} is not a ccrhost failure history ({exc}): started afresh", boot=boot)
    history.now = now
    return after_boot(history, boot)


def keep_history(path: str, verdict: Verdict, policy, read_nic_serials=None) -> None:
    """Write the history this verdict makes (model.history.record), through
    the state writer; a history that cannot be written is said, never fatal.
    ``read_nic_serials``: names -> {name: serial} (probes.vpd.nic_serials),
    asked only when a failure starts with a FAIL reason that names a NIC."""
    from ccrhost.model.history import failing_nics, record
    from ccrhost.model.plain import plain

    before = verdict.readings.history
    nics = failing_nics(verdict.reasons) if verdict.status == FAIL and not before.failing else []
    if nics and read_nic_serials is None:
        from ccrhost.probes.vpd import nic_serials as read_nic_serials
    serials = read_nic_serials(nics) if nics else {}
    after = record(before, verdict.status, verdict.reasons, verdict.action, gpu_serials(verdict.readings), policy,
                   serials)
    data = plain(after)
    data.pop("now", None), data.pop("error", None)
    after.error = before.error
    verdict.readings.history = after  # the JSON carries it, this failure included: the fleet finds lemons in it
    try:
        os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
        write_state(path, json.dumps(data, sort_keys=True) + "\n")  # a root write: never through a planted link
    except OSError as exc:
        after.error = f"cannot keep the failure history in {path}: {exc.strerror or exc}"
