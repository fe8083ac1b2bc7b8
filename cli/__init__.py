"""The ``modelctl`` command line: thin typer commands over the packages."""

from cli._app import app, main
from cli._kubectl import kubectl_plugin

__all__ = ["app", "kubectl_plugin", "main"]
