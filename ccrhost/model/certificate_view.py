"""A node's acceptance certificate as its check reads it back and the
reports show it (issue 50): information beside the verdict, never a reason
of it, so the node's status does not move with it.

The check keeps the file as stored (:class:`StoredCertificate`, one of the
readings, so a node's JSON carries it to ``slurm verify``) with the node's
versions and accept_stages at that moment; :func:`summary` says what it
amounts to then (model/certificate.py ``state``), :func:`cell` in a few
words for a table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ccrhost.model import certificate as cm
from ccrhost.model.status import FAIL, OK


@dataclass
class StoredCertificate:
    read_at: float                     # when the check read it back: every age is counted to here
    path: str                          # accept_certificate
    wanted: tuple[str, ...] = cm.STAGES  # accept_stages: what certified means for this node
    versions: dict = field(default_factory=dict)  # the node's versions as it read them (:func:`versions`)
    data: dict | None = None           # the certificate as stored (Certificate.to_dict); None: none stored
    error: str | None = None           # the file could not be read, or is not a certificate


def nic_firmware_text(fw: dict) -> str | None:
    """{device: fw_ver} as one version, or each version with its devices where
    they differ (the form ``ccrhost baseline results`` writes)."""
    by: dict[str, list[str]] = {}
    for device, version in fw.items():
        by.setdefault(str(version), []).append(str(device))
    if len(by) <= 1:
        return next(iter(by), None)
    return ", ".join(f"{v} ({', '.join(sorted(d))})" for v, d in sorted(by.items()))


def versions(readings, ccrhost_version: str | None = None) -> dict[str, str]:
    """The node's versions a certificate is issued under, from what its
    check read: ``driver`` (/proc/driver/nvidia/version, the data-path read),
    ``nic_firmware`` (the compute ports' NICs' fw_ver), ``nccl`` (libnccl.so.2,
    read where a baseline_* key asks for the host baseline), ``gpus`` (the
    GPUs' UUIDs, sorted: a GPU swapped in a repair is another GPU, whatever
    the node is called), ``nics`` (the compute NICs' node GUIDs, sorted,
    likewise) and ``ccrhost`` (this ccrhost's). A version not read
    is absent, never a guess: the certificate's ``holds`` compares only
    those known on both sides."""
    out: dict[str, str] = {}
    uuids = sorted(g.uuid for g in readings.gpus if g.uuid)
    if uuids:
        out["gpus"] = ",".join(uuids)
    dp = readings.datapath
    if dp is not None and dp.error is None:
        if dp.versions.nvidia:
            out["driver"] = dp.versions.nvidia
        compute = {p.device for p in readings.ports}
        fw = nic_firmware_text({d: v for d, v in dp.versions.nic_fw.items() if d in compute and v})
        if fw:
            out["nic_firmware"] = fw
        guids = sorted(g for d, g in dp.versions.nic_guid.items() if d in compute and g)
        if guids:
            out["nics"] = ",".join(guids)
    base = readings.baseline
    if base is not None and base.error is None and base.nccl:
        out["nccl"] = base.nccl
    if ccrhost_version is None:
        from ccrhost import __version__ as ccrhost_version
    out["ccrhost"] = ccrhost_version
    return out


def _codes(result: cm.StageResult) -> list[str]:
    """The stage's codes at its own level (all its non-OK ones where none is)."""
    reasons = [r for r in result.reasons if isinstance(r, dict) and isinstance(r.get("code"), str)]
    at_level = [r["code"] for r in reasons if r.get("level") == result.status]
    return list(dict.fromkeys(at_level or [r["code"] for r in reasons if r.get("level") != OK]))


def _stage(result: cm.StageResult) -> dict:
    return {"stage": result.stage, "title": cm.TITLES.get(result.stage, result.stage), "status": result.status,
            "at": result.at, "codes": _codes(result)}


def _expiry(cert: cm.Certificate, wanted, now: float, present: dict) -> dict | None:
    """The first wanted stage that passed and no longer holds: too old, or run under other versions."""
    for s in wanted:
        r = cert.stages.get(s)
        if r is None or r.status == cm.SKIPPED or cm.holds(r, now, cert.valid_for, present):
            continue
        changed = {k: [r.versions[k], v] for k, v in present.items()
                   if v is not None and r.versions.get(k) is not None and r.versions[k] != v}
        return {"stage": s, "title": cm.TITLES.get(s, s), "at": r.at, "age_s": now - r.at,
                "versions_changed": changed}
    return None


def summary(stored: StoredCertificate) -> dict:
    """What the certificate amounts to when the check read it: ``state``
    (model/certificate.py: certified, failed, incomplete, expired; None where
    the file could not be read), ``issued_at``, ``age_s`` (since it was
    issued, else since its last stage), ``valid_until`` and ``valid_for_s``
    (a certified one: its oldest stage's time plus valid_for), the first
    failed or unknown stage with its codes, the stage that expired it, and
    each wanted stage's status (None: not run)."""
    out = {"path": stored.path, "stored": stored.data is not None, "error": stored.error, "state": None,
           "issued_at": None, "updated_at": None, "age_s": None, "valid_until": None, "valid_for_s": None,
           "failed_stage": None, "expired_stage": None, "pending": [], "stages": {}}
    if stored.error is not None:
        return out
    cert = None
    if stored.data is not None:
        try:
            cert = cm.Certificate.from_dict(stored.data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return {**out, "stored": True, "error": f"{stored.path}: not a certificate: {exc}"}
    now, wanted = stored.read_at, tuple(stored.wanted)
    out["state"] = cm.state(cert, wanted, now, stored.versions)
    if cert is None:
        return out
    times = [r.at for r in cert.stages.values()]
    out["issued_at"], out["updated_at"] = cert.issued_at, max(times, default=None)
    since = cert.issued_at if cert.issued_at is not None else out["updated_at"]
    out["age_s"] = None if since is None else now - since
    out["stages"] = {s: cert.stages[s].status if s in cert.stages else None for s in wanted}
    out["pending"] = [s for s in wanted if s not in cert.stages]
    if out["state"] == cm.CERTIFIED:
        ran = [cert.stages[s].at for s in wanted if cert.stages[s].status != cm.SKIPPED]
        if ran:
            out["valid_until"] = min(ran) + cert.valid_for
            out["valid_for_s"] = out["valid_until"] - now
    elif out["state"] == cm.FAILED:
        first = next(cert.stages[s] for s in wanted if s in cert.stages and cert.stages[s].status == FAIL)
        out["failed_stage"] = _stage(first)
    elif out["state"] == cm.INCOMPLETE:
        first = cm.first_failure(cert, wanted)
        out["failed_stage"] = _stage(first) if first is not None else None
    elif out["state"] == cm.EXPIRED:
        out["expired_stage"] = _expiry(cert, wanted, now, stored.versions)
    return out


def span(seconds: float) -> str:
    """``45 s``, ``12 min``, ``2 h``, ``29 d``: whole units, rounded down."""
    s = max(0.0, seconds)
    for unit, size, below in (("s", 1, 120), ("min", 60, 7200), ("h", 3600, 2 * 86400)):
        if s < below:
            return f"{int(s // size)} {unit}"
    return f"{int(s // 86400)} d"


def cell(doc: dict | None) -> str:
    """A :func:`summary` in a few words: ``certified 2 h ago, valid 29 d``,
    ``failed S2 connectivity mesh: rdma_mesh_pruned``, ``incomplete S3 pair
    bandwidth: not run`` (or its codes where it was unknown), ``expired S1 node-local: 31 d old``, ``none``
    (none stored), ``unreadable``; ``-`` where the check did not read it."""
    if doc is None:
        return "-"
    if doc["error"] is not None:
        return "unreadable"
    if not doc["stored"]:
        return "none"
    state = doc["state"]
    if state == cm.CERTIFIED:
        age = f" {span(doc['age_s'])} ago" if doc["age_s"] is not None else ""
        left = f", valid {span(doc['valid_for_s'])}" if doc["valid_for_s"] is not None else ""
        return f"certified{age}{left}"
    failed = doc["failed_stage"]
    if failed is not None:
        codes = f": {','.join(failed['codes'])}" if failed["codes"] else ""
        if state == cm.FAILED:
            return f"failed {failed['title']}{codes}"
        return f"incomplete {failed['title']}{codes or ': ' + cm.status_word(failed['status'])}"
    if state == cm.INCOMPLETE:
        first = doc["pending"][0] if doc["pending"] else None
        return f"incomplete {cm.TITLES.get(first, first)}: not run" if first else "incomplete"
    expired = doc["expired_stage"]
    if state == cm.EXPIRED and expired is not None:
        changed = "; ".join(_change(k, a, b) for k, (a, b) in sorted(expired["versions_changed"].items()))
        if not changed and expired["age_s"] < 0:  # a clock set back: the stage's time is still to come
            return f"expired {expired['title']}: its time is {span(-expired['age_s'])} ahead of the node's clock"
        return f"expired {expired['title']}: {changed or span(expired['age_s']) + ' old'}"
    return str(state)


def _change(key: str, was: str, now: str) -> str:
    if key in ("gpus", "nics"):  # name only the GPUs or NICs that left and came, not every one of the node
        gone, came = set(was.split(",")) - set(now.split(",")), set(now.split(",")) - set(was.split(","))
        return f"{key} {','.join(sorted(gone)) or 'none'} -> {','.join(sorted(came)) or 'none'}"
    return f"{key} {was} -> {now}"


def cells(verdicts: dict) -> dict[str, str]:
    """Each host's certificate in a few words (:func:`cell`), for the fleet's text table and page; none at
    all where no host's check read one (a deploy's report, an older ccrhost on the nodes)."""
    if all(v.readings.certificate is None for v in verdicts.values()):
        return {}
    return {h: cell(summary(v.readings.certificate) if v.readings.certificate is not None else None)
            for h, v in verdicts.items()}


STATES = (cm.CERTIFIED, cm.FAILED, cm.INCOMPLETE, cm.EXPIRED)
