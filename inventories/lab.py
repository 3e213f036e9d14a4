# The running lab's nodes (see `ccrhost lab up`). CCRHOST_LAB_DIR picks a
# lab other than the default /var/lib/ccrhost/lab.
from ccrhost.lab.inventory import lab_hosts

# Every node is judged for the training job in group_data/lab_nodes.py
# (verify_workload: a named preset), so the CCR table has workload bands.
lab_nodes = lab_hosts()
