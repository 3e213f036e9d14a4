"""Pure domain model: ports and rates, GPUs and peaks, CCR and workloads, verdicts, QoS plan, NCCL env, utilization. No I/O."""
