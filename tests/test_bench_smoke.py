"""The benchmark harness still runs (one node, one repeat). No timings are asserted."""

import pytest

from bench.run import main

pytestmark = pytest.mark.lab


def test_bench_harness_runs_and_writes_its_table(tmp_path):
    out = tmp_path / "results.md"
    assert main(["--sizes", "1", "--repeats", "1", "--skip-extras", "--output", str(out)]) == 0
    text = out.read_text()
    assert "| 1 | no-op rerun |" in text and "remote commands / host" in text
    assert "<= 8 remote commands per host on a no-op run" in text
