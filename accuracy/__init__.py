"""Accuracy from ground truth: labels joined with the captures of the predictions they label.

Labels come from the predictor's feedback route or, in bulk, from ``push_labels``
(``modelctl feedback push``: JSON lines or Parquet, every row checked by the route's
rules before anything is written, stored in the same label files) or ``send_labels``
(``push --url``: the same rows through the predictors' route, so that they count in a
rollout's ``accuracy`` check too); both live beside the captures (``captures``, the
one package the predictor and this one share).
``build_accuracy_report`` joins them in DuckDB by request ID, the latest label of
each ID counting, and scores every version and role over the whole span and per
window of the prediction's time: accuracy, F1 per class and the expected calibration
error of classifiers, the mean absolute error of numbers, exact match and token-set
Jaccard of generations (``_scores``, pure; its text similarity is the shadow report's
too). ``render_html`` draws the report as one self-contained page. docs/FEEDBACK.md.
"""

from accuracy._errors import AccuracyError
from accuracy._page import render_html
from accuracy._push import PushResult, push_labels
from accuracy._report import AccuracyRequest, build_accuracy_report, summary_rows
from accuracy._scores import (
    Tally,
    calibration,
    class_scores,
    kind_of,
    macro_f1,
    score_columns,
    scores,
    set_jaccard_sql,
    token_set_sql,
)
from accuracy._send import SendResult, send_labels

__all__ = [
    "AccuracyError",
    "AccuracyRequest",
    "PushResult",
    "SendResult",
    "Tally",
    "build_accuracy_report",
    "calibration",
    "class_scores",
    "kind_of",
    "macro_f1",
    "push_labels",
    "render_html",
    "score_columns",
    "scores",
    "send_labels",
    "set_jaccard_sql",
    "summary_rows",
    "token_set_sql",
]
