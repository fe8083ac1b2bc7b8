"""``kubectl-modelctl``: modelctl as a kubectl plugin, so ``kubectl modelctl rollout
status ISVC -n ns`` works as ``kubectl argo rollouts status`` does.

kubectl finds the plugin by the words before the first flag and executes it with every
argument after the plugin's name, unchanged, and kubectl's environment
(staging/src/k8s.io/kubectl/pkg/cmd/cmd.go ``HandlePluginCommand``; a flag before the
plugin's name is refused there: "flags cannot be placed before plugin name"). kubectl
does not parse its own global flags for a plugin, so this entry point honours the ones
a cluster command needs — ``--namespace``/``-n``, ``--context`` and ``--kubeconfig`` —
wherever they stand, as a cobra plugin's persistent flags would be, and hands them to
the command that runs when it takes them; a command that does not talk to a cluster
ignores them, as kubectl's own commands do.
"""

from __future__ import annotations

from typing import Any

import typer

GLOBAL_FLAGS = {"-n": "--namespace", "--namespace": "--namespace", "--context": "--context",
                "--kubeconfig": "--kubeconfig"}
PROG_NAME = "kubectl modelctl"


def split_global_flags(argv: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(the arguments without kubectl's global flags, those flags as (long name, value)).

    Accepts the spellings pflag does: ``-n ns``, ``-nns``, ``-n=ns``, ``--namespace ns``
    and ``--namespace=ns``. Everything after ``--`` is left alone. A flag with no value
    is left in place, for the command's own parser to report.
    """
    rest: list[str] = []
    flags: list[tuple[str, str]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        name, eq, value = arg.partition("=")
        if name in GLOBAL_FLAGS and eq:
            flags.append((GLOBAL_FLAGS[name], value))
        elif arg in GLOBAL_FLAGS and i + 1 < len(argv):
            flags.append((GLOBAL_FLAGS[arg], argv[i + 1]))
            i += 1
        elif arg.startswith("-n") and len(arg) > 2 and not arg.startswith("--"):
            flags.append(("--namespace", arg[2:]))
        else:
            rest.append(arg)
        i += 1
    return rest, flags


def _leaf(group: Any, args: list[str]) -> Any:
    """The command that ``args`` select: the deepest sub-command named before a flag.
    (Duck-typed: typer builds its commands on its own copy of click.)"""
    command = group
    for arg in args:
        sub = getattr(command, "commands", {}).get(arg)
        if arg.startswith("-") or sub is None:
            break
        command = sub
    return command


def plugin_argv(root: Any, argv: list[str]) -> list[str]:
    """``argv`` with kubectl's global flags moved after the command that takes them
    (dropped where the command takes none). ``root``: the app's click command."""
    rest, flags = split_global_flags(argv)
    taken = {opt for param in _leaf(root, rest).params for opt in param.opts}
    extra = [part for name, value in flags if name in taken for part in (name, value)]
    if "--" in rest:
        cut = rest.index("--")
        return [*rest[:cut], *extra, *rest[cut:]]
    return [*rest, *extra]


def kubectl_plugin() -> None:
    """Console entry point of ``kubectl-modelctl``."""
    import sys

    from cli._app import app, main

    argv = plugin_argv(typer.main.get_command(app), sys.argv[1:])
    main(argv, prog_name=PROG_NAME)
