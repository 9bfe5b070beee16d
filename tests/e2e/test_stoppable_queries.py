"""A query can always be stopped and never blocks a run (issue 48, defect 2), through `augdag` subprocesses.

Ctrl-C is SIGINT to the process (started in its own session, as a terminal's foreground job gets it) once its query
runs: the query reads a snapshot of the catalog, and the snapshot's directory appearing under the process's TMPDIR
says that it does. `select count(*) from range(10000000000000)` runs for days: an exit at all proves the stop.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conf.errors import CatalogError
from storage.artifacts import ArtifactRef, write_manifest, write_part
from storage.catalog import Catalog
from tests.cli.test_sql_statements import ERRORS, RESULTS, SCRIPT
from tests.conftest import REPO, bitext, subprocess_env

FOREVER = "select count(*) from range(10000000000000)"
INTERRUPTED = "error: interrupted (Ctrl-C): the query was stopped"
HANG_GUARD_S = 120  # not a threshold: only so that a broken stop fails the test instead of hanging it


STARTED: list[subprocess.Popen | int] = []  # what a test started (a terminal's child: its pid), killed after it
# should a failed assertion have left it running


@pytest.fixture(autouse=True)
def _no_query_left_running():
    yield
    while STARTED:
        started = STARTED.pop()
        if isinstance(started, subprocess.Popen):
            if started.poll() is None:
                started.kill()
                started.wait()
            continue
        with contextlib.suppress(ChildProcessError):  # reaped already: nothing to kill (its pid may be another's)
            if os.waitpid(started, os.WNOHANG) == (0, 0):
                os.kill(started, signal.SIGKILL)
                os.waitpid(started, 0)


@pytest.fixture
def cache(tmp_path) -> Path:
    """A cache with one `bitext` artifact of two pairs."""
    cache = tmp_path / "cache"
    ref = ArtifactRef(str(cache), "clean", "a" * 32, "bitext", "d", 1)
    write_part(bitext([("a b", "x y"), ("c", "z")]), ref.path(0))
    Catalog(cache).register(ref, write_manifest(ref, version="1", params={}), run_id="r1")
    return cache


def start(cache: Path, *args: str, stdin: bytes | None = None, **env: str) -> subprocess.Popen:
    """`augdag ARGS --cache CACHE` in its own session, its temporary files in ``<cache>/../tmp``."""
    tmp = cache.parent / "tmp"
    tmp.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", *args, "--cache", str(cache)],
        env=subprocess_env(cache.parent, COLUMNS="200", TMPDIR=str(tmp), **env),
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    STARTED.append(proc)
    if stdin is not None:
        proc.stdin.write(stdin)
    proc.stdin.close()
    proc.stdin = None  # all written: communicate() has nothing to send
    return proc


def when_querying(proc: subprocess.Popen | None, cache: Path) -> None:
    """Return once ``proc`` (or the one process querying ``cache``) reads its snapshot of the catalog (its query
    runs, or is about to)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not list((cache.parent / "tmp").glob("augdag-query-*/catalog.duckdb")):
        assert proc is None or proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the query never started"
        time.sleep(0.1)
    time.sleep(0.5)  # past the connection's settings, into the query (a SIGINT before it is handled the same)


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    """Its exit code, stdout and stderr; a process that does not end is killed (and the test fails)."""
    try:
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out.decode(), err.decode()


def test_ctrl_c_stops_a_running_query_with_exit_130_and_one_line(cache):
    proc = start(cache, "sql", FOREVER)
    when_querying(proc, cache)
    proc.send_signal(signal.SIGINT)
    assert finish(proc) == (130, "", INTERRUPTED + "\n")
    assert list((cache.parent / "tmp").iterdir()) == []  # the snapshot is gone with it


def test_timeout_stops_a_query_with_exit_1_and_one_line(cache):
    done = finish(start(cache, "sql", FOREVER, "--timeout", "1"))
    assert done == (1, "", "error: query stopped at its time limit of 1 s (--timeout, $AUGDAG_QUERY_TIMEOUT)\n")


def test_ctrl_c_in_the_piped_shell_stops_the_statement_and_the_next_one_runs(cache):
    proc = start(cache, "sql", "--shell", "-f", "json", stdin=f"{FOREVER};\nSELECT 42 AS alive;\n".encode())
    when_querying(proc, cache)
    proc.send_signal(signal.SIGINT)
    stopped = INTERRUPTED.replace("error: ", "error: line 1: ")  # piped: the line of the statement
    assert finish(proc) == (1, '{"alive": 42}\n', f"{stopped}\nerror: 1 statement(s) failed\n")


