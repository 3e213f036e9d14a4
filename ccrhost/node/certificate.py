"""The acceptance certificate on the node (accept_certificate; issue 50):
read back by every check and shown beside its verdict, written whole by a
Slurm job step of ``ccrhost slurm accept`` (:func:`store_script`), and
exported to Prometheus with the check's other metrics (:func:`metrics`).

The file is the record of model/certificate.py as JSON. A missing file is
no certificate; one that cannot be read or is not a certificate is said
so (an error string), never a crash and never a state.
"""

from __future__ import annotations

import json
import math
import time

from ccrhost.model.certificate import PASSED, SKIPPED, STAGES, Certificate
from ccrhost.model.certificate_view import STATES, StoredCertificate, summary
from ccrhost.model.certificate_view import versions as versions  # the runner's too: what a stage ran under
from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN

MAX_BYTES = 1 << 22  # a certificate is kilobytes; more is not one (and is not read whole)
_STATUSES = (OK, WARN, FAIL, UNKNOWN, SKIPPED)


def _problem(cert: Certificate) -> str | None:
    """What makes a parsed record no certificate: a stage of another name, a status no verdict has, a time
    that is no number."""
    for key, r in cert.stages.items():
        if key not in STAGES or r.stage != key:
            return f"stage {key!r} is not one of {', '.join(STAGES)} (or names another)"
        if r.status not in _STATUSES:
            return f"stage {key}: status {r.status!r} is not one of {', '.join(_STATUSES)}"
        if not math.isfinite(r.at):
            return f"stage {key}: its time {r.at!r} is not a number"
    if not math.isfinite(cert.valid_for) or (cert.issued_at is not None and not math.isfinite(cert.issued_at)):
        return "valid_for or issued_at is not a number"
    return None


def read(path: str) -> Certificate | str | None:
    """The node's certificate; None when none is stored; why, as one line, when the file cannot be read or
    is not a certificate."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path}: cannot be read: {exc.strerror or exc}"
    return parse(raw, path)


def parse(raw: bytes, path: str) -> Certificate | str:
    """The certificate in ``raw`` (the file's bytes, however read: here, or by a deploy's fact); why, as one
    line, where it is none."""
    if len(raw) > MAX_BYTES:
        return f"{path}: over {MAX_BYTES >> 20} MiB: not a certificate"
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return f"{path}: not JSON: {exc}"
    if not isinstance(doc, dict):
        return f"{path}: not a certificate (a JSON {type(doc).__name__})"
    try:
        cert = Certificate.from_dict(doc)
    except KeyError as exc:
        return f"{path}: not a certificate: no {exc}"
    except (TypeError, ValueError, AttributeError) as exc:
        return f"{path}: not a certificate: {exc}"
    problem = _problem(cert)
    return f"{path}: not a certificate: {problem}" if problem else cert


def stored_reading(path: str, wanted: tuple[str, ...], present: dict, clock=time.time) -> StoredCertificate:
    """What the check keeps among its readings: the certificate as stored (normalised), or why it could not
    be read, with the node's accept_stages and versions (:func:`versions`) and the time it was read."""
    return stored_from(read(path), path, wanted, present, clock())


def stored_from(got: Certificate | str | None, path: str, wanted: tuple[str, ...], present: dict,
                now: float) -> StoredCertificate:
    """:func:`stored_reading` from what :func:`read` or :func:`parse` gave."""
    if isinstance(got, str):
        return StoredCertificate(now, path, tuple(wanted), dict(present), error=got)
    return StoredCertificate(now, path, tuple(wanted), dict(present), None if got is None else got.to_dict())


def document(cert: Certificate) -> str:
    return json.dumps(cert.to_dict(), indent=1, sort_keys=True, allow_nan=False) + "\n"


def store_script(path: str, cert: Certificate) -> str:
    """A /bin/sh command a job step runs on the node to store ``cert`` at
    ``path`` (accept_certificate) whole: the JSON travels base64 in the
    command, goes to a new temporary name beside the file (mktemp: O_EXCL),
    0644, and is renamed over it (``mv -T``: never into a folder the path
    names), so a check never reads half. Exits non-zero, leaving the old
    file, when it cannot. One compound command: it can be joined to others."""
    import base64
    import os
    import shlex

    if not os.path.isabs(path):
        raise ValueError(f"the certificate's path must be absolute: {path!r}")
    data = base64.b64encode(document(cert).encode()).decode()
    folder, name = os.path.split(os.path.normpath(path))
    d, q = shlex.quote(folder or "/"), shlex.quote(os.path.normpath(path))
    return (f"{{ mkdir -p {d} && t=$(mktemp {d}/{shlex.quote('.' + name)}.XXXXXXXX) && "
            f"{{ printf '%s' {data} | base64 -d > \"$t\" && chmod 644 \"$t\" && mv -fT \"$t\" {q} "
            f"|| {{ rm -f \"$t\"; false; }}; }}; }}")


def metrics(stored: StoredCertificate | None) -> list[str]:
    """The Prometheus lines (``ccrhost check --format prometheus``): the state
    (1 for the node's, 0 for the others; all 0 where the file could not be
    read), its age (absent without a certificate) and each wanted stage
    passed or not (absent without a certificate). None where the check did
    not read it."""
    if stored is None:
        return []
    doc = summary(stored)
    out = ["# HELP ccrhost_certificate_state The node's acceptance certificate (1: its state; every state 0 "
           "when the file cannot be read).",
           "# TYPE ccrhost_certificate_state gauge"]
    out += [f'ccrhost_certificate_state{{state="{s}"}} {int(s == doc["state"])}' for s in STATES]
    if doc["age_s"] is not None:
        out += ["# HELP ccrhost_certificate_age_seconds Seconds since the certificate was issued (not issued: "
                "since its last stage).",
                "# TYPE ccrhost_certificate_age_seconds gauge", f"ccrhost_certificate_age_seconds {doc['age_s']:.0f}"]
    if doc["error"] is None and doc["stored"]:
        out += ["# HELP ccrhost_certificate_stage_passed 1 when the stage's last result passed (OK, WARN or "
                "skipped), 0 when it failed, was unknown or never ran.",
                "# TYPE ccrhost_certificate_stage_passed gauge"]
        out += [f'ccrhost_certificate_stage_passed{{stage="{s}"}} {int(status in (*PASSED, SKIPPED))}'
                for s, status in doc["stages"].items()]
    return out
