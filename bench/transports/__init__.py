"""Which transport costs least per request (issue 18): uvicorn against granian for HTTP,
grpcio against grpclib for gRPC, each on a server that does nearly nothing, so the
difference is the transports'."""

__all__: list[str] = []  # run with python -m bench.transports
