"""ccrhost itself on a node: the controller's version in a venv, linked at ``slurm_ccrhost``."""

from __future__ import annotations

import time
from pathlib import Path

from pyinfra import host
from pyinfra.api import FileUploadCommand, QuoteString, StringCommand

from ccrhost.facts.install import CcrhostInstall
from ccrhost.model.install import Wheel, install_plan, venv, venv_command
from ccrhost.operations.base import operation


def _step(what: str, *bits) -> StringCommand:
    # a failing step says which one, on this host's error line
    return StringCommand("{", *bits, "; } || { echo", QuoteString(f"ccrhost install: {what} failed"), ">&2; exit 1; }")


@operation
def ccrhost(settings, version: str, wheel: Wheel, wheels: list[Path]):
    """
    Install ccrhost ``version`` from the controller's wheelhouse into a venv
    on the node and link ``slurm_ccrhost`` to its command.

    + settings: the host's validated ``HostSettings`` (ccrhost_install_dir, ccrhost_wheelhouse, ccrhost_index_url, ccrhost_python, slurm_ccrhost)
    + version: the controller's ccrhost version
    + wheel: the ccrhost wheel of the wheelhouse (name and sha256)
    + wheels: every wheel file to upload (ccrhost's and its dependencies')

    Nothing is done when ``<ccrhost_install_dir>/installed`` names this very wheel,
    the venv's ccrhost answers ``--version`` with ``version`` and
    ``slurm_ccrhost`` links to it. The wheels go to
    ``<ccrhost_install_dir>/wheels.new`` over SFTP, pip installs from there alone
    (``--no-index``, unless ``ccrhost_index_url``), and they replace
    ``<ccrhost_install_dir>/wheels`` once ccrhost runs. A file (not a link) at
    ``slurm_ccrhost`` is kept as ``<path>.ccrhost-bak.<unix time>``.

    **Example:**

    .. code:: python

        install.ccrhost(name="Install ccrhost", settings=settings, version="0.1.0", wheel=wheel, wheels=files)
    """
    home = settings.ccrhost_install_dir.rstrip("/")
    link = settings.slurm_ccrhost
    state = host.get_fact(CcrhostInstall, link=link, install_dir=home)
    plan = install_plan(state, wheel, version, link, home)
    if plan.install:
        staged = f"{home}/wheels.new"
        env = venv(home)
        yield StringCommand("rm -rf", QuoteString(staged), "&& mkdir -p", QuoteString(staged))
        for path in wheels:
            yield FileUploadCommand(str(path), f"{staged}/{path.name}")
        yield _step(f"{settings.ccrhost_python} -m venv {env}",
                    "[ -x", QuoteString(f"{env}/bin/python"), "] ||", QuoteString(settings.ccrhost_python),
                    "-m venv", QuoteString(env))
        # pip reads no pip.conf of the node's: the wheels named here, and the index if one is set, are all it uses
        source = (["--index-url", QuoteString(settings.ccrhost_index_url)] if settings.ccrhost_index_url
                  else ["--no-index"])
        pip = ["PIP_CONFIG_FILE=/dev/null", QuoteString(f"{env}/bin/python"), "-m pip install -q",
               "--disable-pip-version-check", *source, "--find-links", QuoteString(staged)]
        # the dependencies, then this very build of ccrhost (pip keeps a same-numbered one otherwise)
        yield _step("pip install of ccrhost's dependencies", *pip, QuoteString(f"{staged}/{wheel.name}"))
        yield _step(f"pip install of {wheel.name}", *pip, "--no-deps --force-reinstall",
                    QuoteString(f"{staged}/{wheel.name}"))
        yield _step(f"{venv_command(home)} --version",
                    QuoteString(venv_command(home)), "--version | grep -qx", QuoteString(f"ccrhost, version {version}"))
        yield StringCommand("rm -rf", QuoteString(f"{home}/wheels"), "&& mv", QuoteString(staged),
                            QuoteString(f"{home}/wheels"), "&& printf '%s\\n'", QuoteString(wheel.marker), ">",
                            QuoteString(f"{home}/installed"))
    if plan.link:
        if plan.backup:
            yield StringCommand("mv -f", QuoteString(link), QuoteString(f"{link}.ccrhost-bak.{int(time.time())}"))
        yield StringCommand("mkdir -p", QuoteString(str(Path(link).parent)), "&& ln -sfn",
                            QuoteString(venv_command(home)), QuoteString(link))
