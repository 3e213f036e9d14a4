"""The reason-code registry against the code that gives reasons.

Static: every place in ccrhost/ (the lab aside) that makes a reason is read
with the ast module, and each code it can give must be registered. A code
that is a literal is read directly; one that is a parameter is followed to
the callers that pass it (``_unknown(code, ...)``, ``not_verified(..., code,
...)``, the ``(code, ...)`` tuples of ``_degraded_links``); ``exc.code`` to
the exception's constructor calls. A code built by an f-string
(``f"link_{name}"``) cannot be read statically: the function that builds it
is run with inputs that make every variant, and those must be registered.
Runtime checks: ``ccrhost explain``, and the handbook entry per code.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path

import pytest

from ccrhost.cli import entry
from ccrhost.model import datapath as dp
from ccrhost.model import reasons
from ccrhost.model.status import FAIL, UNKNOWN, WARN

ROOT = Path(__file__).resolve().parent.parent / "ccrhost"
LEVELS = {"FAIL": FAIL, "WARN": WARN, "UNKNOWN": UNKNOWN}
# The calls that make a reason, and the position of their code argument.
# A new helper that takes a code is found automatically when its parameter
# flows into one of these; add it here only if the scan says so.
MAKERS = {"Reason": 1}


def _sources():
    for path in sorted(ROOT.rglob("*.py")):
        if "lab" in path.relative_to(ROOT).parts:
            continue  # the lab emulates nodes; production never imports it
        yield path, ast.parse(path.read_text(), str(path))


def _parents(tree):
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child.parent = node


def _enclosing_function(node):
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node = getattr(node, "parent", None)
    return node


def _name(func) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


class Scan:
    def __init__(self):
        self.literal: dict[str, list[str]] = {}       # code -> where
        self.levels: dict[str, set[str]] = {}         # code -> levels given at a literal site
        self.patterns: dict[str, str] = {}            # regex of an f-string code -> where
        self.unresolved: list[str] = []

    def add(self, code, where, level=None):
        self.literal.setdefault(code, []).append(where)
        if level:
            self.levels.setdefault(code, set()).add(level)


def scan() -> Scan:
    trees = list(_sources())
    for _, tree in trees:
        _parents(tree)
    makers = dict(MAKERS)          # function name -> index of its code argument
    tuple_makers: dict[str, int] = {}  # function -> index of an argument of (code, ...) tuples
    exc_classes: set[str] = set()  # exceptions whose .code is a reason code
    sites = []
    # find the helpers that forward a code into a reason, until nothing new turns up
    changed = True
    while changed:
        changed = False
        sites.clear()
        for path, tree in trees:
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or _name(node.func) not in makers:
                    continue
                index = makers[_name(node.func)]
                if index >= len(node.args):
                    continue
                sites.append((path, node, node.args[index]))
                arg, func = node.args[index], _enclosing_function(node)
                params = [a.arg for a in func.args.args] if func else []
                if isinstance(arg, ast.Name) and arg.id in params:
                    if makers.get(func.name) != params.index(arg.id):
                        makers[func.name] = params.index(arg.id)
                        changed = True
                elif isinstance(arg, ast.Name) and func is not None:
                    # for code, ... in PARAM (a loop or a comprehension): PARAM holds (code, ...) tuples
                    for loop in ast.walk(func):
                        if (isinstance(loop, (ast.For, ast.comprehension)) and isinstance(loop.target, ast.Tuple)
                                and isinstance(loop.target.elts[0], ast.Name) and loop.target.elts[0].id == arg.id
                                and isinstance(loop.iter, ast.Name) and loop.iter.id in params):
                            if tuple_makers.get(func.name) != params.index(loop.iter.id):
                                tuple_makers[func.name] = params.index(loop.iter.id)
                                changed = True
                elif isinstance(arg, ast.Attribute) and arg.attr == "code" and func is not None:
                    for handler in ast.walk(func):
                        if isinstance(handler, ast.ExceptHandler) and handler.name == getattr(arg.value, "id", None):
                            name = _name(handler.type)
                            if name and name not in exc_classes:
                                exc_classes.add(name)
                                changed = True

    result = Scan()

    def level_of(call):
        first = call.args[0] if call.args else None
        return LEVELS.get(first.id) if isinstance(first, ast.Name) else None

    for path, call, arg in sites:
        where = f"{path.relative_to(ROOT.parent)}:{call.lineno}"
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            result.add(arg.value, where, level_of(call) if _name(call.func) == "Reason" else None)
        elif isinstance(arg, ast.JoinedStr):
            regex = "".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".+" for v in arg.values)
            result.patterns[f"^{regex}$"] = where
        elif not isinstance(arg, (ast.Name, ast.Attribute)):
            result.unresolved.append(f"{where}: code {ast.unparse(arg)}")
        else:
            func = _enclosing_function(call)
            forwarded = func is not None and (func.name in makers or func.name in tuple_makers)
            if not forwarded and not (isinstance(arg, ast.Attribute) and arg.attr == "code"):
                result.unresolved.append(f"{where}: code {ast.unparse(arg)}")
    # the tuples handed to a tuple forwarder, and the exceptions' constructor calls
    for path, tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            where = f"{path.relative_to(ROOT.parent)}:{node.lineno}"
            name = _name(node.func)
            if name in tuple_makers and tuple_makers[name] < len(node.args):
                arg = node.args[tuple_makers[name]]
                level = node.args[0].id if node.args and isinstance(node.args[0], ast.Name) else None
                for item in getattr(arg, "elts", []):
                    first = item.elts[0] if isinstance(item, ast.Tuple) and item.elts else None
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        result.add(first.value, where, LEVELS.get(level))
                    else:
                        result.unresolved.append(f"{where}: code {ast.unparse(item)}")
            if name in exc_classes and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    result.add(arg.value, where)
                else:
                    result.unresolved.append(f"{where}: code {ast.unparse(arg)}")
    return result


@functools.cache
def scanned() -> Scan:
    """The scan, once per process and only when a test asks: at import it ran in every xdist
    worker's collection (some 3 s of CPU each)."""
    return scan()


