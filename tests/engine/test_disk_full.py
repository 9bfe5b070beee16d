"""A full disk is one line, and the run's log never recurses (issue 48, defect 7; flows/engine/run_log.py).

The log handler writes to ``/dev/full`` (every write there fails with ENOSPC), with ``print`` sending what it prints
to stderr into logging as Prefect's ``log_prints`` does: it used to print "--- Logging error ---" and recurse. The
end-to-end case, a real tmpfs that fills up under `augdag run`, is tests/e2e/test_disk_full_cli.py."""

from __future__ import annotations

import builtins
import contextvars
import errno
import logging
from pathlib import Path

import duckdb
import pytest

from conf.errors import StageError
from flows.engine.run_log import DiskFull, RunLogHandler, disk_full, disk_full_as_error, log_path, open_run_log


def test_a_log_on_a_full_disk_is_given_up_with_one_warning_and_no_recursion(tmp_path, monkeypatch, capsys):
    printed_as_log = lambda *a, **k: logging.getLogger("augdag.run").info(" ".join(map(str, a)))  # noqa: E731
    monkeypatch.setattr(builtins, "print", printed_as_log)  # as Prefect's log_prints: stderr prints become records

    def run() -> Path:
        path = open_run_log(tmp_path, "ingest-1", None)
        path.symlink_to("/dev/full")  # every write: ENOSPC
        for i in range(3):
            logging.getLogger("augdag").warning("stage %d", i)
        return path

    path = contextvars.copy_context().run(run)  # the run's open log stays in this context
    handler = next(h for h in logging.getLogger().handlers if isinstance(h, RunLogHandler))
    assert handler.given_up == {path: "No space left on device"}
    assert path == log_path(tmp_path, "ingest-1")
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.endswith(("stage 0", "stage 1", "stage 2"))]  # the console
    assert lines == [f"warning: the run's log {path} could not be written (No space left on device); it stops here"]


def _raised(*errors: BaseException) -> BaseException:
    """The last of ``errors``, each raised while handling the one before (as a run that failed on a full disk and
    then failed to record it)."""
    try:
        if len(errors) == 1:
            raise errors[0]
        try:
            raise _raised(*errors[:-1])
        except BaseException:
            raise errors[-1]  # noqa: B904 — "during handling of the above exception"
    except BaseException as e:
        return e


def test_disk_full_names_the_first_file_that_could_not_be_written():
    checkpoint = duckdb.IOException(
        "IO Error: Detached database 'catalog_4', but CHECKPOINT during DETACH failed.\nOriginal error: Could not "
        'write file "/c/catalog.duckdb": No space left on device'
    )
    part = OSError(errno.ENOSPC, "No space left on device", "/c/artifacts/clean/ab/.part-00000.parquet.tmp")
    assert str(disk_full(_raised(checkpoint, duckdb.IOException("IO Error: the database has been invalidated")))) == (
        "no space left on device: could not write /c/catalog.duckdb (free some space there)"
    )
    assert str(disk_full(_raised(part, checkpoint))) == (
        "no space left on device: could not write /c/artifacts/clean/ab/.part-00000.parquet.tmp (free some space there)"
    )
    nameless = OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device")
    assert str(disk_full(nameless)) == (
        "no space left on device: [Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device "
        "(free some space there)"
    )
    assert disk_full(_raised(OSError(errno.EIO, "Input/output error", "/c/x"))) is None
    assert disk_full(ValueError("no space here")) is None


def test_a_full_disk_under_a_run_is_raised_as_one_diskfull_with_the_runs_resume():
    stage = StageError("stage 'clean' (dataset train) failed on shard 1 of 3: [Errno 28] No space left on device")
    stage.run_id, stage.cache = "ingest-1", "/c"
    with pytest.raises(DiskFull) as e, disk_full_as_error():
        raise _raised(
            OSError(errno.ENOSPC, "No space left on device", "/c/artifacts/m.json"),
            stage,
            duckdb.IOException('IO Error: Could not write file "/c/catalog.duckdb": No space left on device'),
        )
    assert str(e.value) == "no space left on device: could not write /c/artifacts/m.json (free some space there)"
    assert (e.value.run_id, e.value.cache, e.value.exit_code) == ("ingest-1", "/c", 1)
    assert e.value.__suppress_context__ and e.value.__cause__ is None  # no traceback of the chain
    with pytest.raises(StageError), disk_full_as_error():  # augdag's own errors are one line already
        raise stage
    with pytest.raises(KeyError), disk_full_as_error():
        raise KeyError("x")


def test_a_value_read_from_the_environment_is_logged_as_its_variable(tmp_path):
    """No secret at rest (issue 48, defect 4): a run's log holds ``${VAR}`` where a record quotes the value."""
    from conf.at_rest import note_value

    note_value("AUGDAG_TEST_SECRET", "s3cr3t-marker-4711")

    def run() -> Path:
        path = open_run_log(tmp_path, "ingest-2", None)
        logging.getLogger("augdag").warning("could not reach http://u:s3cr3t-marker-4711@store.example/")
        return path

    path = contextvars.copy_context().run(run)
    assert path.read_text().splitlines()[-1].endswith("could not reach http://u:${AUGDAG_TEST_SECRET}@store.example/")
