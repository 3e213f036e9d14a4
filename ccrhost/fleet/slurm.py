"""Slurm as the fleet engine: what each node gets so that Slurm runs
``ccrhost check`` itself (:func:`integration_files`: the check's settings,
a prolog, a HealthCheckProgram wrapper and a slurm.conf fragment)."""

from __future__ import annotations

import yaml

from ccrhost.config import HostSettings

CHECK_CONFIG = "/etc/ccrhost/check.yaml"
PROLOG = "/etc/ccrhost/slurm-prolog.sh"
HEALTHCHECK = "/etc/ccrhost/slurm-healthcheck.sh"
# The keys ``ccrhost check`` reads: what the node expects of itself and how it judges.
CHECK_KEYS = (
    "rdma_exclude_devices", "verify_profile", "verify_gpu_model", "verify_gpu_count", "verify_ports",
    "verify_port_gbps", "verify_precision", "verify_beta", "verify_workload", "verify_bandwidth_model",
    "verify_min_ccr", "verify_min_ccr_fraction", "verify_gpu_tflops", "verify_measure_min_fraction",
)


# -- what a node gets ------------------------------------------------------

def check_config(settings: HostSettings) -> dict:
    """The host's validated check keys, as plain YAML-able values (unset ones left out)."""
    data = settings.model_dump(include=set(CHECK_KEYS), exclude_none=True)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(data.items())}


def integration_files(settings: HostSettings) -> list[tuple[str, str, str]]:
    """``(path, content, mode)`` of every file the Slurm integration owns on a node."""
    from ccrhost.operations.files import MANAGED_HEADER
    from ccrhost.render import render

    values = {"header": MANAGED_HEADER, "path": settings.slurm_path, "slurm_conf": settings.slurm_conf,
              "ccrhost": settings.slurm_ccrhost, "config": CHECK_CONFIG}
    config = (MANAGED_HEADER + "# What `ccrhost check` expects of this node; the Slurm prolog and health check read it.\n"
              + yaml.safe_dump(check_config(settings), sort_keys=True, default_flow_style=False))
    fragment = render("slurm-ccrhost.conf.j2", header=MANAGED_HEADER, fragment=settings.slurm_fragment,
                      prolog=settings.slurm_prolog, prolog_path=PROLOG, healthcheck_path=HEALTHCHECK,
                      interval=settings.slurm_healthcheck_interval, node_state=settings.slurm_healthcheck_node_state)
    return [
        (CHECK_CONFIG, config, "644"),
        (PROLOG, render("slurm-prolog.sh.j2", **values), "755"),
        (HEALTHCHECK, render("slurm-healthcheck.sh.j2", **values), "755"),
        (settings.slurm_fragment, fragment, "644"),
    ]
