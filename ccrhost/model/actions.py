"""What an operator (or ``ccrhost slurm remediate``) does about a reason, and
to which part of the node.

The words are shared with the XID catalogue (issue 36): one vocabulary for
a reason code's action and an XID's. Each reason code carries one action and
one scope in the reason catalogue (ccrhost/model/catalogue/*.yaml, read by
model/reasons.py); this module only names them and ranks them, so every
report says the same thing.
"""

from __future__ import annotations

# Least to most disruptive for the node: a node's action is the most
# disruptive one its worst-level reasons ask for (a node that needs a
# person, or a new part, is not fixed by a reset).
NONE, RESTART_JOB, RESET_GPU, REBOOT, RESEAT_CABLE, INVESTIGATE, REPLACE = (
    "none", "restart_job", "reset_gpu", "reboot", "reseat_cable", "investigate", "replace")
ACTIONS = (NONE, RESTART_JOB, RESET_GPU, REBOOT, RESEAT_CABLE, INVESTIGATE, REPLACE)

# What a reason is about: the whole node, one GPU (index, PCI address,
# UUID), one NIC (RDMA device or netdev), one port of a NIC.
NODE, GPU, NIC, PORT = "node", "gpu", "nic", "port"
SCOPES = (NODE, GPU, NIC, PORT)

# Actions a machine may carry out without a person (``ccrhost slurm remediate``).
AUTOMATABLE = (RESET_GPU, REBOOT)


def worst_action(actions) -> str:
    """The most disruptive of ``actions`` (``none`` for none)."""
    return max(actions, key=ACTIONS.index, default=NONE)
