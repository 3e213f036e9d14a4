"""The Slurm integration on a node: its check settings, a prolog, a
health check and the slurm.conf fragment that names them."""

from __future__ import annotations

from pyinfra import host

from ccrhost.model.slurm import integration_files
from ccrhost.operations import cache as fact_cache
from ccrhost.operations.base import operation
from ccrhost.operations.files import converge


@operation
def integration(settings):
    """
    Install what lets Slurm run ``ccrhost check`` on this node.

    + settings: the host's validated ``HostSettings`` (the check keys, slurm_*)

    Writes /etc/ccrhost/check.yaml (what ``ccrhost check`` expects of this
    node), /etc/ccrhost/slurm-prolog.sh, /etc/ccrhost/slurm-healthcheck.sh
    and the fragment at ``slurm_fragment``. slurm.conf itself is never
    written: the site adds ``Include <slurm_fragment>`` to it once. A file
    at one of these paths that ccrhost did not write is kept as
    ``<path>.ccrhost-bak.<unix time>``.

    **Example:**

    .. code:: python

        slurm.integration(name="Install the Slurm prolog and health check", settings=settings)
    """
    files = integration_files(settings)
    states = fact_cache.files(host, [path for path, _, _ in files])
    for path, content, mode in files:
        yield from converge(path, content, states.get(path), mode)
