"""Node readings without pyinfra: the same shell snippets the facts run,
executed locally, plus NVML. ``ccrhost check`` uses these, so it stays
fast and needs nothing but the package on the node."""
