"""Verify each node's connection-to-compute ratio; changes nothing.

    pyinfra -y INVENTORY deploys/verify.py

With verify_measure, ib_write_bw first measures every host against a peer
(slow pairs are retried, then split against known-good partners). Hosts
that FAIL are failed by pyinfra (the run exits 1); the fleet report is
written to verify_report_dir and its table printed at the end.
"""

from pyinfra import host, inventory, state

from ccrhost.inventory import all_settings, host_settings
from ccrhost.measure import fleet_measurements
from ccrhost.operations import verify
from ccrhost.report import fleet_report

settings = host_settings(host, inventory)
measured = fleet_measurements(state, inventory, all_settings(inventory)) if settings.verify_measure else {}

verify.ccr(
    name="Verify CCR",
    settings=settings,
    report=fleet_report(settings.verify_report_dir, settings.verify_fleet_tolerance),
    measured=measured.get(host.name),
)
