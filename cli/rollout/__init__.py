"""``modelctl rollout``: the command group (``_group``: the group and the commands that
start and read a rollout), the verbs that move one (``_verbs``), the options they share
(``_args``), the rendering (``_view``) and ``report`` (``_report``)."""

from cli.rollout._group import app

__all__ = ["app"]
