"""The lab's Slurm 24.11 block-topology reader (lab/slurm_block.py): what it takes from
``scontrol show topology``. Its run against the real slurmctld is in tests/test_rack_lab.py."""

import pytest

from ccrhost.lab import slurm_block
from ccrhost.lab.state import LabError

# verbatim: Debian trixie's scontrol 24.11.5 against its slurmctld (topology/block) in the lab,
# BlockSizes=2,4,8,16,32 with rack1 node[1-3] and rack2 node[4-5]
SHOWN = """\
BlockName=rack1 BlockIndex=0 Nodes=node[1-3] BlockSize=2
BlockName=rack2 BlockIndex=1 Nodes=node[4-5] BlockSize=2
AggregatedBlock=rack[1-2] BlockIndex=2 Nodes=node[1-5] BlockSize=4
"""


def test_the_blocks_and_the_aggregated_block_slurmctld_shows():
    B = slurm_block.Block
    assert slurm_block.parse_topology(SHOWN) == [
        B("rack1", 0, ("node1", "node2", "node3"), 2),
        B("rack2", 1, ("node4", "node5"), 2),
        B("rack[1-2]", 2, ("node1", "node2", "node3", "node4", "node5"), 4, aggregated=True),
    ]
    assert slurm_block.parse_topology("slurm_load_topo error: Unable to contact slurm controller\n") == []


def test_hostlists_as_slurmctld_prints_them():
    assert slurm_block.expand("node[1-2,6],gb07,gpu[008-010]") == [
        "node1", "node2", "node6", "gb07", "gpu008", "gpu009", "gpu010"]


def test_the_cluster_declares_every_node_future_under_topology_block():
    conf = slurm_block.slurm_conf(["node2", "node1", "node3"])
    assert "TopologyPlugin=topology/block\n" in conf
    assert "NodeName=node[1-3] NodeAddr=10.254.0.2 CPUs=1 RealMemory=100 State=FUTURE\n" in conf


def test_without_the_root_filesystem_it_says_bootstrap_builds_it(monkeypatch, tmp_path):
    monkeypatch.setattr(slurm_block, "ROOT", tmp_path / "slurm-trixie")
    monkeypatch.setattr(slurm_block.os, "geteuid", lambda: 0)
    why = slurm_block.unavailable()
    assert why == (f"no {tmp_path}/slurm-trixie/usr/sbin/slurmctld: scripts/bootstrap builds the trixie "
                   "Slurm 24.11 root filesystem")
    with pytest.raises(LabError, match="Slurm 24.11: no .*slurmctld: scripts/bootstrap builds"):
        slurm_block.load(["n1"], "BlockName=r Nodes=n1\n")
