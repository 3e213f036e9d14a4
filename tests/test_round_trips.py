"""Round trips the deploy saves: the modules stage re-reads the node only
after loading a module that can bring RDMA devices (a hardware driver, or a
name it does not know); the link window's second counter reading travels in
the snapshot's own command."""

import base64
import gzip

import pytest

from ccrhost.operations.modules import brings_devices
from ccrhost.probes.node import PACKED_MARK, WINDOW_MARK, command, parse_snapshot


@pytest.mark.parametrize("module", ["ib_uverbs", "rdma_ucm", "rdma_cm", "ib_core", "ib_umad", "rdma-ucm"])
def test_rdma_core_layers_bring_no_device(module):
    assert not brings_devices(module)


@pytest.mark.parametrize("module", ["mlx5_ib", "mlx5_core", "irdma", "bnxt_re", "efa", "rdma_rxe", "ib_ipoib",
                                    "some_vendor_driver"])
def test_drivers_and_unknown_modules_may_bring_devices(module):
    assert brings_devices(module)


def _packed(text: str) -> list[str]:
    return [f"{PACKED_MARK} gz", base64.b64encode(gzip.compress(text.encode())).decode()]


def test_the_window_is_asked_for_in_the_same_command():
    plain = command(["/etc/nccl.conf"], "/etc/x.wants")
    windowed = command(["/etc/nccl.conf"], "/etc/x.wants", window=3)
    assert windowed.startswith(plain) and f"echo '{WINDOW_MARK} 3.0'" in windowed and "sleep 3.0" in windowed
    assert WINDOW_MARK not in plain


def test_the_window_counters_are_parsed_apart_from_the_probes():
    lines = _packed("@@@ modules\n") + [f"{WINDOW_MARK} 3.0", "@@ib",
                                         "mlx5_0/ports/1/counters/symbol_error:7",
                                         "mlx5_0/ports/1/counters/link_downed:1"]
    snap = parse_snapshot(lines)
    assert snap.window == (3.0, {"mlx5_0/1": {"symbol_error": 7, "link_downed": 1}})
    assert "modules" not in snap.errors and "rdma" in snap.errors  # only the modules probe printed


def test_no_window_asked_none_kept():
    assert parse_snapshot(_packed("@@@ modules\n")).window is None
