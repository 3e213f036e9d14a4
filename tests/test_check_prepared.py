"""`ccrhost check` keeps its validated settings between runs
(ccrhost.node.prepared) and validates in full again whenever an input
changed: the config's bytes, an override, ccrhost's own sources."""

from __future__ import annotations

import dataclasses
import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

from ccrhost.node import prepared
from ccrhost.settings import validate_host

REPO = Path(__file__).resolve().parent.parent


def check(cache: Path, *args: str, importtime: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "CCRHOST_CHECK_CACHE": str(cache)}
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "ccrhost", "check", "--format", "json", *args],
                          capture_output=True, text=True, cwd=REPO, env=env)


def imported(run: subprocess.CompletedProcess) -> set[str]:
    """The modules a run imported (python -X importtime lines on stderr)."""
    return {line.split("|")[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}


def test_a_second_check_loads_the_kept_settings_without_validating(tmp_path):
    cache, config = tmp_path / "kept", tmp_path / "check.yaml"
    config.write_text("verify_profile: hgx-h100-8x400\nverify_gpu_count: 4\n")
    first = check(cache, "--config", str(config), importtime=True)
    assert "ccrhost.settings" in imported(first) and "pydantic" in imported(first)
    assert cache.exists() and cache.stat().st_mode & 0o777 == 0o600
    second = check(cache, "--config", str(config), importtime=True)
    assert "ccrhost.settings" not in imported(second) and "pydantic" not in imported(second)
    assert "yaml" not in imported(second)
    # the same verdict both ways (this machine has no RDMA: FAIL, with the settings' expectation)
    one, two = (json.loads(r.stdout[r.stdout.index("{"):]) for r in (first, second))
    assert (one["status"], one["reasons"]) == (two["status"], two["reasons"])


def test_a_hand_edited_config_is_validated_again(tmp_path):
    cache, config = tmp_path / "kept", tmp_path / "check.yaml"
    config.write_text("verify_profile: hgx-h100-8x400\n")
    assert check(cache, "--config", str(config)).returncode == 2
    config.write_text("verify_profile: hgx-h100-8x400\nverify_min_ccr_fraction: 1.5\n")
    bad = check(cache, "--config", str(config))
    assert bad.returncode == 3 and "verify_min_ccr_fraction = 1.5" in bad.stderr
    assert json.loads(bad.stdout)["reasons"][0]["code"] == "check_config"
    # an override is an input too
    config.write_text("verify_profile: hgx-h100-8x400\n")
    assert check(cache, "--config", str(config)).returncode == 2
    assert check(cache, "--config", str(config), "--gpus", "0").returncode == 3


def kept(tmp_path):
    settings = validate_host("n1", {"verify_profile": "hgx-h100-8x400",
                                    "verify_gpu_xid_ignore": [13, 31]}).check_settings()
    given = prepared.inputs(b"verify_profile: hgx-h100-8x400\n", {}, "n1")
    path = tmp_path / "state" / "kept"
    prepared.store(given, settings, str(path))
    return settings, given, path


def test_kept_settings_round_trip_exactly(tmp_path):
    settings, given, path = kept(tmp_path)
    assert prepared.load(given, str(path)) == settings
    other = prepared.inputs(b"verify_profile: hgx-h100-8x400\n#\n", {}, "n1")
    assert prepared.load(other, str(path)) is None


def test_a_file_others_may_write_is_never_loaded(tmp_path):
    settings, given, path = kept(tmp_path)
    path.chmod(0o666)
    assert prepared.load(given, str(path)) is None
    path.chmod(0o600)
    path.parent.chmod(0o777)
    assert prepared.load(given, str(path)) is None
    path.parent.chmod(0o700)
    assert prepared.load(given, str(path)) == settings


def test_a_torn_or_foreign_file_is_a_miss(tmp_path):
    settings, given, path = kept(tmp_path)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    assert prepared.load(given, str(path)) is None
    # a record of a class outside the model is refused, not built
    path.write_bytes(marshal.dumps((given, {"\0record": "subprocess:Popen", "fields": {"args": "true"}})))
    assert prepared.load(given, str(path)) is None


def test_a_record_whose_fields_changed_is_a_miss(tmp_path):
    settings, given, path = kept(tmp_path)
    given_back, encoded = marshal.loads(path.read_bytes())
    del encoded["fields"]["judged_by"]["fields"]["beta"]  # as if written by a ccrhost whose Policy had no beta
    path.write_bytes(marshal.dumps((given_back, encoded)))
    assert prepared.load(given, str(path)) is None
    assert {f.name for f in dataclasses.fields(settings.judged_by)} >= {"beta"}


def test_a_changed_source_file_is_a_new_input(tmp_path, monkeypatch):
    before = prepared.inputs(b"", {}, "n1")
    module = tmp_path / "ccrhost"
    (module / "model").mkdir(parents=True)
    (module / "settings.py").write_text("x = 1\n")
    monkeypatch.setattr(prepared, "_PACKAGE", str(module))
    one = prepared.inputs(b"", {}, "n1")
    (module / "settings.py").write_text("x = 22\n")
    assert prepared.inputs(b"", {}, "n1") != one != before
