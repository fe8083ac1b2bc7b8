"""What a generation request asks for, checked: OpenAI's completions and chat bodies, and
seed 1's ``POST /sample``.

The bodies are OpenAI's (the fields of ``openai.types.CompletionCreateParams`` and
``ChatCompletionCreateParams`` that this server can honour), validated with pydantic:
an unknown field, a wrong type or a value out of range is ``BadInput`` (400, in OpenAI's
error shape) naming the field. Fields OpenAI has that we cannot honour (``n`` above 1,
``logprobs``, penalties, tools) are refused by name rather than silently ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from predictor._errors import BadInput
from predictor.llm._engine import Sampling

MAX_STOP = 4  # OpenAI's own limit on stop sequences
MAX_STOP_CHARS = 64

Temperature = Annotated[float, Field(ge=0.0, le=2.0, strict=False)]
TopP = Annotated[float, Field(gt=0.0, le=1.0, strict=False)]
PositiveInt = Annotated[StrictInt, Field(ge=1)]
Unsupported = Annotated[float, Field(ge=0.0, le=0.0, strict=False)]  # accepted only at its default


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    include_usage: StrictBool = False


class _Common(_Strict):
    model: StrictStr
    temperature: Temperature | None = None
    top_p: TopP | None = None
    n: Literal[1] | None = None
    stop: StrictStr | list[StrictStr] | None = None
    seed: Annotated[StrictInt, Field(ge=0)] | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    user: StrictStr | None = None
    presence_penalty: Unsupported | None = None
    frequency_penalty: Unsupported | None = None
    ignore_eos: StrictBool = False  # vLLM's extension, for benchmarks


class CompletionBody(_Common):
    prompt: StrictStr | Annotated[list[StrictStr], Field(min_length=1, max_length=1)]
    max_tokens: PositiveInt | None = None
    logprobs: None = None
    echo: Literal[False] = False


class TextPart(_Strict):
    type: Literal["text"]
    text: StrictStr


class Message(_Strict):
    role: Literal["system", "user", "assistant", "developer"]
    content: StrictStr | list[TextPart]
    name: StrictStr | None = None


class ChatBody(_Common):
    messages: Annotated[list[Message], Field(min_length=1)]
    max_tokens: PositiveInt | None = None
    max_completion_tokens: PositiveInt | None = None
    logprobs: Literal[False] | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """One checked request: its prompt (text, or chat messages), sampling and stop strings."""

    model: str
    prompt: str | None
    messages: tuple[dict[str, str], ...] | None
    max_tokens: int | None  # None: the server's default
    temperature: float
    top_p: float
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    ignore_eos: bool = False

    def sampling(self, max_tokens: int) -> Sampling:
        return Sampling(
            max_tokens=max_tokens, temperature=self.temperature, top_p=self.top_p, seed=self.seed,
            ignore_eos=self.ignore_eos)


_FIELD = re.compile(r"^(?!(str|int|float|bool|none|list|dict)$)[a-z_][a-z0-9_]*$")


def _problem(exc: ValidationError) -> str:
    """pydantic's first error as one line that names the field."""
    first = exc.errors(include_url=False)[0]
    # A union's error names the member it tried (``prompt.str``, ``content.list[TextPart]``):
    # only the field path is the user's.
    path = [str(p) for p in first.get("loc", ()) if isinstance(p, int) or _FIELD.match(str(p))]
    where = ".".join(path) or "body"
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        return f"unknown or unsupported field {where!r}"
    if kind == "missing":
        return f"field {where!r} is required"
    return f"field {where!r}: {first.get('msg', 'invalid')}"


def _json(body: bytes) -> Any:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadInput(f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadInput("the body must be a JSON object")
    return data


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > MAX_STOP:
        raise BadInput(f"field 'stop': at most {MAX_STOP} stop sequences")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise BadInput(f"field 'stop': a stop sequence is longer than {MAX_STOP_CHARS} characters")
    return tuple(s for s in stops if s)


def _common(
    body: _Common,
    *,
    prompt: str | None,
    messages: tuple[dict[str, str], ...] | None,
    max_tokens: int | None,
) -> GenerationRequest:
    temperature = 1.0 if body.temperature is None else float(body.temperature)
    return GenerationRequest(
        model=body.model,
        prompt=prompt,
        messages=messages,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=1.0 if body.top_p is None else float(body.top_p),
        seed=body.seed,
        stop=_stops(body.stop),
        stream=body.stream,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        ignore_eos=body.ignore_eos,
    )


def parse_completion(body: bytes) -> GenerationRequest:
    """``POST /openai/v1/completions``."""
    try:
        parsed = CompletionBody.model_validate(_json(body))
    except ValidationError as exc:
        raise BadInput(_problem(exc)) from None
    prompt = parsed.prompt if isinstance(parsed.prompt, str) else parsed.prompt[0]
    return _common(parsed, prompt=prompt, messages=None, max_tokens=parsed.max_tokens)


def parse_chat(body: bytes) -> GenerationRequest:
    """``POST /openai/v1/chat/completions``."""
    try:
        parsed = ChatBody.model_validate(_json(body))
    except ValidationError as exc:
        raise BadInput(_problem(exc)) from None
    messages = tuple(
        {
            "role": "system" if m.role == "developer" else m.role,
            "content": m.content
            if isinstance(m.content, str)
            else "".join(p.text for p in m.content),
        }
        for m in parsed.messages
    )
    limit = parsed.max_completion_tokens or parsed.max_tokens
    return _common(parsed, prompt=None, messages=messages, max_tokens=limit)


def parse_sample(body: bytes, model: str) -> GenerationRequest:
    """Seed 1's ``POST /sample``: the body is the raw prompt (UTF-8); greedy, the server's
    default length."""
    try:
        prompt = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput("the body must be UTF-8 text: the prompt") from None
    if not prompt.strip():
        raise BadInput("the body is empty: send the prompt as the body")
    return GenerationRequest(
        model=model,
        prompt=prompt,
        messages=None,
        max_tokens=None,
        temperature=0.0,
        top_p=1.0,
        seed=None,
        stop=(),
        stream=False,
        include_usage=False,
    )
