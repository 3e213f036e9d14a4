"""The fleet's NVLink racks from the nodes' verdicts (issue 49): a tray
(fleet/rack.py ``Tray``) for each node whose settings turn ``imex_enable``
on, made from its verdict's readings and its ``imex_rack``; the rack checks'
reasons added to the trays' verdicts (a FAIL one drains its tray as usual);
Slurm's ``topology/block`` file (``topology-block.conf``) written into the
report directory without the failing trays. ``ccrhost slurm verify`` and the
deploy's fleet report both call :func:`report`, as they call the wiring view.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ccrhost.fleet import rack as fr
from ccrhost.model.ports import natural_key
from ccrhost.model.status import FAIL, Reason
from ccrhost.model.verdict import Verdict, worst

FILE = "topology-block.conf"
TOPOLOGY_BLOCK = "topology_block"  # the key of the --topology-block copy in RackReport.files


@dataclass
class RackReport:
    """What :func:`report` found and wrote."""
    racks: dict[str, list[str]] = field(default_factory=dict)   # rack -> its trays (the inventory's imex_rack)
    no_rack: list[str] = field(default_factory=list)            # trays whose imex_rack is not set
    reasons: dict[str, list[Reason]] = field(default_factory=dict)  # tray -> its rack reasons
    left_out: list[str] = field(default_factory=list)           # what the block file leaves out, and why
    files: dict[str, str] = field(default_factory=dict)         # file name (or TOPOLOGY_BLOCK) -> path written
    failed: dict[str, str] = field(default_factory=dict)        # file name -> why it was not written

    def to_dict(self) -> dict:
        def codes(host):
            return [r.code for r in self.reasons.get(host, ())]

        return {"racks": {name: {h: codes(h) for h in hosts} for name, hosts in self.racks.items()},
                "no_rack": {h: codes(h) for h in self.no_rack},
                "findings": [{"host": h, **r.to_dict()} for h, rs in self.reasons.items() for r in rs],
                "files": dict(self.files), "failed": dict(self.failed), "left_out": list(self.left_out)}


def imex_on(s) -> bool:
    """The node's settings turn imex_enable on: a HostSettings' own key, a CheckSettings' policy's."""
    if s is None:
        return False
    own = getattr(s, "imex_enable", None)
    return bool(own if own is not None else s.policy().imex.enabled)


NO_VERSION = object()  # the tool printed the node list without versions (older daemons): nothing to compare


def imex_version(verdict: Verdict):
    """This tray's own IMEX version: its entry of ``nvidia-imex-ctl -N``'s node
    list (the one at an address of its own); None where not read;
    :data:`NO_VERSION` where the list carries none (an older daemon)."""
    reading = verdict.readings.imex
    if reading is None or reading.error or reading.domain.error:
        return None
    own = [n for n in reading.domain.nodes if n.address in reading.addresses]
    if own and not any(n.version for n in reading.domain.nodes):
        return NO_VERSION
    return own[0].version if own and own[0].version else None


def node_tray(host: str, verdict: Verdict, rack: str | None) -> fr.Tray:
    health = verdict.readings.gpu_health
    gpus = health.gpus if health is not None and not health.error else None
    imex = imex_version(verdict)
    versions = {} if imex is NO_VERSION else {"imex": imex}
    datapath = verdict.readings.datapath
    if datapath is not None:  # the data path's read carries the driver's version (model/datapath.py HostVersions)
        versions["driver"] = None if datapath.error else datapath.versions.nvidia
    return fr.tray(host, rack, gpus, verdict.status == FAIL, **versions)


def report(verdicts: dict[str, Verdict], settings: dict, directory: str | Path | None, say=None,
           topology_block: str | None = None, cluster: list[str] | None = None) -> RackReport | None:
    """:func:`build`; a fault in it is said on ``say`` and returns None: the
    rack view never keeps the drains or the fleet reports from coming."""
    try:
        return build(verdicts, settings, directory, say, topology_block, cluster)
    except Exception as exc:
        (say or (lambda line: None))(f"rack: not reported: {type(exc).__name__}: {exc}")
        return None


def build(verdicts: dict[str, Verdict], settings: dict, directory: str | Path | None, say=None,
          topology_block: str | None = None, cluster: list[str] | None = None) -> RackReport | None:
    """The racks of the nodes whose settings turn imex_enable on (None when
    none does): each rack reason said on ``say`` and added to its tray's
    verdict (the worst of its own status and these); the block topology, with
    what it leaves out as comments at its end, written into ``directory``
    (and to ``topology_block`` too, only where every node of ``cluster``,
    the nodes Slurm lists, was judged here: a tray left unchecked, busy or
    drained, would be in no block and share no job)."""
    from ccrhost.output import write_atomic

    on = sorted((n for n in verdicts if imex_on(settings.get(n))), key=natural_key)
    if not on:
        return None
    say = say or (lambda line: None)
    trays = [node_tray(n, verdicts[n], getattr(settings[n], "imex_rack", None)) for n in on]
    found = fr.check_racks(trays)  # everything judged before any verdict changes
    out = RackReport(reasons={h: rs for h, rs in found.items() if rs})
    for t in trays:
        if t.rack is None:
            out.no_rack.append(t.host)
        else:
            out.racks.setdefault(t.rack, []).append(t.host)
    out.racks = dict(sorted(out.racks.items()))
    for t in trays:
        reasons = found[t.host]
        if reasons:
            v = verdicts[t.host]
            v.reasons.extend(reasons)
            v.status = worst([v.status, *(r.level for r in reasons)])
            t.failing = v.status == FAIL
        for r in reasons:
            say(f"rack: {r.code}: {r.message}")
    text, out.left_out = fr.block_topology(trays)
    if out.left_out:
        text += "".join(f"# left out: {line}\n" for line in out.left_out)
    targets = [(FILE, Path(directory) / FILE)] if directory is not None else []
    unchecked = sorted(set(cluster or ()) - set(settings), key=natural_key)  # judged here: tray or not, it is known
    if topology_block and unchecked:
        out.failed[TOPOLOGY_BLOCK] = (f"not written: {len(unchecked)} node(s) of the cluster were not judged "
                                      f"here ({', '.join(unchecked[:8])}{', ...' if len(unchecked) > 8 else ''}): a "
                                      "block file without them keeps them from every job; check them too")
        say(f"rack: {topology_block} {out.failed[TOPOLOGY_BLOCK]}")
    elif topology_block:
        targets.append((TOPOLOGY_BLOCK, Path(topology_block)))
    for name, path in targets:
        try:
            write_atomic(path, text)
        except Exception as exc:  # a full disk, a directory in its place: named, the report still comes
            out.failed[name] = f"{type(exc).__name__}: {exc}"
            say(f"rack: {path} was not written: {out.failed[name]}")
        else:
            out.files[name] = str(path)
    if TOPOLOGY_BLOCK in out.files:
        say(f"rack: wrote {out.files[TOPOLOGY_BLOCK]} (Slurm 24.05+ topology/block): run `scontrol reconfigure` "
            "for slurmctld to load it")
    return out
