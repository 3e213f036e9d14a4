"""Staged acceptance of the inventory's nodes without Slurm (issue 50).

    pyinfra -y INVENTORY deploys/accept.py

Runs the stages of each node's accept_stages that its stored certificate
(accept_certificate) does not hold, the fleet stages with every live node,
then stores each node's certificate on it and under
verify_report_dir/certificates/. Hosts not certified are failed by pyinfra
(the run exits 1), naming the stage and its codes; a node with GPU work
running is not touched. With --dry only the passive check runs and nothing
is written (docs/accept.md).
"""

from ccrhost.deploys import accept_stage

accept_stage()
