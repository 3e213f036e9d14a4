"""What the Slurm integration puts on a node (deploys/slurm.py): the check's
settings, a prolog, a HealthCheckProgram wrapper and a slurm.conf fragment.
Pure: settings in, file contents out."""

from __future__ import annotations

from ccrhost.model.managed import CHECK_CONFIG, MANAGED_HEADER, SLURM_HEALTHCHECK, SLURM_PROLOG
from ccrhost.render import render


def check_config(settings) -> dict:
    """The host's whole validated settings (``HostSettings``), as plain
    YAML values: the node-local check judges with exactly what the deploy
    validated, every key of the model included (but the controller's own,
    marked so on the field), so no key can be left behind."""
    return settings.model_dump(mode="json", include=set(settings.node_keys()))


def check_config_text(settings) -> str:
    import yaml

    return (MANAGED_HEADER + "# The host's validated ccrhost settings; the Slurm prolog and health check read them.\n"
            + yaml.safe_dump(check_config(settings), sort_keys=True, default_flow_style=False))


def integration_files(settings) -> list[tuple[str, str, str]]:
    """``(path, content, mode)`` of every file the Slurm integration owns on a node."""
    values = {"header": MANAGED_HEADER, "path": settings.slurm_path, "slurm_conf": settings.slurm_conf,
              "ccrhost": settings.slurm_ccrhost, "config": CHECK_CONFIG,
              "refresh_nic": settings.verify_nic_firmware or settings.verify_nic_optics}
    fragment = render("slurm-ccrhost.conf.j2", header=MANAGED_HEADER, fragment=settings.slurm_fragment,
                      prolog=settings.slurm_prolog, prolog_path=SLURM_PROLOG, healthcheck_path=SLURM_HEALTHCHECK,
                      interval=settings.slurm_healthcheck_interval, node_state=settings.slurm_healthcheck_node_state)
    return [
        (CHECK_CONFIG, check_config_text(settings), "644"),
        (SLURM_PROLOG, render("slurm-prolog.sh.j2", **values,
                              dcgm_level=settings.verify_dcgm_level_prolog if settings.verify_dcgm else 0), "755"),
        (SLURM_HEALTHCHECK, render("slurm-healthcheck.sh.j2", **values), "755"),
        (settings.slurm_fragment, fragment, "644"),
    ]
