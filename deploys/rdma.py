"""Tune a node's RDMA stack.

    pyinfra -y INVENTORY deploys/rdma.py

Stages, in order: kernel modules, RoCE defaults for rdma_cm, the boot unit
that re-applies the volatile settings, lossless QoS (trust/DSCP, PFC,
buffers, ECN/DCQCN; each interface as a unit), the NCCL environment
(/etc/nccl.conf and /etc/profile.d/ccrhost-nccl.sh), then the verification
of each node's CCR (hosts below threshold fail). Every host's
inventory data is validated before any host is touched; the keys are in
docs/settings.md.
"""

from ccrhost.deploys import rdma_stages

rdma_stages()
