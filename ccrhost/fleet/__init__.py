"""Work across hosts: bandwidth measurement, the monitor window, fleet reports and charts."""
