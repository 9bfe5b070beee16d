"""The `augdag` command line, one module per command group (`commands`: run, demo and the catalog's readers;
`ops`: nightly, retry, server, serve, deploy, schedules; `report`: report and logs; `why`), on one typer app
(`app`).

Exit codes: 0 ok, 1 a run failed, 2 bad usage, configuration or input.
"""

from flows.cli.app import app
from flows.cli.commands import main

__all__ = ["app", "main"]
