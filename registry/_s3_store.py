"""``S3Store``: the registry in an S3 bucket (AWS, MinIO, SeaweedFS), through s3fs.

Atomicity comes from S3 conditional writes: ``If-None-Match: *`` for exclusive
create and ``If-Match: <etag>`` for compare-and-swap. AWS S3 has honoured both
since 2024; SeaweedFS re-checks them under a per-object lock since the race in
4.16 was fixed (seaweedfs#8800); docs/REGISTRY.md says why this is enough.
The endpoint and credentials come from the standard AWS environment
(``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``) or any other source botocore knows.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from registry._checksum import CHUNK_BYTES, Observer
from registry._errors import StoreError
from registry._orphans import quiet_orphaned_writes
from registry._store import Token

MAX_PARTS = 9000  # S3 allows 10,000 parts per upload; keep a margin


def _endpoint_from_env() -> str | None:
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def _safe_endpoint(endpoint: str | None) -> str:
    """The endpoint without any user:password part, for messages."""
    if not endpoint:
        return "the default AWS S3 endpoint"
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}" if parts.scheme else endpoint


class S3Store:
    """An ``ArtifactStore`` over ``s3://bucket/prefix``."""

    transfer_threads = 8
    local_root = None

    def __init__(self, bucket: str, prefix: str, fs: Any, endpoint: str | None) -> None:
        self._bucket = bucket
        self._prefix = prefix.strip("/")
        self._fs = fs
        self._endpoint = endpoint

    @classmethod
    def from_url(cls, url: str) -> S3Store:
        parts = urlsplit(url)
        if parts.username or parts.password:
            raise StoreError("put S3 credentials in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                             "not in the registry URL")
        bucket = parts.hostname or ""
        if not bucket:
            raise StoreError(f"no bucket in registry URL {url!r}: use s3://bucket/prefix")
        import s3fs

        endpoint = _endpoint_from_env()
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        client_kwargs: dict[str, Any] = {}
        if region or endpoint:
            client_kwargs["region_name"] = region or "us-east-1"
        fs = s3fs.S3FileSystem(
            endpoint_url=endpoint,
            client_kwargs=client_kwargs,
            # Fail fast on a dead endpoint instead of botocore's long default retries.
            config_kwargs={
                "connect_timeout": 5,
                "read_timeout": 120,
                "retries": {"max_attempts": 3, "mode": "standard"},
            },
            skip_instance_cache=True,  # each Registry sees the environment it was opened with
            use_listings_cache=False,  # other processes push too: never trust a stale listing
        )
        quiet_orphaned_writes(fs.loop)
        return cls(bucket, parts.path, fs, endpoint)

    @property
    def url(self) -> str:
        return f"s3://{self._bucket}/{self._prefix}".rstrip("/")

    def _key(self, key: str) -> str:
        return "/".join(p for p in (self._prefix, key) if p)

    def _path(self, key: str) -> str:
        return f"{self._bucket}/{self._key(key)}".rstrip("/")

    def _call(self, method: str, **kwargs: Any) -> Any:
        return self._fs.call_s3(method, Bucket=self._bucket, **kwargs)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Turn library errors into one clear StoreError; not-found passes through."""
        try:
            yield
        except StoreError:
            raise
        except Exception as exc:  # mapped below; re-raised if unknown
            mapped = self._translate(exc, what)
            if mapped is None:
                raise
            raise mapped from exc

    def _raise_if_no_bucket(self, exc: FileNotFoundError) -> None:
        """A missing key is an answer; a missing bucket is a broken configuration."""
        if "bucket" in str(exc).lower():
            raise StoreError(
                f"bucket {self._bucket!r} does not exist at {_safe_endpoint(self._endpoint)}"
            ) from exc

    def _translate(self, exc: Exception, what: str) -> Exception | None:
        from botocore import exceptions as bx

        where = _safe_endpoint(self._endpoint)
        text = str(exc)
        if isinstance(exc, FileNotFoundError):
            self._raise_if_no_bucket(exc)
            return None
        if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
            return StoreError(f"no S3 credentials for {where}: set AWS_ACCESS_KEY_ID and "
                              "AWS_SECRET_ACCESS_KEY")
        key_id = os.environ.get("AWS_ACCESS_KEY_ID", "(from the botocore chain)")
        if isinstance(exc, PermissionError):
            low = text.lower()
            if "signature" in low:
                return StoreError(f"S3 at {where} rejected the secret key for access key "
                                  f"{key_id!r} (signature mismatch): check AWS_SECRET_ACCESS_KEY")
            if "access key" in low:
                return StoreError(f"S3 at {where} does not know access key {key_id!r}: "
                                  "check AWS_ACCESS_KEY_ID")
            return StoreError(f"S3 at {where} denied access to {self.url} "
                              f"(access key {key_id!r}) while trying to {what}")
        if isinstance(exc, bx.EndpointConnectionError | bx.ConnectTimeoutError) or (
            "could not connect" in text.lower()
        ):
            return StoreError(f"cannot reach the S3 endpoint {where} (to {what}): is it up, "
                              "and is AWS_ENDPOINT_URL right?")
        if isinstance(exc, OSError | bx.BotoCoreError | bx.ClientError):
            return StoreError(f"S3 error at {where} while trying to {what}: {text}")
        from aiohttp import ClientError as StreamError

        if isinstance(exc, StreamError):  # s3fs streams bodies with aiohttp: a cut transfer
            reason = (text.strip().splitlines() or [type(exc).__name__])[0]
            return StoreError(f"the connection to S3 at {where} broke while trying to {what}: "
                              f"{reason}")
        return None

    def read_bytes(self, key: str) -> bytes | None:
        return self.read_with_token(key)[0]

    def read_with_token(self, key: str) -> tuple[bytes | None, Token]:
        with self._errors(f"read {self._key(key)}"):
            try:
                resp = self._call("get_object", Key=self._key(key))
            except FileNotFoundError as exc:
                self._raise_if_no_bucket(exc)
                return None, None
            data = _sync(self._fs, _read_all, resp["Body"])
            return data, resp["ETag"]

    def write_if(self, key: str, data: bytes, token: Token) -> bool:
        cond = {"IfNoneMatch": "*"} if token is None else {"IfMatch": token}
        return self._conditional_put(key, data, cond)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        return self._conditional_put(key, data, {"IfNoneMatch": "*"})

    def _conditional_put(self, key: str, data: bytes, cond: dict[str, str]) -> bool:
        with self._errors(f"write {self._key(key)}"):
            try:
                self._call("put_object", Key=self._key(key), Body=data, **cond)
            except (OSError, FileNotFoundError) as exc:
                if _is_precondition_failure(exc):
                    return False
                raise
            return True

    def exists(self, key: str) -> bool:
        with self._errors(f"look up {self._key(key)}"):
            try:
                self._call("head_object", Key=self._key(key))
            except FileNotFoundError:
                return False
            return True

    def list_dir(self, key: str) -> list[str]:
        path = self._path(key)
        with self._errors(f"list {path}"):
            try:
                entries = self._fs.ls(path, detail=False)
            except FileNotFoundError as exc:
                self._raise_if_no_bucket(exc)
                return []
        return sorted({e.rstrip("/").rsplit("/", 1)[-1] for e in entries if e.rstrip("/") != path})

    def list_files(self, key: str) -> list[str]:
        path = self._path(key)
        with self._errors(f"list {path}"):
            try:
                found = self._fs.find(path + "/")
            except FileNotFoundError as exc:
                self._raise_if_no_bucket(exc)
                return []
        start = len(path) + 1
        return sorted(f[start:] for f in found if f.startswith(path + "/") and len(f) > start)

    def put_file(self, local: Path, key: str, observe: Observer) -> None:
        s3_key = self._key(key)
        size = local.stat().st_size
        part_bytes = max(CHUNK_BYTES, -(-size // MAX_PARTS))
        with self._errors(f"upload {s3_key}"), open(local, "rb") as f:
            if size <= part_bytes:
                data = f.read()
                observe(memoryview(data))
                self._call("put_object", Key=s3_key, Body=data)
                return
            upload_id = self._call("create_multipart_upload", Key=s3_key)["UploadId"]
            try:
                parts: list[dict[str, Any]] = []
                while data := f.read(part_bytes):
                    observe(memoryview(data))
                    number = len(parts) + 1
                    resp = self._call("upload_part", Key=s3_key, UploadId=upload_id,
                                      PartNumber=number, Body=data)
                    parts.append({"PartNumber": number, "ETag": resp["ETag"]})
                self._call("complete_multipart_upload", Key=s3_key, UploadId=upload_id,
                           MultipartUpload={"Parts": parts})
            except BaseException:
                with contextlib.suppress(Exception):
                    self._call("abort_multipart_upload", Key=s3_key, UploadId=upload_id)
                raise

    def get_file(self, key: str, local: Path, observe: Observer) -> None:
        with open(local, "wb") as f:

            def sink(chunk: memoryview) -> None:
                observe(chunk)
                f.write(chunk)

            self.scan(key, sink)

    def scan(self, key: str, observe: Observer) -> None:
        s3_key = self._key(key)
        with self._errors(f"download {s3_key}"):
            body = self._call("get_object", Key=s3_key)["Body"]
            try:
                while chunk := _sync(self._fs, _read_chunk, body, CHUNK_BYTES):
                    observe(memoryview(chunk))
            finally:
                body.close()

    def delete_tree(self, key: str) -> None:
        path = self._path(key)
        with self._errors(f"delete {path}"), contextlib.suppress(FileNotFoundError):
            self._fs.rm(path, recursive=True)

    def uri(self, key: str) -> str:
        # The trailing slash matters: KServe's S3 download lists by prefix, and
        # ".../demo/1" would also match ".../demo/10/...".
        return f"s3://{self._bucket}/{self._key(key)}/"


def _sync(fs: Any, func: Callable[..., Any], *args: Any) -> Any:
    """Run coroutine function ``func`` on the filesystem's event loop, from this thread."""
    from fsspec.asyn import sync

    return sync(fs.loop, func, *args)


async def _read_chunk(body: Any, size: int) -> bytes:
    """Up to ``size`` bytes from a streaming body (fewer only at the end)."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        piece = await body.read(size - got)
        if not piece:
            break
        parts.append(piece)
        got += len(piece)
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def _read_all(body: Any) -> bytes:
    try:
        return bytes(await body.read())
    finally:
        body.close()


def _is_precondition_failure(exc: BaseException) -> bool:
    """412 (the condition failed) or 409 (a concurrent conditional write won)."""
    for err in (exc, exc.__cause__):
        response = getattr(err, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (412, 409):
                return True
    return "pre-conditions you specified did not hold" in str(exc)
