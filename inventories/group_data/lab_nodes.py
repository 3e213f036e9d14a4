# Data for every host of the `lab_nodes` group of inventories/lab.py (pyinfra
# reads group_data/<group>.py next to the inventory), so that the demo's CCR
# table judges each lab node for a named training job, with bands
# (docs/ccr-model.md). At the kernel share DeepSeek-V3's published GPU
# hours imply, a healthy lab node is compute-underused: WARN ccr_high.
# The guide's literal-beta figure stays in each host's workload statement
# and JSON ("literal_beta_ccr"), labelled as such.
verify_workload = {"preset": "deepseek-v3"}
