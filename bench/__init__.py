"""Benchmarks of ccrhost against the lab (see bench/run.py)."""
