"""Helpers the integration tests share: free ports, real processes, polling."""

from tests.support.procs import ManagedProcess, free_port, wait_for, wait_http_ok

__all__ = ["ManagedProcess", "free_port", "wait_for", "wait_http_ok"]
