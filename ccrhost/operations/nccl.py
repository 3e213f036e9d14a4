"""NCCL's environment: /etc/nccl.conf (a managed block) and a shell profile."""

from __future__ import annotations

from pyinfra import host

from ccrhost.model import nccl
from ccrhost.operations import cache as fact_cache
from ccrhost.operations.base import fail, operation
from ccrhost.operations.files import MANAGED_HEADER, converge


@operation
def environment(settings, conf_path: str = nccl.CONF_PATH, profile_path: str = nccl.PROFILE_PATH):
    """
    Write the NCCL settings derived from this node's RDMA ports.

    + settings: the host's validated ``HostSettings``
    + conf_path: NCCL's own config file; only ccrhost's marked block in it
      is rewritten, the site's lines around it stay as they are
    + profile_path: the same settings as shell exports, owned by ccrhost

    **Example:**

    .. code:: python

        nccl.environment(name="Write NCCL environment", settings=settings)
    """
    try:
        env = nccl.derive(fact_cache.rdma(host), settings)
    except nccl.NcclError as exc:
        yield from fail(f"NCCL: {exc}")
        return
    states = fact_cache.files(host, [conf_path, profile_path])
    current = states.get(conf_path)
    if current is not None and current.error:
        yield from fail(f"{conf_path} left untouched: {current.error}")
        return
    existing = current.content if current else None
    try:
        merged = nccl.merge_block(existing, nccl.render_block(env))
    except nccl.BlockError as exc:
        yield from fail(f"{conf_path} left untouched: {exc}")
        return
    for key in nccl.site_overrides(existing, env):
        host.log(f"{conf_path}: the site sets {key} above ccrhost's block, and NCCL keeps the first value")
    yield from converge(conf_path, merged, current, owned=False, site=nccl.site_text(existing))
    yield from converge(profile_path, MANAGED_HEADER + nccl.render_profile(env), states.get(profile_path))
