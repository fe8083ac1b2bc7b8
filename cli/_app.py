"""The root ``modelctl`` typer app; each command group lives in its own module."""

from __future__ import annotations

import sys

import typer

from cli._errors import exit_code_for, report


def build_app() -> typer.Typer:
    """Assemble the command tree (commands import their packages lazily)."""
    root = typer.Typer(
        name="modelctl",
        help=(
            "Serve models on KServe with a batching predictor, keep them in a "
            "checksummed registry, and roll new versions out safely."
        ),
        no_args_is_help=True,
        add_completion=True,  # typer's --install-completion / --show-completion
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
    )
    from cli import _registry

    root.add_typer(_registry.app, name="registry")

    from cli import _deploy

    root.add_typer(_deploy.app, name="deploy")

    from cli import rollout

    root.add_typer(rollout.app, name="rollout")

    from cli import _shadow

    root.add_typer(_shadow.app, name="shadow")

    from cli import _feedback

    root.add_typer(_feedback.app, name="feedback")

    from cli import _dev

    root.add_typer(_dev.app, name="dev")

    from cli import _tenants

    root.add_typer(_tenants.app, name="tenants")

    from cli._plan import plan

    root.command("plan")(plan)

    from cli._serve import PassThroughCommand, serve

    root.command(
        "serve", cls=PassThroughCommand,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(serve)

    from cli._profile import profile

    root.command("profile")(profile)
    return root


app = build_app()


def main(argv: list[str] | None = None, prog_name: str | None = None) -> None:
    """Console entry point: maps expected errors to one line and an exit code.
    ``argv`` defaults to ``sys.argv[1:]``; ``prog_name`` (default ``modelctl``) is the
    name usage lines show."""
    try:
        app(args=argv, prog_name=prog_name)
    except SystemExit:
        raise
    except BaseException as exc:
        code = exit_code_for(exc)
        if code is None:
            raise
        report(exc)
        sys.exit(code)
