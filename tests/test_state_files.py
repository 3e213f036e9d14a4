"""Issue 36: state files by one rule. Every state write goes through one safe writer (an exclusive,
no-follow temporary name, then a rename), in Python and in the deploy's shell twin; a stored reading that is
corrupt or out of range is discarded, replaced and noted, never raised on."""

from __future__ import annotations

import json
import subprocess

import pytest

from ccrhost.model.gpu_health import GpuHealth, GpuHealthReading
from ccrhost.probes import fabric


@pytest.fixture
def sticky(tmp_path):
    """A /tmp-like folder with a file someone else's link may point at."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    folder.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.write_text("not ccrhost's\n")
    return folder, victim


def test_a_link_planted_at_the_old_temporary_name_is_not_written_through(sticky):
    folder, victim = sticky
    state = folder / "counters"
    (folder / "counters.new").symlink_to(victim)  # main opened <state>.new with a plain open(..., "w")
    lines = fabric.with_stored(str(state), "@@t 100.5\n@@boot b\n", keep=True)
    assert "@@unkept" not in " ".join(lines)
    assert victim.read_text() == "not ccrhost's\n"
    assert state.read_text() == "@@t 100.5\n@@boot b\n" and not state.is_symlink()


def test_a_link_at_the_state_path_is_replaced_not_followed(sticky):
    from ccrhost.output import write_state

    folder, victim = sticky
    state = folder / "gpu.json"
    state.symlink_to(victim)
    write_state(state, "{}\n")
    assert victim.read_text() == "not ccrhost's\n" and state.read_text() == "{}\n" and not state.is_symlink()
    assert sorted(p.name for p in folder.iterdir()) == ["gpu.json"]  # no temporary left


def test_the_shell_twin_writes_the_same_way(sticky):
    from ccrhost.output import write_state_command

    folder, victim = sticky
    state = folder / "counters"
    (folder / "counters.new").symlink_to(victim)
    state.symlink_to(victim)
    script = "r='@@t 7'; " + write_state_command(str(state), '"$r"')
    assert subprocess.run(["sh", "-c", script], capture_output=True).returncode == 0
    assert victim.read_text() == "not ccrhost's\n"
    assert state.read_text() == "@@t 7\n" and not state.is_symlink()
    assert sorted(p.name for p in folder.iterdir()) == ["counters", "counters.new"]  # the planted link, untouched
    # a state path that is a folder is refused, not written into
    (folder / "dir").mkdir()
    bad = "r=x; " + write_state_command(str(folder / "dir"), '"$r"')
    assert subprocess.run(["sh", "-c", bad], capture_output=True).returncode != 0
    assert list((folder / "dir").iterdir()) == [] and sorted(p.name for p in folder.iterdir()) == [
        "counters", "counters.new", "dir"]


def test_the_deploy_snapshot_uses_the_shell_twin():
    from ccrhost.output import write_state_command

    assert write_state_command("/run/ccrhost/counters", '"$r"') in fabric.command("/run/ccrhost/counters")
    assert ".new" not in fabric.command("/run/ccrhost/counters")


# --- corrupt or out-of-range stored readings -------------------------------------------

CORRUPT = {
    "time of 10**400": '{"boot_id": "boot-1", "time": 1' + "0" * 400 + ', "counters": {}}',
    "deep nested JSON": "[" * 100_000 + "]" * 100_000,
    "5,000-digit counter": '{"boot_id": "boot-1", "time": 900, "counters": {"0000:18:00.0": {"pcie_replays": '
                           + "9" * 5000 + "}}}",
    "4,000-digit counter": '{"boot_id": "boot-1", "time": 900, "counters": {"0000:18:00.0": {"pcie_replays": '
                           + "9" * 4000 + "}}}",
    "a list": "[1, 2, 3]",
    "binary": "\udcff",
}


@pytest.mark.parametrize("what", CORRUPT)
def test_a_corrupt_gpu_state_is_discarded_rewritten_and_noted(tmp_path, monkeypatch, what):
    from ccrhost.model.gpu_health import GpuHealthPolicy, check_gpu_health
    from ccrhost.node import check
    from ccrhost.settings import validate_host

    state = tmp_path / "gpu.json"
    state.write_bytes(CORRUPT[what].encode(errors="surrogateescape"))
    settings = validate_host("gpu01", {"verify_gpu_state": str(state)})
    monkeypatch.setattr(check, "boot_id", lambda: "boot-1")

    def read():
        return GpuHealthReading(gpus=[GpuHealth(0, pci="0000:18:00.0", pcie_replays=5)])

    reading = check.local_gpu_health(settings, read, now=1000.0)  # main: OverflowError, RecursionError
    assert reading.window.seconds is None
    assert reading.window.note.startswith(f"the stored reading was corrupt or out of range in {state}") or \
        reading.window.note.startswith(f"GPU counters in {state}: the stored reading was corrupt or out of range")
    assert check_gpu_health(reading, [], GpuHealthPolicy()) == []
    assert json.loads(state.read_text()) == {"boot_id": "boot-1", "time": 1000.0,
                                             "counters": {"0000:18:00.0": {"pcie_replays": 5}}}
    again = check.local_gpu_health(settings, read, now=1060.0)  # the next check has its baseline again
    assert again.window.seconds == 60.0 and again.window.note is None


@pytest.mark.parametrize("stored", [
    ["@@t 900", "@@boot b", "@@ib", "mlx5_0/ports/1/counters/link_downed:" + "9" * 5000],
    ["@@t 900", "@@boot b", "@@ib", "mlx5_0/ports/1/counters/link_downed:" + "9" * 30],
])
def test_a_corrupt_fabric_state_is_discarded_and_noted(stored):
    from ccrhost.probes.fabric import PREVIOUS, fabric_reading, parse_fabric_dump

    lines = ["@@previous", *(PREVIOUS + x for x in stored), "@@t 1000", "@@boot b", "@@ib",
             "mlx5_0/ports/1/counters/link_downed:0"]
    dump = parse_fabric_dump(lines)  # main: ValueError (int() of 5,000 digits) out of the check
    window = fabric_reading(dump).window
    assert window.seconds is None and window.note.startswith("the stored reading was corrupt or out of range (")


def test_a_corrupt_netdev_counter_in_the_stored_fabric_reading_is_no_baseline():
    from ccrhost.probes.fabric import PREVIOUS, fabric_reading, parse_fabric_dump

    stored = ["@@t 900", "@@boot b", "@@stats mlx5_0 eth0", "     rx_crc_errors_phy: " + "9" * 5000]
    lines = ["@@previous", *(PREVIOUS + x for x in stored), "@@t 1000", "@@boot b", "@@stats mlx5_0 eth0",
             "     rx_crc_errors_phy: 0"]
    window = fabric_reading(parse_fabric_dump(lines)).window  # main: ValueError out of the check
    assert window.before == {} and window.after == {"eth0": {"rx_crc_errors_phy": 0}}


def test_the_active_check_state_is_written_by_the_same_rule(sticky):
    # issue 37's state file (verify_allreduce_state) came with its own writer: a fixed
    # <state>.ccrhost-tmp written with `>`, which a planted link turned against the node
    from ccrhost.model.active import ActiveResult
    from ccrhost.node import active

    folder, victim = sticky
    ok = ActiveResult("allreduce", "nvlink", "OK", None, "busbw 480 GB/s", 1000.0, 86400, 480.0)
    state = folder / "active.json"
    state.symlink_to(victim)
    (folder / "active.json.ccrhost-tmp").symlink_to(victim)
    active.store(str(state), [ok])
    assert victim.read_text() == "not ccrhost's\n" and not state.is_symlink()
    assert active.load(str(state)) == {"allreduce/nvlink": ok}
    state.unlink()
    state.symlink_to(victim)
    script = active.store_script(str(state), [ok])
    assert subprocess.run(["sh", "-c", script], capture_output=True).returncode == 0
    assert victim.read_text() == "not ccrhost's\n" and not state.is_symlink()
    assert active.load(str(state)) == {"allreduce/nvlink": ok}
