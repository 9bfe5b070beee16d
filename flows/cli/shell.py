"""`augdag sql --shell`: an interactive, read-only SQL loop over the catalog.

Hand-written because DuckDB's Python package has no CLI (and its CLI would open the catalog for
writing). Statements end with `;` and may span lines: DuckDB's own tokenizer finds the `;` that ends one
(storage/sql_guard.py ``split_statements``: a `;` in a quote, a ``$$`` or ``E'\\''`` string or a comment ends
nothing), and the loop reads more lines until it does. Each statement goes through ``check_read_only`` and
``Catalog.query`` (a snapshot of the catalog: a running flow writes meanwhile), and its result is printed; a
refused or failing one prints its error and the loop goes on, Ctrl-C stops a running query and returns to the
prompt. A line starting with `.` at the start of a statement is a command: `.views`, `.schema [NAME]`, `.help`,
`.quit` (or end of input). On a terminal the prompt shows and readline keeps a history in ``~/.augdag_history``;
piped input (``augdag sql --shell < queries.sql``) runs without prompts and without history, each error names the
line where its statement starts, and the command exits 1 when any statement failed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from conf.errors import AugdagError
from flows.engine import registry
from storage.catalog import Catalog
from storage.sql_guard import check_read_only, split_statements
from storage.views.docs import catalog_columns, catalog_objects

PROMPT, MORE = "augdag> ", "   ...> "
HISTORY = "~/.augdag_history"
HELP = """\
Read-only SQL over the catalog's tables and views; end a statement with ; (it may span lines).
  .views          tables and views, with their row counts and what they hold (= augdag views)
  .schema NAME    the columns of a table or view: type and description (= augdag views NAME)
  .help           this text
  .quit           leave (also .exit, or Ctrl-D)"""

Show = Callable[[pa.Table], None]
Say = Callable[[str], None]
__all__ = ["dot_command", "run_statement", "split_statements", "sql_shell"]  # split_statements: its old home


def run_statement(catalog: Catalog, statement: str, *, show: Show, error: Say) -> bool:
    """One statement: refused unless read-only, else queried and shown; a failure is only printed. Returns
    whether it ran."""
    try:
        check_read_only(statement)
        show(catalog.query(statement, sandbox=True))
        return True
    except AugdagError as e:
        error(str(e))
    except KeyboardInterrupt:
        error("interrupted (Ctrl-C): the query was stopped")
    except Exception as e:  # noqa: BLE001 — a DuckDB error in the user's query: print it, keep the loop
        error(f"query failed: {e}")
    return False


def dot_command(catalog: Catalog, line: str, *, show: Show, error: Say) -> bool | None:
    """Run a `.command`: None when it ends the loop, else whether it succeeded."""
    command, _, arg = line.partition(" ")
    arg = arg.strip().rstrip(";")
    if command in (".quit", ".exit"):
        return None
    try:
        if command == ".views":
            show(catalog_objects(catalog, registry.view_docs()))
        elif command == ".schema":
            cols = catalog_columns(catalog, registry.view_docs(), arg or None)
            show(cols.select(["column", "type", "description"]) if arg else cols)
        elif command == ".help":
            print(HELP)
        else:
            error(f"unknown command {command!r}; expected .views, .schema NAME, .help or .quit")
            return False
    except AugdagError as e:
        error(str(e))
        return False
    return True


def _history() -> Callable[[], None]:
    """Load the readline history (if readline exists); returns the function that saves it."""
    try:
        import readline
    except ImportError:
        return lambda: None
    path = Path(HISTORY).expanduser()
    with contextlib.suppress(OSError):  # no history yet, or unreadable: start empty
        readline.read_history_file(path)
    readline.set_history_length(1000)

    def save() -> None:
        with contextlib.suppress(OSError):
            readline.write_history_file(path)

    return save


def _at_line(error: Say, line: int | None) -> Say:
    """``error`` with the input's line in front (piped input: a script's line; None: at the terminal, none)."""
    return error if line is None else (lambda msg: error(f"line {line}: {msg}"))


def sql_shell(catalog: Catalog, *, show: Show, error: Say) -> int:
    """Read statements from stdin until `.quit` or end of input; show each result with ``show``. Returns how
    many statements (and commands) failed, a last one without `;` included. Piped input's errors name the line
    where their statement starts."""
    interactive = sys.stdin.isatty()
    with contextlib.suppress(AttributeError, ValueError):  # bytes that are not UTF-8 reach check_text, named
        sys.stdin.reconfigure(errors="surrogateescape")
    save_history = _history() if interactive else (lambda: None)
    if interactive:
        print(f"augdag sql shell on {catalog.path} (read-only). .help for help, .quit to leave.")
    pending, failed, read, first = "", 0, 0, 1  # read: lines read; first: the line where `pending` starts
    try:
        while True:
            try:
                line = input((MORE if pending.strip() else PROMPT) if interactive else "")
            except EOFError:
                break
            except KeyboardInterrupt:  # Ctrl-C drops the statement being typed, as psql does
                print()
                pending = ""
                continue
            read += 1
            first = first if pending else read
            if not pending.strip() and line.lstrip().startswith("."):
                ran = dot_command(catalog, line.strip(), show=show, error=_at_line(error, None if interactive else read))
                if ran is None:
                    break
                failed += not ran
                continue
            text = pending + line + "\n"
            statements, pending = split_statements(text)
            at = 0
            for statement in statements:
                at = text.index(statement, at)
                where = None if interactive else first + text.count("\n", 0, at)
                failed += not run_statement(catalog, statement, show=show, error=_at_line(error, where))
                at += len(statement)
            first += text.count("\n", 0, len(text) - len(pending))
        if pending.strip():
            where = None if interactive else first + pending[: len(pending) - len(pending.lstrip())].count("\n")
            _at_line(error, where)(f"not run: the last statement has no `;`: {pending.strip()[:80]!r}")
            failed += 1
    finally:
        if interactive:
            print()
        save_history()
    return failed
