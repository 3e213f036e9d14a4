"""The fleet report: JSON (everything, with each host's GPU x NIC topology
matrix), JUnit XML (a testcase per host), a text table sorted by CCR, and
an HTML chart of CCR per host. Every host of the inventory is in each, the
ones the verification never judged too. Firmware and driver versions are
compared across the fleet here, once every host's verdict is in."""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import time
from pathlib import Path
from typing import Callable
from xml.etree import ElementTree as ET

from ccrhost import failures
from ccrhost.model import mfu as mfumod
from ccrhost.model.certificate_view import cells
from ccrhost.model.status import FAIL, OK, UNKNOWN, WARN
from ccrhost.model.verdict import Verdict, apply_fleet_rules, host_versions, scope_detail, scope_text, unjudged
from ccrhost.model.verdict_line import cut
from ccrhost.output import write_atomic


def fleet_versions(verdicts: dict[str, Verdict]) -> dict:
    """How many hosts (NICs, for firmware) run each version."""
    out: dict[str, dict[str, int]] = {"nic_fw": {}, "mlx5": {}, "nvidia": {}}
    for v in host_versions(verdicts).values():
        for fw in v.nic_fw.values():
            out["nic_fw"][fw] = out["nic_fw"].get(fw, 0) + 1
        for key in ("mlx5", "nvidia"):
            if getattr(v, key):
                out[key][getattr(v, key)] = out[key].get(getattr(v, key), 0) + 1
    return out


CERT_WIDTH = 60  # the text table's certificate cell at most (a version change names both versions)


def text_table(verdicts: dict[str, Verdict]) -> str:
    rows = sorted(verdicts.items(), key=lambda kv: (kv[1].ccr.ccr if kv[1].ccr else -1.0, kv[0]))
    model = next((v.ccr.model for v in verdicts.values() if v.ccr), "bottleneck")
    # a column only where the nodes' checks read their certificates; the JSON and the page carry it whole
    certs = {h: cut(c, CERT_WIDTH) for h, c in cells(verdicts).items()}
    width = max((len(c) for c in certs.values()), default=0)
    cert_head = f"{'certificate':{width}}  " if certs else ""
    lines = [f"CCR per host (B = {model} bandwidth, F = peak dense compute, CCR = B / (beta x F); measured: "
             "B from the two-node all-reduce):",
             f"{'host':24} {'status':8} {'CCR':>10} {'band':17} {'MFU':>8} {'expected':>10} {'B Gb/s':>8} "
             f"{'F TFLOPS':>9} {'beta':>8} {'measured':>10}  {cert_head}reasons"]
    for host, v in rows:
        c = v.ccr
        w = c.workload if c else None
        # a node's JSON from a ccrhost before issue 45 has no mfu_kind: not claimed a prediction
        mfu = mfumod.cell(w["mfu_end_to_end"]["causal"], w.get("mfu_kind", mfumod.CEILING)) if w else "-"
        lines.append(
            f"{host:24} {v.status:8} {_cell(c and c.ccr, '10.3e')} {(c.band if c else None) or '-':17} "
            f"{mfu:>8} {_cell(v.expected_ccr or None, '10.3e')} "
            f"{_cell(c and c.bandwidth_gbps, '8.0f')} {_cell(c and c.tflops, '9.1f')} "
            f"{_cell(c and c.beta, '8.3g')} {_cell(v.measured_ccr and v.measured_ccr.ccr, '10.3e')}  "
            f"{f'{certs[host]:{width}}  ' if certs else ''}{v.summary()}"
        )
    models = [(host, v.ccr.workload) for host, v in rows if v.ccr and v.ccr.workload]
    statements: dict[str, list[str]] = {}  # each host's own (its GPUs and bandwidth enter it); alike ones once
    for host, model in models:
        statements.setdefault(model["statement"], []).append(host)
    for statement, hosts in statements.items():
        who = hosts[0] if len(hosts) == 1 else f"{len(hosts)} hosts ({', '.join(hosts[:3])}{', ...' if len(hosts) > 3 else ''})"
        lines.append(f"{who}: workload model: {statement}")
    if models:
        lines.append("workload model assumptions: " + "; ".join(models[0][1]["assumptions"]))
        lines.append("MFU: the end-to-end model FLOPs utilisation the workload model gives each host (model "
                     "FLOPs / step time / peak F, attention counted causal, 6 x layers x seq_len x attention width "
                     "per token; counted full, 12 x ..., as PaLM and Megatron-LM publish, it is in the JSON): a "
                     "prediction where the kernel share is calibrated (a preset's source, kernel_share or mfu "
                     "given); '<=' marks a ceiling (kernels at peak), not a prediction")
    bands = {v.ccr.band for v in verdicts.values() if v.ccr}
    if bands == {None}:
        lines.append("beta is the CCR guide's literal 4 bytes/FLOP, so the 0.5/2 bands do not apply; "
                     "set verify_workload to classify hosts.")
    counts = {s: sum(v.status == s for v in verdicts.values()) for s in (OK, WARN, FAIL, UNKNOWN)}
    lines.append("  ".join(f"{s}: {n}" for s, n in counts.items()))
    return "\n".join(lines) + "\n"


