"""Benchmarks of ccrhost against the lab (see bench/run.py)."""

import os


def scratch() -> str:
    """Where a bench run keeps its lab and files: the test run's tmpfs when
    scripts/test gave it one (bench/suite-time.md), else /var/tmp (lab
    nodes keep a private /tmp, so not there)."""
    return os.environ.get("CCRHOST_TEST_TMP") or "/var/tmp"
