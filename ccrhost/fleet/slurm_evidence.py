"""``ccrhost slurm verify`` collects the evidence bundles (issue 40): a
node whose check failed kept a bundle (:mod:`ccrhost.node.evidence`) and
named it in its verdict; verify copies it into the report directory, as
``<report-dir>/evidence/<node>/<bundle>/``, through one srun step in the
allocation it already holds (``tar`` to stdout, base64 through srun's
labelled output, the way the check step sends the node's settings; gzip
keeps the stream small).

Bounded: a bundle over the cap is not copied (it stays on the node), and
a node whose bundle cannot be fetched gets a note in the report; neither
ever changes its verdict.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
import shlex
import shutil
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from ccrhost.fleet import slurm_client

MAX_BYTES = 32 << 20   # per bundle: the node cuts each file at 1 MiB, but nvidia-bug-report's log can be larger
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # a Slurm node name, safe as one folder name


@dataclass
class Fetched:
    bundle: str                 # the bundle's name, as the node's verdict and drain reason give it
    path: str | None = None     # where it was put: <report-dir>/evidence/<node>/<bundle>
    bytes: int = 0              # the tar stream's size
    note: str | None = None     # why it was not put there

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def evidence_of(check_text: str) -> str | None:
    """The bundle the node's ``ccrhost check --format json`` named (its path on the node)."""
    start, end = check_text.find("{"), check_text.rfind("}")
    try:
        doc = json.loads(check_text[start:end + 1]) if start >= 0 else None
    except ValueError:
        return None
    value = doc.get("evidence") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def bundle_script(path: str, cap: int) -> str:
    """A node's branch of the step: its bundle as a tar stream in base64,
    cut one byte past ``cap`` (so the controller sees it was over)."""
    p = PurePosixPath(path)
    folder, name = shlex.quote(str(p.parent)), shlex.quote(p.name)
    return (f'if [ -d {folder}/{name} ] && [ ! -L {folder}/{name} ]; then echo "@@tar"; '
            f'tar -C {folder} -czf - -- {name} 2>/dev/null | head -c {cap + 1} | base64; echo "@@end"; '
            f'else echo "@@missing"; fi')


def _bundle_path(path: str) -> str | None:
    """``path`` when it is one a node's check gives (absolute, named by its
    UTC time), else None: a verdict never makes verify fetch another folder."""
    from ccrhost.node.evidence import is_bundle_name

    p = PurePosixPath(path)
    return path if p.is_absolute() and ".." not in p.parts and is_bundle_name(p.name) else None


def unpack(node: str, bundle: str, lines: list[str] | None, report_dir: str | Path, cap: int) -> Fetched:
    """One node's step output put under the report directory, or the note why not."""
    got = Fetched(bundle)
    if lines is None:
        got.note = "no output from the evidence step"
        return got
    if "@@missing" in lines:
        got.note = f"bundle {bundle} is not on the node (removed by age, or its folder is not readable)"
        return got
    if "@@tar" not in lines or "@@end" not in lines:
        said = " ".join(x.strip() for x in lines[-3:] if x.strip())[:300]
        got.note = "the evidence step did not finish" + (f": {said}" if said else "")
        return got
    body = lines[lines.index("@@tar") + 1:lines.index("@@end")]
    try:
        data = base64.b64decode("".join(x.strip() for x in body), validate=True)
    except (binascii.Error, ValueError) as exc:
        got.note = f"the bundle's base64 does not decode ({exc})"
        return got
    got.bytes = len(data)
    if not data:
        got.note = f"tar gave nothing for {bundle} (can the step's user read verify_evidence_dir?)"
        return got
    if len(data) > cap:
        got.note = f"bundle {bundle} is over {cap} bytes: not copied, it stays on the node"
        return got
    dest = Path(report_dir) / "evidence" / node
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            members = [m for m in tar.getmembers() if (m.isfile() or m.isdir()) and
                       PurePosixPath(m.name).parts[:1] == (bundle,) and ".." not in PurePosixPath(m.name).parts]
            if not any(m.isfile() for m in members):
                got.note = f"the tar stream of {bundle} holds no files"
                return got
            shutil.rmtree(dest / bundle, ignore_errors=True)  # an earlier run's copy of the same bundle
            dest.mkdir(parents=True, exist_ok=True)
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, OSError) as exc:
        got.note = f"the bundle could not be unpacked: {exc}"
        return got
    got.path = str(dest / bundle)
    return got


def collect(job: str, named: dict[str, str], report_dir: str | Path, say, timeout: float = 300,
            cap: int = MAX_BYTES, run_steps=None) -> dict[str, Fetched]:
    """Fetch each node's named bundle (``named``: node -> the path its
    verdict gave) in one srun step of ``job``; {node: what came of it}."""
    run_steps = run_steps or slurm_client.run_steps

    out: dict[str, Fetched] = {}
    branches = {}
    for node, path in sorted(named.items()):
        bundle = PurePosixPath(path).name
        if not _NODE.match(node) or _bundle_path(path) is None:
            out[node] = Fetched(bundle, note=f"{path!r} is not a bundle ccrhost names: not fetched")
        else:
            branches[node] = bundle_script(path, cap)
    if not branches:
        return out
    say(f"fetching the evidence bundles of {', '.join(branches)}")
    for attempt in (1, 2):  # a stream cut short (seen on the Slurm lab) is asked for once more
        if not branches:
            break
        results, error = run_steps(job, branches, "ccrhost-evidence", timeout)()
        for node in branches:
            bundle = PurePosixPath(named[node]).name
            out[node] = unpack(node, bundle, results.get(node), report_dir, cap)
            if out[node].note and error:
                out[node].note += f" (srun: {error})"
        branches = {n: b for n, b in branches.items() if attempt == 1 and _cut_short(out[n])}
        for node in branches:
            say(f"evidence of {node}: {out[node].note}; asking again")
    for node, got in out.items():
        say(f"evidence of {node}: {got.path or got.note}")
    return out


def _cut_short(got: Fetched) -> bool:
    return bool(got.note) and got.note.startswith(("the evidence step did not finish", "no output from"))
