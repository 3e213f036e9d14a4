"""Which inventory keys are ccrhost's, which are gone, which only the
controller reads, and how a key's bounds read in an error."""

from __future__ import annotations

# Keys with these prefixes belong to ccrhost; anything else in host data
# (ssh_*, the site's own keys) is left alone.
OWNED_PREFIXES = ("ccrhost_", "monitor_", "rdma_", "roce_", "qos_", "pfc_", "ecn_", "dcqcn_", "nccl_", "verify_", "ccr_", "gpu_",
                  "slurm_", "baseline_", "host_health_", "imex_", "wiring_", "accept_")

# Keys that no longer exist, and what replaced them: refused with that name.
REMOVED_KEYS = {
    "verify_link_window": "removed: rates are now the change since the node's last stored reading, read in the "
                          "same command (no sleep); use verify_window_max_age to bound how old that reading may be",
}

# A key only the controller running the deploy reads (it never reaches the
# node's check.yaml, so changing it rewrites nothing on the nodes).
CONTROLLER_ONLY = {"controller_only": True}


def bounds(key: str, model) -> str | None:
    """``allowed: ...`` from the numeric bounds of ``model``'s field ``key``, or None."""
    field = model.model_fields.get(key)
    lo = hi = None
    for item in getattr(field, "metadata", []):
        lo = getattr(item, "ge", lo)
        hi = getattr(item, "le", hi)
    if lo is not None and hi is not None:
        kind = "integers " if field.annotation in (int, int | None) else ""
        return f"allowed: {kind}{lo} to {hi}"
    return None