# --- the codes an f-string makes, by running the code that makes them ---------

def _link_counter_codes() -> set[str]:
    before = {"mlx5_0/1": dict.fromkeys(dp.COUNTERS, 0)}
    after = {"mlx5_0/1": dict.fromkeys(dp.COUNTERS, 5)}
    return {r.code for r in dp.check_link_health(before, after, dp.LinkThresholds(symbol_error=0,
                                                                                   link_error_recovery=0), 3)}


def _version_codes() -> set[str]:
    hosts = {f"h{i}": dp.HostVersions(mlx5=v, nvidia=v) for i, v in enumerate(["2.0", "2.0", "1.0"])}
    out = dp.check_fleet_versions(hosts, dp.RequiredVersions(mlx5="3.0", nvidia="3.0"))
    return {r.code for rs in out.values() for r in rs}


def _version_unknown_codes() -> set[str]:
    hosts = {"h": dp.HostVersions(mlx5="abc", nvidia="abc")}
    out = dp.check_fleet_versions(hosts, dp.RequiredVersions(mlx5="3.0", nvidia="3.0"))
    return {r.code for rs in out.values() for r in rs}


# regex of each f-string code in the source -> the function that makes every variant
DYNAMIC = {
    r"^link_.+$": _link_counter_codes,
    r"^.+_mismatch$": _version_codes,
    r"^.+_required$": _version_codes,
    r"^.+_version_unknown$": _version_unknown_codes,
}


def emitted() -> dict[str, str]:
    """Every code the source can give -> where it is made."""
    codes = {c: where[0] for c, where in scanned().literal.items()}
    for pattern, where in scanned().patterns.items():
        for code in DYNAMIC[pattern]() if pattern in DYNAMIC else ():
            if re.match(pattern, code):
                codes.setdefault(code, where)
    return codes


CATALOGUE = "ccrhost/model/catalogue"


def _catalogue_file(code: str) -> str:
    """The catalogue file whose codes share the longest start with ``code``."""
    def shared(other):
        return len(os.path.commonprefix([code, other]))
    return max(reasons.SOURCES.items(), key=lambda item: shared(item[0]))[1]


