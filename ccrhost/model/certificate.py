"""A node's acceptance certificate (issue 50): each stage's verdict, figures
and time, and the versions it ran under. Pure: the runner
(ccrhost.fleet.accept) fills it; the node keeps it (accept_certificate),
``slurm verify``, the Prometheus textfile and ``remediate`` read it.

A stage's status is the one verdict's (model/verdict.py) for the node as
that stage left it, never re-derived here. A node is certified when every
stage its settings ask for passed (OK or WARN) within ``valid_for`` and
under the versions it now runs; a second run re-runs only the stages that
are not so (resumable), and ``remediate`` re-runs the stages a failure's
codes concern (:func:`stages_for`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ccrhost.model.plain import plain
from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN

# S0..S5, in the order they run (settings/accept.py takes its list from here)
STAGES = ("check", "node", "mesh", "pairs", "scale", "soak")
TITLES = {"check": "S0 passive check", "node": "S1 node-local", "mesh": "S2 connectivity mesh",
          "pairs": "S3 pair bandwidth", "scale": "S4 scale", "soak": "S5 soak"}
# seconds a stage may take on the whole run (accept_budgets overrides)
BUDGETS = {"check": 900, "node": 4 * 3600, "mesh": 3600, "pairs": 3600, "scale": 3600, "soak": 4 * 3600}
FLEET_STAGES = ("mesh", "pairs", "scale")  # a node's result depends on its peers': run with every live node
SKIPPED = "SKIPPED"   # a stage the node's settings leave out
PASSED = (OK, WARN)
# the versions a passed stage must still match (model/certificate_view.versions' keys), the GPUs' UUIDs
# and the NICs' GUIDs among them: ccrhost's own is recorded, not compared, so upgrading ccrhost does not
# expire every node's certificate
COMPARED = ("driver", "nic_firmware", "nccl", "gpus", "nics")

CERTIFIED, FAILED, INCOMPLETE, EXPIRED = "certified", "failed", "incomplete", "expired"

# The stages a failure concerns, by the catalogue file of its code (model/reasons.SOURCES): a repaired node
# re-runs these (and the passive check) before it returns. A code of a file not here concerns every stage.
STAGES_OF_FILE = {
    "gpu.yaml": ("node", "soak"), "gpu_health.yaml": ("node", "soak"), "dcgm.yaml": ("node",),
    "nvbandwidth.yaml": ("node",), "acceptance.yaml": ("node", "scale", "soak"), "allreduce.yaml": ("node", "scale"),
    "connectivity.yaml": ("mesh",), "ports.yaml": ("mesh", "pairs"), "links.yaml": ("mesh", "pairs"),
    "fabric.yaml": ("mesh", "pairs", "soak"), "wiring.yaml": ("mesh", "pairs"), "ccr.yaml": ("pairs",),
    "nicfw.yaml": ("mesh", "pairs"), "datapath.yaml": ("node", "pairs"), "versions.yaml": ("node", "scale"),
    "host_health.yaml": ("soak",), "history.yaml": ("soak",), "imex.yaml": ("node", "scale"),
    "baseline.yaml": ("check",), "check.yaml": ("check",),
}


@dataclass(frozen=True)
class StageResult:
    stage: str
    status: str                  # the node's verdict after the stage (OK, WARN, FAIL, UNKNOWN) or SKIPPED
    at: float                    # when the stage ended for the node, seconds since the epoch
    seconds: float = 0.0         # how long the stage ran (the whole stage, all its nodes)
    reasons: tuple = ()          # ({level, code, message}, ...) the stage's own findings
    figures: dict = field(default_factory=dict)   # what it measured: {"gemm_tflops": ..., "busbw_gbs": ...}
    versions: dict = field(default_factory=dict)  # what it ran under (driver, firmware, ccrhost)
    run: str = ""                # the accept run it belongs to

    @property
    def passed(self) -> bool:
        return self.status in PASSED or self.status == SKIPPED

    @classmethod
    def from_dict(cls, d: dict) -> StageResult:
        return cls(d["stage"], d["status"], float(d["at"]), float(d.get("seconds", 0)),
                   tuple(d.get("reasons") or ()), dict(d.get("figures") or {}), dict(d.get("versions") or {}),
                   str(d.get("run", "")))


@dataclass(frozen=True)
class Certificate:
    node: str
    stages: dict = field(default_factory=dict)   # stage -> StageResult
    versions: dict = field(default_factory=dict)  # the node's versions at its last stage
    valid_for: float = 30 * 86400
    issued_at: float | None = None  # when the last stage passed with every other one still holding; None: not so

    def to_dict(self) -> dict:
        return plain(self)

    @classmethod
    def from_dict(cls, d: dict) -> Certificate:
        return cls(str(d["node"]), {k: StageResult.from_dict(v) for k, v in (d.get("stages") or {}).items()},
                   dict(d.get("versions") or {}), float(d.get("valid_for", 30 * 86400)),
                   None if d.get("issued_at") is None else float(d["issued_at"]))


def holds(result: StageResult | None, now: float, valid_for: float, versions: dict) -> bool:
    """A passed stage within ``valid_for`` that ran under the node's present versions (those known on both)."""
    # a stage skipped (the node's settings left it out then) proves nothing once it is wanted
    if result is None or result.status not in PASSED or not 0 <= now - result.at <= valid_for:
        return False
    return all(result.versions.get(k) == versions[k] for k in COMPARED
               if versions.get(k) is not None and result.versions.get(k) is not None)


