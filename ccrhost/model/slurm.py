"""What the Slurm integration puts on a node (deploys/slurm.py): the check's
settings, a prolog, a HealthCheckProgram wrapper (or, beside a site's LBNL
NHC, an NHC check file) and a slurm.conf fragment. Pure: settings in, file
contents out."""

from __future__ import annotations

from ccrhost.model.managed import CHECK_CONFIG, MANAGED_HEADER, NHC_CHECK, SLURM_HEALTHCHECK, SLURM_PROLOG
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


# The health check's whole run stays within these seconds (`ccrhost check
# --budget`): slurmd kills a HealthCheckProgram at 60 s (slurm.conf(5)); the
# rest is the interpreter's start and the drain's scontrol calls.
HEALTHCHECK_BUDGET = 45
# NHC's watchdog ends its whole run at TIMEOUT (30 s by default, nhc):
# check_ccrhost's own default stays below it, ccrhost's budget 5 s below that.
NHC_CHECK_TIMEOUT = 25
NHC_BUDGET_MARGIN = 5


def report_options(settings) -> str:
    """Where the prolog and health check tell what they did (node/observe.py): on the command line,
    not only in check.yaml, so that a check.yaml that cannot be read is still told there."""
    return "".join(f" {opt} {path}" for opt, path in (("--log", settings.slurm_log),
                                                      ("--textfile", settings.slurm_textfile)) if path)


def integration_files(settings) -> list[tuple[str, str, str]]:
    """``(path, content, mode)`` of every file the Slurm integration owns on a node."""
    values = {"header": MANAGED_HEADER, "path": settings.slurm_path, "slurm_conf": settings.slurm_conf,
              "ccrhost": settings.slurm_ccrhost, "config": CHECK_CONFIG,
              "refresh_nic": settings.verify_nic_firmware or settings.verify_nic_optics or settings.wiring_enable,
              "budget": HEALTHCHECK_BUDGET, "nhc_timeout": NHC_CHECK_TIMEOUT, "nhc_margin": NHC_BUDGET_MARGIN,
              "observe": settings.slurm_mode == "observe", "report": report_options(settings)}
    # slurm_healthcheck other than ccrhost: HealthCheckProgram is the site's (NHC) or nobody's
    fragment = render("slurm-ccrhost.conf.j2", header=MANAGED_HEADER, fragment=settings.slurm_fragment,
                      prolog=settings.slurm_prolog, prolog_path=SLURM_PROLOG, healthcheck_path=SLURM_HEALTHCHECK,
                      healthcheck=settings.slurm_healthcheck, interval=settings.slurm_healthcheck_interval,
                      node_state=settings.slurm_healthcheck_node_state)
    files = [
        (CHECK_CONFIG, check_config_text(settings), "644"),
        (SLURM_PROLOG, render("slurm-prolog.sh.j2", **values,
                              dcgm_level=settings.verify_dcgm_level_prolog if settings.verify_dcgm else 0), "755"),
    ]
    if settings.slurm_healthcheck == "ccrhost":
        files.append((SLURM_HEALTHCHECK, render("slurm-healthcheck.sh.j2", **values), "755"))
    elif settings.slurm_healthcheck == "nhc":
        files.append((NHC_CHECK, render("ccrhost.nhc.j2", **values), "644"))
    return files + [(settings.slurm_fragment, fragment, "644")]
