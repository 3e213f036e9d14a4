"""Data flows one way: probes -> facts -> model -> operations and checks ->
reports, and the lab is its own area. Each rule is read from the imports."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ccrhost"


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def offenders(folder: str, forbidden: str) -> list[str]:
    return sorted(f"{p.relative_to(PACKAGE)} imports {m}" for p in (PACKAGE / folder).rglob("*.py")
                  for m in imports(p) if m == forbidden or m.startswith(forbidden + "."))


def test_the_model_imports_nothing_of_the_probes():
    # the records the probes fill are the model's vocabulary and live in model/
    assert offenders("model", "ccrhost.probes") == []


def test_operations_never_import_the_fleet_layer_above_them():
    assert offenders("operations", "ccrhost.fleet") == []


def test_production_code_never_imports_the_lab():
    found = [f"{p.relative_to(PACKAGE)} imports {m}" for p in PACKAGE.rglob("*.py") if "lab" not in p.parts
             for m in imports(p) if m.startswith("ccrhost.lab")]
    assert found == []


def test_the_lab_slurm_cluster_sits_on_the_fleet_not_beside_it():
    # lab/fleet.py starts the cluster (imports lab/slurm.py); lab/slurm.py only names Lab for type checking
    runtime = set()
    for node in ast.parse((PACKAGE / "lab/slurm.py").read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            runtime.add(node.module)
    assert "ccrhost.lab.fleet" not in runtime


def _module_graph() -> dict[str, set[str]]:
    """Each ccrhost module -> the ccrhost modules it imports, at any depth of
    the file (function-level imports too: they are circles all the same)."""
    mods = {}
    for p in PACKAGE.rglob("*.py"):
        rel = p.relative_to(PACKAGE.parent).with_suffix("")
        mods[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = p
    graph = {}
    for name, p in mods.items():
        deps = set()
        for m in imports(p):
            while m and m not in mods:
                m = m.rpartition(".")[0]
            if m and m not in (name, "ccrhost"):
                deps.add(m)
        graph[name] = deps
    return graph


def _reach(graph, start) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for dep in graph[todo.pop()] - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


def test_no_import_circle():
    graph = _module_graph()
    reach = {m: _reach(graph, m) for m in graph}
    # a module that reaches itself is on a circle: name each circle once, by its members
    circles = {" <-> ".join(sorted(n for n in reach[m] if m in reach[n])) for m in graph if m in reach[m]}
    assert sorted(circles) == []


def test_no_module_outside_the_lab_past_700_lines():
    # one concern per file: a module this long holds several (docs/development.md, code map)
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if "lab" not in p.parts
            if (n := len(p.read_text().splitlines())) > 700}
    assert long == {}
