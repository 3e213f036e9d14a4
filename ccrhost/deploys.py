"""The packaged stages, so an installed ccrhost needs no checkout.

The repository's ``deploys/*.py`` call the plain functions; a site's own
deploy file uses the pyinfra ``@deploy`` wrappers::

    from ccrhost.deploys import rdma
    rdma()

Every host's inventory data is validated before any operation is queued.
"""

from __future__ import annotations

from pyinfra import host, inventory, state
from pyinfra.api import deploy

from ccrhost.fleet.report import fleet_report
from ccrhost.inventory import all_settings, host_settings
from ccrhost.operations import tune, verify

_WHEELHOUSES = "_ccrhost_wheelhouses"


def _keep_readings(settings) -> None:
    """A deploy that verifies moves the node's stored counter reading on
    with its reads: the verification judges the window since the last one
    (a dry run writes nothing)."""
    from ccrhost.operations import cache
    from ccrhost.operations.base import DRY

    cache.configure(host, settings.verify_link_state, keep=not DRY, settings=settings)


def rdma_stages() -> None:
    """Modules, RoCE defaults, the boot unit, lossless QoS with the RoCE
    MTU first, the GPU-to-NIC data path, the NCCL environment, then the
    verification (hosts below threshold fail)."""
    settings = host_settings(host, inventory)
    _keep_readings(settings)
    tune.rdma(
        name="Tune RDMA (modules, RoCE, boot unit, QoS, data path, NCCL)",
        settings=settings,
    )
    verify_stage(measure=False)


def verify_stage(measure: bool = True) -> None:
    """The CCR and data-path verification; with ``verify_measure`` (and
    ``measure``), ib_write_bw between host pairs first, and with
    ``verify_measure_gpudirect`` each node's GPU-NIC pairs through GPU
    memory, and with ``verify_allreduce`` the single-node all-reduce modes (and the pair mode where
    ``verify_allreduce_launcher`` says how to launch it), and with ``verify_dcgm`` DCGM's diagnostics at
    ``verify_dcgm_level_deploy``. A host whose GPUs hold compute processes runs none of these and is in
    no pair (UNKNOWN ``node_busy``), unless ``verify_active_when_busy``."""
    settings = host_settings(host, inventory)
    _keep_readings(settings)
    from ccrhost.fleet.busy import busy_hosts, runs_active

    skipped, busy = None, {}
    if runs_active(settings, measure):
        # no active test on a node with GPU work, nor a pair test with it as a peer
        busy = busy_hosts(state, inventory, all_settings(inventory))
        if host.name in busy:
            from ccrhost.model.busy import SkippedTests

            skipped, measure = SkippedTests(busy[host.name], active_tests(settings)), False
    measured = {}
    if measure and settings.verify_measure:
        # imported when used: every run of a deploy loads this module
        from ccrhost.fleet.measure import fleet_measurements

        measured = fleet_measurements(state, inventory, all_settings(inventory), exclude=set(busy))
    gpudirect = None
    if measure and settings.verify_measure_gpudirect:
        from ccrhost.fleet.gpudirect import measure_host

        gpudirect = measure_host(host, settings)
    allreduce = None
    if measure and settings.verify_allreduce:
        from ccrhost.fleet.allreduce import fleet_allreduce

        # every host's single-node modes at once, then the pairs (each host waits for them here)
        allreduce = fleet_allreduce(state, inventory, all_settings(inventory), exclude=set(busy)).get(host.name)
    dcgm = None
    if measure and settings.verify_dcgm and settings.verify_dcgm_level_deploy:
        from ccrhost.fleet.allreduce import dcgm_host

        dcgm = dcgm_host(host, settings, settings.verify_dcgm_level_deploy)
    verify.ccr(
        name="Verify CCR",
        settings=settings,
        report=fleet_report(settings.verify_report_dir, settings.verify_fleet_tolerance, state, inventory),
        measured=measured.get(host.name),
        gpudirect=gpudirect,
        allreduce=allreduce,
        dcgm=dcgm,
        skipped=skipped,
    )


def active_tests(settings) -> list[str]:
    """The active tests this host's verification runs, by name (for a skip's message)."""
    return [name for name, on in (
        ("ib_write_bw", settings.verify_measure), ("GPUDirect bandwidth", settings.verify_measure_gpudirect),
        ("all-reduce", settings.verify_allreduce),
        ("DCGM diag", settings.verify_dcgm and settings.verify_dcgm_level_deploy > 0)) if on]


