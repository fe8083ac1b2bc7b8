"""Bearer tokens read from files (a mounted Secret), never from args or env, never logged,
and checked on a request in constant time."""

from __future__ import annotations

import hmac
from pathlib import Path

from common import PlatformError
from predictor._errors import Unauthorized

MIN_TOKEN_CHARS = 16


def read_token_file(path: str, flag: str) -> str | None:
    """The token in ``path`` (None: the flag was not given); PlatformError (exit 2 at
    start) for a file that cannot be read or a token shorter than 16 characters."""
    if not path:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise PlatformError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None
    if len(token) < MIN_TOKEN_CHARS:
        raise PlatformError(f"{flag} {path} holds a token shorter than {MIN_TOKEN_CHARS} "
                            "characters")
    return token


def check_bearer(expected: str, authorization: str | None, *, needs: str, flag: str) -> None:
    """Raise Unauthorized (401) unless ``authorization`` is ``Bearer <expected>``, compared
    in constant time; the message names what ``needs`` it and the ``flag`` of its token."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(),
                                                             expected.encode()):
        raise Unauthorized(f"{needs} needs Authorization: Bearer <token> (the token of "
                           f"{flag})")