def test_the_shell_reads_a_piped_script_with_duckdbs_statements_and_exits_1_on_a_failed_one(cache):
    code, out, err = finish(start(cache, "sql", "--shell", "-f", "json", stdin=SCRIPT))
    assert (code, out.splitlines(), err.splitlines()) == (1, RESULTS, ERRORS)


@pytest.mark.parametrize("stop", ["ctrl_c", "time_limit", "timeout_option"])
def test_ctrl_c_and_the_time_limit_stop_an_export_and_write_nothing(cache, stop):
    where = f"({FOREVER}) > 0"
    env = {"AUGDAG_QUERY_TIMEOUT": "1"} if stop == "time_limit" else {}
    limit = ["--timeout", "1"] if stop == "timeout_option" else []
    proc = start(cache, "export", "bitext", "-o", str(cache.parent / "out.parquet"), "--where", where, *limit, **env)
    if stop == "ctrl_c":
        when_querying(proc, cache)
        proc.send_signal(signal.SIGINT)
        assert finish(proc) == (130, "", INTERRUPTED + "\n")  # one line, as `sql` says it
    else:
        limit = "error: query stopped at its time limit of 1 s (--timeout, $AUGDAG_QUERY_TIMEOUT)\n"
        assert finish(proc) == (1, "", limit)
    assert [p.name for p in cache.parent.iterdir() if p.name.startswith("out")] == []  # no file, no temporary one


def test_a_writer_takes_the_lock_while_a_long_query_runs(cache):
    """The query holds the catalog's lock only while it copies its snapshot: a run's registration goes through (on
    main before this, it waited for the query: here `CatalogError` after lock_timeout_s)."""
    proc = start(cache, "sql", FOREVER)
    try:
        when_querying(proc, cache)
        with Catalog(cache, lock_timeout_s=10).write() as con:
            con.execute("INSERT INTO lineage VALUES ('child', 'parent')")
        assert Catalog(cache).query("SELECT child, parent FROM lineage").to_pylist() == [{"child": "child", "parent": "parent"}]
        assert proc.poll() is None  # and the query still runs
    finally:
        proc.send_signal(signal.SIGINT)
        assert finish(proc)[0] == 130


HOLD = """import sys
from storage.catalog import Catalog
with Catalog(sys.argv[1]).write():
    print("held", flush=True)
    sys.stdin.read()
"""  # holds the catalog's exclusive lock until its stdin closes


def test_a_process_waiting_for_the_lock_names_its_holder_then_proceeds_or_fails_naming_it(cache):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(cache)],
        cwd=REPO,
        env=subprocess_env(cache.parent),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    waiter = None
    try:
        assert holder.stdout.readline() == "held\n"
        # a writer with a short lock_timeout_s: one line naming the holder
        with pytest.raises(CatalogError) as failed, Catalog(cache, lock_timeout_s=1).write():
            pass
        who = rf"held by pid {holder.pid} on {re.escape(socket.gethostname())} \(python -c import sys\\nfrom storage"
        assert re.fullmatch(
            rf"{re.escape(str(cache))}/catalog\.lock: could not lock the catalog within 1 s \(orchestration\.lock_timeout_s\); "
            rf"{who}.*\) since \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC, exclusive",
            str(failed.value),
        ), str(failed.value)
        waiter = start(cache, "sql", "SELECT count(*) AS n FROM bitext", "-f", "json")
        watchdog = threading.Timer(HANG_GUARD_S, waiter.kill)
        watchdog.start()
        said = waiter.stderr.readline().decode()  # the waiter says so before the lock is free
        assert re.search(
            rf"waiting 2 s for the catalog lock {re.escape(str(cache))}/catalog\.lock, {who}.*\) since [^,]+ UTC, "
            r"exclusive; waiting up to 600 s \(orchestration\.lock_timeout_s\)$",
            said.rstrip("\n"),
        ), said
        assert waiter.poll() is None  # still waiting
        holder.stdin.close()  # the holder lets go: the waiter proceeds
        assert finish(waiter) == (0, '{"n": 2}\n', "")
        watchdog.cancel()
    finally:
        holder.kill() if holder.poll() is None else None
        if waiter is not None and waiter.poll() is None:
            waiter.kill()
    assert list((cache / "catalog.holders").iterdir()) == []  # every note removed with its lock


