"""Benchmarks: the open-loop load generator (``bench.loadgen``) and the scenarios built on it."""
