"""Benchmarks: the open-loop load generator (``bench.loadgen``) and the scenarios built on it."""

__all__: list[str] = []  # scripts, run with python -m bench.<name>
