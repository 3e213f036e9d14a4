"""ccrhost: tune GPU nodes for RDMA and prove their connection-to-compute ratio."""

__version__ = "0.1.0"
