"""Peer servers for the comparison in ``bench/compare.py`` (issue 18), and its helpers.

``kserve_plain``, ``ray_serve``, ``bento_service``, ``mosec_service`` and
``pytriton_service`` are the peers we wrap (each runs as its own process: Ray Serve,
BentoML and Mosec from ``bench/.venv-peers``, PyTriton from ``bench/.venv-peers-np1``);
Infinity runs as its own CLI from ``bench/.venv-peers-np1``. ``_workloads`` is the
batch function the wrapped peers share; ``_configs`` the published configurations and
the capacity rules; ``_launch``, ``_measure`` and ``_report`` start, measure and report.
"""
