# The running lab's nodes (see `ccrhost lab up`). CCRHOST_LAB_DIR picks a
# lab other than the default /var/lib/ccrhost/lab.
from ccrhost.lab.inventory import lab_hosts

lab_nodes = lab_hosts()