def _entry_hint(code: str, where: str) -> str:
    level = "/".join(sorted(scanned().levels.get(code, ()))) or "LEVEL"
    return (f"{code} (made at {where}): add an entry to {CATALOGUE}/{_catalogue_file(code)} (or the file of its "
            f"domain): code: {code}, level: {level}, action, scope, meaning, reads, causes, confirm, fix, see "
            "(the fields: ccrhost/model/reasons.py), then run python -m ccrhost.docs")


def test_the_scan_resolves_every_code_argument():
    assert not scanned().unresolved, ("a reason code the scan cannot follow; make it a literal, a parameter of a "
                                 "helper, or teach tests/test_reasons.py: " + "; ".join(scanned().unresolved))
    unknown = {p: w for p, w in scanned().patterns.items() if p not in DYNAMIC}
    assert not unknown, ("a reason code made by an f-string: add its pattern and a function that makes every "
                         f"variant to DYNAMIC in tests/test_reasons.py: {unknown}")
    # the scan does find what it is meant to: a literal, a forwarded one, a tuple, an exception's code
    for code in ("port_down", "check_failed", "unreachable", "nic_pcie_width", "gpu_pcie_gen", "gpu_unknown_model",
                 "check_error"):
        assert code in scanned().literal, code


def test_every_code_the_code_can_give_is_registered():
    missing = {c: w for c, w in emitted().items() if c not in reasons.REGISTRY}
    assert not missing, "unregistered reason codes:\n" + "\n".join(_entry_hint(c, w) for c, w in missing.items())


def test_no_registered_code_is_dead():
    dead = sorted(set(reasons.REGISTRY) - set(emitted()))
    assert not dead, ("registered but no code gives them: "
                      f"{', '.join(f'{c} ({CATALOGUE}/{reasons.SOURCES[c]})' for c in dead)}; remove their "
                      "entries from those files (or the code that gave them was lost)")


def test_registered_levels_are_the_levels_the_code_gives():
    wrong = {c: (reasons.REGISTRY[c].level, sorted(levels)) for c, levels in scanned().levels.items()
             if c in reasons.REGISTRY and levels != {reasons.REGISTRY[c].level}}
    assert not wrong, f"registry level vs the level in the source: {wrong}"


def test_dynamic_variants_are_what_the_runtime_gives():
    assert _link_counter_codes() == {"link_flap", *(f"link_{c}" for c in dp.COUNTERS if c != "link_downed")}
    assert _version_codes() == {"mlx5_mismatch", "nvidia_mismatch", "mlx5_required", "nvidia_required"}


def test_each_entry_is_complete():
    for doc in reasons.REGISTRY.values():
        assert doc.meaning and doc.reads and doc.causes and doc.confirm and doc.fix, doc.code
        assert re.fullmatch(r"[a-z0-9_]+", doc.code), doc.code
        if doc.see:
            page = doc.see.split("#")[0]
            assert (ROOT.parent / "docs" / page).is_file(), f"{doc.code}: see {doc.see}"


def test_every_code_has_an_action_and_a_scope_in_the_handbook():
    from ccrhost.docs import reasons_handbook
    from ccrhost.model.actions import ACTIONS, SCOPES

    page = reasons_handbook()
    assert len(reasons.REGISTRY) >= 90
    for code, doc in reasons.REGISTRY.items():
        assert doc.action in ACTIONS and doc.scope in SCOPES, (code, doc.action, doc.scope)
        entry_md = page.split(f"## `{code}`\n")[1].split("\n## ")[0]
        assert f"**Action:** `{doc.action}`; **scope:** {doc.scope}" in entry_md, code
        assert f"Action: {doc.action}; scope: {doc.scope}\n" in reasons.entry_text(doc), code
    # the table is not one default: the failures a machine can fix say so, the rest do not
    assert reasons.REGISTRY["gpu_row_remap_pending"].action == "reset_gpu"
    assert reasons.REGISTRY["gpu_fell_off_bus"].action == "reboot"
    assert reasons.REGISTRY["gpu_row_remap_failure"].action == "replace"
    assert reasons.REGISTRY["port_down"].action == "reseat_cable"
    assert reasons.REGISTRY["gpu_xid"].action == "restart_job"
    assert {d.action for d in reasons.REGISTRY.values()} == set(ACTIONS)
    assert {d.scope for d in reasons.REGISTRY.values()} == set(SCOPES)


