# Data for every host of the `compute` group of inventories/example.py
# (pyinfra reads group_data/<group>.py next to the inventory). The keys are
# in docs/settings.md, the settings reference.

# RoCE traffic class: DSCP 26 with ECN-capable transport (ToS 106).
roce_dscp = 26
roce_ecn_bits = 2

# The hardware each node should have; the verification fails a node below it.
verify_profile = "hgx-h100-8x400"

# The training job the CCR is judged for (docs/ccr-model.md): a named
# workload, any key beside it overrides it. On an HGX H100 with 8 x 400
# Gb/s, DeepSeek-V3's reported layout (EP 64 over 8 nodes) at the kernel
# share its published GPU hours imply (0.425) gives CCR 3.1:
# compute-underused, so a healthy node WARNs ccr_high (the NICs outrun
# the job; nothing is broken). Dense presets such as llama3-70b give
# 10-36 there.
verify_workload = {"preset": "deepseek-v3"}
