"""The reason catalogue as data: the YAML files in ccrhost/model/catalogue/,
checked entry by entry when they are read. A malformed entry is refused
with an error naming its file and the entry; the packaged files load, and
their compiled form (what a check reads) is what they say."""

from __future__ import annotations

import ast
import fnmatch
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml

from ccrhost.model import reasons
from ccrhost.model.reasons import CatalogueError

REPO = Path(__file__).resolve().parent.parent
PACKAGED = REPO / "ccrhost" / "model" / "catalogue"

GOOD = {"code": "port_down", "level": "FAIL", "action": "reseat_cable", "scope": "port",
        "meaning": "A compute port is not ACTIVE/LinkUp.", "reads": "`state`.",
        "causes": ["a cable unplugged"], "confirm": ["ibstat <dev>"],
        "fix": ["reseat the cable", "ccrhost check --format json   # after the fix"],
        "see": "verification.md"}


def entry(**changes) -> dict:
    out = {**GOOD, **changes}
    return {k: v for k, v in out.items() if v is not None}


def write(folder: Path, name: str, entries) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(entries, sort_keys=False))
    return path


def refused(folder: Path) -> str:
    with pytest.raises(CatalogueError) as exc:
        reasons.load(folder)
    return str(exc.value)


def test_a_good_entry_loads_as_the_registry_holds_it(tmp_path):
    write(tmp_path, "ports.yaml", [entry(), entry(code="no_rdma", scope="node", proof=False)])
    loaded = reasons.load(tmp_path)
    assert list(loaded) == ["port_down", "no_rdma"]
    doc = loaded["port_down"]
    assert (doc.level, doc.action, doc.scope, doc.causes, doc.see, doc.proof) == \
        ("FAIL", "reseat_cable", "port", ("a cable unplugged",), "verification.md", False)
    # a fix starting with a command's name is set as a command line, the rest as prose
    assert [isinstance(f, reasons.Cmd) for f in doc.fix] == [False, True]


@pytest.mark.parametrize("bad, problem", [
    (entry(action=None), "entry 'port_down': missing action"),
    (entry(action=None, scope=None), "entry 'port_down': missing action, scope"),
    (entry(level="BAD"), "entry 'port_down': level 'BAD' is not one of FAIL, WARN, UNKNOWN"),
    (entry(level="OK"), "entry 'port_down': level 'OK' is not one of FAIL, WARN, UNKNOWN"),
    (entry(action="reboot_now"), "entry 'port_down': action 'reboot_now' is not one of none, restart_job, "
                                 "reset_gpu, reboot, reseat_cable, investigate, replace"),
    (entry(scope="rack"), "entry 'port_down': scope 'rack' is not one of node, gpu, nic, port"),
    (entry(drains=False), "entry 'port_down': unknown field 'drains' (the fields: code, level, action, scope, "
                          "proof, meaning, reads, causes, confirm, fix, see)"),
    (entry(code=None), "entry 2: missing code"),
    (entry(code="Port-Down"), "entry 'Port-Down': a code is lowercase letters, digits and underscores"),
    (entry(meaning=""), "entry 'port_down': meaning is not text: ''"),
    (entry(causes="a cable"), "entry 'port_down': causes is not a list of text (one item or more): 'a cable'"),
    (entry(confirm=[]), "entry 'port_down': confirm is not a list of text (one item or more): []"),
    (entry(proof="yes please"), "entry 'port_down': proof is not true or false: 'yes please'"),
    (entry(proof=True), "entry 'port_down': a proof code is UNKNOWN, not FAIL"),
    ("port_down", "entry 2: not a mapping of fields"),
])
def test_a_malformed_entry_is_refused_naming_the_file_and_the_entry(tmp_path, bad, problem):
    path = write(tmp_path, "ports.yaml", [entry(code="no_rdma"), bad])
    assert refused(tmp_path) == f"{path}: {problem}"


