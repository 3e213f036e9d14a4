"""``ccrhost ci run``: a merge request's inventory, deployed on lab nodes
that stand in for its hosts.

Steps, each a JUnit test case: start the lab from the inventory, run the
deploy, run it again (it must change nothing), run the verification. The
lab is torn down whatever happens. Exit 0 when every step passed, 1 when
one failed, with one line saying which and why.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import click

from ccrhost.lab.fleet import Lab, LabError
from ccrhost.lab.profile import ProfileError
from ccrhost.output import write_atomic

# The packaged stages (what deploys/rdma.py and deploys/verify.py run), so an
# installed ccrhost needs no checkout.
DEPLOYS = {
    "rdma.py": "from ccrhost.deploys import rdma_stages\n\nrdma_stages()\n",
    "verify.py": "from ccrhost.deploys import verify_stage\n\nverify_stage()\n",
}


@dataclass
class Step:
    name: str
    status: str = "skipped"      # passed, failed, skipped
    seconds: float = 0.0
    message: str = ""            # why it failed, one line
    detail: str = ""             # what the step printed (its log)


@dataclass
class PyinfraRun:
    rc: int
    out: str

    def results(self) -> dict[str, dict[str, str]]:
        """pyinfra's results table: {operation: {hosts, success, error, no_change}}."""
        rows, in_table = {}, False
        for line in self.out.splitlines():
            if line.startswith("--> Results:"):
                in_table = True
                continue
            if in_table:
                if line.startswith("-->"):
                    break
                cells = re.split(r"\s{2,}", line.strip())
                if len(cells) == 5 and cells[0] not in ("Operation", "Grand total"):
                    rows[cells[0]] = dict(zip(("hosts", "success", "error", "no_change"), cells[1:]))
        return rows


def _pyinfra(inventory: Path, deploy: Path, report_dir: Path, log: Path) -> PyinfraRun:
    env = {**os.environ, "PYINFRA_PROGRESS": "off", "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", str(inventory), str(deploy),
         "--data", f"verify_report_dir={report_dir}"],
        env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    write_atomic(log, out)
    return PyinfraRun(proc.returncode, out)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def why_failed(run: PyinfraRun) -> str:
    """The lines that say why a pyinfra run failed: ccrhost's refusal of the
    data (host, key, value), else each host's error."""
    text = _ANSI.sub("", run.out)
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("ccrhost: inventory data rejected"):
            problems = [x.strip() for x in lines[i + 1:] if x.startswith("  ")]
            return "; ".join(problems) or line
    errors = []
    for line in lines:
        match = re.match(r"^\s*\[([^\]]+)\]\s+(?:Error|FAIL)[: ]\s*(.*)$", line)
        if match and match.group(2) and not match.group(2).startswith("executed 0 commands"):
            errors.append(f"{match.group(1)}: {match.group(2).strip()}")
    if errors:
        return "; ".join(dict.fromkeys(errors))
    tail = [x.strip() for x in lines if x.strip()]
    return tail[-1] if tail else f"pyinfra exited {run.rc}"


def changed_operations(run: PyinfraRun) -> list[str]:
    return [f"{op} ({row['success']} hosts)" for op, row in run.results().items() if row["success"] != "-"]


def junit(steps: list[Step], inventory: str) -> str:
    failures = sum(s.status == "failed" for s in steps)
    skipped = sum(s.status == "skipped" for s in steps)
    cases = []
    for s in steps:
        body = ""
        if s.status == "failed":
            body = f"<failure message={quoteattr(s.message)}>{escape(s.detail[-20000:])}</failure>"
        elif s.status == "skipped":
            body = f"<skipped message={quoteattr(s.message or 'an earlier step failed')}/>"
        elif s.detail:
            body = f"<system-out>{escape(s.detail[-20000:])}</system-out>"
        cases.append(f'  <testcase classname="ccrhost.ci" name={quoteattr(s.name)} time="{s.seconds:.1f}">'
                     f"{body}</testcase>")
    return ('<?xml version="1.0" encoding="utf-8"?>\n'
            f'<testsuite name={quoteattr("ccrhost ci " + inventory)} tests="{len(steps)}" '
            f'failures="{failures}" skipped="{skipped}">\n' + "\n".join(cases) + "\n</testsuite>\n")


