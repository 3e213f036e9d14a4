"""The benchmark harness still runs at one node, one repeat, both tools on
the same lab node. No timings are asserted: timing goals live in
bench/results.md. One run serves every assertion, from the developers'
.venv (--venv current): the bench's own venv costs a fresh `pip install .`
with every dependency, minutes of the suite's two cores, and only timing
fidelity depends on it (an installed wheel is tests/test_wheel.py's)."""

import pytest

from bench import playbook
from bench.run import main

pytestmark = pytest.mark.lab


def test_bench_runs_both_tools_on_one_node_and_writes_its_table(tmp_path):
    try:
        playbook.ensure_ansible()
        ansible = None
    except playbook.AnsibleUnavailable as exc:
        ansible = f"Ansible side not run: ansible-core could not be installed into bench/.ansible-venv ({exc})"
    out = tmp_path / "results.md"
    # exit 0 also means both tools' runs succeeded, the playbook's no-op
    # changed nothing and node1 ended in the same state under both tools
    assert main(["--sizes", "1", "--ansible-sizes", "" if ansible else "1", "--repeats", "1", "--skip-extras",
                 "--venv", "current", "--output", str(out)]) == 0
    text = out.read_text()
    assert "| 1 | no-op rerun |" in text and "remote commands / host" in text
    assert "| 1 | pyinfra floor (bench/floor.py) |" in text
    assert "- ccrhost: runs from `.venv` (" in text  # this interpreter's environment, as asked
    row = next(line for line in text.splitlines() if line.startswith("| no-op `deploys/rdma.py`"))
    assert row.endswith("| 1: 1 | pass (1 to 256 not all measured) |"), row
    assert "`deploys/verify.py` without measurement: 1 command per host | 1: 1 | pass |" in text
    # the stages counted from the tuning's per-stage lines of the lab node
    # (logged under its address): a fresh node changes five of them, and
    # their writes go in one command after the one read and the GPU-work read
    row = next(line for line in text.splitlines() if line.startswith("| first deploy: one read, the GPU-work read"))
    assert "| 1: 3 (stages written in the one write: " in row and row.endswith("| pass |"), row
    # no 64 and 256 hosts were asked for, and the table says so rather than passing
    assert "| controller CPU per added host on a no-op <= 15 ms | not measured |" in text
    if ansible:
        assert "| >= 20x faster than Ansible in wall time, no-op, 1 host | not measured |" in text
        pytest.skip(ansible)  # ccrhost's side was checked; the comparison was not made, so no pass
    assert "| 1 | no-op | " in text and "| 1 | first run | " in text
    assert "| the Ansible playbook is idempotent (no-op rerun: changed=0) | changed=0 | pass |" in text
    row = next(line for line in text.splitlines() if line.startswith("| node end state after Ansible's first run"))
    assert row.endswith("| identical | pass |"), row
