"""Self-contained report pages, shared by ``rollout report``, ``shadow report --html``
and ``feedback report --html``: one style sheet, escaping, verdict badges, key-value
tables, and matplotlib figures as inline SVG (or PNG bytes). A page has no script and
refers to nothing outside itself, so it opens anywhere and travels as one attachment.
matplotlib loads on first use."""

from __future__ import annotations

import html
import io
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

VERDICT_COLORS = {"Pass": "#34a853", "Fail": "#d93025", "Inconclusive": "#9aa0a6"}
CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: #202124; max-width: 1000px; margin: 24px auto; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
.outcome { font-size: 16px; padding: 10px 14px; border-radius: 6px; margin: 12px 0; }
.good { background: #e6f4ea; } .bad { background: #fce8e6; } .neutral { background: #e8f0fe; }
table { border-collapse: collapse; width: 100%; margin: 8px 0; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e0e0e0;
         vertical-align: top; }
th { background: #f8f9fa; font-weight: 600; }
td.num { font-variant-numeric: tabular-nums; white-space: nowrap; }
.verdict { font-weight: 600; padding: 1px 6px; border-radius: 4px; color: #fff; }
.figure svg { width: 100%; height: auto; }
code, pre { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
pre { white-space: pre-wrap; background: #f8f9fa; padding: 8px; border-radius: 4px; }
.muted { color: #5f6368; }
"""


def escape(value: Any) -> str:
    return html.escape(str(value), quote=True)


def badge(verdict: Any) -> str:
    """A verdict (Pass, Fail, Inconclusive) as a coloured badge."""
    text = str(verdict or "n/a")
    color = VERDICT_COLORS.get(text, "#9aa0a6")
    return f'<span class="verdict" style="background:{color}">{escape(text)}</span>'


def number(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return escape(value)


def key_values(rows: list[tuple[str, str]]) -> str:
    """A two-column table: each key (text, escaped here) beside its value (HTML)."""
    return "<table>" + "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>"
                               for k, v in rows) + "</table>"


def page(title: str, body: str) -> str:
    """The whole document around ``body`` (already HTML)."""
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{escape(title)}</h1>{body}</body></html>\n")


@contextmanager
def figure(height: float, width: float = 9.0) -> Iterator[Figure]:
    """A figure of its own (never pyplot's global state), styled while it is drawn."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"font.size": 9, "axes.spines.top": False,
                                "axes.spines.right": False}):
        yield Figure(figsize=(width, height), layout="constrained")


def svg(fig: Figure) -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog, no external refs)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text: smaller
        fig.savefig(buffer, format="svg")
    text = buffer.getvalue()
    width_px = round(fig.get_size_inches()[0] * 96)  # no larger than drawn: text stays legible
    return (f"<div class='figure' style='max-width:{width_px}px'>"
            f"{text[text.index('<svg'):]}</div>")


def png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()