def test_a_code_twice_in_one_file_is_refused(tmp_path):
    path = write(tmp_path, "ports.yaml", [entry(), entry(code="no_rdma"), entry(level="WARN")])
    assert refused(tmp_path) == f"{path}: entry 'port_down': the code is in the catalogue twice (also in {path})"


def test_a_code_twice_across_files_is_refused_naming_both(tmp_path):
    first = write(tmp_path, "a_ports.yaml", [entry()])
    second = write(tmp_path, "b_links.yaml", [entry(code="link_flap"), entry(scope="nic")])
    assert refused(tmp_path) == (f"{second}: entry 'port_down': the code is in the catalogue twice "
                                 f"(also in {first})")


def test_a_file_that_is_not_a_list_of_entries_or_not_yaml_is_refused(tmp_path):
    path = write(tmp_path, "ports.yaml", {"port_down": entry()})
    assert refused(tmp_path) == f"{path}: not a list of entries"
    path.write_text("- code: port_down\n  level: [FAIL\n")
    assert refused(tmp_path).startswith(f"{path}: not valid YAML: ")


def test_the_packaged_files_load_and_are_the_registry():
    names = sorted(p.name for p in PACKAGED.glob("*.yaml"))
    assert len(names) >= 10  # one file per domain
    loaded = reasons.load(PACKAGED)
    assert loaded == reasons.REGISTRY and len(loaded) >= 90
    assert set(reasons.SOURCES.values()) == set(names)
    for name in names:  # every file holds entries, and each code says which file holds it
        codes = [e["code"] for e in yaml.safe_load((PACKAGED / name).read_text())]
        assert codes and all(reasons.SOURCES[c] == name for c in codes), name
    # the proof codes, the action and scope words all come from the entries
    assert reasons.PROOF_CODES == {c for c, d in loaded.items() if d.proof}
    assert {"allreduce_missing", "dcgm_hang", "nic_fw_stale"} <= reasons.PROOF_CODES
    assert all(loaded[c].level == "UNKNOWN" for c in reasons.PROOF_CODES)


def test_the_compiled_catalogue_is_what_the_yaml_files_say():
    committed = (PACKAGED / reasons.COMPILED).read_text()
    assert committed == reasons.compiled_text(PACKAGED), \
        "ccrhost/model/catalogue/compiled.json is out of date: run python -m ccrhost.docs"


def test_an_edit_not_yet_compiled_is_read_from_the_yaml(tmp_path):
    folder = tmp_path / "catalogue"
    shutil.copytree(PACKAGED, folder)
    registry, _ = reasons._catalogue(folder)
    assert registry == reasons.REGISTRY
    path = folder / reasons.SOURCES["port_down"]
    text = path.read_text()
    entry_at = text.index("- code: port_down\n")
    edited = text[:entry_at] + text[entry_at:].replace("  action: reseat_cable\n", "  action: investigate\n", 1)
    path.write_text(edited)
    registry, _ = reasons._catalogue(folder)
    assert registry["port_down"].action == "investigate"
    # and a bad edit is refused the same way, naming the file
    path.write_text(text[:entry_at] + text[entry_at:].replace("  action: reseat_cable\n", "", 1))
    with pytest.raises(CatalogueError) as exc:
        reasons._catalogue(folder)
    assert str(exc.value) == f"{path}: entry 'port_down': missing action"


def test_the_wheel_ships_every_catalogue_file():
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["ccrhost.model"]
    files = [p.relative_to(PACKAGED.parent).as_posix() for p in PACKAGED.iterdir()]
    assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), (files, globs)


def test_the_catalogue_does_not_import_the_verdict_code():
    # model/status.py reads the catalogue (Reason.from_dict); the catalogue takes the levels from model/levels.py
    tree = ast.parse((REPO / "ccrhost" / "model" / "reasons.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "ccrhost.model.status" not in imported and "ccrhost.model.levels" in imported
