"""The fabric's wiring across the fleet, from the nodes' verdicts (issue 48):
each node's stored wiring reading (``Verdict.readings.wiring``) taken back,
the fleet findings of ``ccrhost.fleet.wiring`` made from them, the files
(``cabling.csv``, ``topology.conf``, ``node-labels.json``, ``wiring-plan.yaml``) written into
the report directory, and ``leaf_suspect`` added to the verdict of each
failing node under a suspect leaf. ``ccrhost slurm verify`` and the
deploy's fleet report both call :func:`report`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from ccrhost.fleet import wiring as fw
from ccrhost.model.actions import INVESTIGATE
from ccrhost.model.active import ActiveResult
from ccrhost.model.ports import natural_key
from ccrhost.model.status import FAIL, WARN, Reason
from ccrhost.model.verdict import Verdict, worst
from ccrhost.model.wiring import StoredWiring, WiringReading, compute_nics, reading_from_dict

# The FAIL codes a faulty leaf switch gives the nodes cabled to it: a port
# it takes down or trains slow, a flapping link, its pause storms, drops,
# physical errors and transport retries, the slow ib_write_bw and all-reduce
# through it. Left out: codes of the node's own setup (global_pause_on, the
# PCIe link, the GPU data path), a wrong all-reduce result (the GPUs or
# their memory), and the wiring codes but a neighbour gone (a leaf that died; its nodes are its own
# where the plan names it: planned()).
FABRIC_CODES = frozenset({
    "port_down", "port_rate", "measured_slow",                           # ports.yaml
    "link_flap",                                                         # links.yaml
    "pause_storm", "pfc_pause_share", "netdev_rx_drops_high",            # fabric.yaml
    "netdev_phy_errors_high", "rdma_transport_failing",
    "allreduce_slow",                                                    # allreduce.yaml
    "wiring_no_neighbour",                                               # wiring.yaml: a dead leaf sends no LLDP
})

FILES = ("cabling.csv", "topology.conf", "node-labels.json", "wiring-plan.yaml")


@dataclass
class WiringReport:
    """What :func:`report` found and wrote."""
    findings: list[fw.Finding] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)   # node -> why its reading was not taken
    files: dict[str, str] = field(default_factory=dict)     # file name (or "topology_conf") -> path written
    failed: dict[str, str] = field(default_factory=dict)    # file name -> why it was not written
    plan_from: str | None = None                            # the node whose settings gave the plan

    def to_dict(self) -> dict:
        return {"findings": [{"kind": f.kind, "message": f.message, "nodes": list(f.nodes)} for f in self.findings],
                "files": dict(self.files), "failed": dict(self.failed), "skipped": dict(self.skipped),
                "plan_from": self.plan_from}


def node_reading(stored) -> tuple[WiringReading | None, str | None]:
    """The node's reading, or why there is none to take: none read back,
    the state file unreadable, none stored, a stored one that is not a
    reading, or one past its validity (an old cable map says nothing)."""
    if stored is None:
        return None, "no stored wiring reading was read back"
    if isinstance(stored, dict):  # a verdict document not typed again
        stored = StoredWiring(stored.get("read_at", 0.0), stored.get("result"), stored.get("error"))
    if stored.error:
        return None, f"the stored wiring reading: {stored.error}"
    if stored.result is None:
        return None, "no stored wiring reading: the wiring probe has not run on it"
    try:
        result = ActiveResult.from_dict(stored.result)
        reading = reading_from_dict(result.data or {})
    except (ValueError, TypeError) as exc:
        return None, f"the stored wiring reading: {exc}"
    if result.stale(stored.read_at):
        return None, f"the stored wiring reading is {result.age(stored.read_at):.0f} s old, valid for " \
                     f"{result.valid_for:g} s"
    return reading, None


def _wiring_on(s) -> bool:
    return bool(s is not None and _policy(s).enabled)


def _policy(s):
    """The node's WiringPolicy: a HostSettings' own, or a CheckSettings' policy's."""
    own = getattr(s, "wiring_policy", None)
    return own() if callable(own) else s.policy().wiring


def fabric_failures(verdicts: dict[str, Verdict], now: float) -> list[tuple[fw.Failure, frozenset[str] | None]]:
    """Each FAIL node's fabric codes of this run (:data:`FABRIC_CODES`), at
    ``now``, each with the NICs its reasons name (None: the node's, all),
    and those of the earlier failing checks its history keeps
    (``verify_history``: each episode's time and FAIL codes, no NIC names)."""
    out = []
    for node, v in sorted(verdicts.items(), key=lambda kv: natural_key(kv[0])):
        history = v.readings.history
        for ep in (history.episodes if history is not None else ()):
            out += [(fw.Failure(node, code, ep.time), None) for code in ep.codes if code in FABRIC_CODES]
        if v.status != FAIL:
            continue
        nics: dict[str, set[str] | None] = {}
        for r in v.reasons:
            if r.level == FAIL and r.code in FABRIC_CODES:
                had = nics.setdefault(r.code, set())
                nics[r.code] = None if had is None or r.nic is None else had | {r.nic}
        out += [(fw.Failure(node, code, now), None if named is None else frozenset(named))
                for code, named in nics.items()]
    return out


def planned(leaves: dict[str, list[tuple[int, str]]], plans: dict, nics: dict[str, list[tuple[str, int]]]
            ) -> dict[str, list[tuple[int, str]]]:
    """The leaves each node is cabled to, for the suspects: its good links, and where a link is
    not good (a dead leaf sends no LLDP and answers no query) the leaf its plan names, where the
    plan names exactly one (a leaf name without a pattern): a leaf that dies still has its nodes."""
    out = {}
    for node, good in leaves.items():
        have = {rail for rail, _ in good}
        extra = []
        for rail in range(len(nics.get(node, ()))):
            plan = fw.plan_of(plans, node, rail)
            if rail not in have and plan is not None and plan.leaf and not any(c in plan.leaf for c in "*?["):
                extra.append((rail, plan.leaf))
        out[node] = sorted(good + extra)
    return out


def suspects(failures: list[tuple[fw.Failure, frozenset[str] | None]], leaves: dict[str, list[tuple[int, str]]],
             readings: dict[str, WiringReading], nics: dict[str, list[tuple[str, int]]], now: float,
             window_s: float, fraction: float, min_nodes: int) -> list[tuple[str, fw.Finding]]:
    """(leaf, finding) for each suspect leaf, ``fw.leaf_suspect`` asked leaf
    by leaf (so each finding's leaf is known without reading its message).
    A failure that names NICs counts only at the leaves those NICs reach: a
    port down on rail 3 says nothing of the node's rail-0 leaf, and one whose
    NICs reach no known leaf counts at none."""
    by_leaf: dict[str, dict[str, list[tuple[int, str]]]] = {}
    for node, good in leaves.items():
        for rail, leaf in good:
            by_leaf.setdefault(leaf, {}).setdefault(node, []).append((rail, leaf))

    def names(node: str, rail: int) -> set[str]:
        device, port = nics[node][rail]
        nic = readings[node].nics.get(f"{device}/{port}")
        return {device} | ({nic.netdev} if nic is not None and nic.netdev else set())

    out = []
    for leaf in sorted(by_leaf, key=natural_key):
        members = by_leaf[leaf]
        counted = []
        for failure, named in failures:
            if failure.node not in members:
                continue
            # a failure naming NICs counts at the leaves they reach; one whose NICs reach no known leaf
            # (a port down sends no LLDP) says nothing of the node's other leaves
            if named is None or named & set().union(*(names(failure.node, r) for r, _ in members[failure.node])):
                counted.append(failure)
        out += [(leaf, f) for f in fw.leaf_suspect(counted, members, now, window_s, fraction, min_nodes)]
    return _merged(out)


def _merged(found: list[tuple[str, fw.Finding]]) -> list[tuple[str, fw.Finding]]:
    """One finding for the leaves that share the same failing nodes on the same code (a fault that
    names no NIC counts at each leaf of its nodes: eight rails, one fault, not eight suspects)."""
    groups: dict[tuple, list[tuple[str, fw.Finding]]] = {}
    for leaf, f in found:
        groups.setdefault((f.nodes, f.message.split(": ", 1)[1]), []).append((leaf, f))
    out = []
    for (nodes, rest), members in groups.items():
        if len(members) == 1:
            out.append(members[0])
            continue
        leaves = ", ".join(leaf for leaf, _ in members)
        out.append((leaves, fw.Finding("leaf_suspect", f"leaves {leaves}: {rest}", nodes, members[0][1].code)))
    return out


def plan_yaml(rails: list[dict], notes: list[str]) -> str:
    """The captured plan as inventory data (``wiring_rails``), its doubts as comments above it."""
    import yaml

    head = ("# The fabric plan these nodes' readings show (ccrhost fleet/wiring.py captured_plan): from a\n"
            "# known-good fleet, paste it into the inventory's data to judge every node against it.\n")
    return head + "".join(f"# {n}\n" for n in notes) + yaml.safe_dump({"wiring_rails": rails}, sort_keys=False)


def suspect_reason(leaf: str, finding: fw.Finding) -> Reason:
    return Reason(WARN, "leaf_suspect", f"{finding.message}: check the leaf switch{'es' if ', ' in leaf else ''} {leaf}")


def report(verdicts: dict[str, Verdict], settings: dict, directory: str | Path | None, say=None,
           now: float | None = None, topology_conf: str | None = None,
           cluster: list[str] | None = None) -> WiringReport | None:
    """:func:`build`; a fault in it is said on ``say`` and returns None: the
    fleet's wiring never keeps the drains or the fleet reports from coming."""
    try:
        return build(verdicts, settings, directory, say, now, topology_conf, cluster)
    except Exception as exc:
        (say or (lambda line: None))(f"wiring: not reported: {type(exc).__name__}: {exc}")
        return None


def build(verdicts: dict[str, Verdict], settings: dict, directory: str | Path | None, say=None,
          now: float | None = None, topology_conf: str | None = None,
          cluster: list[str] | None = None) -> WiringReport | None:
    """The fleet's wiring from the verdicts of the nodes whose settings turn
    wiring on (None when none does): the findings, said one a line on
    ``say``; the files written into ``directory`` (and the topology.conf to
    ``topology_conf`` too); ``leaf_suspect`` added to the verdicts it names
    (WARN: a FAIL stays FAIL). Each node's links are judged by its own plan;
    the thresholds are those of the first such node by name. ``cluster``:
    every node Slurm has, without which ``topology_conf`` is not written
    (a node placed under no switch could share no job)."""
    from ccrhost.output import write_atomic

    on = sorted((n for n in verdicts if _wiring_on(settings.get(n))), key=natural_key)
    if not on:
        return None
    say = say or (lambda line: None)
    now = time.time() if now is None else now
    first = settings[on[0]]
    policy = _policy(first)
    out = WiringReport(plan_from=on[0])
    readings, nics = {}, {}
    for node in on:
        v = verdicts[node]
        reading, why = node_reading(v.readings.wiring)
        if reading is None:
            out.skipped[node] = why
            continue
        readings[node] = reading
        nics[node] = compute_nics([(p.device, p.port) for p in v.readings.ports if not p.efa])
    plans = {node: _policy(settings[node]) for node in on}  # each node judged by its own plan, as its check was
    leaves = fw.node_leaves(readings, plans, nics)
    found = suspects(fabric_failures({n: verdicts[n] for n in on}, now), planned(leaves, plans, nics), readings, nics, now,
                     getattr(first, "wiring_leaf_suspect_window_hours", 1) * 3600,
                     getattr(first, "wiring_leaf_suspect_fraction", 0.5),
                     getattr(first, "wiring_leaf_suspect_min_nodes", 2))
    out.findings = fw.duplicate_guids(readings, nics) + fw.lid_problems(readings, nics) + \
        fw.subnet_managers(readings, nics)
    out.findings += [f for _, f in found]
    for leaf, finding in found:
        for node in finding.nodes:
            v = verdicts[node]
            # the switch, not the node: its own failures of that code ask a person to look (the leaf), never
            # an automatic reset or reboot of N nodes (slurm remediate acts on reset_gpu and reboot only)
            v.reasons = [replace(r, action=INVESTIGATE) if r.level == FAIL and r.code == finding.code else r
                         for r in v.reasons]
            v.reasons.append(suspect_reason(leaf, finding))
            v.status = worst([v.status, WARN])
    if out.skipped:
        say(f"wiring: no reading from {len(out.skipped)} node(s): "
            + "; ".join(f"{n}: {why}" for n, why in out.skipped.items()))
    for f in out.findings:
        say(f"wiring: {f.kind}: {f.message}")
    texts = {"cabling.csv": lambda: fw.cabling_csv(readings, plans, nics),
             "topology.conf": lambda: fw.topology_conf(readings, plans, nics,
                                                        spines=dict(getattr(first, "wiring_spines", None) or {})),
             "node-labels.json": lambda: json.dumps(fw.node_labels(readings, plans, nics), indent=2,
                                                    sort_keys=True) + "\n",
             "wiring-plan.yaml": lambda: plan_yaml(*fw.captured_plan(readings, nics))}
    targets = [(name, Path(directory) / name) for name in FILES] if directory is not None else []
    unplaced = sorted(set(cluster or ()) - {n for n, good in leaves.items() if good}, key=natural_key)
    if topology_conf and unplaced:
        # topology.conf(5): every node must be under a switch, or no job spans it and the rest
        out.failed["topology_conf"] = (f"not written: {len(unplaced)} node(s) of the cluster have no leaf in "
                                       f"these readings ({', '.join(unplaced[:8])}{', ...' if len(unplaced) > 8 else ''}): "
                                       "check them too (busy or drained ones were not), or fix their cabling")
        say(f"wiring: {topology_conf} {out.failed['topology_conf']}")
    elif topology_conf:
        targets.append(("topology_conf", Path(topology_conf)))
    for name, path in targets:
        try:
            write_atomic(path, texts["topology.conf" if name == "topology_conf" else name]())
        except Exception as exc:  # a full disk, a rendering fault: named, and the other files still come
            out.failed[name] = f"{type(exc).__name__}: {exc}"
            say(f"wiring: {path} was not written: {out.failed[name]}")
        else:
            out.files[name] = str(path)
    if "topology_conf" in out.files:
        say(f"wiring: wrote {out.files['topology_conf']}: run `scontrol reconfigure` for slurmctld to load it")
    return out
