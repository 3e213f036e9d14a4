"""What runs on the node itself (ccrhost check, ccrhost monitor): gather locally with the probes, decide with the model."""