def test_explain_prints_the_registry_entry(capsys):
    with pytest.raises(SystemExit) as done:
        entry(["explain", "acs_redirect"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out == reasons.entry_text(reasons.REGISTRY["acs_redirect"])
    assert out.startswith("acs_redirect (FAIL)\nAction: investigate; scope: node\n\nPCIe ACS redirect is on at a bridge")
    assert "  setpci -s <bdf> ECAP_ACS+0x6.w=0000:003d   # what the deploy writes, now and at boot\n" in out


def test_explain_of_an_unknown_code_exits_2_naming_it_and_the_closest(capsys):
    with pytest.raises(SystemExit) as done:
        entry(["explain", "link_flapping"])
    assert done.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Error: unknown reason code 'link_flapping'; did you mean: link_flap" in captured.err
    with pytest.raises(SystemExit) as done:
        entry(["explain", "zzzz"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "unknown reason code 'zzzz'; known codes: accept_budget_exceeded, accept_not_run, acs_redirect," in err


def test_the_handbooks_calc_commands_run(tmp_path, monkeypatch, capsys):
    # the commands that need no node: each runs as written, on a job file like the one the entry means
    import shlex

    monkeypatch.chdir(tmp_path)
    (tmp_path / "JOB.yaml").write_text("tokens_per_gpu_step: 8192\ndp_size: 1024\n")
    commands = sorted({c.split("#")[0].strip() for d in reasons.REGISTRY.values() for c in (*d.confirm, *d.fix)
                       if c.startswith("ccrhost calc")})
    assert len(commands) >= 4
    for command in commands:
        with pytest.raises(SystemExit) as done:
            entry(shlex.split(command)[1:])
        assert done.value.code == 0, (command, capsys.readouterr().err)
        assert "CCR" in capsys.readouterr().out, command


def _written_prefixes() -> dict[str, str]:
    """Every ``*_PREFIX`` constant of ccrhost (outside the lab) whose text is
    one ccrhost writes into a node's reason or comment: ``ccrhost...:``."""
    import ast
    from pathlib import Path

    root = Path(reasons.__file__).resolve().parent.parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        if "lab" in path.relative_to(root).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str) and node.value.value.startswith("ccrhost") \
                    and node.value.value.endswith(":"):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.endswith("PREFIX"):
                        found[f"{path.relative_to(root)}:{target.id}"] = node.value.value
    return found


def test_every_reason_prefix_ccrhost_writes_is_known_to_explain(capsys):
    # issue 46: rollout left "ccrhost rollout: ..." reasons that explain did not know (exit 2, ~150 codes)
    from ccrhost.model.drain_reason import WRITTEN_PREFIXES

    written = _written_prefixes()
    assert "fleet/rollout.py:REASON_PREFIX" in written and "model/managed.py:DRAIN_PREFIX" in written
    assert set(written.values()) == set(WRITTEN_PREFIXES)
    for prefix in WRITTEN_PREFIXES:
        # as `sinfo -R` shows it: the reason, then who set it and when
        with pytest.raises(SystemExit) as done:
            entry(["explain", f"{prefix} firmware 28.39 root 2026-12-05T10:00:00 gpu[01-04]"])
        out = capsys.readouterr().out
        assert done.value.code == 0, prefix
        assert out.startswith(f"{prefix} ") and out.replace("\n", " ").rstrip().endswith(
            WRITTEN_PREFIXES[prefix].split()[-1]), prefix


def test_a_prefixed_reason_with_codes_explains_the_prefix_then_each_code(capsys):
    with pytest.raises(SystemExit) as done:
        entry(["explain", "ccrhost: held: port_down: drain cap reached: 4 of 4 nodes"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("ccrhost: held: a node comment, not a drain: the drain cap")
    assert "\n\n" + reasons.entry_text(reasons.REGISTRY["port_down"]) in out
    # a plain ccrhost drain: its codes alone, as before
    with pytest.raises(SystemExit):
        entry(["explain", "ccrhost: port_down: port mlx5_0/1 is DOWN/Disabled [action reseat_cable]"])
    assert capsys.readouterr().out == reasons.entry_text(reasons.REGISTRY["port_down"])
