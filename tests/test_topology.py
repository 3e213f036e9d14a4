"""GPU <-> NIC levels from sysfs paths, pairing, and the matrix render."""

from pathlib import Path

import pytest

from ccrhost.model.topology import (
    Endpoint,
    TopologyError,
    classify,
    matrix,
    pair,
    path_bridges,
    render,
    split_path,
)

FIXTURES = Path(__file__).parent / "fixtures" / "gdr"


def ep(name, *chain, numa=0, host=None):
    """An endpoint whose resolved path is /sys/devices/<host>/<chain...>."""
    host = host or f"pci0000:{chain[0][5:7]}"
    return Endpoint(name, chain[-1], "/sys/devices/" + "/".join((host,) + chain), numa)


def test_split_path_of_the_reference_nic():
    # strace in netdata/netdata#9091: root port 0000:5d:00.0 -> NIC 0000:5e:00.0
    host, bridges = split_path("/sys/devices/pci0000:5d/0000:5d:00.0/0000:5e:00.0", "0000:5e:00.0")
    assert (host, bridges) == ("pci0000:5d", ("0000:5d:00.0",))


@pytest.mark.parametrize("path, why", [
    ("/sys/bus/pci/devices/0000:5e:00.0", "is not a resolved"),
    ("/sys/devices/pci0000:5d/0000:5d:00.0/0000:5f:00.0", "does not end in the function"),
    ("/sys/devices/pci0000:5d/virtual/0000:5e:00.0", "no PCI address: 'virtual'"),
])
def test_split_path_refuses_other_paths(path, why):
    with pytest.raises(TopologyError, match=why):
        split_path(path, "0000:5e:00.0")


# One PCIe switch (upstream port 15:00.0, downstream ports 16:00.0 / 16:01.0)
# under root port 14:01.0, as on HGX boards.
GPU = ep("GPU0", "0000:14:01.0", "0000:15:00.0", "0000:16:00.0", "0000:18:00.0")
NIC = ep("mlx5_0", "0000:14:01.0", "0000:15:00.0", "0000:16:01.0", "0000:1a:00.0")


def test_levels():
    assert classify(GPU, NIC) == "PIX"
    # the SimAI #128 topology: GPU d9 and NIC da both directly under switch port d7
    assert classify(ep("g", "0000:d6:01.0", "0000:d7:00.0", "0000:d9:00.0"),
                    ep("n", "0000:d6:01.0", "0000:d7:00.0", "0000:da:00.0")) == "PIX"
    nested = ep("mlx5_1", "0000:14:01.0", "0000:15:00.0", "0000:16:02.0", "0000:1b:00.0", "0000:1c:00.0",
                "0000:1d:00.0")
    assert classify(GPU, nested) == "PXB"
    other_root_port = ep("mlx5_2", "0000:14:02.0", "0000:1e:00.0", host="pci0000:14")
    assert classify(GPU, other_root_port) == "PHB"
    assert classify(GPU, ep("mlx5_3", "0000:24:01.0", "0000:2a:00.0", numa=0)) == "NODE"
    assert classify(GPU, ep("mlx5_4", "0000:94:01.0", "0000:9a:00.0", numa=1)) == "SYS"
    # numa_node -1 (no NUMA information) proves no crossing
    assert classify(GPU, ep("mlx5_5", "0000:94:01.0", "0000:9a:00.0", numa=None)) == "NODE"


def test_path_bridges_are_the_ones_peer_traffic_crosses():
    assert path_bridges(GPU, NIC) == ("0000:15:00.0", "0000:16:00.0", "0000:16:01.0")
    far = ep("mlx5_4", "0000:94:01.0", "0000:9a:00.0", numa=1)
    assert path_bridges(GPU, far) == ("0000:14:01.0", "0000:15:00.0", "0000:16:00.0", "0000:94:01.0")


def hgx(numa_far: int | None = None):
    """8 GPU/NIC pairs, each on its own host bridge behind a switch; pairs
    0-3 on socket 0, 4-7 on socket 1. ``numa_far``: that pair's NIC moved
    to a root port of the other socket."""
    gpus, nics = [], []
    for i in range(8):
        b = 0x14 + 0x10 * i
        rp, up, dn = f"0000:{b:02x}:01.0", f"0000:{b + 1:02x}:00.0", f"0000:{b + 2:02x}"
        numa = 0 if i < 4 else 1
        gpus.append(ep(f"GPU{i}", rp, up, dn + ":00.0", f"0000:{b + 4:02x}:00.0", numa=numa))
        if i == numa_far:
            nics.append(ep(f"mlx5_{i}", f"0000:{b + 5:02x}:01.0", f"0000:{b + 6:02x}:00.0", numa=1 - numa))
        else:
            nics.append(ep(f"mlx5_{i}", rp, up, dn + ":01.0", f"0000:{b + 6:02x}:00.0", numa=numa))
    return gpus, nics


def reference_topo() -> dict[str, list[str]]:
    """GPU rows' NIC columns of the verbatim ``nvidia-smi topo -m``."""
    lines = (FIXTURES / "nvidia_smi_topo_sglang30401.txt").read_text().splitlines()
    header = lines[0].split()
    nic_cols = [i for i, h in enumerate(header) if h.startswith("NIC")]
    out = {}
    for line in lines[1:]:
        cells = line.split()
        if cells and cells[0].startswith("GPU"):
            values = cells[1:]
            out[cells[0]] = [values[i] for i in nic_cols]
    return out


def test_matrix_matches_nvidia_smi_on_the_same_layout():
    gpus, nics = hgx()
    got = matrix(gpus, nics)
    want = reference_topo()
    assert list(got) == list(want)
    for gpu, row in want.items():
        assert list(got[gpu].values()) == row, gpu


def test_render_prints_the_matrix_and_legends():
    gpus, nics = hgx()
    text = render(gpus, nics)
    lines = text.splitlines()
    assert lines[0].split() == [f"NIC{i}" for i in range(8)] + ["NUMA", "Affinity"]
    assert lines[1].split() == ["GPU0", "PIX", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS", "0"]
    assert lines[8].split()[-1] == "1"
    assert "  PIX  = Connection traversing at most a single PCIe bridge" in lines
    assert "  NIC7: mlx5_7" in lines


def test_pairing_is_rail_local_and_keeps_a_moved_nic_with_its_gpu():
    gpus, nics = hgx()
    assert [(p.gpu.name, p.nic.name, p.level, p.shared) for p in pair(gpus, nics)] == [
        (f"GPU{i}", f"mlx5_{i}", "PIX", False) for i in range(8)]
    gpus, nics = hgx(numa_far=3)
    pairs = pair(gpus, nics)
    # GPU3's own NIC went to socket 1; its socket-0 neighbours keep their NICs.
    assert [(p.gpu.name, p.nic.name, p.level) for p in pairs][2:5] == [
        ("GPU2", "mlx5_2", "PIX"), ("GPU3", "mlx5_3", "SYS"), ("GPU4", "mlx5_4", "PIX")]


def test_fewer_nics_than_gpus_are_shared_nearest_first():
    gpus, nics = hgx()
    two = [nics[0], nics[4]]
    pairs = pair(gpus, two)
    assert [(p.nic.name, p.shared) for p in pairs[:2]] == [("mlx5_0", False), ("mlx5_0", True)]
    assert [p.level for p in pairs[:2]] == ["PIX", "NODE"]
    assert (pairs[5].nic.name, pairs[5].level) == ("mlx5_4", "NODE")
    assert pair(gpus, []) == []
