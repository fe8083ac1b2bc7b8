"""S3 failures a user can cause are one clear line naming the cause, never the secret."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from registry import Registry, StoreError
from tests.support import free_port
from tests.support.seaweed import SeaweedS3


def open_with(monkeypatch: pytest.MonkeyPatch, seaweed: SeaweedS3, url: str = "s3://models/x",
              **env: str | None) -> Registry:
    for name, value in {**seaweed.env(), **env}.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return Registry.open(url)


def assert_one_clean_line(exc: StoreError, seaweed: SeaweedS3) -> None:
    message = str(exc)
    assert "\n" not in message
    assert seaweed.secret_key not in message


def test_unreachable_endpoint(monkeypatch: pytest.MonkeyPatch, seaweed: SeaweedS3) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    reg = open_with(monkeypatch, seaweed, AWS_ENDPOINT_URL=dead)
    started = time.monotonic()
    with pytest.raises(StoreError, match=f"cannot reach the S3 endpoint {dead}") as exc:
        reg.models()
    assert time.monotonic() - started < 30  # fails fast, not after minutes of retries
    assert_one_clean_line(exc.value, seaweed)


def test_wrong_secret_key(monkeypatch: pytest.MonkeyPatch, seaweed: SeaweedS3) -> None:
    reg = open_with(monkeypatch, seaweed, AWS_SECRET_ACCESS_KEY="not-the-secret")
    with pytest.raises(StoreError, match="rejected the secret key for access key "
                                         f"'{seaweed.access_key}'") as exc:
        reg.versions("demo")
    assert_one_clean_line(exc.value, seaweed)
    assert "not-the-secret" not in str(exc.value)


def test_unknown_access_key(monkeypatch: pytest.MonkeyPatch, seaweed: SeaweedS3) -> None:
    reg = open_with(monkeypatch, seaweed, AWS_ACCESS_KEY_ID="AKNOBODY")
    with pytest.raises(StoreError, match="does not know access key 'AKNOBODY'") as exc:
        reg.models()
    assert_one_clean_line(exc.value, seaweed)


def test_no_credentials(monkeypatch: pytest.MonkeyPatch, seaweed: SeaweedS3,
                        tmp_path_factory: pytest.TempPathFactory) -> None:
    home = tmp_path_factory.mktemp("no-aws-home")
    monkeypatch.setenv("HOME", str(home))  # no ~/.aws either
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    reg = open_with(monkeypatch, seaweed, AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None)
    with pytest.raises(StoreError, match="no S3 credentials") as exc:
        reg.models()
    assert_one_clean_line(exc.value, seaweed)


def test_missing_bucket(monkeypatch: pytest.MonkeyPatch, seaweed: SeaweedS3,
                        sample_src: Path) -> None:
    reg = open_with(monkeypatch, seaweed, url="s3://no-such-bucket/models")
    missing = f"bucket 'no-such-bucket' does not exist at {seaweed.endpoint}"
    with pytest.raises(StoreError, match=missing):
        reg.resolve("demo", 1)
    with pytest.raises(StoreError, match=missing):
        reg.push(sample_src, "demo", "fixed-latency")
    with pytest.raises(StoreError, match=missing):
        reg.models()


def test_credentials_in_the_url_are_refused(monkeypatch: pytest.MonkeyPatch,
                                            seaweed: SeaweedS3) -> None:
    with pytest.raises(StoreError, match="not in the registry URL") as exc:
        open_with(monkeypatch, seaweed, url=f"s3://AK:{seaweed.secret_key}@models/x")
    assert_one_clean_line(exc.value, seaweed)