def _cell(value: float | None, spec: str) -> str:
    """A table cell: ``-`` where there is no figure, ``inf`` for an infinite
    CCR (a job with no inter-node traffic)."""
    width = spec.split(".")[0]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return format("-", f">{width}")
    return format(value, spec)


def _finite(obj):
    """``obj`` with every infinite or NaN float as None: JSON has neither
    (json.dumps would write the invalid ``Infinity``)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def junit_xml(verdicts: dict[str, Verdict]) -> str:
    suite = ET.Element("testsuite", name="ccrhost.verify", tests=str(len(verdicts)),
                       failures=str(sum(v.status == FAIL for v in verdicts.values())),
                       skipped=str(sum(v.status == UNKNOWN for v in verdicts.values())))
    for host, v in sorted(verdicts.items()):
        case = ET.SubElement(suite, "testcase", classname="ccrhost.ccr", name=host)
        props = ET.SubElement(case, "properties")
        ET.SubElement(props, "property", name="ccr", value=_cell(v.ccr and v.ccr.ccr, ".6e").strip())
        ET.SubElement(props, "property", name="ccr_measured",
                      value=_cell(v.measured_ccr and v.measured_ccr.ccr, ".6e").strip())
        if v.status != OK:  # what to do, and each reason's code, action and part, for a CI to route on
            ET.SubElement(props, "property", name="action", value=v.action_text())
            if v.evidence:
                ET.SubElement(props, "property", name="evidence", value=v.evidence)
            for r in v.reasons:
                if r.level != OK:
                    ET.SubElement(props, "property", name=f"reason.{r.code}",
                                  value=f"{r.level} {scope_detail(r, v.readings)['action']} {scope_text(r, v.readings)}")
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


class Written(dict):
    """kind -> path of each report written; ``failed``: kind -> why, for
    each one that was not."""

    def __init__(self):
        super().__init__()
        self.failed: dict[str, str] = {}


def _drop_stale(path: Path) -> None:
    """Remove the previous run's report of a kind this run could not write,
    so that it is never read as this run's (only a regular file of ours)."""
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass


def write_each(reports: dict[str, tuple[Path, Callable[[], str]]], stream=None) -> Written:
    """Render and write each report on its own: one that fails (a rendering
    bug, a full disk) is named on ``stream`` (stderr by default) with why,
    its previous run's file removed, and never keeps the others, or the
    caller's closing table, from coming."""
    written = Written()
    for kind, (path, render) in reports.items():
        try:
            write_atomic(path, render())
        except Exception as exc:  # one report's failure is reported, never the end of the others
            written.failed[kind] = f"{type(exc).__name__}: {exc}"
            _drop_stale(path)
            (stream or sys.stderr).write(f"ccrhost: the {kind} report {path} was not written: "
                                         f"{written.failed[kind]}\n")
        else:
            written[kind] = path
    return written


def write_reports(verdicts: dict[str, Verdict], directory: str | Path, meta: dict | None = None,
                  addresses: dict[str, str] | None = None, stream=None) -> Written:
    """Write the four reports (each on its own: :func:`write_each`);
    ``addresses``: host name -> address, shown beside the name where they differ."""
    out = Path(directory)

    def document() -> str:
        doc = {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(meta or {}),
               "hosts": {h: v.to_dict() for h, v in sorted(verdicts.items())}}
        # no indent: only then does json use its C encoder (some 3 ms a host
        # at fleet scale); the text and HTML reports are the ones people read.
        # The encoder refuses an infinite or NaN float (allow_nan=False): only
        # a document that has one is walked to replace it (a Python walk of
        # every value was a millisecond a host).
        try:
            return json.dumps(doc, default=str, allow_nan=False) + "\n"
        except ValueError:
            return json.dumps(_finite(doc), default=str, allow_nan=False) + "\n"

    renders = {"json": document, "xml": lambda: junit_xml(verdicts), "txt": lambda: text_table(verdicts),
               "html": lambda: html_chart(verdicts, addresses)}
    return write_each({kind: (out / f"ccr-report.{kind}", render) for kind, render in renders.items()}, stream)


