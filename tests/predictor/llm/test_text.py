"""TextStream on the real demo-chat tokenizer: whole characters, stop strings across
tokens, and a streamed answer equal to the same answer sent whole."""

from __future__ import annotations

import pytest

from predictor.llm import TextStream


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> object:
    """demo-chat's own tokenizer (a byte-level BPE), without its weights."""
    from transformers import AutoTokenizer

    from scripts.demo_models import CHAT_GGUF, smollm2_dir

    return AutoTokenizer.from_pretrained(smollm2_dir(), gguf_file=CHAT_GGUF)


def _stream(tokenizer: object, ids: list[int], stop: tuple[str, ...] = ()) -> list[str]:
    text = TextStream(tokenizer, stop)
    pieces = [text.feed(ids[:i]) for i in range(1, len(ids))]
    pieces.append(text.feed(ids, final=True))
    return pieces


def test_streamed_pieces_add_up_to_the_whole_text(tokenizer: object) -> None:
    sentence = "The capital of France is Paris. Ça coûte 5 € — naïve café 🙂!"
    ids = tokenizer.encode(sentence)  # type: ignore[attr-defined]
    pieces = _stream(tokenizer, ids)
    assert "".join(pieces) == tokenizer.decode(ids)  # type: ignore[attr-defined]
    assert not any("\ufffd" in p for p in pieces)  # never half a character


def test_a_stop_string_split_across_tokens_is_never_sent(tokenizer: object) -> None:
    ids = tokenizer.encode("one, two, three. END of it")  # type: ignore[attr-defined]
    pieces = _stream(tokenizer, ids, stop=("three.",))
    assert "".join(pieces) == "one, two, "
    text = TextStream(tokenizer, ("three.",))
    for i in range(1, len(ids) + 1):
        text.feed(ids[:i])
        if text.stopped:
            break
    assert text.stopped and text.text == "one, two, "


def test_without_a_stop_string_only_the_last_token_may_wait(tokenizer: object) -> None:
    ids = tokenizer.encode("plain ascii words here")  # type: ignore[attr-defined]
    text = TextStream(tokenizer)
    assert text.feed(ids[:2]) == tokenizer.decode(ids[:2])  # type: ignore[attr-defined]
