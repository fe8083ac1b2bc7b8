"""Reports kept next to a version (``Registry.put_report`` / ``get_report``), on a local
directory and a real S3 server: stored, replaced, read back, never part of the version."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry import InvalidName, ManifestError, NotFound, Registry


@pytest.fixture
def reg(registry_url: str) -> Registry:
    return Registry.open(registry_url)


def test_a_report_is_stored_replaced_and_kept_out_of_the_version(reg: Registry,
                                                                 sample_src: Path) -> None:
    version = reg.push(sample_src, "demo", "fixed-latency").version
    assert reg.get_report("demo", version, "shadow") is None
    where = reg.put_report("demo", "latest", "shadow", {"verdict": "Fail", "pairs": 10})
    assert where == f"{reg.url}/demo/reports/{version}/shadow.json"
    reg.put_report("demo", version, "shadow", {"verdict": "Pass", "pairs": 900})
    assert reg.get_report("demo", version, "shadow") == {"verdict": "Pass", "pairs": 900}
    assert reg.verify("demo", version) == []  # the version's files are untouched
    assert reg.versions("demo") == [version] and reg.models() == ["demo"]
    assert reg.push(sample_src, "demo", "fixed-latency").version == version + 1


def test_bad_report_requests(reg: Registry, sample_src: Path) -> None:
    version = reg.push(sample_src, "demo", "fixed-latency").version
    with pytest.raises(NotFound):
        reg.put_report("demo", version + 1, "shadow", {})
    with pytest.raises(InvalidName):
        reg.put_report("demo", version, "../escape", {})
    with pytest.raises(NotFound):
        reg.get_report("missing", 1, "shadow")


def test_a_damaged_report_is_a_clear_error(local_url: str, sample_src: Path) -> None:
    reg = Registry.open(local_url)
    version = reg.push(sample_src, "demo", "fixed-latency").version
    reg.put_report("demo", version, "shadow", {"verdict": "Pass"})
    (Path(local_url) / "demo" / "reports" / str(version) / "shadow.json").write_text("[1, 2")
    with pytest.raises(ManifestError, match="is not JSON"):
        reg.get_report("demo", version, "shadow")
