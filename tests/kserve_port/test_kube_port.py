"""Kubernetes' own cases for the Deployment helpers the stand-in's Deployment controller uses.

Ported from kubernetes/kubernetes ``pkg/controller/deployment/util/deployment_util_test.go``
(``TestDeploymentComplete``, ``TestDeploymentProgressing``, ``TestDeploymentTimedOut``,
``TestMaxUnavailable``).
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.support.kserve import _deployment_util as util
from tests.support.kserve._conditions import timestamp


def _rolling(desired: int, max_unavailable: Any, max_surge: Any) -> dict[str, Any]:
    return {"metadata": {}, "spec": {"replicas": desired, "strategy": {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": max_unavailable, "maxSurge": max_surge}}}}


@pytest.mark.parametrize("case, args, expected", [
    ("not complete: min but not all pods become available", (5, 5, 5, 4, 1, 0), False),
    ("not complete: min availability is not honored", (5, 5, 5, 3, 1, 0), False),
    ("complete", (5, 5, 5, 5, 0, 0), True),
    ("not complete: all pods are available but not updated", (5, 5, 4, 5, 0, 0), False),
    ("not complete: still running old pods", (1, 2, 1, 1, 0, 1), False),
    ("not complete: one replica deployment never comes up", (1, 1, 1, 0, 1, 1), False),
])
def test_deployment_complete(case: str, args: tuple[int, ...], expected: bool) -> None:
    """TestDeploymentComplete/<case>: deployment(desired, current, updated, available,
    maxUnavailable, maxSurge)."""
    desired, current, updated, available, unavailable, surge = args
    d = _rolling(desired, unavailable, surge)
    status = {"replicas": current, "updatedReplicas": updated, "availableReplicas": available}
    assert util.deployment_complete(d, status) is expected


@pytest.mark.parametrize("case, old, new, expected", [
    ("progressing: updated pods", (10, 4, 4, 4), (10, 6, 4, 4), True),
    ("not progressing", (10, 4, 4, 4), (10, 4, 4, 4), False),
    ("progressing: old pods removed", (10, 4, 6, 6), (8, 4, 6, 6), True),
    ("not progressing: less new pods", (10, 7, 3, 3), (10, 6, 3, 3), False),
    ("progressing: less overall but more new pods", (10, 4, 7, 7), (8, 8, 5, 5), True),
    ("progressing: more ready pods", (10, 10, 9, 8), (10, 10, 10, 8), True),
    ("progressing: more available pods", (10, 10, 10, 9), (10, 10, 10, 10), True),
])
def test_deployment_progressing(case: str, old: tuple[int, ...], new: tuple[int, ...],
                                expected: bool) -> None:
    """TestDeploymentProgressing/<case>: (current, updated, ready, available)."""
    def status(values: tuple[int, ...]) -> dict[str, int]:
        return dict(zip(("replicas", "updatedReplicas", "readyReplicas", "availableReplicas"),
                        values, strict=True))
    assert util.deployment_progressing(status(old), status(new)) is expected


def _at(minute: int, second: int) -> float:
    return datetime.datetime(2016, 1, 1, 0, minute, second, tzinfo=datetime.UTC).timestamp()


@pytest.mark.parametrize("case, deadline, reason, since, now, expected", [
    ("nil progressDeadlineSeconds specified - no timeout", None, "", _at(1, 9), _at(1, 20),
     False),
    ("infinite progressDeadlineSeconds specified - no timeout", 2**31 - 1, "", _at(1, 9),
     _at(1, 20), False),
    ("progressDeadlineSeconds: 10s, now - started => 00:01:20 - 00:01:09 => 11s", 10, "",
     _at(1, 9), _at(1, 20), True),
    ("progressDeadlineSeconds: 10s, now - started => 00:01:20 - 00:01:11 => 9s", 10, "",
     _at(1, 11), _at(1, 20), False),
    ("previous status was a complete deployment", None, "NewReplicaSetAvailable", 0.0, 0.0,
     False),
])
def test_deployment_timed_out(case: str, deadline: int | None, reason: str, since: float,
                              now: float, expected: bool) -> None:
    """TestDeploymentTimedOut/<case>."""
    spec = {} if deadline is None else {"progressDeadlineSeconds": deadline}
    status = {"conditions": [{"type": "Progressing", "status": "True", "reason": reason,
                              "lastUpdateTime": timestamp(since)}]}
    assert util.deployment_timed_out({"spec": spec}, status, now) is expected


@pytest.mark.parametrize("case, replicas, value, expected", [
    ("maxUnavailable less than replicas", 10, 5, 5),
    ("maxUnavailable equal replicas", 10, 10, 10),
    ("maxUnavailable greater than replicas", 5, 10, 5),
    ("maxUnavailable with replicas is 0", 0, 10, 0),
    ("maxUnavailable less than replicas with percents", 10, "50%", 5),
    ("maxUnavailable equal replicas with percents", 10, "100%", 10),
    ("maxUnavailable greater than replicas with percents", 5, "100%", 5),
])
def test_max_unavailable(case: str, replicas: int, value: Any, expected: int) -> None:
    """TestMaxUnavailable/<case> (maxSurge 1)."""
    assert util.max_unavailable(_rolling(replicas, value, 1)) == expected


def test_max_unavailable_with_recreate() -> None:
    """TestMaxUnavailable/maxUnavailable with Recreate deployment strategy."""
    assert util.max_unavailable({"spec": {"strategy": {"type": "Recreate"}}}) == 0
