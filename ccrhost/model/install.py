"""ccrhost on a compute node (deploys/install.py) and the Slurm guard that
needs it there (deploys/slurm.py). Pure: readings in, plans and problems out."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# `ccrhost --version` (click's version_option): "ccrhost, version 0.1.0"
_VERSION = re.compile(r"^ccrhost, version (\S+)$")
# how long `--version` may take before the node counts as not running it
VERSION_TIMEOUT = 30


class WheelhouseError(ValueError):
    """The controller's wheelhouse cannot install the controller's version."""


@dataclass(frozen=True)
class CommandRun:
    rc: int | None   # the command's exit status; None when the probe printed none
    output: str      # its stdout and stderr, first lines


@dataclass(frozen=True)
class InstallState:
    link: str               # "absent", "symlink", "file" (anything else at the path)
    link_target: str        # readlink of the link, "" unless a symlink
    marker: str             # <install_dir>/installed: the wheel file name and its sha256
    command: CommandRun     # <install_dir>/venv/bin/ccrhost --version


@dataclass(frozen=True)
class Wheel:
    name: str    # the wheel's file name, e.g. ccrhost-0.1.0-py3-none-any.whl
    sha256: str

    @property
    def marker(self) -> str:
        return f"{self.name} {self.sha256}"


@dataclass(frozen=True)
class InstallPlan:
    install: bool   # the venv lacks this very wheel, or its ccrhost does not run
    link: bool      # slurm_ccrhost is not the link to the venv's ccrhost
    backup: bool    # something that is not a link sits at slurm_ccrhost: kept as .ccrhost-bak


def controller_version() -> str:
    """The running ccrhost's version, as its ``--version`` prints it."""
    from importlib.metadata import version

    return version("ccrhost")


def venv(install_dir: str) -> str:
    return f"{install_dir.rstrip('/')}/venv"


def venv_command(install_dir: str) -> str:
    return f"{venv(install_dir)}/bin/ccrhost"


def version_of(run: CommandRun) -> str | None:
    first = run.output.strip().splitlines()[:1]
    match = _VERSION.match(first[0].strip()) if first else None
    return match.group(1) if match else None


def command_problem(run: CommandRun, version: str) -> str | None:
    """Why ``<path> --version`` does not show this controller's ccrhost, or None."""
    last = run.output.strip().splitlines()[-1:] or [""]
    if run.rc is None:
        return "printed no exit status"
    if run.rc == 127:
        return f"is not there (exit 127: {last[0]})" if last[0] else "is not there (exit 127)"
    if run.rc == 126:
        return f"cannot be run (exit 126: {last[0]})" if last[0] else "cannot be run (exit 126)"
    if run.rc == 124:
        return f"did not answer --version within {VERSION_TIMEOUT} s"
    if run.rc != 0:
        return f"exits {run.rc} on --version: {last[0]}"
    found = version_of(run)
    if found is None:
        first = (run.output.strip().splitlines() or [""])[0]
        return f"prints {first!r} on --version, not ccrhost's version"
    if found != version:
        return f"is ccrhost {found}, the controller {version} (its settings are written for {version})"
    return None


def install_plan(state: InstallState, wheel: Wheel, version: str, link_path: str, install_dir: str) -> InstallPlan:
    installed = state.marker == wheel.marker and command_problem(state.command, version) is None
    target = venv_command(install_dir)
    linked = link_path == target or (state.link == "symlink" and state.link_target == target)
    return InstallPlan(install=not installed, link=not linked, backup=not linked and state.link == "file")


def find_wheel(names: list[str], version: str, where: str) -> str:
    """The one ccrhost wheel of ``version`` among the wheelhouse's files."""
    ours = sorted(n for n in names if n.startswith("ccrhost-") and n.endswith(".whl"))
    exact = [n for n in ours if n.split("-")[1] == version]
    if len(exact) == 1:
        return exact[0]
    if not ours:
        raise WheelhouseError(f"{where} holds no ccrhost wheel")
    if not exact:
        found = ", ".join(n.split("-")[1] for n in ours)
        raise WheelhouseError(f"{where} holds ccrhost {found}, the controller runs {version}")
    raise WheelhouseError(f"{where} holds {len(exact)} ccrhost {version} wheels: {', '.join(exact)}; keep one")


def wheelhouse(directory: str, version: str) -> tuple[Wheel, list[Path]]:
    """The controller's wheelhouse: its ccrhost wheel for ``version`` and every
    wheel to upload. Raises WheelhouseError naming the folder and the fix."""
    import hashlib

    folder = Path(directory)
    how = "build it on the controller: pip wheel --wheel-dir {} <ccrhost checkout or ccrhost=={}>".format(
        directory, version)
    if not folder.is_dir():
        raise WheelhouseError(f"ccrhost_wheelhouse {directory} is not a folder; {how}")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(".whl"))
    try:
        name = find_wheel([p.name for p in files], version, f"ccrhost_wheelhouse {directory}")
    except WheelhouseError as exc:
        raise WheelhouseError(f"{exc}; {how}") from None
    digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    return Wheel(name, digest), files
