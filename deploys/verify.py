"""Verify each node's connection-to-compute ratio; changes no setting.

    pyinfra -y INVENTORY deploys/verify.py

With an active key on (verify_measure, verify_allreduce, verify_dcgm, ...)
it loads the GPUs and the fabric: a node whose GPUs hold compute processes
is not tested (UNKNOWN node_busy, nothing drained) unless
verify_active_when_busy (docs/verification.md).

With verify_measure, ib_write_bw first measures every host against a peer
(slow pairs are retried, then split against known-good partners). Hosts
that FAIL are failed by pyinfra (the run exits 1); the fleet report is
written to verify_report_dir and its table printed at the end.
"""

from ccrhost.deploys import verify_stage

verify_stage()
