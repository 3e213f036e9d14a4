"""The Slurm integration on a node: its check settings, a prolog, a
health check and the slurm.conf fragment that names them."""

from __future__ import annotations

from pyinfra import host

from ccrhost.facts.install import CcrhostVersion
from ccrhost.model.install import command_problem, controller_version
from ccrhost.model.slurm import integration_files
from ccrhost.operations import cache as fact_cache
from ccrhost.operations.base import fail, operation
from ccrhost.operations.files import converge


@operation
def integration(settings, version: str | None = None):
    """
    Install what lets Slurm run ``ccrhost check`` on this node.

    + settings: the host's validated ``HostSettings`` (the check keys, slurm_*)
    + version: the ccrhost version the node must run; default: the controller's

    First ``slurm_ccrhost --version`` runs on the node as slurmd would run
    the prolog (``slurm_path`` its only environment): a node where it does
    not answer with ``version`` fails, naming the path, and keeps every file
    as it was, since a prolog that cannot run drains the node at the first job.

    Writes /etc/ccrhost/check.yaml (what ``ccrhost check`` expects of this
    node), /etc/ccrhost/slurm-prolog.sh, the health check per
    ``slurm_healthcheck`` (/etc/ccrhost/slurm-healthcheck.sh; beside LBNL
    NHC /etc/nhc/scripts/ccrhost.nhc; none) and the fragment at
    ``slurm_fragment``. slurm.conf and nhc.conf are never written: the site
    adds ``Include <slurm_fragment>`` (and ``* || check_ccrhost``) once. A file
    at one of these paths that ccrhost did not write is kept as
    ``<path>.ccrhost-bak.<unix time>``.

    **Example:**

    .. code:: python

        slurm.integration(name="Install the Slurm prolog and health check", settings=settings)
    """
    found = host.get_fact(CcrhostVersion, command=settings.slurm_ccrhost, search_path=settings.slurm_path)
    problem = command_problem(found, version or controller_version())
    if problem:
        yield from fail(f"slurm_ccrhost {settings.slurm_ccrhost} {problem}: no prolog or health check written "
                        "(install ccrhost on the node first: deploys/install.py)")
        return
    files = integration_files(settings)
    states = fact_cache.files(host, [path for path, _, _ in files])
    for path, content, mode in files:
        yield from converge(path, content, states.get(path), mode)
