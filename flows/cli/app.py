"""The `augdag` app: the typer application, its consoles and shared options, and how a command fails.

Every command module (flows/cli/commands.py, cli_ops.py, cli_report.py) registers on ``app`` and imports what it
shares from here and from flows/cli/run.py, never from another command module.
Exit codes: 0 ok, 1 a run failed, 2 bad usage, configuration or input.
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

import flows  # noqa: F401 — switches the stack offline before Prefect is imported
from conf.cache_path import resolve_cache
from conf.errors import AugdagError, ConfError
from flows.engine.run_log import configure_console, log_path
from storage.catalog import Catalog

# typer 0.29's rich help prints a flag's Python type (`--shell <bool>`, `--help <bool>`); its plain help
# does not. A flag takes no value, so it shows none.
_option_type = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else _option_type(self, ctx)

QUIET, NORMAL, VERBOSE = 0, 1, 2
_verbosity = [NORMAL]  # this invocation's -q/-v (the last one typed wins); read with verbosity()


def verbosity() -> int:
    """QUIET (``-q``: the final summary lines and errors), NORMAL (stage progress and summaries) or VERBOSE
    (``-v``: Prefect's log, fairseq's training log and tracebacks on the terminal too)."""
    return _verbosity[0]


def _set_verbosity(level: int) -> Callable[[bool], None]:
    def callback(value: bool) -> None:
        if value:
            _verbosity[0] = level
            configure_console(verbose=level == VERBOSE, quiet=level == QUIET)  # before Prefect is imported

    return callback


VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        callback=_set_verbosity(VERBOSE),
        help="show Prefect's log, fairseq's training log and tracebacks on the terminal too (a run's log file, "
        "<cache>/logs/<run id>.log, always has them; `augdag logs RUN` prints it)",
    ),
]
QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        callback=_set_verbosity(QUIET),
        help="print the final summary lines and errors only (no stage tables, no progress)",
    ),
]


def _command_flags() -> list[Any]:
    """-v and -q as options of a command that does not pass them to its function (typer builds them)."""
    flags = typer.Typer(add_completion=False)

    @flags.command()
    def _flags(verbose: VerboseOpt = False, quiet: QuietOpt = False) -> None: ...

    params = typer.main.get_command(flags).params
    for p in params:
        p.expose_value = False
    return params


class AugdagGroup(typer.core.TyperGroup):
    """The app's command group: ``-v``/``-q`` are taken after the command too (``augdag run ingest -q``);
    each invocation starts at NORMAL."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Reset the verbosity to NORMAL (and the console to match) before parsing this invocation's arguments."""
        _verbosity[0] = NORMAL
        configure_console(verbose=False)
        return super().parse_args(ctx, args)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command ``cmd_name``, with ``-v`` and ``-q`` added to its options when it does not take them itself."""
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None and not any(p.name == "verbose" for p in cmd.params):
            cmd.params += _command_flags()
        return cmd


app = typer.Typer(
    cls=AugdagGroup, add_completion=False, no_args_is_help=True, help="augdag: offline data augmentation as a Prefect DAG"
)
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)


def _global_cache(ctx: typer.Context, value: Path | None) -> Path | None:
    """A command's own --cache, else the one typed before the command (``augdag --cache DIR sql ...``)."""
    if value is None and (before := ctx.find_root().params.get("cache")) is not None:
        return Path(before)
    return value


CacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache", callback=_global_cache, help="cache root (default: `augdag --cache DIR`, else $AUGDAG_CACHE, else ./.augdag)"
    ),
]
SetOpt = Annotated[list[str], typer.Option("--set", help="override a profile key: a.b=value (repeatable)")]
ConfigOpt = Annotated[str, typer.Option("--config", "-c", help="a profile: a YAML path or a packaged name")]


def _version(value: bool) -> None:
    if value:
        out.print(f"augdag {importlib.metadata.version('augdag')}", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    cache: Annotated[
        Path | None,
        typer.Option(
            "--cache", help="cache root of every command (a command's own --cache wins; default: $AUGDAG_CACHE, else ./.augdag)"
        ),
    ] = None,
    verbose: VerboseOpt = False,
    quiet: QuietOpt = False,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_version, help="print augdag's version and exit")
    ] = False,
) -> None:
    """The options before the command hold for it (its commands read ``cache`` with ``_global_cache``);
    -v and -q are taken after it too, and its own --cache wins over this one."""


