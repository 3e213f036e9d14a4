# Data for every host of the `compute` group of inventories/example.py
# (pyinfra reads group_data/<group>.py next to the inventory). The keys are
# in the README, "Inventory keys".

# RoCE traffic class: DSCP 26 with ECN-capable transport (ToS 106).
roce_dscp = 26
roce_ecn_bits = 2

# The hardware each node should have; the verification fails a node below it.
verify_profile = "hgx-h100-8x400"
