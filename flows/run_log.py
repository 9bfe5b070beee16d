"""Where a run's log goes: every record to ``<cache>/logs/<run_id>.log``, tracebacks included; the terminal
gets warnings only, and its last line is the CLI's one-line error (`augdag -v` shows it all again).

The file: ``RunLogHandler`` sits on the root logger, so it receives Prefect's records (the flow and task
run loggers, the engine's failure reports with their tracebacks) and augdag's. Each record goes to the log
of every run open where it was logged: a ``ContextVar`` that a run sets when it starts, which Prefect copies
into the threads of its tasks, and the nightly run into its pipelines (whose records therefore reach both
their own log and the nightly's). An entry ends with the Prefect flow run that opened it. Tasks in other
processes (the processes, Dask and Ray runners) log there, not here.

The terminal: the CLI calls ``configure_console`` before Prefect is imported. Prefect's logging setup then
finds a handler on the root logger and leaves the root alone (its console handler is not installed; the
handlers that send flow and task run logs to the server, and so to the UI, are untouched). Where Prefect
was imported first (a test, a script around the CLI) the same filter goes on Prefect's console handler.
No Prefect import here.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from pathlib import Path
from typing import Any

LOG_DIR = "logs"
_open: contextvars.ContextVar[tuple[tuple[Any, Path], ...]] = contextvars.ContextVar("augdag_run_logs", default=())
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


def log_path(cache: Path | str, run_id: str) -> Path:
    """The log file of run ``run_id`` in cache ``cache``."""
    return Path(cache).absolute() / LOG_DIR / f"{run_id}.log"


class RunLogFormatter(logging.Formatter):
    """``time | LEVEL | logger - Task run 'name' - message``, the traceback below (as Prefect's console)."""

    def __init__(self, datefmt: str = "%Y-%m-%d %H:%M:%S") -> None:
        super().__init__("%(asctime)s.%(msecs)03d | %(levelname)-7s | %(name)s - %(augdag_where)s%(message)s", datefmt)

    def format(self, record: logging.LogRecord) -> str:
        task, flow = getattr(record, "task_run_name", None), getattr(record, "flow_run_name", None)
        record.augdag_where = f"Task run {task!r} - " if task else f"Flow run {flow!r} - " if flow else ""
        return super().format(record)


def _alive(flow_run_context: Any) -> bool:
    """Whether the Prefect flow run that opened a log is still running (its context still entered)."""
    return flow_run_context is None or getattr(flow_run_context, "_token", True) is not None


class RunLogHandler(logging.Handler):
    """Appends each record to the logs of the runs open where it was logged (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(RunLogFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        paths = [path for ctx, path in _open.get() if _alive(ctx)]
        if not paths:
            return
        try:
            text = self.format(record) + "\n"
            for path in paths:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(text)
        except Exception:  # noqa: BLE001 — logging never fails a run
            self.handleError(record)


def open_run_log(cache: Path | str, run_id: str, flow_run_context: Any) -> Path:
    """Start the log of run ``run_id``: from here on, records logged in this context (and the threads
    and pipelines it starts) while ``flow_run_context`` runs are appended to ``log_path(cache, run_id)``."""
    root = logging.getLogger()
    if not any(isinstance(h, RunLogHandler) for h in root.handlers):
        root.addHandler(RunLogHandler())
    augdag = logging.getLogger("augdag")
    if augdag.level == logging.NOTSET:
        augdag.setLevel(logging.INFO)  # its records reach the file; the terminal shows warnings only
    path = log_path(cache, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    _open.set(tuple(e for e in _open.get() if _alive(e[0])) + ((flow_run_context, path),))
    return path


class QuietConsole(logging.Filter):
    """The terminal without ``-v``: warnings and errors, but no traceback and no run failure (each is in
    the run's log; the CLI's last line says what failed and how to resume)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or record.exc_info or record.stack_info:
            return False
        return not (record.levelno >= logging.ERROR and record.name.startswith(RUN_LOGGERS))


class ConsoleHandler(logging.StreamHandler):
    """A stream handler on whatever ``sys.stderr`` is when it writes (a test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(RunLogFormatter(datefmt="%H:%M:%S"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure_console(verbose: bool) -> None:
    """The terminal's share of the log: everything (Prefect's INFO and tracebacks) with ``verbose``, else
    ``QuietConsole``. Call before Prefect is imported (see the module docstring); calling again replaces it."""
    root = logging.getLogger()
    prefect_consoles = [h for h in root.handlers if type(h).__name__ == "PrefectConsoleHandler"]
    ours = [h for h in root.handlers if isinstance(h, ConsoleHandler)]
    if not prefect_consoles and not ours:
        ours = [ConsoleHandler()]
        root.addHandler(ours[0])
    for handler in (*prefect_consoles, *ours):
        for f in [f for f in handler.filters if isinstance(f, QuietConsole)]:
            handler.removeFilter(f)
        if not verbose:
            handler.addFilter(QuietConsole())
    logging.getLogger("augdag").setLevel(logging.INFO)
