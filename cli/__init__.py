"""The ``modelctl`` command line: thin typer commands over the packages."""

from cli._app import app, main

__all__ = ["app", "main"]
