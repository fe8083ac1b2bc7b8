"""The shadow report as one self-contained HTML page (``modelctl shadow report --html``):
the checks, the agreement with its figure (the cosine distribution of embeddings, the
confusion matrix of labels) and both sides' latency CDFs, drawn with matplotlib as
inline SVG; no script, nothing fetched."""

from shadow.page._html import render_html

__all__ = ["render_html"]
