"""Registries to test against: a local directory and a real S3 server (SeaweedFS)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.seaweed import SeaweedS3, seaweed_s3

BUCKET = "models"
ROOT_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """One SeaweedFS S3 server for the session, with a ``models`` bucket."""
    with seaweed_s3(tmp_path_factory.mktemp("seaweed")) as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture
def s3_url(seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh ``s3://models/<unique>`` registry; the AWS env points at SeaweedFS
    (child processes inherit it)."""
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    return f"s3://{BUCKET}/t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def local_url(tmp_path: Path) -> str:
    return str(tmp_path / "registry")


@pytest.fixture(params=["local", "s3"])
def registry_url(request: pytest.FixtureRequest) -> str:
    """The same test against both stores."""
    name = "local_url" if request.param == "local" else "s3_url"
    return str(request.getfixturevalue(name))


def make_source(root: Path, files: dict[str, bytes]) -> Path:
    """A directory holding ``files`` (relative path -> content)."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


SAMPLE = {
    "config.json": b'{"hidden_size": 8}\n',
    "model.safetensors": bytes(range(256)) * 400,
    "tokenizer/vocab.txt": b"[PAD]\n[UNK]\nhello\n",
}


@pytest.fixture
def sample_src(tmp_path: Path) -> Path:
    return make_source(tmp_path / "src", SAMPLE)


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., CliResult]:
    """Run ``modelctl ARGS`` in-process through the real entry point (``cli.main``:
    the same argument parsing, error table and exit codes as the console script)."""
    from cli import main

    monkeypatch.setenv("COLUMNS", "200")  # rich tables: no truncation in assertions

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["modelctl", *args])
        with pytest.raises(SystemExit) as exited:
            main()
        captured = capsys.readouterr()
        code = exited.value.code
        return CliResult(code if isinstance(code, int) else 1, captured.out, captured.err)

    return run
