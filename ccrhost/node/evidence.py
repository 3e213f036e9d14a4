"""Evidence at the moment of failure: a bounded bundle of what the node
looked like when its check failed, for the person who picks up the drain.

A bundle is a folder named by the UTC time of the failing check under
``verify_evidence_dir``: ``verdict.json`` (ccrhost's readings and verdict),
``kernel-log.txt`` (the XID lines the verdict judged), ``nvidia-smi-q-gpuN.txt``
for each GPU a FAIL reason names, and ``nvidia-bug-report.log.gz`` when
``verify_evidence_bug_report`` is on and the script is installed. Each file
is cut at ``MAX_FILE`` bytes; bundles older than ``verify_evidence_max_age_days``
and beyond the newest ``verify_evidence_keep`` are removed. One bundle per
failure: a new one when a failure starts (the history says so), or, without
a history, when the newest is over an hour old.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from ccrhost.model.status import FAIL
from ccrhost.output import write_state

MAX_FILE = 1 << 20      # bytes per file of a bundle
UNTIMED_GAP = 3600      # without a history: at most one bundle an hour
_NAME = "%Y%m%dT%H%M%SZ"


def bundles(folder: str) -> list[Path]:
    """The bundles in ``folder``, oldest first (only names this module gives)."""
    try:
        entries = sorted(p for p in Path(folder).iterdir() if p.is_dir() and not p.is_symlink() and _stamp(p.name))
    except OSError:
        return []
    return entries


def is_bundle_name(name: str) -> bool:
    """Whether ``name`` is one this module gives a bundle (its UTC time)."""
    return len(name) == 16 and _stamp(name) is not None


def _stamp(name: str) -> float | None:
    import calendar

    try:
        return calendar.timegm(time.strptime(name, _NAME))
    except ValueError:
        return None


def due(folder: str, verdict, now: float) -> bool:
    """Whether this verdict starts a failure that has no bundle yet."""
    if verdict.status != FAIL:
        return False
    history = verdict.readings.history
    if history is not None:
        episodes = history.episodes
        return bool(episodes) and episodes[-1].time == history.now  # this check opened it
    newest = bundles(folder)[-1:]
    return not newest or now - (_stamp(newest[0].name) or 0) >= UNTIMED_GAP


def _cut(text: str) -> str:
    data = text.encode()
    return text if len(data) <= MAX_FILE else data[:MAX_FILE].decode(errors="ignore") + "\n[cut at 1 MiB]\n"


def _run(args: list[str], timeout: float) -> str:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(args)}: {exc}\n"
    return out.stdout + (f"\n[stderr]\n{out.stderr}" if out.stderr.strip() else "") + \
        (f"\n[exit {out.returncode}]\n" if out.returncode else "")


def collect(folder: str, verdict, now: float, bug_report: bool = False, timeout: float = 20) -> Path:
    """Write this verdict's bundle; returns its folder."""
    bundle = Path(folder) / time.strftime(_NAME, time.gmtime(now))
    bundle.mkdir(parents=True, exist_ok=True, mode=0o700)
    # the folder may sit under /tmp: never write through a link or into a folder someone else made
    if bundle.is_symlink() or bundle.lstat().st_uid != os.geteuid():
        raise OSError(f"{bundle} is a link or not ccrhost's own: no bundle kept")
    write_state(bundle / "verdict.json", _cut(json.dumps(verdict.to_dict(), indent=1, default=str)) + "\n")
    health = verdict.readings.gpu_health
    lines = [f"Xid {x.code} (PCI:{x.pci}) {'%.0f s ago' % x.age_s if x.age_s is not None else 'since boot'}: "
             f"{x.text.strip()}" for x in (health.xids if health else [])]
    write_state(bundle / "kernel-log.txt", _cut("".join(line + "\n" for line in lines) or "no XID lines\n"))
    for index in sorted({r.gpu for r in verdict.reasons if r.gpu is not None and r.level == FAIL}):
        write_state(bundle / f"nvidia-smi-q-gpu{index}.txt", _cut(_run(["nvidia-smi", "-q", "-i", str(index)],
                                                                         timeout)))
    script = shutil.which("nvidia-bug-report.sh") if bug_report else None
    if script:  # minutes on a real node: only where the operator turned it on
        _run([script, "--output-file", str(bundle / "nvidia-bug-report.log")], 600)
    return bundle


def prune(folder: str, now: float, max_age_s: float, keep: int) -> list[Path]:
    """Remove bundles older than ``max_age_s`` and all but the newest ``keep``."""
    found = bundles(folder)
    old = [b for b in found if now - (_stamp(b.name) or 0) > max_age_s]
    extra = [b for b in found if b not in old][:max(0, len(found) - len(old) - keep)]
    for b in old + extra:
        shutil.rmtree(b, ignore_errors=True)
    return old + extra


def keep_evidence(settings, verdict, now: float | None = None) -> str | None:
    """After a check: collect when due, prune, and name the newest bundle
    on a FAIL verdict (None when there is none or evidence is off)."""
    folder = getattr(settings, "verify_evidence_dir", None)
    if not folder:
        return None
    now = time.time() if now is None else now
    try:
        if due(folder, verdict, now):
            collect(folder, verdict, now, getattr(settings, "verify_evidence_bug_report", False))
        prune(folder, now, getattr(settings, "verify_evidence_max_age_days", 7) * 86400,
              getattr(settings, "verify_evidence_keep", 10))
    except OSError:
        return None
    newest = bundles(folder)[-1:]
    return str(newest[0]) if newest and verdict.status == FAIL else None
