"""ccrhost's own install on a node: the link at ``slurm_ccrhost``, the
installed wheel's marker, and whether a ccrhost command answers ``--version``."""

from __future__ import annotations

import shlex

from ccrhost.model.install import VERSION_TIMEOUT, CommandRun, InstallState, venv_command


def _version_run(command: str, search_path: str | None) -> str:
    # as the prolog runs it: its own PATH, no stdin; `timeout` and `env`
    # are found on the login shell's PATH, the command by its absolute path
    env = f"env -i PATH={shlex.quote(search_path)} " if search_path else ""
    return (f"out=$(timeout {VERSION_TIMEOUT} {env}{shlex.quote(command)} --version 2>&1 </dev/null); "
            "echo \"rc=$?\"; printf '%s\\n' \"$out\" | head -n 5")


def version_command(command: str, search_path: str | None = None) -> str:
    """``rc=<status>`` then the first lines ``<command> --version`` printed; always exits 0."""
    return _version_run(command, search_path)


def parse_version(lines: list[str]) -> CommandRun:
    lines = [line for line in lines]
    if not lines or not lines[0].startswith("rc="):
        return CommandRun(None, "\n".join(lines))
    status = lines[0][3:].strip()
    return CommandRun(int(status) if status.isdigit() else None, "\n".join(lines[1:]))


def state_command(link: str, install_dir: str) -> str:
    """``link=<kind>``, ``target=<readlink>``, ``marker=<installed>``, then the venv's ``--version`` run."""
    q_link, q_marker = shlex.quote(link), shlex.quote(f"{install_dir.rstrip('/')}/installed")
    return (
        f"if [ -L {q_link} ]; then echo link=symlink; elif [ -e {q_link} ]; then echo link=file; "
        f"else echo link=absent; fi; echo \"target=$(readlink {q_link} 2>/dev/null)\"; "
        f"echo \"marker=$(head -c 200 {q_marker} 2>/dev/null)\"; "
        + _version_run(venv_command(install_dir), None)
    )


def parse_state(lines: list[str]) -> InstallState:
    lines = list(lines)
    fields = {}
    for line in lines[:3]:
        key, _, value = line.partition("=")
        fields[key] = value.strip()
    return InstallState(link=fields.get("link", "absent"), link_target=fields.get("target", ""),
                        marker=fields.get("marker", ""), command=parse_version(lines[3:]))
