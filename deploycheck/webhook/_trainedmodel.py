"""KServe's TrainedModel validating webhook, ported: what
``trainedmodel.kserve-webhook-server.validator`` (``create;update`` of
``serving.kserve.io/v1alpha1`` TrainedModels) would refuse.

Follows KServe aaac4e294, ``pkg/apis/serving/v1alpha1/trainedmodel_webhook.go``:

- ``ValidateCreate``: ``validateTrainedModel``, that is ``validateTrainedModelName`` (the
  name matches ``TmRegexp``, ``^[a-zA-Z0-9_-]+$``) then ``validateStorageURI`` (the
  storageUri starts with one of the model agent's protocols, ``storage.GetAllProtocol()``
  of ``pkg/agent/storage/provider.go``: ``s3://``, ``gs://``, ``https://``, ``http://``;
  ``pvc://`` and ``file://`` are commented out there, so the agent cannot fetch them);
- ``ValidateUpdate``: an object being deleted is let through; otherwise
  ``validateTrainedModel``, then ``validateMemorySpecNotModified`` (``spec.model.memory``
  is immutable: compared as quantities, ``Quantity.Equal``, so ``1Gi`` equals ``1024Mi``).

Messages are KServe's own; quantities in them are written the way Go's
``Quantity.String()`` writes them (``1536Mi``, ``1k``, ``500m``). Where KServe answers its
first error (``FirstNonNilError``), :func:`admit_trainedmodel` returns every error in
KServe's order. ``ValidateDelete`` refuses nothing and is not ported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from deploycheck._problems import Finding
from deploycheck.webhook._component import as_map, quantity

TM_NAME_FMT = "[a-zA-Z0-9_-]+"  # TmNameFmt
TM_REGEXP = f"^{TM_NAME_FMT}$"  # TmRegexp, as Go prints a *regexp.Regexp
_TM_NAME = re.compile(TM_REGEXP)
AGENT_PROTOCOLS = ("s3://", "gs://", "https://", "http://")  # storage.SupportedProtocols
_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P",
            18: "E"}


def is_trained_model(doc: Mapping[str, Any]) -> bool:
    """The objects the webhook is registered for: serving.kserve.io/v1alpha1 TrainedModel."""
    return doc.get("apiVersion") == "serving.kserve.io/v1alpha1" and doc.get("kind") == (
        "TrainedModel"
    )


def admit_trainedmodel(new: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[str]:
    """The errors KServe's TrainedModel webhook answers for creating ``new`` (``old``
    None) or updating ``old`` to ``new``; empty when it admits the object."""
    return [finding.message for finding in trainedmodel_findings(new, old)]


def trainedmodel_findings(
    new: Mapping[str, Any], old: Mapping[str, Any] | None = None
) -> list[Finding]:
    """:func:`admit_trainedmodel` with the path each error is about."""
    if old is None:
        return validate_trained_model(new)  # ValidateCreate
    if as_map(new.get("metadata")).get("deletionTimestamp") is not None:
        return []  # ValidateUpdate: an object being deleted is always let through
    return [*validate_trained_model(new), *validate_memory_not_modified(new, old)]


def _name(tm: Mapping[str, Any]) -> str:
    return str(as_map(tm.get("metadata")).get("name") or "")


def _model(tm: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_map(as_map(tm.get("spec")).get("model"))


def validate_trained_model(tm: Mapping[str, Any]) -> list[Finding]:
    """validateTrainedModel: the name, then the storage URI."""
    out = []
    name = _name(tm)
    if not _TM_NAME.match(name):  # validateTrainedModelName, InvalidTmNameFormatError
        out.append(Finding(
            ("metadata", "name"),
            f'the Trained Model "{name}" is invalid: a Trained Model name must consist of '
            "alphanumeric characters, '_', or '-'. (e.g. \"my-Name\" or \"abc_123\", regex "
            f"used for validation is '{TM_REGEXP}')",
        ))
    uri = str(_model(tm).get("storageUri") or "")
    if not uri.startswith(AGENT_PROTOCOLS):  # validateStorageURI, InvalidStorageUriFormatError
        out.append(Finding(
            ("spec", "model", "storageUri"),
            f'the Trained Model "{name}" storageUri field is invalid. The storage uri must '
            f"start with one of the prefixes: {', '.join(AGENT_PROTOCOLS)}. (the storage uri "
            f'given is "{uri}")',
        ))
    return out


def validate_memory_not_modified(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Finding]:
    """validateMemorySpecNotModified (InvalidTmMemoryModification)."""
    was, now = _model(old).get("memory"), _model(new).get("memory")
    if quantity(was) == quantity(now):
        return []
    return [Finding(
        ("spec", "model", "memory"),
        f'the Trained Model "{_name(new)}" memory field is immutable. The memory was '
        f'"{quantity_string(was)}" but it is updated to "{quantity_string(now)}"',
    )]


def quantity_string(value: Any) -> str:
    """``Quantity.String()`` (CanonicalizeBytes) of a quantity as written: binary suffixes
    stay binary where exact and at least 1024, an exponent stays an exponent, otherwise
    the largest SI suffix with an integer mantissa (unparseable reads as ``0``)."""
    amount = quantity(value)
    if amount == 0:
        return "0"
    text = str(value)
    sign, amount = ("-", -amount) if amount < 0 else ("", amount)
    if text.endswith(_BINARY[1:]) and amount >= 1024 and amount == amount.to_integral_value():
        number, power = int(amount), 0
        while number % 1024 == 0 and power < len(_BINARY) - 1:
            number, power = number // 1024, power + 1
        return f"{sign}{number}{_BINARY[power]}"
    mantissa, exponent = amount, 0
    while mantissa != mantissa.to_integral_value() and exponent > -9:
        mantissa, exponent = mantissa * 10, exponent - 1
    mantissa = mantissa.to_integral_value(rounding="ROUND_CEILING")
    while mantissa % 10 == 0:
        mantissa, exponent = mantissa / 10, exponent + 1
    mantissa, exponent = mantissa * Decimal(10) ** (exponent % 3), exponent - exponent % 3
    if re.search(r"[eE]", text):  # DecimalExponent
        return f"{sign}{int(mantissa)}" + (f"e{exponent}" if exponent else "")
    return f"{sign}{int(mantissa)}{_DECIMAL.get(exponent, f'e{exponent}')}"
