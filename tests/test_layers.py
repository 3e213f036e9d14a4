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
