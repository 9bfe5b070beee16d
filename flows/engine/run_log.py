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

A log that cannot be written (a full disk) is given up: one warning on stderr, written directly, and the run goes
on. Never ``logging.Handler.handleError``: it prints the traceback, Prefect's ``log_prints`` turns a print into a
record, the record comes back here and fails again (3,049 lines of "--- Logging error ---" and a RecursionError).
A full disk that fails the run is one line at the end (``disk_full``: the CLI's last line names what could not be
written).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import logging
import re
import sys
import traceback
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from conf.at_rest import redact
from conf.errors import AugdagError

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
    """Appends each record to the logs of the runs open where it was logged (see the module docstring); a log it
    could not write to is given up with one warning (``given_up``)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(RunLogFormatter())
        self.given_up: dict[Path, str] = {}  # log -> why it is no longer written

    def emit(self, record: logging.LogRecord) -> None:
        """Append the formatted record to the log of every run still open in this context."""
        paths = [path for ctx, path in _open.get() if _alive(ctx) and path not in self.given_up]
        if not paths:
            return
        try:
            text = redact(self.format(record)) + "\n"  # a value from the environment (a secret) as its ${VAR}
        except Exception as e:  # noqa: BLE001 — a record that cannot be formatted: said on stderr, never recursively
            self.give_up(None, f"a record of {record.name} could not be formatted ({type(e).__name__}: {e})")
            return
        for path in paths:
            try:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(text)
            except OSError as e:  # logging never fails a run: a full disk, a removed directory
                self.give_up(path, e.strerror or str(e))

    def give_up(self, path: Path | None, why: str) -> None:
        """Stop writing the log ``path`` (None: one bad record) and say so once on stderr, written directly: a
        ``print`` or a record would come back here (see the module docstring)."""
        if path is not None:
            self.given_up[path] = why
        line = f"warning: {why}" if path is None else f"warning: the run's log {path} could not be written ({why}); it stops here"
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001, S110 — no stderr either: nothing is left to tell
            pass


class DiskFull(AugdagError):
    """The disk filled up while augdag wrote (a part, a manifest, the catalog, a log): ``disk_full``."""


_FULL_PATH = re.compile(r'"([^"]+)": No space left on device')  # DuckDB: Could not write file "PATH": No space left


def causes(error: BaseException | None) -> list[BaseException]:
    """``error``, the error it was raised from or while handling, that one's, and so on."""
    chain: list[BaseException] = []
    while error is not None and all(error is not e for e in chain):
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


_PATH_NAMES = ("self", "path", "tmp", "target", "final", "dest", "file")  # pathlib's own frames hold it as ``self``


def written_path(error: BaseException) -> str | None:
    """The file a write that raised ``error`` without naming it was writing: the ``Path`` held by the innermost frame
    that holds one (``Path.write_text``'s ``self``, a writer's ``tmp``); None when no frame holds one."""
    tb, frames = error.__traceback__, []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        held = frame.f_locals
        if found := next((held[n] for n in _PATH_NAMES if isinstance(held.get(n), Path)), None):
            return str(found)
    return None


def disk_full(error: BaseException) -> DiskFull | None:
    """``error`` (with the errors it was raised from or while handling) as one line naming what could not be written,
    when a write found no space left on the device; None otherwise. The first full write is named (a run that
    fails on a full disk then fails to record it too); the run id and cache of any error in the chain come along
    for the CLI's resume line."""
    chain = causes(error)
    full = [e for e in chain if getattr(e, "errno", None) == errno.ENOSPC or "No space left on device" in str(e)]
    if not full:
        return None
    first = full[-1]
    named = next((str(f.filename) for f in reversed(full) if getattr(f, "filename", None)), None)
    named = named or next((m[1] for f in reversed(full) if (m := _FULL_PATH.search(str(f)))), None)
    named = named or written_path(first)
    what = f"could not write {named}" if named else f"{' '.join(str(first).split())}"
    out = DiskFull(f"no space left on device: {what} (free some space there)")
    for e in chain:
        if getattr(e, "run_id", None) and getattr(e, "cache", None):
            out.run_id, out.cache = e.run_id, e.cache  # type: ignore[attr-defined]
            break
    return out


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


@contextlib.contextmanager
def disk_full_as_error() -> Iterator[None]:
    """Inside: an error that is not augdag's and comes of a full disk (``disk_full``) is raised as ``DiskFull``, one
    line the CLI prints with exit 1 (a decorator too: the CLI's ``run_pipeline``, ``run_nightly``)."""
    try:
        yield
    except AugdagError:
        raise
    except Exception as e:
        if (full := disk_full(e)) is None:
            raise
        for failed in causes(e):  # the frames' locals (DuckDB connections among them) let go now, not at interpreter
            traceback.clear_frames(failed.__traceback__)  # exit, where nanobind reports each as a leak
        raise full from None  # the error and its traceback are in the run's log already