def _op_failure(state, host) -> str | None:
    """The stage that failed ``host`` and its last line of stderr."""
    for op_hash in state.get_op_order():
        data = state.ops.get(host, {}).get(op_hash)
        meta = getattr(data, "operation_meta", None)
        if meta is None or not meta.is_complete() or not meta.did_error():
            continue
        stage = ", ".join(state.get_op_meta(op_hash).names) or "an operation"
        stderr = [line.strip() for line in meta.stderr_lines if line.strip()]
        return f"{stage}: {stderr[-1]}" if stderr else stage
    return None


def fleet_verdicts(verdicts: dict[str, Verdict], judged: set[str], state, inventory) -> dict[str, Verdict]:
    """Every inventory host of the run: its verdict when the verification
    judged it, else UNKNOWN "unreachable: ..." for a host pyinfra could not
    reach, UNKNOWN ``<probe>_unreadable`` for a host whose node output could
    not be read, else FAIL "failed before verification: <reason>"."""
    out = {}
    for host in inventory:
        if not state.is_host_in_limit(host):
            continue
        recorded = failures.reason(host.name)
        if host.name in judged or (host not in state.failed_hosts and host.name in verdicts):
            out[host.name] = verdicts[host.name]
        elif host not in state.activated_hosts:
            out[host.name] = unjudged(UNKNOWN, "unreachable", "unreachable: no SSH connection at the start of the run")
        elif recorded and recorded[0] == failures.UNREACHABLE:
            out[host.name] = unjudged(UNKNOWN, "unreachable", f"unreachable: {recorded[1]}")
        elif recorded and recorded[0] == failures.UNREADABLE:  # what could not be read is never a FAIL
            unread = failures.verdict_reason(host.name)
            out[host.name] = unjudged(UNKNOWN, unread.code, unread.message)
        else:
            stage = _op_failure(state, host)
            why = recorded[1] if recorded else None
            if stage and why and not stage.endswith(why):
                why = f"{stage.split(':')[0]}: {why}"
            out[host.name] = unjudged(FAIL, "failed_before_verification",
                                          f"failed before verification: {why or stage or 'see the run log'}")
    return out


class FleetReport:
    """Collects each host's verdict during a run; written once at the end,
    with every inventory host in it."""

    def __init__(self, directory: str, tolerance: float | None = None, state=None, inventory=None):
        self.directory = directory
        self.tolerance = tolerance
        self.state, self.inventory = state, inventory
        self.verdicts: dict[str, Verdict] = {}
        self.judged: set[str] = set()  # hosts whose verification ran (not only planned)
        self.addresses: dict[str, str] = {}
        self.settings: dict = {}  # host -> its HostSettings, where given (the fleet's wiring reads them)

    def record(self, host: str, verdict: Verdict, executed: bool = False, address: str | None = None,
               settings=None) -> None:
        self.verdicts[host] = verdict  # the execute-time verdict replaces the plan-time one
        if address:
            self.addresses[host] = address
        if settings is not None:
            self.settings[host] = settings
        if executed:
            self.judged.add(host)

    def finish(self, stream=None) -> dict[str, Path] | None:
        verdicts = self.verdicts
        if self.state is not None and self.inventory is not None:
            verdicts = fleet_verdicts(self.verdicts, self.judged, self.state, self.inventory)
        if not verdicts:
            return None
        apply_fleet_rules(verdicts, self.tolerance)
        meta = {"fleet_versions": fleet_versions(verdicts)}
        from ccrhost.fleet.wiring_report import report as wiring_report  # the fleet's wiring (issue 48)

        say = (lambda line: stream.write(line + "\n")) if stream is not None else None
        wiring = wiring_report(verdicts, self.settings, self.directory, say)
        if wiring is not None:
            meta["wiring"] = wiring.to_dict()
        from ccrhost.fleet.rack_report import report as rack_report  # the NVLink racks (issue 49)

        racks = rack_report(verdicts, self.settings, self.directory, say)
        if racks is not None:
            meta["rack"] = racks.to_dict()
        paths = write_reports(verdicts, self.directory, meta, addresses=self.addresses, stream=stream)
        if stream is not None:
            stream.write("\n" + text_table(verdicts))
            stream.write(f"Reports: {', '.join(str(p) for p in paths.values())}\n")
        return paths


_FLEET: FleetReport | None = None


def fleet_report(directory: str, tolerance: float | None = None, state=None, inventory=None) -> FleetReport:
    """The run's report, written and printed when the pyinfra process exits."""
    global _FLEET
    if _FLEET is None:
        import atexit
        import sys

        def real(obj):  # pyinfra's context proxies may be unset when the process exits
            getter = getattr(type(obj), "_get_module", None)
            return getter(obj) if getter else obj

        _FLEET = FleetReport(directory, tolerance, real(state), real(inventory))
        atexit.register(_FLEET.finish, sys.stdout)
    return _FLEET
