"""The fleet report: JSON (everything), JUnit XML (a testcase per host), a
text table sorted by CCR, and an HTML chart of CCR per host."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from xml.etree import ElementTree as ET

from ccrhost.checks import FAIL, OK, UNKNOWN, WARN, Verdict, fleet_outliers, worst


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def apply_fleet_tolerance(verdicts: dict[str, Verdict], tolerance: float | None) -> None:
    if not tolerance:
        return
    for host, reason in fleet_outliers(verdicts, tolerance).items():
        verdict = verdicts[host]
        verdict.reasons.append(reason)
        verdict.status = worst([verdict.status, reason.level])


def text_table(verdicts: dict[str, Verdict]) -> str:
    rows = sorted(verdicts.items(), key=lambda kv: (kv[1].ccr.ccr if kv[1].ccr else -1.0, kv[0]))
    model = next((v.ccr.model for v in verdicts.values() if v.ccr), "bottleneck")
    lines = [f"CCR per host (B = {model} bandwidth, F = peak dense compute, CCR = B / (beta x F)):",
             f"{'host':24} {'status':8} {'CCR':>10} {'expected':>10} {'B Gb/s':>8} {'F TFLOPS':>9} {'beta':>8}  reasons"]
    for host, v in rows:
        c = v.ccr
        lines.append(
            f"{host:24} {v.status:8} {c.ccr if c else float('nan'):10.3e} "
            f"{v.expected_ccr if v.expected_ccr else float('nan'):10.3e} "
            f"{c.bandwidth_gbps if c else float('nan'):8.0f} {c.tflops if c else float('nan'):9.1f} "
            f"{c.beta if c else float('nan'):8.3g}  {v.summary()}"
        )
    bands = {v.ccr.band for v in verdicts.values() if v.ccr}
    if bands == {None}:
        lines.append("beta is the seed's literal 4 bytes/FLOP, so the 0.5/2 bands do not apply; "
                     "set verify_workload to classify hosts.")
    counts = {s: sum(v.status == s for v in verdicts.values()) for s in (OK, WARN, FAIL, UNKNOWN)}
    lines.append("  ".join(f"{s}: {n}" for s, n in counts.items()))
    return "\n".join(lines) + "\n"


def junit_xml(verdicts: dict[str, Verdict]) -> str:
    suite = ET.Element("testsuite", name="ccrhost.verify", tests=str(len(verdicts)),
                       failures=str(sum(v.status == FAIL for v in verdicts.values())),
                       skipped=str(sum(v.status == UNKNOWN for v in verdicts.values())))
    for host, v in sorted(verdicts.items()):
        case = ET.SubElement(suite, "testcase", classname="ccrhost.ccr", name=host)
        if v.status == FAIL:
            ET.SubElement(case, "failure", message=v.summary()).text = v.summary()
        elif v.status == UNKNOWN:
            ET.SubElement(case, "skipped", message=v.summary())
        elif v.status == WARN:
            ET.SubElement(case, "system-out").text = "WARN: " + v.summary()
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def html_chart(verdicts: dict[str, Verdict], addresses: dict[str, str] | None = None) -> str:
    """The page an operator opens first (see ``ccrhost.fleet.page``)."""
    from ccrhost.fleet.page import fleet_page

    return fleet_page(verdicts, addresses)


def write_reports(verdicts: dict[str, Verdict], directory: str | Path, meta: dict | None = None,
                  addresses: dict[str, str] | None = None) -> dict[str, Path]:
    """``addresses``: host name -> address, shown beside the name where they differ."""
    out = Path(directory)
    paths = {kind: out / f"ccr-report.{kind}" for kind in ("json", "xml", "txt", "html")}
    document = {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(meta or {}),
                "hosts": {h: v.to_dict() for h, v in sorted(verdicts.items())}}
    _atomic_write(paths["json"], json.dumps(document, indent=2, default=str) + "\n")
    _atomic_write(paths["xml"], junit_xml(verdicts))
    _atomic_write(paths["txt"], text_table(verdicts))
    _atomic_write(paths["html"], html_chart(verdicts, addresses))
    return paths


class FleetReport:
    """Collects each host's verdict during a run; written once at the end."""

    def __init__(self, directory: str, tolerance: float | None = None):
        self.directory = directory
        self.tolerance = tolerance
        self.verdicts: dict[str, Verdict] = {}
        self.addresses: dict[str, str] = {}

    def record(self, host: str, verdict: Verdict, address: str | None = None) -> None:
        self.verdicts[host] = verdict  # the execute-time verdict replaces the plan-time one
        if address:
            self.addresses[host] = address

    def finish(self, stream=None) -> dict[str, Path] | None:
        if not self.verdicts:
            return None
        apply_fleet_tolerance(self.verdicts, self.tolerance)
        paths = write_reports(self.verdicts, self.directory, addresses=self.addresses)
        if stream is not None:
            stream.write("\n" + text_table(self.verdicts))
            stream.write(f"Reports: {', '.join(str(p) for p in paths.values())}\n")
        return paths


_FLEET: FleetReport | None = None


def fleet_report(directory: str, tolerance: float | None = None) -> FleetReport:
    """The run's report, written and printed when the pyinfra process exits."""
    global _FLEET
    if _FLEET is None:
        import atexit
        import sys

        _FLEET = FleetReport(directory, tolerance)
        atexit.register(_FLEET.finish, sys.stdout)
    return _FLEET