# what a terminal would act on rather than show: C0 controls (ESC starts a title, a clear screen, a hyperlink), DEL,
# C1 controls (U+009B is a CSI on some terminals) and the bidi embeddings, overrides and isolates (U+202A-U+202E,
# U+2066-U+2069: "Trojan Source", text shown in another order than it is stored)
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def shown(text: str, *, lines: bool = False) -> str:
    """``text`` safe for a terminal: each control character (``UNSAFE``) written as its escape, as Python
    writes it (``\\x1b``, ``\\t``, ``\\n``, ``\\u202e``); a backslash itself is shown as it is. ``lines``:
    keep line feeds (a message of several lines). Files written with ``-o`` keep the bytes; only the terminal
    sees this."""

    def escaped(m: re.Match[str]) -> str:
        c = m.group()
        if lines and c == "\n":
            return c
        return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")

    return UNSAFE.sub(escaped, text)


def fail(e: AugdagError) -> None:
    """The last line the user sees: the error and, for a run that failed, the command that resumes it and
    where its log is (its run id and cache ride on the error: the driver's StageError, NightlyFailed). Control
    characters in it (a value, a name, a path) are shown escaped (``shown``); a message of several lines keeps them."""
    text = shown(f"{e}{resume_hint(e)}", lines=True)
    err.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)
    raise typer.Exit(e.exit_code)


def resume_hint(e: AugdagError) -> str:
    """The tail of ``fail``'s line: the ``augdag retry`` command that resumes the failed run and where its log
    is; only the log for a configuration error, and nothing when the error names no run and cache."""
    run_id, cache = getattr(e, "run_id", None), getattr(e, "cache", None)
    if run_id is None and isinstance(summary := getattr(e, "summary", None), dict):
        run_id, cache = summary.get("run_id"), summary.get("cache")
    if not run_id or not cache:
        return ""
    cache = Path(cache).absolute()
    log = f"(log: {log_path(cache, run_id)}; -v shows it here)"
    if isinstance(e.__cause__, ConfError):  # a retry runs the recorded configuration: it would fail the same way
        return f"  {log}"
    opt = "" if cache == resolve_cache(None, None).absolute() else f" --cache {shlex.quote(str(cache))}"
    when = "Once the input is fixed" if e.exit_code == 2 else "Resume"  # a bad input fails again until it is fixed
    return f" {when}: augdag retry {run_id}{opt}  {log}"


def choice(what: str, value: str, choices: tuple[str, ...]) -> None:
    """Bad usage (exit 2) unless ``value`` is one of ``choices``."""
    if value not in choices:
        err.print(f"[bold red]error:[/] {what} {value!r}: expected one of {', '.join(choices)}")
        raise typer.Exit(2)


def catalog_at(cache: Path | None) -> Catalog:
    """The catalog of the cache root ``cache`` resolves to (``resolve_cache``: --cache, else $AUGDAG_CACHE, else
    ./.augdag)."""
    return Catalog(resolve_cache(None, cache))


def existing_catalog_at(cache: Path | None) -> Catalog:
    """The catalog a read command reads: where no run wrote one, exit 2 with one line and create nothing
    (a typo in --cache is no empty result; storage/output.py)."""
    from storage.output import existing_catalog

    try:
        return existing_catalog(resolve_cache(None, cache))
    except AugdagError as e:
        fail(e)
        raise  # unreachable: fail exits


def print_table(result, fmt: str, *, header: bool = True) -> None:
    """``result`` on the terminal: a table (cells and names as text, never read as markup, control characters
    escaped: ``shown``), or as data with the bytes kept: csv or tsv (``header``: a first line of names; nested
    values as JSON, TSV raw and checked whole first; storage/output.py) or one JSON object per line."""
    if fmt in ("csv", "tsv"):
        from storage.output import tsv_table, write_batches

        text = tsv_table(result, header=header) if fmt == "tsv" else None  # a tab in a value: refused before any row
        sys.stdout.flush()
        if text is None:
            write_batches(result.to_reader(), sys.stdout.buffer, fmt, header=header)
        else:
            sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.buffer.flush()
    elif fmt in ("json", "jsonl"):
        from storage.output import check_json_names, json_line

        check_json_names(result.schema, fmt)
        sys.stdout.writelines(json_line(row) for row in result.to_pylist())
    else:
        table = Table(show_lines=False)
        for name in result.column_names:
            table.add_column(Text(shown(name)), overflow="fold")
        for row in zip(*(column.to_pylist() for column in result.columns), strict=True):  # by position: names may repeat
            table.add_row(*(Text("" if v is None else shown(str(v))) for v in row))
        out.print(table)
        out.print(f"[dim]{result.num_rows} row(s)[/]")
