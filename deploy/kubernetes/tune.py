"""The tuning stages of deploys/rdma.py (modules, RoCE, boot unit, MTU, QoS,
data path, NCCL), for the DaemonSet's init container:

    pyinfra -y deploy/kubernetes/inventory.py deploy/kubernetes/tune.py

The verification is left to Node Problem Detector, which runs ``ccrhost check
--format npd`` once the pod runs: a node that is tuned but unfit then gets
its CCRHostUnhealthy condition, where a failing init container would keep
the pod, and so the condition, from ever starting. A stage that fails fails
this run, and the init container with it.
"""

from pyinfra import host, inventory

from ccrhost.inventory import host_settings
from ccrhost.operations import tune

tune.rdma(
    name="Tune RDMA (modules, RoCE, boot unit, QoS, data path, NCCL)",
    settings=host_settings(host, inventory),
)
