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

Bounded in time: the ``nvidia-smi -q`` of the failing GPUs run at once,
each under ``SMI_TIMEOUT``, all within ``SMI_BUDGET`` (one stuck in the
driver is left behind, its file says so); and never in a Slurm prolog,
whose job waits for it: the health check after it collects the bundle of
the failure the prolog found (the history's open episode has none yet).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from ccrhost.model.history import opened_now
from ccrhost.model.status import FAIL
from ccrhost.output import write_state

MAX_FILE = 1 << 20      # bytes per file of a bundle
UNTIMED_GAP = 3600      # without a history: at most one bundle an hour
SMI_TIMEOUT = 20        # s, one nvidia-smi -q (a healthy one answers in about 1 s per GPU)
SMI_BUDGET = 30         # s, all of them together: the check never waits longer for its evidence
_NAME = "%Y%m%dT%H%M%SZ"


def bundles(folder: str) -> list[Path]:
    """The bundles in ``folder``, oldest first (only names this module gives)."""
    try:
        entries = sorted(p for p in Path(folder).iterdir() if p.is_dir() and not p.is_symlink() and _stamp(p.name))
    except OSError:
        return []
    return entries


def _until(folder: str, now: float) -> list[Path]:
    """The bundles stamped no later than ``now``, oldest first: one stamped
    while the clock ran ahead is no newer failure's."""
    return [b for b in bundles(folder) if (_stamp(b.name) or 0) <= now]


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
    if history is not None:  # the open failure, until a bundle of it is kept (a prolog keeps none)
        if not history.failing or not history.episodes:
            return False
        started = int(history.episodes[-1].time)
        return opened_now(history) or not any((_stamp(b.name) or 0) >= started for b in _until(folder, now))
    newest = _until(folder, now)[-1:]
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


def _smi_queries(indexes: list[int], timeout: float, budget: float) -> dict[int, str]:
    """``nvidia-smi -q -i N`` of each GPU, all at once, each within
    ``timeout``: what each printed, or why it is missing once ``budget``
    ran out (a query stuck in the driver outlives its kill: its thread is
    a daemon, left behind, and the check goes on)."""
    out: dict[int, str] = {}

    def query(index: int) -> None:
        out[index] = _run(["nvidia-smi", "-q", "-i", str(index)], timeout)

    threads = [threading.Thread(target=query, args=(i,), daemon=True) for i in indexes]
    for t in threads:
        t.start()
    deadline = time.monotonic() + budget
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return {i: out.get(i, f"nvidia-smi -q -i {i}: not collected: no answer within the evidence's {budget:g} s\n")
            for i in indexes}


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
    indexes = sorted({r.gpu for r in verdict.reasons if r.gpu is not None and r.level == FAIL})
    for index, text in _smi_queries(indexes, min(timeout, SMI_TIMEOUT), SMI_BUDGET).items():
        write_state(bundle / f"nvidia-smi-q-gpu{index}.txt", _cut(text))
    script = shutil.which("nvidia-bug-report.sh") if bug_report else None
    if script:  # minutes on a real node: only where the operator turned it on
        _run([script, "--output-file", str(bundle / "nvidia-bug-report.log")], 600)
    return bundle


def prune(folder: str, now: float, max_age_s: float, keep: int) -> list[Path]:
    """Remove bundles older than ``max_age_s``, those stamped after ``now``
    (the clock ran ahead when they were kept: their age cannot be told) and
    all but the newest ``keep``."""
    found = bundles(folder)
    old = [b for b in found if not 0 <= now - (_stamp(b.name) or 0) <= max_age_s]
    extra = [b for b in found if b not in old][:max(0, len(found) - len(old) - keep)]
    for b in old + extra:
        shutil.rmtree(b, ignore_errors=True)
    return old + extra


def keep_evidence(settings, verdict, now: float | None = None) -> str | None:
    """After a check: collect when due, prune, and name the newest bundle
    on a FAIL verdict (None when there is none, evidence is off, or this is
    a Slurm prolog: the next health check collects it)."""
    folder = getattr(settings, "verify_evidence_dir", None)
    if not folder or os.environ.get("SLURM_SCRIPT_CONTEXT") == "prolog_slurmd":  # a job waits on a prolog
        return None
    now = time.time() if now is None else now
    try:
        if due(folder, verdict, now):
            collect(folder, verdict, now, getattr(settings, "verify_evidence_bug_report", False))
        prune(folder, now, getattr(settings, "verify_evidence_max_age_days", 7) * 86400,
              getattr(settings, "verify_evidence_keep", 10))
    except OSError:
        return None
    newest = _until(folder, now)[-1:]
    return str(newest[0]) if newest and verdict.status == FAIL else None
