"""PromQL templates: ``{placeholder}`` substitution and a local syntax check.

The check is deliberately shallow (placeholders, brackets, string literals): it runs
when an analysis file is loaded, without a server. ``Analysis.validate`` asks the
server for the rest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from common import format_promql_duration
from rollout._errors import RolloutError
from rollout.analysis._results import AnalysisContext

PLACEHOLDERS = ("namespace", "isvc", "version", "role", "interval", "step")
# A placeholder is `{word}`; PromQL label matchers always hold an operator (`{a="b"}`)
# and regex repetitions start with a digit (`5.{2}`), so neither is mistaken for one.
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Kubernetes names and registry versions fit this; anything else could break out of
# the label value's quotes.
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]*$")
_PAIRS = {")": "(", "]": "[", "}": "{"}


def placeholders_in(template: str) -> set[str]:
    """The placeholder names a template uses."""
    return set(_PLACEHOLDER.findall(template))


def check_template(template: str, allowed: tuple[str, ...] = PLACEHOLDERS) -> str | None:
    """What is wrong with a template (unknown placeholder, unbalanced brackets,
    unterminated string), or None when it looks like PromQL."""
    if not template.strip():
        return "is empty"
    unknown = sorted(placeholders_in(template) - set(allowed))
    if unknown:
        names = ", ".join("{" + n + "}" for n in unknown)
        return f"uses unknown placeholder {names} (allowed: " + ", ".join(
            "{" + n + "}" for n in allowed
        ) + ")"
    sample = _PLACEHOLDER.sub("x", template)
    return _bracket_problem(sample)


def _bracket_problem(text: str) -> str | None:
    stack: list[tuple[str, int]] = []
    quote = ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote != "`":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'`":
            quote = ch
            start = i
        elif ch in "([{":
            stack.append((ch, i))
        elif ch in _PAIRS:
            if not stack or stack[-1][0] != _PAIRS[ch]:
                return f"has an unbalanced {ch!r} at column {i + 1}"
            stack.pop()
        i += 1
    if quote:
        return f"has an unterminated string starting at column {start + 1}"
    if stack:
        ch, pos = stack[-1]
        return f"has an unclosed {ch!r} at column {pos + 1}"
    return None



def label_value(field: str, value: str) -> str:
    """``value`` unchanged if it is safe inside a PromQL label matcher, else ValueError."""
    if not _SAFE_VALUE.match(value):
        raise ValueError(f"{field} {value!r} cannot be used in a PromQL label value")
    return value


def render(template: str, values: Mapping[str, str]) -> str:
    """Replace every ``{placeholder}``; a placeholder without a value is a KeyError."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def placeholder_values(ctx: AnalysisContext, role: str, step_s: float | None) -> dict[str, str]:
    """What each placeholder stands for when ``role`` ("canary" or "stable") of ``ctx``
    is measured; a name or version that could break out of PromQL's quotes is refused."""
    version = ctx.canary_version if role == "canary" else ctx.stable_version
    try:
        values = {
            "namespace": label_value("namespace", ctx.namespace),
            "isvc": label_value("InferenceService name", ctx.isvc),
            "version": label_value("version", version),
            "role": role,
            "interval": format_promql_duration(ctx.interval_s),
        }
    except ValueError as exc:
        raise RolloutError(str(exc)) from None
    if step_s is not None:
        values["step"] = format_promql_duration(step_s)
    return values
