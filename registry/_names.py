"""Names and refs: what a model, an alias, a task and a ``NAME@REF`` may look like."""

from __future__ import annotations

import re

from registry._errors import InvalidName

TASKS: tuple[str, ...] = (
    "feature-extraction",
    "text-classification",
    "text-generation",
    "fixed-latency",
    "llm",
    "lora-adapter",
)
"""Tasks a version may declare at push (the predictor has one handler per task; ``llm``
is served by its continuous-batching engine, predictor/llm/; a ``lora-adapter``, with
the metadata ``base=NAME@VERSION``, on its base model's, never alone)."""

LATEST = "latest"
"""The reserved ref that always means the highest visible version."""

MAX_NAME_LEN = 63  # model names end up in Kubernetes object names (DNS labels)

_NAME_RE = re.compile(r"[a-z][a-z0-9-]*\Z")
_FRAMEWORK_RE = re.compile(r"[a-z][a-z0-9._-]*\Z")
_META_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*\Z")
_NAME_RULE = "use lower-case letters, digits and '-', starting with a letter (e.g. 'demo-embed')"


def _name_problem(text: str) -> str | None:
    """Why ``text`` is not a valid model or alias name, or None if it is."""
    if not text:
        return "it is empty"
    if len(text) > MAX_NAME_LEN:
        return f"it is longer than {MAX_NAME_LEN} characters"
    if "/" in text or "\\" in text:
        return "it contains a path separator"
    if ".." in text:
        return "it contains '..'"
    if any(ch.isspace() for ch in text):
        return "it contains whitespace"
    if text != text.lower():
        return "it contains upper-case letters"
    if not _NAME_RE.match(text):
        return "it has characters other than a-z, 0-9 and '-', or does not start with a letter"
    return None


def check_model_name(name: str) -> str:
    """Return ``name`` if it is a valid model name, else raise InvalidName."""
    problem = _name_problem(name)
    if problem is not None:
        raise InvalidName(f"invalid model name {name!r}: {problem}; {_NAME_RULE}")
    return name


def check_alias(alias: str) -> str:
    """Return ``alias`` if it is a valid, settable alias, else raise InvalidName."""
    problem = _name_problem(alias)
    if problem is not None:
        raise InvalidName(f"invalid alias {alias!r}: {problem}; {_NAME_RULE}")
    if alias == LATEST:
        raise InvalidName(f"alias {LATEST!r} is reserved: it always means the newest version")
    return alias


def check_task(task: str) -> str:
    """Return ``task`` if it is one of TASKS, else raise InvalidName."""
    if task not in TASKS:
        raise InvalidName(f"unknown task {task!r}: choose one of {', '.join(TASKS)}")
    return task


def check_framework(framework: str) -> str:
    if not _FRAMEWORK_RE.match(framework):
        raise InvalidName(
            f"invalid framework {framework!r}: use lower-case letters, digits, '.', '_' or '-'"
        )
    return framework


def check_metadata(metadata: dict[str, str]) -> dict[str, str]:
    """Metadata is string to string with simple keys; return a sorted copy."""
    for key, value in metadata.items():
        if not isinstance(key, str) or not _META_KEY_RE.match(key):
            raise InvalidName(
                f"invalid metadata key {key!r}: use letters, digits, '.', '_', '/' or '-'"
            )
        if not isinstance(value, str):
            raise InvalidName(f"metadata value for {key!r} must be a string, got {value!r}")
    return dict(sorted(metadata.items()))


def check_ref(ref: str) -> str:
    """A ref is a version number, ``latest`` or an alias name."""
    if ref.isdigit() and ref.isascii():
        if int(ref) < 1:
            raise InvalidName(f"invalid version {ref!r}: versions start at 1")
        return str(int(ref))
    problem = _name_problem(ref)
    if problem is not None:
        raise InvalidName(
            f"invalid ref {ref!r}: {problem}; a ref is a version number, "
            f"{LATEST!r} or an alias such as 'stable'"
        )
    return ref


def parse_ref(text: str) -> tuple[str, str]:
    """Split ``"name@ref"`` into ``(name, ref)``; without ``@`` the ref is ``latest``.

    >>> parse_ref("demo-embed@stable")
    ('demo-embed', 'stable')
    >>> parse_ref("demo-embed")
    ('demo-embed', 'latest')
    """
    name, sep, ref = text.partition("@")
    check_model_name(name)
    if not sep:
        return name, LATEST
    if not ref:
        raise InvalidName(f"invalid ref in {text!r}: nothing after '@'")
    if "@" in ref:
        raise InvalidName(f"invalid ref in {text!r}: more than one '@'")
    return name, check_ref(ref)


def version_of(ref: str | int) -> int | None:
    """The version number a ref names directly, or None for ``latest`` and aliases."""
    if isinstance(ref, int) and not isinstance(ref, bool):
        if ref < 1:
            raise InvalidName(f"invalid version {ref}: versions start at 1")
        return ref
    text = check_ref(str(ref))
    return int(text) if text.isdigit() else None