class Terminal:
    """`augdag ARGS --cache CACHE` on a pseudo-terminal of its own: Ctrl-C typed there is SIGINT to its foreground
    process group, as a user's terminal sends it."""

    def __init__(self, cache: Path, *args: str) -> None:
        tmp = cache.parent / "tmp"
        tmp.mkdir(exist_ok=True)
        env = subprocess_env(cache.parent, COLUMNS="200", TMPDIR=str(tmp), HOME=str(cache.parent), NO_COLOR="1")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: a session of its own with the terminal as its controlling one
            os.chdir(REPO)
            os.execve(sys.executable, [sys.executable, "-m", "flows.cli", *args, "--cache", str(cache)], env)
        STARTED.append(self.pid)
        self.seen = b""

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def until(self, text: bytes) -> bytes:
        """What the terminal showed up to ``text`` (then forgotten), styles left out; a failure once the process ended."""
        deadline = time.monotonic() + HANG_GUARD_S
        while text not in self.seen:
            assert time.monotonic() < deadline, self.seen
            if select.select([self.fd], [], [], 0.2)[0]:
                try:
                    self.seen += os.read(self.fd, 4096)
                except OSError:  # the process ended
                    raise AssertionError(self.seen) from None
        shown, _, self.seen = self.seen.partition(text)
        return re.sub(rb"\x1b\[[0-9;]*m", b"", shown + text)  # without the bold of `error:`

    def exit_code(self) -> int:
        with contextlib.suppress(OSError):
            while os.read(self.fd, 4096):
                pass
        return os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])


def test_ctrl_c_typed_in_a_terminal_stops_a_query_of_the_shell_and_of_sql(cache):
    shell = Terminal(cache, "sql", "--shell", "-f", "json")
    shell.until(b"augdag> ")
    shell.type(f"{FOREVER};\r".encode())
    when_querying(None, cache)
    shell.type(b"\x03")  # Ctrl-C
    assert shell.until(b"augdag> ").endswith(f"^C{INTERRUPTED}\r\naugdag> ".encode())  # back to the prompt
    shell.type(b"SELECT 42 AS alive;\r")
    assert shell.until(b"augdag> ").endswith(b'{"alive": 42}\r\naugdag> ')
    shell.type(b".quit\r")
    assert shell.exit_code() == 0

    one = Terminal(cache, "sql", FOREVER)
    when_querying(None, cache)
    one.type(b"\x03")
    assert one.until(INTERRUPTED.encode()).endswith(b"^C" + INTERRUPTED.encode())
    assert one.exit_code() == 130


def test_a_run_started_while_a_long_query_runs_completes(cache, tmp_path):
    """`augdag run ingest` registers its artifacts while `augdag sql` queries (on main before this, the run waited
    silently for the query's shared lock until lock_timeout_s)."""
    (tmp_path / "a.en").write_text("one\ntwo\nthree\n")
    (tmp_path / "a.de").write_text("eins\nzwei\ndrei\n")
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"datasets:\n  pair:\n    kind: bitext\n    format: text\n    src: {tmp_path}/a.en\n    tgt: {tmp_path}/a.de\n"
    )
    query = start(cache, "sql", FOREVER)
    try:
        when_querying(query, cache)
        run = finish(start(cache, "run", "ingest", "--config", str(profile)))
        assert run[0] == 0 and "completed: shards: 3 computed, 0 cached of 3" in run[1], run
        assert query.poll() is None  # the query still runs
    finally:
        query.send_signal(signal.SIGINT)
        assert finish(query)[0] == 130
    assert Catalog(cache).query("SELECT count(*) AS n FROM bitext WHERE source = 'pair'").to_pylist() == [{"n": 3}]


def test_the_snapshot_of_a_killed_query_is_removed_by_the_next_query(cache):
    proc = start(cache, "sql", FOREVER)
    when_querying(proc, cache)
    proc.kill()  # SIGKILL: no cleanup runs
    assert finish(proc)[0] == -signal.SIGKILL
    tmp = cache.parent / "tmp"
    assert [p.name.split("-")[2] for p in tmp.iterdir()] == [str(proc.pid)]  # augdag-query-<pid>-*, left behind
    assert finish(start(cache, "sql", "SELECT 42 AS x", "-f", "json")) == (0, '{"x": 42}\n', "")
    assert list(tmp.iterdir()) == []