def accept_stage() -> None:
    """Staged acceptance (deploys/accept.py; docs/accept.md): the stages each host's certificate does not
    hold, run once for the whole inventory by the first host here (ccrhost.fleet.accept_deploy), then each
    host's certificate stored on it; a host not certified fails, naming the stage and its codes."""
    from ccrhost.operations import accept
    from ccrhost.operations.base import DRY

    settings = host_settings(host, inventory)
    _keep_readings(settings)
    outcome = accept_fleet(DRY).get(host.name)
    if outcome is None:  # the host failed before its stages (pyinfra has said why)
        return
    if outcome.planned:
        host.log(f"acceptance: stages its certificate did not hold: {', '.join(outcome.planned)}")
    accept.certificate(name="Store the acceptance certificate", settings=settings, outcome=outcome)


def accept_fleet(dry: bool) -> dict:
    """Every active host's acceptance outcome, computed once per run; the table printed once."""
    import sys
    import time

    from ccrhost.fleet.parallel import once_per_run

    def compute():
        from ccrhost.fleet import accept as common
        from ccrhost.fleet.accept_deploy import run
        from ccrhost.fleet.accept_pyinfra import runners

        settings = all_settings(inventory)
        active = set(inventory.get_active_hosts())
        names = [h.name for h in inventory if h in active]
        addresses = {h.name: h.data.get("ssh_hostname") or h.name for h in inventory if h in active}
        report_dir = settings[names[0]].verify_report_dir if names else "."
        results, out = run(names, settings, addresses, runners(state, inventory, settings), report_dir, dry,
                           say=lambda line: sys.stderr.write(f"ccrhost accept: {line}\n"))
        if not dry:  # a dry run ran S0 alone: each host says what it would run
            sys.stderr.write("\n" + common.text_table(out, time.time()))
        return results

    return once_per_run(inventory, "accept", compute)


def monitor_stage() -> None:
    """One sampling window on every host at once; the fleet table at the end."""
    from ccrhost.fleet.monitor import fleet_window

    host_settings(host, inventory)
    fleet_window(state, inventory, all_settings(inventory))


def _wheelhouses() -> dict:
    """Every host's wheelhouse, read once before any host is touched: a
    missing folder or a wheel of another version stops the run (exit 2)."""
    import sys

    from ccrhost.model.install import WheelhouseError, controller_version, wheelhouse

    found = getattr(inventory, _WHEELHOUSES, None)
    if found is None:
        version, found, errors = controller_version(), {}, {}
        for settings in all_settings(inventory).values():
            folder = settings.ccrhost_wheelhouse
            if folder not in found and folder not in errors:
                try:
                    found[folder] = wheelhouse(folder, version)
                except WheelhouseError as exc:
                    errors[folder] = str(exc)
        if errors:
            sys.stderr.write("ccrhost: ccrhost_wheelhouse rejected, no host was changed:\n")
            for error in errors.values():
                sys.stderr.write(f"  {error}\n")
            raise SystemExit(2)
        setattr(inventory, _WHEELHOUSES, found)
    return found


def install_stage() -> None:
    """ccrhost of the controller's version into a venv on the node, from the
    controller's wheelhouse, linked at ``slurm_ccrhost``: run before the
    Slurm integration, whose prolog runs that command."""
    from ccrhost.model.install import controller_version
    from ccrhost.operations import install

    settings = host_settings(host, inventory)
    wheel, wheels = _wheelhouses()[settings.ccrhost_wheelhouse]
    install.ccrhost(
        name=f"Install ccrhost {controller_version()} at {settings.slurm_ccrhost}",
        settings=settings, version=controller_version(), wheel=wheel, wheels=wheels,
    )


def nic_firmware_stage() -> None:
    """The NIC firmware profile written for the next boot (mlxconfig -y set);
    never reboots, logs "reboot required" per host."""
    from ccrhost.operations import nicfw

    nicfw.firmware(name="NIC firmware", settings=host_settings(host, inventory))


def slurm_stage() -> None:
    """The Slurm prolog, health check and fragment; a node whose
    ``slurm_ccrhost --version`` does not run the controller's version fails
    with nothing written."""
    from ccrhost.operations import slurm

    slurm.integration(name="Install the Slurm prolog and health check", settings=host_settings(host, inventory))


@deploy("ccrhost install")
def install() -> None:
    install_stage()


@deploy("ccrhost slurm")
def slurm() -> None:
    slurm_stage()


@deploy("ccrhost rdma")
def rdma() -> None:
    rdma_stages()


@deploy("ccrhost verify")
def verification() -> None:
    verify_stage()


@deploy("ccrhost accept")
def acceptance() -> None:
    accept_stage()


@deploy("ccrhost monitor")
def monitor() -> None:
    monitor_stage()


def baseline_stage() -> None:
    """Read-only: the host's calibration input and its captured hardware under
    <verify_report_dir>/baseline/ (deploys/baseline.py)."""
    import datetime

    from ccrhost.fleet.baseline_collect import capture_host, collect_host

    settings = host_settings(host, inventory)
    host.log(f"baseline: wrote {collect_host(host, settings)}")
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    host.log(f"baseline: {capture_host(host, settings, today)}")
