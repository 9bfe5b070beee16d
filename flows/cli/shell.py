"""`augdag sql --shell`: an interactive, read-only SQL loop over the catalog.

Hand-written because DuckDB's Python package has no CLI (and its CLI would open the catalog for
writing). Statements end with `;` and may span lines; each one goes through ``check_read_only`` and
``Catalog.query`` (a short shared lock per statement, so a running flow can still write between two),
and a refused or failing one prints its error and the loop goes on. A line starting with `.` at the
start of a statement is a command: `.views`, `.schema [NAME]`, `.help`, `.quit` (or end of input).
On a terminal the prompt shows and readline keeps a history in ``~/.augdag_history``; piped input
(``augdag sql --shell < queries.sql``) runs without prompts and without history.
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
from storage.sql_guard import check_read_only
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


def split_statements(text: str) -> tuple[list[str], str]:
    """The complete statements of ``text``, each ended by a `;` outside quotes and comments (the `;` left
    out; nothing but comments is no statement), and the unfinished rest ("" when it holds only comments).
    Quotes: '...' ('' inside) and "..."; comments: ``--`` to the end of the line and ``/* ... */``."""
    done, start, i = [], 0, 0
    open_, code = None, False  # open_: the quote or comment we are inside; code: seen SQL since `start`
    while i < len(text):
        c, two = text[i], text[i : i + 2]
        if open_ is None:
            if two in ("--", "/*"):
                open_, i = two, i + 1
            elif c == ";":
                if code:
                    done.append(text[start:i].strip())
                start, code = i + 1, False
            elif not c.isspace():
                open_, code = (c if c in "'\"" else None), True
        elif (open_ == "--" and c == "\n") or (open_ == "/*" and two == "*/") or open_ == c:
            i += open_ == "/*"
            open_ = None
        i += 1
    return done, text[start:] if code or open_ == "/*" else ""


def run_statement(catalog: Catalog, statement: str, *, show: Show, error: Say) -> None:
    """One statement: refused unless read-only, else queried and shown; any failure is only printed."""
    try:
        check_read_only(statement)
        show(catalog.query(statement, sandbox=True))
    except AugdagError as e:
        error(str(e))
    except KeyboardInterrupt:
        error("interrupted")
    except Exception as e:  # noqa: BLE001 — a DuckDB error in the user's query: print it, keep the loop
        error(f"query failed: {e}")


def dot_command(catalog: Catalog, line: str, *, show: Show, error: Say) -> bool:
    """Run a `.command`; False when it ends the loop."""
    command, _, arg = line.partition(" ")
    arg = arg.strip().rstrip(";")
    if command in (".quit", ".exit"):
        return False
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
    except AugdagError as e:
        error(str(e))
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


def sql_shell(catalog: Catalog, *, show: Show, error: Say) -> None:
    """Read statements from stdin until `.quit` or end of input; show each result with ``show``."""
    interactive = sys.stdin.isatty()
    save_history = _history() if interactive else (lambda: None)
    if interactive:
        print(f"augdag sql shell on {catalog.path} (read-only). .help for help, .quit to leave.")
    pending = ""
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
            if not pending.strip() and line.lstrip().startswith("."):
                if not dot_command(catalog, line.strip(), show=show, error=error):
                    break
                continue
            statements, pending = split_statements(pending + line + "\n")
            for statement in statements:
                run_statement(catalog, statement, show=show, error=error)
        if pending.strip():
            error(f"not run: the last statement has no `;`: {pending.strip()[:80]!r}")
    finally:
        if interactive:
            print()
        save_history()
