"""ccrhost's own install on a node as pyinfra facts (see :mod:`ccrhost.probes.install`)."""

from __future__ import annotations

from pyinfra.api import FactBase

from ccrhost.model.install import CommandRun, InstallState
from ccrhost.probes import install


class CcrhostVersion(FactBase):
    """
    Returns a :class:`~ccrhost.model.install.CommandRun` of ``<command> --version``,
    run with ``search_path`` as its only environment (as slurmd runs the prolog):

    .. code:: python

        run = host.get_fact(CcrhostVersion, command="/usr/local/bin/ccrhost", search_path="/usr/bin:/bin")
        run.rc   # 127 when it is not there
    """

    def default(self):
        return CommandRun(None, "")

    def command(self, command, search_path=None) -> str:
        return install.version_command(command, search_path)

    def process(self, output):
        return install.parse_version(list(output))


class CcrhostInstall(FactBase):
    """
    Returns the :class:`~ccrhost.model.install.InstallState` of ccrhost's venv
    under ``install_dir`` and of the link at ``link``.

    .. code:: python

        state = host.get_fact(CcrhostInstall, link="/usr/local/bin/ccrhost", install_dir="/usr/local/lib/ccrhost")
    """

    def default(self):
        return InstallState("absent", "", "", CommandRun(None, ""))

    def command(self, link, install_dir) -> str:
        return install.state_command(link, install_dir)

    def process(self, output):
        return install.parse_state(list(output))
