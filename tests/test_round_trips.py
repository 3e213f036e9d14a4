"""Round trips the deploy saves: the modules stage re-reads the node only
after loading a module that can bring RDMA devices (a hardware driver, or a
name it does not know); the fabric counters' window comes from the node's
stored reading, read in the snapshot's own command: nothing sleeps."""

import base64
import gzip

import pytest

from ccrhost.operations.modules import brings_devices
from ccrhost.probes.node import PACKED_MARK, command, parse_snapshot


@pytest.mark.parametrize("module", ["ib_uverbs", "rdma_ucm", "rdma_cm", "ib_core", "ib_umad", "rdma-ucm"])
def test_rdma_core_layers_bring_no_device(module):
    assert not brings_devices(module)


@pytest.mark.parametrize("module", ["mlx5_ib", "mlx5_core", "irdma", "bnxt_re", "efa", "rdma_rxe", "ib_ipoib",
                                    "some_vendor_driver"])
def test_drivers_and_unknown_modules_may_bring_devices(module):
    assert brings_devices(module)


def _packed(text: str) -> list[str]:
    return [f"{PACKED_MARK} gz", base64.b64encode(gzip.compress(text.encode())).decode()]


def test_no_command_of_the_deploy_or_the_check_sleeps_to_measure_a_rate():
    """Rates are changes since the node's stored reading: the snapshot (with
    or without keeping its reading), the read-back and the check's fabric
    read never wait."""
    from ccrhost.probes import fabric

    for keep in (False, True):
        cmd = command(["/etc/nccl.conf"], "/etc/x.wants", state="/run/ccrhost/counters", keep=keep)
        assert "sleep" not in cmd and "@@previous" in cmd
        assert ("mv -fT" in cmd) is keep  # only a kept read writes the state
    assert "sleep" not in fabric.command("/run/ccrhost/counters")


def test_the_fabric_reading_travels_in_the_snapshot():
    lines = _packed("@@@ fabric\n@@previous\n@@t 1000.5\n@@boot b1\n@@ib\n"
                    "mlx5_0/ports/1/counters/link_downed:1\n")
    snap = parse_snapshot(lines, ("fabric",))
    assert snap.errors == {}
    assert snap.fabric.previous is None and snap.fabric.now.counters == {"mlx5_0/1": {"link_downed": 1}}
    assert snap.fabric.now.boot_id == "b1" and snap.fabric.now.time == 1000.5
