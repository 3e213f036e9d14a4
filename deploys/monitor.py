"""Watch the fleet for one window: GPU utilization and RDMA throughput.

    pyinfra -y INVENTORY deploys/monitor.py [--data monitor_seconds=60]

Every host samples the same window at once; the fleet table at the end
flags hosts whose network or GPU utilization is an outlier against the
fleet median. Read-only; nothing needs installing on the nodes.
"""

from ccrhost.deploys import monitor_stage

monitor_stage()
