"""ccrhost onto the nodes (deploys/install.py) and the Slurm guard, without
the lab: the probes run in a real shell against real files, the plans and
problems are pure. The lab test is tests/test_install_e2e.py."""

import subprocess
from pathlib import Path

import pytest

from ccrhost.model.install import (
    CommandRun,
    InstallState,
    Wheel,
    WheelhouseError,
    command_problem,
    controller_version,
    install_plan,
    venv_command,
    wheelhouse,
)
from ccrhost.probes import install as probe

VERSION = controller_version()


def sh(command: str) -> list[str]:
    run = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr  # a probe never fails its fact
    return run.stdout.splitlines()


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_a_missing_command_is_named_as_not_there(tmp_path):
    run = probe.parse_version(sh(probe.version_command(str(tmp_path / "ccrhost"), "/usr/bin:/bin")))
    assert run.rc == 127
    assert command_problem(run, VERSION).startswith("is not there (exit 127: ")


def test_a_file_that_cannot_run_and_a_stranger_are_refused(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("not a program\n")
    run = probe.parse_version(sh(probe.version_command(str(plain), "/usr/bin:/bin")))
    assert run.rc == 126 and command_problem(run, VERSION).startswith("cannot be run (exit 126")
    other = script(tmp_path / "other", "echo 'some tool 1.0'\n")
    run = probe.parse_version(sh(probe.version_command(other, "/usr/bin:/bin")))
    assert command_problem(run, VERSION) == "prints 'some tool 1.0' on --version, not ccrhost's version"
    broken = script(tmp_path / "broken", "echo 'ModuleNotFoundError: No module named ccrhost' >&2; exit 1\n")
    run = probe.parse_version(sh(probe.version_command(broken, "/usr/bin:/bin")))
    assert command_problem(run, VERSION) == "exits 1 on --version: ModuleNotFoundError: No module named ccrhost"


def test_the_version_runs_with_the_prologs_path_alone(tmp_path):
    # slurmd gives the prolog no environment: the probe runs the command with slurm_path as its only one
    seen = script(tmp_path / "ccrhost", 'echo "ccrhost, version 9.9"; echo "PATH=$PATH HOME=${HOME-unset}"\n')
    run = probe.parse_version(sh(probe.version_command(seen, "/opt/x:/bin")))
    assert run.rc == 0 and run.output.splitlines()[1] == "PATH=/opt/x:/bin HOME=unset"
    assert command_problem(run, "9.9") is None
    assert command_problem(run, "1.0") == "is ccrhost 9.9, the controller 1.0 (its settings are written for 1.0)"


def test_the_real_command_answers_with_the_controllers_version():
    import shutil
    import sys

    mine = shutil.which("ccrhost", path=str(Path(sys.executable).parent))
    run = probe.parse_version(sh(probe.version_command(mine, "/usr/bin:/bin")))
    assert run == CommandRun(0, f"ccrhost, version {VERSION}")
    assert command_problem(run, VERSION) is None


def test_install_state_read_and_planned(tmp_path):
    home = str(tmp_path / "lib")
    link = tmp_path / "bin" / "ccrhost"
    wheel = Wheel(f"ccrhost-{VERSION}-py3-none-any.whl", "ab" * 32)

    empty = probe.parse_state(sh(probe.state_command(str(link), home)))
    assert (empty.link, empty.link_target, empty.marker, empty.command.rc) == ("absent", "", "", 127)
    plan = install_plan(empty, wheel, VERSION, str(link), home)
    assert (plan.install, plan.link, plan.backup) == (True, True, False)

    (tmp_path / "lib/venv/bin").mkdir(parents=True)
    script(tmp_path / "lib/venv/bin/ccrhost", f'echo "ccrhost, version {VERSION}"\n')
    (tmp_path / "lib/installed").write_text(wheel.marker + "\n")
    link.parent.mkdir()
    link.symlink_to(venv_command(home))
    done = probe.parse_state(sh(probe.state_command(str(link), home)))
    assert done == InstallState("symlink", venv_command(home), wheel.marker, CommandRun(0, f"ccrhost, version {VERSION}"))
    plan = install_plan(done, wheel, VERSION, str(link), home)
    assert (plan.install, plan.link) == (False, False)  # a rerun changes nothing
    # another build of the same version is installed again
    assert install_plan(done, Wheel(wheel.name, "cd" * 32), VERSION, str(link), home).install

    link.unlink()
    link.write_text("#!/bin/sh\n")  # a site's own file at the path: kept as a backup, then linked
    plan = install_plan(probe.parse_state(sh(probe.state_command(str(link), home))), wheel, VERSION, str(link), home)
    assert (plan.install, plan.link, plan.backup) == (False, True, True)


def test_the_wheelhouse_must_hold_the_controllers_version(tmp_path):
    with pytest.raises(WheelhouseError, match=r"^ccrhost_wheelhouse .*/none is not a folder; build it on the "
                                              r"controller: pip wheel --wheel-dir "):
        wheelhouse(str(tmp_path / "none"), VERSION)
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh/click-8.1.0-py3-none-any.whl").write_bytes(b"x")
    with pytest.raises(WheelhouseError, match="holds no ccrhost wheel"):
        wheelhouse(str(tmp_path / "wh"), VERSION)
    (tmp_path / "wh/ccrhost-0.0.1-py3-none-any.whl").write_bytes(b"old")
    with pytest.raises(WheelhouseError, match=f"holds ccrhost 0.0.1, the controller runs {VERSION}"):
        wheelhouse(str(tmp_path / "wh"), VERSION)
    (tmp_path / f"wh/ccrhost-{VERSION}-py3-none-any.whl").write_bytes(b"new")
    wheel, files = wheelhouse(str(tmp_path / "wh"), VERSION)
    assert wheel == Wheel(f"ccrhost-{VERSION}-py3-none-any.whl",
                          "11507a0e2f5e69d5dfa40a62a1bd7b6ee57e6bcd85c67c9b8431b36fff21c437")
    assert [f.name for f in files] == ["ccrhost-0.0.1-py3-none-any.whl", f"ccrhost-{VERSION}-py3-none-any.whl",
                                       "click-8.1.0-py3-none-any.whl"]


def test_install_keys_are_validated_naming_host_key_and_value():
    from ccrhost.settings import InventoryDataError, validate_host

    with pytest.raises(InventoryDataError) as caught:
        validate_host("gpu01", {"ccrhost_index_url": "ftp://mirror/simple", "ccrhost_python": "python3; rm -rf /",
                                "ccrhost_install_dir": "relative/lib"})
    text = "\n".join(str(e) for e in caught.value.errors)
    assert "gpu01: ccrhost_index_url = 'ftp://mirror/simple'" in text
    assert "gpu01: ccrhost_python = 'python3; rm -rf /'" in text
    assert "gpu01: ccrhost_install_dir = 'relative/lib'" in text
    settings = validate_host("gpu01", {"ccrhost_index_url": "file:///srv/mirror/simple"})
    assert (settings.ccrhost_install_dir, settings.ccrhost_python) == ("/usr/local/lib/ccrhost", "python3")
