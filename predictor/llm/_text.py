"""From token IDs to the text a client is sent: incremental decoding and stop strings.

Pure (the tokenizer is passed in). A token may end in the middle of a UTF-8 character
(byte-level BPE), so text is released only once it no longer ends in U+FFFD; and a stop
string may be split across tokens, so the last ``len(longest stop) - 1`` characters are
held back until the next token says whether they begin one. What is sent never has to be
taken back: a streamed answer and the same answer sent whole are the same text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_REPLACEMENT = "\ufffd"


class TextStream:
    """The text of one sequence, released piece by piece as its tokens come."""

    def __init__(
        self, tokenizer: Any, stop: Sequence[str] = (), eos_token_ids: frozenset[int] = frozenset()
    ) -> None:
        self._tokenizer = tokenizer
        self._stop = tuple(s for s in stop if s)
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._eos = eos_token_ids
        self._text = ""  # all decoded text so far (stable: no trailing partial character)
        self._sent = 0  # characters of _text already released
        self.stopped = False  # a stop string was found: the sequence should end

    def feed(self, token_ids: Sequence[int], *, final: bool = False) -> str:
        """All of the sequence's tokens so far in, the text newly releasable out."""
        if self.stopped:
            return ""
        ids = [t for t in token_ids if t not in self._eos]
        text = self._tokenizer.decode(ids, skip_special_tokens=True)
        if text.endswith(_REPLACEMENT) and not final:
            text = text.rstrip(_REPLACEMENT)  # half a character: wait for the next token
        self._text = text
        cut = self._find_stop()
        if cut is not None:
            self.stopped = True
            return self._release(cut)
        if final:
            return self._release(len(self._text))
        return self._release(max(self._sent, len(self._text) - self._hold))

    def _find_stop(self) -> int | None:
        """Where the first stop string begins in the text not yet released, if any."""
        found = [
            i for s in self._stop if (i := self._text.find(s, max(0, self._sent - len(s) + 1))) >= 0
        ]
        return min(found) if found else None

    def _release(self, upto: int) -> str:
        upto = max(upto, self._sent)
        piece = self._text[self._sent : upto]
        self._sent = upto
        return piece

    @property
    def text(self) -> str:
        """Everything released so far."""
        return self._text[: self._sent]
