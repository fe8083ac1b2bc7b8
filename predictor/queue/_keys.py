"""The Redis key names of one model version: a fixed contract (the KEDA trigger and the
Kubernetes overlay are written against it, docs/QUEUE.md lists it).

Every key of one version carries the hash tag ``{<model>:<version>}``: Redis Cluster
hashes only the part between the first ``{`` and the next ``}``, so a version's stream,
results and worker hash live on one shard, and many versions spread over shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

PREFIX = "modelctl"


@dataclass(frozen=True)
class QueueKeys:
    """Key names for ``model`` at registry ``version``."""

    model: str
    version: str
    GROUP: ClassVar[str] = "workers"

    def __post_init__(self) -> None:
        for what, value in (("model", self.model), ("version", self.version)):
            if not value or any(c in value for c in "{}: \t\r\n"):
                raise ValueError(f"a queue {what} name must be non-empty, without braces, "
                                 f"colons or spaces: {value!r}")

    @property
    def tag(self) -> str:
        """The hash tag every key of this version shares."""
        return "{" + f"{self.model}:{self.version}" + "}"

    @property
    def stream(self) -> str:
        """The request stream (consumer group ``workers``)."""
        return f"{PREFIX}:{self.tag}:requests"

    @property
    def dead(self) -> str:
        """The dead-letter stream: entries delivered more than --queue_max_deliveries times."""
        return f"{PREFIX}:{self.tag}:dead"

    @property
    def workers(self) -> str:
        """The hash of worker info: consumer name -> JSON (batch time, start-up time)."""
        return f"{PREFIX}:{self.tag}:workers"

    def result(self, request_id: str) -> str:
        """Where one request's result is kept for --queue_result_ttl_s."""
        return f"{PREFIX}:{self.tag}:result:{request_id}"

    def reply(self, frontend_id: str) -> str:
        """The Pub/Sub channel one frontend process listens on."""
        return f"{PREFIX}:{self.tag}:reply:{frontend_id}"

    def tokens(self, request_id: str) -> str:
        """An LLM request's answer as it is generated: a stream of pieces (task ``llm``)."""
        return f"{PREFIX}:{self.tag}:tokens:{request_id}"

    def cancel(self, request_id: str) -> str:
        """Set by the frontend when an LLM request's client went away (task ``llm``)."""
        return f"{PREFIX}:{self.tag}:cancel:{request_id}"
