"""The gRPC server both libraries run: one unary ``ModelInfer`` method at KServe's path
that reads the request's bytes and answers a fixed, already-serialised
``ModelInferResponse``. No protobuf on the server, so the cost measured is the
library's transport alone; standard library plus the library under test, so grpclib's
own virtualenv can run it.

    python _grpc_echo.py grpcio|grpclib PORT RESPONSE_HEX
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

SERVICE, METHOD = "inference.GRPCInferenceService", "ModelInfer"


async def serve_grpcio(port: int, answer: bytes) -> None:
    """grpcio's asyncio server, as KServe's ``GRPCServer`` runs it (``grpc.aio.server``)."""
    import grpc

    async def infer(request: bytes, context: Any) -> bytes:
        return answer

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {METHOD: grpc.unary_unary_rpc_method_handler(infer)}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def serve_grpclib(port: int, answer: bytes) -> None:
    """grpclib's server (pure Python over ``h2``) with a codec that passes bytes through."""
    from grpclib.const import Cardinality, Handler
    from grpclib.encoding.base import CodecBase
    from grpclib.server import Server

    class Raw(CodecBase):  # type: ignore[misc]
        __content_subtype__ = "proto"

        def encode(self, message: Any, message_type: Any) -> bytes:
            return bytes(message)

        def decode(self, data: bytes, message_type: Any) -> bytes:
            return data

    class Inference:
        async def infer(self, stream: Any) -> None:
            await stream.recv_message()
            await stream.send_message(answer)

        def __mapping__(self) -> dict[str, Any]:
            return {f"/{SERVICE}/{METHOD}": Handler(self.infer, Cardinality.UNARY_UNARY,
                                                    bytes, bytes)}

    server = Server([Inference()], codec=Raw())
    await server.start("127.0.0.1", port)
    await server.wait_closed()


if __name__ == "__main__":
    kind, port, answer = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
    serve = {"grpcio": serve_grpcio, "grpclib": serve_grpclib}[kind]
    asyncio.run(serve(port, answer))
