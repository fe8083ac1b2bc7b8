"""``python -m bench.loadgen``: run a load from the command line (see ``--help``)."""

from bench.loadgen._cli import run_cli

if __name__ == "__main__":
    run_cli()