@dataclass
class Ci:
    inventory: str
    profiles: dict[str, str]
    report_dir: Path
    per_group: int | None = None
    deploy: str | None = None
    lab_dir: str | None = None
    name: str = "ci"
    subnet: int = 0
    steps: list[Step] = field(default_factory=list)

    def run(self) -> tuple[bool, str]:
        """Every step, then the teardown; (passed, the one-line summary)."""
        from ccrhost.lab import from_inventory

        self.report_dir.mkdir(parents=True, exist_ok=True)
        names = ("lab up", "deploy", "deploy again changes nothing", "verify")
        self.steps = [Step(n) for n in names]
        lab = Lab(self.lab_dir)
        hosts, started = 0, False
        try:
            with self._step(0) as step:
                # a lab already running there is refused, and left alone
                _, placements, inv = from_inventory.up(self.inventory, self.profiles, self.per_group,
                                                       lab.dir, name=self.name, subnet=self.subnet)
                hosts, started = len(placements), True
                step.detail = "\n".join(f"{p.host} -> {p.node} {p.address} ({', '.join(p.groups)}) {p.profile}"
                                        for p in placements)
                deploys = self._deploys(lab.dir)
            ccr = self.report_dir / "ccr"
            for index, deploy, log, unchanged in ((1, "rdma.py", "deploy.log", False),
                                                  (2, "rdma.py", "deploy-again.log", True),
                                                  (3, "verify.py", "verify.log", False)):
                if self._ok():
                    self._run_deploy(index, inv, deploys[deploy], ccr, self.report_dir / log, unchanged)
        finally:
            if started:
                lab.down()
            write_atomic(self.report_dir / "junit.xml", junit(self.steps, self.inventory))
        failed = next((s for s in self.steps if s.status == "failed"), None)
        if failed:
            return False, f"ccrhost ci: FAIL at {failed.name}: {failed.message}"
        return True, (f"ccrhost ci: PASS: {hosts} lab node{'s' if hosts != 1 else ''} for {self.inventory}: "
                      "deployed, second run changed nothing, verified")

    def _run_deploy(self, index: int, inv, deploy, ccr, log, unchanged: bool) -> None:
        """One pyinfra step; with ``unchanged`` it must also change nothing."""
        with self._step(index) as step:
            run = _pyinfra(inv, deploy, ccr, log)
            step.detail = run.out
            changed = changed_operations(run)
            if run.rc != 0:
                step.fail(why_failed(run))
            elif unchanged and (changed or not run.results()):
                step.fail("the second run changed " + (", ".join(changed) or "something (no results table)"))

    def _ok(self) -> bool:
        return all(s.status == "passed" for s in self.steps if s.status != "skipped")

    def _deploys(self, lab_dir: Path) -> dict[str, Path]:
        folder = lab_dir / "deploys"
        folder.mkdir(parents=True, exist_ok=True)
        out = {}
        for name, text in DEPLOYS.items():
            (folder / name).write_text(text)
            out[name] = folder / name
        if self.deploy:
            out["rdma.py"] = Path(self.deploy).resolve()
        return out

    def _step(self, index: int):
        return _StepRun(self.steps[index])


class _StepRun:
    def __init__(self, step: Step):
        self.step = step

    def __enter__(self):
        self.start = time.monotonic()
        self.step.status = "passed"
        self.step.fail = self._fail  # type: ignore[attr-defined]
        return self.step

    def _fail(self, message: str) -> None:
        self.step.status, self.step.message = "failed", message

    def __exit__(self, kind, exc, tb):
        self.step.seconds = time.monotonic() - self.start
        if isinstance(exc, (LabError, ProfileError)):
            self._fail(str(exc).replace("\n", " "))
            return True
        if exc is not None and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            self._fail(f"{type(exc).__name__}: {exc}")
            return True
        return False


@click.group()
def ci():
    """Test an inventory's changes on lab nodes (needs root, as the lab does)."""


@ci.command()
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False))
@click.option("--profile", "profile_args", multiple=True, metavar="GROUP=PROFILE",
              help="The lab profile (a captured YAML file, or a packaged name) for a group's hosts; all=PROFILE "
                   "for every host.")
@click.option("--per-group", type=click.IntRange(1, 200), help="Only the first N hosts of each group.")
@click.option("--report-dir", type=click.Path(file_okay=False), default="ccrhost-ci", show_default=True,
              help="junit.xml, each run's log and the CCR reports (ccr/).")
@click.option("--deploy", type=click.Path(exists=True, dir_okay=False),
              help="The deploy to run twice [default: ccrhost's rdma stages, as deploys/rdma.py].")
@click.option("--dir", "directory", default=None, envvar="CCRHOST_LAB_DIR",
              help="Lab folder [default: /var/lib/ccrhost/lab].")
@click.option("--subnet", type=click.IntRange(0, 255), default=0, show_default=True, envvar="CCRHOST_LAB_SUBNET",
              help="Use 198.18.<subnet>.0/24.")
def run(inventory, profile_args, per_group, report_dir, deploy, directory, subnet):
    """Lab up from INVENTORY, deploy, deploy again (must change nothing),
    verify, tear down. Exit 0 when all passed, 1 otherwise."""
    from ccrhost.lab.cli import group_profiles

    job = Ci(inventory, group_profiles(profile_args), Path(report_dir), per_group, deploy, directory, subnet=subnet)
    passed, summary = job.run()
    for s in job.steps:
        click.echo(f"{s.name:30} {s.status:8} {s.seconds:6.1f}s  {s.message}")
    click.echo(f"reports: {Path(report_dir) / 'junit.xml'}")
    click.echo(summary)
    raise SystemExit(0 if passed else 1)
