"""``modelctl rollout report``: a rollout as one self-contained HTML page (and PNGs).

``build_report`` gathers the rollout's state and decisions and, from Prometheus range
queries, each analysed metric for canary and stable over the rollout; ``render_html``
draws it (matplotlib SVG inline, no script, nothing fetched); ``write_pngs`` writes
the same figures as PNG files.
"""

from rollout.report._data import MetricPanel, RangeSource, Report, Window, build_report
from rollout.report._html import render_html
from rollout.report._plots import write_pngs

__all__ = ["MetricPanel", "RangeSource", "Report", "Window", "build_report", "render_html",
           "write_pngs"]
