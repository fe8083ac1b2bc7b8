"""KServe's model repository extension, with its two writes refused.

KServe serves ``POST /v2/repository/models/NAME/load`` and ``.../unload`` over HTTP,
and ``RepositoryModelLoad`` and ``RepositoryModelUnload`` over gRPC, without any
authentication. In a single-model predictor ``unload`` takes the model out of the
registry for good (readiness 503, liveness still fine, so nothing restarts the pod)
and ``load`` cannot bring it back (``ModelRepository.load`` does nothing). Until
multi-model serving makes them real, both raise ``RepositoryRefused`` here, the one
place that decides; the one table in ``_errors`` maps that error at each edge: HTTP
403 through the app's ``PredictorError`` handler, gRPC ``PERMISSION_DENIED`` through
``grpc_error_for``. The model keeps serving. ``index`` (read-only) is KServe's own.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from predictor._errors import PredictorError, RepositoryRefused, grpc_error_for
from predictor._versions import check_version, served_version


@cache
def repository_classes() -> tuple[type[Any], type[Any]]:
    """(ReadOnlyRepository, GuardedServicer), built on first use like the server classes."""
    from kserve.protocol.grpc.servicer import InferenceServicer
    from kserve.protocol.model_repository_extension import ModelRepositoryExtension

    class ReadOnlyRepository(ModelRepositoryExtension):
        """KServe's repository extension: ``index`` as KServe answers it; no load or unload."""

        async def load(self, model_name: str) -> None:
            raise RepositoryRefused("load")

        async def unload(self, model_name: str) -> None:
            raise RepositoryRefused("unload")

    class GuardedServicer(InferenceServicer):
        """KServe's gRPC servicer; a domain error from the repository becomes its gRPC status,
        and a request naming a version is checked against the one served (``_versions``).

        KServe's interceptor would answer INTERNAL to any exception it does not know.
        """

        async def ModelReady(self, request: Any, context: Any) -> Any:
            self._check_version(request.name, request.version)
            return await super().ModelReady(request, context)

        async def ModelMetadata(self, request: Any, context: Any) -> Any:
            self._check_version(request.name, request.version)
            response = await super().ModelMetadata(request, context)
            served = served_version(self._data_plane.model_registry, request.name)
            if served:
                response.versions.append(served)
            return response

        async def ModelInfer(self, request: Any, context: Any) -> Any:
            self._check_version(request.model_name, request.model_version)
            return await super().ModelInfer(request, context)

        def _check_version(self, name: str, version: str) -> None:
            """The version a request names is the one served, or NOT_FOUND (_versions)."""
            try:
                check_version(self._data_plane.model_registry, name, version)
            except PredictorError as exc:
                raise grpc_error_for(exc) from exc

        async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
            try:
                return await super().RepositoryModelLoad(request, context)
            except PredictorError as exc:
                raise grpc_error_for(exc) from exc

        async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
            try:
                return await super().RepositoryModelUnload(request, context)
            except PredictorError as exc:
                raise grpc_error_for(exc) from exc

    return ReadOnlyRepository, GuardedServicer
