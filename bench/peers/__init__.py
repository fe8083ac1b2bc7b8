"""Peer servers for the comparison in ``bench/compare.py`` (issue 9), and its helpers.

``kserve_plain``, ``ray_serve`` and ``bento_service`` are the peers (run as their own
processes; Ray Serve and BentoML from ``bench/.venv-peers``); ``_workloads`` is the
batch function they all share; ``_configs`` the published configurations and the
capacity rule; ``_launch``, ``_measure`` and ``_report`` start, measure and report.
"""
