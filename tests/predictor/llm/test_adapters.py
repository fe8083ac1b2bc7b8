"""The pure parts of per-tenant adapters: which engine leaves, the catalog, an adapter's
files, and its metrics. The router itself runs in tests/system/llm/test_llm_adapters.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from predictor._errors import BadInput
from predictor.llm._adapters import to_evict
from predictor.llm._lora import check_adapter, read_adapter_catalog, read_lora
from predictor.llm._metrics import AdapterMetrics


def test_nothing_leaves_while_there_is_room_or_the_adapter_is_resident() -> None:
    assert to_evict([], "a", set(), 1) == []
    assert to_evict(["a"], "b", set(), 2) == []
    assert to_evict(["a", "b"], "b", {"a", "b"}, 2) == []  # resident: just used


def test_the_least_recently_used_idle_one_leaves() -> None:
    assert to_evict(["a", "b"], "c", set(), 2) == ["a"]
    assert to_evict(["a", "b"], "c", {"a"}, 2) == ["b"]  # a is busy: b, though newer
    assert to_evict(["a", "b", "c"], "d", set(), 1) == ["a", "b", "c"]  # the limit shrank


def test_no_room_while_every_resident_one_is_busy() -> None:
    assert to_evict(["a"], "b", {"a"}, 1) is None
    assert to_evict(["a", "b"], "c", {"a", "b"}, 2) is None
    assert to_evict(["a", "b", "c"], "d", {"b", "c"}, 2) is None  # two must go, one is idle


def _catalog(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    path = tmp_path / "adapters.json"
    path.write_text(json.dumps({"registry": str(tmp_path / "reg"), "adapters": rows}))
    return path


def _row(name: str, base: str = "demo-chat@1") -> dict[str, object]:
    return {"name": name, "version": 3, "base": base, "dir": f"/cache/{name}/3",
            "files": {"adapter_config.json": 10}}


def test_a_catalog_lists_each_adapter_with_its_base(tmp_path: Path) -> None:
    found = read_adapter_catalog(_catalog(tmp_path, [_row("demo-chat-acme"),
                                                     _row("demo-chat-beta")]), "demo-chat@1")
    assert sorted(found) == ["demo-chat-acme", "demo-chat-beta"]
    acme = found["demo-chat-acme"]
    assert (acme.version, acme.base, acme.adapter_dir) == (3, "demo-chat@1",
                                                           Path("/cache/demo-chat-acme/3"))
    assert acme.registry == str(tmp_path / "reg")


@pytest.mark.parametrize(("rows", "problem"), [
    ([_row("demo-chat-acme", base="demo-chat@2")], "made for demo-chat@2, not for demo-chat@1"),
    ([_row("demo-chat-acme", base="other@1")], "made for other@1"),
    ([_row("demo-chat-acme"), _row("demo-chat-acme")], "listed twice"),
    ([_row("Bad Name")], "bad adapter name"),
    ([{"name": "x"}], "not an adapter catalog"),
])
def test_a_bad_catalog_is_one_line(tmp_path: Path, rows: list[dict[str, object]],
                                   problem: str) -> None:
    with pytest.raises(BadInput, match=problem) as caught:
        read_adapter_catalog(_catalog(tmp_path, rows), "demo-chat@1")
    assert "\n" not in str(caught.value)


def test_a_catalog_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "adapters.json"
    path.write_text("{")
    with pytest.raises(BadInput, match="not an adapter catalog"):
        read_adapter_catalog(path, "demo-chat@1")


def test_an_adapter_must_be_a_lora_adapter_of_the_model_served() -> None:
    check_adapter("a", "lora-adapter", {"base": "demo-chat@1"}, "demo-chat@1")
    with pytest.raises(BadInput, match="is a 'llm' version"):
        check_adapter("a", "llm", {"base": "demo-chat@1"}, "demo-chat@1")
    with pytest.raises(BadInput, match="made for demo-chat@2, not for demo-chat@1"):
        check_adapter("a", "lora-adapter", {"base": "demo-chat@2"}, "demo-chat@1")
    with pytest.raises(BadInput, match="no base"):
        check_adapter("a", "lora-adapter", {}, "demo-chat@1")


def test_an_adapter_is_safetensors_only(tmp_path: Path) -> None:
    (tmp_path / "adapter_config.json").write_text("{}")
    (tmp_path / "adapter_model.bin").write_bytes(b"pickle")
    with pytest.raises(BadInput, match="pickle weights"):
        read_lora("a", tmp_path)
    (tmp_path / "adapter_model.bin").unlink()
    with pytest.raises(BadInput, match=r"adapter_model\.safetensors is missing"):
        read_lora("a", tmp_path)


def test_adapter_metrics_count_loads_evictions_and_residents() -> None:
    registry = CollectorRegistry()
    metrics = AdapterMetrics("demo-chat", "1", "stable", ["a", "b"], registry=registry)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"model": "demo-chat", "version": "1",
                                                "role": "stable", **labels})

    assert value("modelctl_llm_adapter_loads_total", adapter="a") == 0  # exported at 0
    metrics.loaded("a", ["a"])
    metrics.evicted("a")
    metrics.loaded("b", ["b"])
    metrics.failed("b")
    assert value("modelctl_llm_adapter_loads_total", adapter="a") == 1
    assert value("modelctl_llm_adapter_evictions_total", adapter="a") == 1
    assert value("modelctl_llm_adapter_load_failures_total", adapter="b") == 1
    assert value("modelctl_llm_adapter_resident", adapter="a") == 0
    assert value("modelctl_llm_adapter_resident", adapter="b") == 1
    assert value("modelctl_llm_adapters_resident") == 1


def test_the_adapter_flags_are_checked_at_start(tmp_path: Path) -> None:
    from predictor._config import ServerConfig

    catalog = _catalog(tmp_path, [_row("demo-chat-acme")])
    assert ServerConfig(model_name="m", adapter_catalog=str(catalog)).max_resident_adapters == 2
    with pytest.raises(ValueError, match="--max_resident_adapters must be >= 1"):
        ServerConfig(model_name="m", max_resident_adapters=0)
    with pytest.raises(ValueError, match="--adapter_catalog must name an existing file"):
        ServerConfig(model_name="m", adapter_catalog=str(tmp_path / "none.json"))
    with pytest.raises(ValueError, match="cannot be combined with --queue_url"):
        ServerConfig(model_name="m", adapter_catalog=str(catalog),
                     queue_url="redis://127.0.0.1:6379/0", queue_role="worker")