def to_run(cert: Certificate | None, wanted: tuple[str, ...], now: float, versions: dict,
           again: tuple[str, ...] = (), valid_for: float | None = None) -> tuple[str, ...]:
    """The stages of ``wanted`` to run, in order: every one not holding, and
    those of ``again`` (a repair's). The passive check always runs: its
    readings and settings are what every later stage works from.
    ``valid_for``: the node's setting now (a shortened one applies at once);
    else the certificate's."""
    out = []
    for stage in STAGES:
        if stage not in wanted:
            continue
        old = cert.stages.get(stage) if cert else None
        limit = valid_for if valid_for is not None else (cert.valid_for if cert else 0)
        if stage == "check" or stage in again or not holds(old, now, limit, versions):
            out.append(stage)
    return tuple(out)


def state(cert: Certificate | None, wanted: tuple[str, ...], now: float, versions: dict | None = None) -> str:
    """certified, failed (a stage's last result FAIL), expired (every stage passed, one no longer holds) or
    incomplete (a stage never ran, or UNKNOWN)."""
    if cert is None:
        return INCOMPLETE
    results = [cert.stages.get(s) for s in wanted]
    if any(r is not None and r.status == FAIL for r in results):
        return FAILED
    if any(r is None or r.status not in PASSED for r in results):
        return INCOMPLETE
    if not all(holds(r, now, cert.valid_for, versions or {}) for r in results):
        return EXPIRED
    return CERTIFIED


def record(cert: Certificate | None, node: str, result: StageResult, valid_for: float, versions: dict,
           wanted: tuple[str, ...]) -> Certificate:
    """``cert`` with ``result`` in its place: issued when this completes every wanted stage."""
    cert = cert or Certificate(node, valid_for=valid_for)
    cert = replace(cert, stages={**cert.stages, result.stage: result}, versions=dict(versions), valid_for=valid_for,
                   issued_at=None)
    if state(cert, wanted, result.at, versions) == CERTIFIED:
        cert = replace(cert, issued_at=result.at)
    return cert


def stages_for(codes, sources: dict[str, str]) -> tuple[str, ...]:
    """The stages a failure with ``codes`` concerns (``sources``: each code's catalogue file,
    model/reasons.SOURCES), in order; a code unknown to the map concerns them all."""
    wanted: set[str] = set()
    for code in codes:
        wanted.update(STAGES_OF_FILE.get(sources.get(code, ""), STAGES))
    return tuple(s for s in STAGES if s in wanted)


def first_failure(cert: Certificate, wanted: tuple[str, ...]) -> StageResult | None:
    """The first wanted stage that did not pass (FAIL or UNKNOWN), if any."""
    return next((cert.stages[s] for s in wanted if s in cert.stages and not cert.stages[s].passed), None)


def status_word(status: str) -> str:
    return {OK: "passed", WARN: "passed", FAIL: "failed", UNKNOWN: "unknown", SKIPPED: "skipped"}.get(status, status)
