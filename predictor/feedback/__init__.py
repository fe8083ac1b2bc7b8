"""Ground-truth feedback: labels for earlier predictions, stored beside the captures.

``_labels`` parses a feedback body and judges a prediction against its label (pure);
``_recent`` keeps the last answered exchanges, fed by the tap, for labels that come
within seconds; ``_routes`` is ``POST /v2/models/NAME/feedback`` (a bearer token,
the labels stored before the answer, each judged label counted per version).
``feedback_routes`` builds the route from the server's flags (docs/FEEDBACK.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from predictor.feedback._labels import MAX_LABELS, judge, parse_labels
from predictor.feedback._recent import RecentOutputs
from predictor.feedback._routes import FEEDBACK_PATH, FeedbackRoutes

if TYPE_CHECKING:
    from predictor._config import ServerConfig
    from predictor._http import ASGIApp
    from predictor.tap import Identity

__all__ = ["FEEDBACK_PATH", "MAX_LABELS", "FeedbackRoutes", "RecentOutputs", "feedback_routes",
           "judge", "parse_labels"]


def feedback_routes(app: ASGIApp, config: ServerConfig, identity: Identity,
                    recent: RecentOutputs | None) -> ASGIApp:
    """``app`` behind the feedback route when ``--feedback_token_file`` is given."""
    if recent is None or not config.feedback_token_file:
        return app
    from captures import ParquetFiles, label_schema
    from predictor._secrets import read_token_file

    token = read_token_file(config.feedback_token_file, "--feedback_token_file")
    assert token is not None  # the flag is given
    files = ParquetFiles(config.capture_uri, identity.model, identity.version,
                         schema=label_schema)
    return FeedbackRoutes(app, identity=identity, token=token, files=files, recent=recent)
