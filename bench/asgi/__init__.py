"""Which ASGI server costs least per request (issue 18): uvicorn as the predictor runs it
against granian, on an app that does nearly nothing, so the difference is the servers'."""

__all__: list[str] = []  # run with python -m bench.asgi
