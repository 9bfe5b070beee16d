"""Where a run's log goes: every record to ``<cache>/logs/<run_id>.log``, tracebacks and fairseq's training
output (``tasks.common.nmt.training_log``) included; the terminal gets warnings only (errors only with `augdag -q`),
and its last line is the CLI's one-line error (`augdag -v` shows it all again, `augdag logs RUN` afterwards:
``log_records`` and ``stage_records`` read the file back).

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
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

LOG_DIR = "logs"
_open: contextvars.ContextVar[tuple[tuple[Any, Path], ...]] = contextvars.ContextVar("augdag_run_logs", default=())
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


def log_path(cache: Path | str, run_id: str) -> Path:
    """The log file of run ``run_id`` in cache ``cache``."""
    return Path(cache).absolute() / LOG_DIR / f"{run_id}.log"


class RunLogFormatter(logging.Formatter):
    """``time | LEVEL | logger - Task run 'name' - message``, the traceback below (as Prefect's console).
    A task run whose name does not start with its task's (a model's training: run 'fairseq' of the task
    'student') adds the task's: ``Task run 'fairseq' (student) - ``."""

    def __init__(self, datefmt: str = "%Y-%m-%d %H:%M:%S") -> None:
        super().__init__("%(asctime)s.%(msecs)03d | %(levelname)-7s | %(name)s - %(augdag_where)s%(message)s", datefmt)

    def format(self, record: logging.LogRecord) -> str:
        """The record as a line, its task run (or flow run) named before the message."""
        task, flow = getattr(record, "task_run_name", None), getattr(record, "flow_run_name", None)
        name = getattr(record, "task_name", None)
        of = f" ({name})" if task and name and not str(task).startswith(str(name)) else ""
        record.augdag_where = f"Task run {task!r}{of} - " if task else f"Flow run {flow!r} - " if flow else ""
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
        """Append the formatted record to the log of every run still open in this context."""
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
    """The terminal without ``-v``: warnings (errors only with ``-q``), but no traceback and no run failure
    (each is in the run's log; the CLI's last line says what failed and how to resume)."""

    def __init__(self, level: int = logging.WARNING) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether the record reaches the terminal: at ``level`` or above, no traceback, no run logger's error."""
        if record.levelno < self.level or record.exc_info or record.stack_info:
            return False
        return not (record.levelno >= logging.ERROR and record.name.startswith(RUN_LOGGERS))


class ConsoleHandler(logging.StreamHandler):
    """A stream handler on whatever ``sys.stderr`` is when it writes (a test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(RunLogFormatter(datefmt="%H:%M:%S"))

    @property
    def stream(self):
        """The ``sys.stderr`` of the moment."""
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        """Ignored: the handler always writes to the current ``sys.stderr``."""
        pass


def configure_console(verbose: bool, quiet: bool = False) -> None:
    """The terminal's share of the log: everything (Prefect's INFO, fairseq's training log, tracebacks) with
    ``verbose``, else ``QuietConsole`` (warnings and errors; errors only when ``quiet``). Call before Prefect
    is imported (see the module docstring); calling again replaces it."""
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
            handler.addFilter(QuietConsole(logging.ERROR if quiet else logging.WARNING))
    logging.getLogger("augdag").setLevel(logging.INFO)


_RECORD = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \| \w+ *\| \S+ - "
    r"(?:Task run '(?P<task>[^']*)'(?: \((?P<task_name>[^)]*)\))? - |Flow run '[^']*' - )?(?P<msg>.*)"
)
# the flow driver's lines about a stage: "clean[pair] 27c002798868: ...", "student 3b2a1c0d9e8f: trained (...)",
# "stage 'clean' (dataset pair) failed ...", "model 'student' (fairseq ...) failed to train ..."
_STAGE_MESSAGE = re.compile(r"(?:(?:stage|model) '(?P<quoted>[^']+)'|(?P<stage>[A-Za-z_][\w.]*)(?:\[| [0-9a-f]{12}:))")


def log_records(lines: Iterable[str]) -> Iterator[list[str]]:
    """The records of a run's log, each as its lines (the first with time, level and logger; a traceback
    or a message of several lines below it)."""
    record: list[str] = []
    for line in lines:
        if _RECORD.match(line) and record:
            yield record
            record = []
        record.append(line)
    if record:
        yield record


def record_stages(first_line: str) -> set[str]:
    """The stage (or model) names a record is about: its task run's stage (``clean-00003`` is ``clean``'s
    shard 3; ``'fairseq' (student)`` is the training of ``student``) or the stage a flow line names."""
    m = _RECORD.match(first_line)
    if m is None:
        return set()
    if m["task"] is not None:
        return {re.sub(r"-\d+$", "", m["task"]), *([m["task_name"]] if m["task_name"] else [])}
    said = _STAGE_MESSAGE.match(m["msg"])
    return {said["quoted"] or said["stage"]} if said else set()


def stage_records(lines: Iterable[str], stage: str) -> Iterator[list[str]]:
    """The records of ``stage`` (a stage or model name, as `augdag runs` lists them) in a run's log."""
    return (r for r in log_records(lines) if stage in record_stages(r[0]))
