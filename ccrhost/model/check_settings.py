"""What ``ccrhost check`` uses of a node's validated settings.

A check needs a handful of keys and the expectation and policy the
settings derive; this record holds exactly those, so that a check can keep
them between runs (:mod:`ccrhost.node.prepared`) instead of validating
every key again. Its names are the settings' own: whatever takes a
:class:`ccrhost.settings.HostSettings` for a check takes this too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccrhost.model.certificate import STAGES
from ccrhost.model.drain_cap import DrainCap
from ccrhost.model.verdict import Expectation, Policy


@dataclass(frozen=True)
class CheckSettings:
    rdma_exclude_devices: tuple[str, ...]  # rdma_exclude_devices
    verify_link_state: str                 # verify_link_state: the fabric counters' stored reading
    verify_gpu_state: str                  # verify_gpu_state: the GPU counters' stored reading
    verify_window_max_age: float           # verify_window_max_age
    verify_npd_warn_unhealthy: bool        # verify_npd_warn_unhealthy
    expected: Expectation                  # HostSettings.expectation()
    judged_by: Policy                      # HostSettings.policy()
    drain_cap: DrainCap = DrainCap()       # HostSettings.drain_cap(): slurm_drain_cap_*
    allreduce_state: str | None = None     # HostSettings.allreduce_state: the stored all-reduce results, if judged
    nic_fw_state: str | None = None        # HostSettings.nic_fw_state: the stored NIC firmware readings, if judged
    verify_nic_valid_for: int = 86400      # verify_nic_valid_for: how long a reading the check stores holds
    verify_history: str | None = None      # verify_history: the node's failure history
    verify_evidence_dir: str | None = None  # verify_evidence_dir: diagnostics bundles on FAIL
    verify_evidence_max_age_days: float = 7  # verify_evidence_max_age_days
    verify_evidence_keep: int = 10          # verify_evidence_keep
    verify_evidence_bug_report: bool = False  # verify_evidence_bug_report
    dcgm_state: str | None = None          # HostSettings.dcgm_state: the stored DCGM diag results, if judged
    verify_dcgm: bool = False              # verify_dcgm: the diag is asked for (else a stale pass says nothing)
    verify_active_when_busy: bool = False  # verify_active_when_busy: --refresh-nic queries a busy node's NICs too
    host_health_state: str = "/run/ccrhost/host-health.json"  # host_health_state: the units' last reading
    wiring_state: str | None = None        # HostSettings.wiring_state: the stored wiring reading, if judged
    wiring_valid_for: float = 86400        # wiring_valid_for: how long a wiring reading the check stores holds
    imex_config: str = "/etc/nvidia-imex/config.cfg"  # imex_config: what nvidia-imex-ctl -N reads (imex_enable)
    imex_rack: str | None = None           # imex_rack: the tray's rack (fleet/rack_report.py)
    slurm_conf: str | None = None          # slurm_conf: where squeue and scontrol find Slurm (busy read, idle node)
    # the fleet's view of the wiring (fleet/wiring_report.py): when a leaf is suspect
    wiring_leaf_suspect_fraction: float = 0.5     # wiring_leaf_suspect_fraction
    wiring_leaf_suspect_min_nodes: int = 2        # wiring_leaf_suspect_min_nodes
    wiring_leaf_suspect_window_hours: float = 1   # wiring_leaf_suspect_window_hours
    wiring_spines: tuple = ()                     # wiring_spines, as (spine, (leaf patterns)) pairs
    accept_certificate: str | None = None  # accept_certificate: the node's acceptance certificate, shown (not judged)
    accept_stages: tuple = STAGES          # accept_stages: the stages it must hold to be certified

    def expectation(self) -> Expectation:
        return self.expected

    def policy(self) -> Policy:
        return self.judged_by
