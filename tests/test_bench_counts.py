"""The bench counts a first deploy's changed stages from the tuning
operation's per-stage log lines (pyinfra's Results table shows the one
tuning operation, however many of its stages changed)."""

from bench.run import stage_writes
from ccrhost.operations import tune
from ccrhost.settings import validate_host


def test_stage_lines_are_counted_per_host_with_their_commands():
    log = "\n".join([
        "[node1] modules: 1 command",
        "\x1b[0m[\x1b[1mnode12\x1b[0m]  QoS: 3 commands",  # pyinfra's styled, padded prefix
        "[node1] boot unit: 2 commands",
        "[node1] verification OK (CCR 2.5e-04)",
        "[node1] /etc/nccl.conf: the site sets NCCL_IB_HCA above ccrhost's block, and NCCL keeps the first value",
        "[node2] Unknown stage: 4 commands",
    ])
    assert stage_writes(log) == {"node1": {"modules": 1, "boot unit": 2}, "node12": {"QoS": 3}}


def test_every_stage_the_tuning_runs_has_a_label_the_bench_knows():
    settings = validate_host("h", {"qos_min_headroom": 1024})
    labels = [label for label, _ in tune._stages(settings)]
    assert {"MTU", "PFC headroom", "GPUDirect", "PCIe ACS"} <= set(labels)
    assert set(labels) <= set(tune.STAGE_LABELS)
