"""Verify each node's connection-to-compute ratio; changes nothing.

    pyinfra -y INVENTORY deploys/verify.py

Hosts that FAIL are failed by pyinfra (the run exits 1); the fleet report
is written to verify_report_dir and its table printed at the end.
"""

from pyinfra import host, inventory

from ccrhost.inventory import host_settings
from ccrhost.operations import verify
from ccrhost.report import fleet_report

settings = host_settings(host, inventory)
report = fleet_report(settings.verify_report_dir, settings.verify_fleet_tolerance)

verify.ccr(name="Verify CCR", settings=settings, report=report)
