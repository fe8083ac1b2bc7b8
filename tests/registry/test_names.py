"""Names, refs and tasks: what is accepted and what each rejection says."""

from __future__ import annotations

import pytest

from registry import TASKS, InvalidName, RegistryError, parse_ref
from registry._names import check_alias, check_model_name, check_ref, check_task, version_of


@pytest.mark.parametrize("name", ["a", "demo-embed", "m2", "x-1-y", "a" * 63])
def test_valid_model_names(name: str) -> None:
    assert check_model_name(name) == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        ("org/model", "path separator"),
        ("a\\b", "path separator"),
        ("..", "'..'"),
        ("a..b", "'..'"),
        ("my model", "whitespace"),
        ("tab\tname", "whitespace"),
        ("Demo", "upper-case"),
        ("1model", "does not start with a letter"),
        ("-model", "does not start with a letter"),
        ("model_x", "characters other than"),
        ("mödel", "characters other than"),
        ("a" * 64, "longer than 63"),
    ],
)
def test_invalid_model_names_say_why(name: str, reason: str) -> None:
    with pytest.raises(InvalidName) as exc:
        check_model_name(name)
    message = str(exc.value)
    assert reason in message
    assert "\n" not in message
    assert isinstance(exc.value, RegistryError)


def test_latest_is_reserved_as_an_alias() -> None:
    with pytest.raises(InvalidName, match="reserved"):
        check_alias("latest")
    assert check_alias("stable") == "stable"
    with pytest.raises(InvalidName, match="upper-case"):
        check_alias("Stable")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("demo", ("demo", "latest")),
        ("demo@latest", ("demo", "latest")),
        ("demo@stable", ("demo", "stable")),
        ("demo@3", ("demo", "3")),
        ("demo@007", ("demo", "7")),
        ("demo-embed@canary-2", ("demo-embed", "canary-2")),
    ],
)
def test_parse_ref(text: str, expected: tuple[str, str]) -> None:
    assert parse_ref(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("demo@", "nothing after '@'"),
        ("demo@a@b", "more than one '@'"),
        ("demo@0", "versions start at 1"),
        ("demo@Stable", "upper-case"),
        ("demo@../x", "path separator"),
        ("Demo@1", "invalid model name"),
        ("@1", "empty"),
    ],
)
def test_parse_ref_rejects(text: str, fragment: str) -> None:
    with pytest.raises(InvalidName, match=fragment):
        parse_ref(text)


def test_version_of() -> None:
    assert version_of(4) == 4
    assert version_of("12") == 12
    assert version_of("latest") is None
    assert version_of("stable") is None
    with pytest.raises(InvalidName):
        version_of(0)
    with pytest.raises(InvalidName):  # non-ASCII digits are not version numbers
        check_ref("٣")
    with pytest.raises(InvalidName):
        version_of("x y")


def test_tasks() -> None:
    assert TASKS == (
        "feature-extraction", "text-classification", "text-generation", "fixed-latency", "llm",
        "lora-adapter",
    )
    for task in TASKS:
        assert check_task(task) == task
    with pytest.raises(InvalidName, match="unknown task 'translation'"):
        check_task("translation")


def test_public_api_is_sorted_and_importable() -> None:
    import registry
    from common import PlatformError

    # isort-style, as ruff's RUF022 enforces: CONSTANTS, then Classes, then functions.
    def kind(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert registry.__all__ == sorted(registry.__all__, key=kind)
    assert all(getattr(registry, name) is not None for name in registry.__all__)
    assert issubclass(registry.RegistryError, PlatformError)
