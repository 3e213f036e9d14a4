"""Install ccrhost's Slurm integration on every node; changes nothing else.

    pyinfra -y INVENTORY deploys/slurm.py

First, on each node, `slurm_ccrhost --version` must answer with the
controller's version (deploys/install.py puts it there): a node where it
does not fails, naming the path, and keeps its files as they were.
Each node gets /etc/ccrhost/check.yaml (its verify_* and
rdma_exclude_devices keys), a prolog and a HealthCheckProgram wrapper that
run `ccrhost check` (FAIL drains with a reason starting "ccrhost:"), and a
slurm.conf fragment (slurm_fragment, default /etc/slurm/ccrhost.conf).
slurm.conf is never rewritten: add `Include /etc/slurm/ccrhost.conf` to it
once, on the controller and the nodes, then `scontrol reconfigure`. Every
host's data is validated before any host is touched.
"""

from ccrhost.deploys import slurm_stage

slurm_stage()
