"""Failures and retries (issue defects 6, 7, 8, 9, 12): which errors are retried, the one line a failed run
ends with, its log file, `augdag runs` on failed stages and retry chains, the nightly totals counting each
artifact once, and `augdag retry --from` recomputing exactly a stage's descendants."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from conf.errors import InputError, ModelError, StageError
from conf.schema import AugdagConf
from flows.cli import app
from flows.engine.retry import forced_artifacts, forcing
from storage.catalog import Catalog
from storage.runs import load_run
from tests.conftest import harness_url, subprocess_env

runner = CliRunner()


# -- defect 6: only transient errors are retried ------------------------------------------------------------


class OutOfMemoryError(RuntimeError):  # torch.cuda.OutOfMemoryError is torch.OutOfMemoryError
    __module__ = "torch"


@pytest.mark.parametrize(
    "error, transient",
    [
        (OSError(5, "Input/output error"), True),
        (TimeoutError("slow"), True),
        (ConnectionResetError(), True),
        (MemoryError(), True),
        (pa.ArrowMemoryError("arrow"), True),
        (OutOfMemoryError("CUDA out of memory"), True),
        (FileNotFoundError(2, "No such file"), False),
        (PermissionError(13, "denied"), False),
        (IsADirectoryError(21, "Is a directory"), False),
        (NotADirectoryError(20, "Not a directory"), False),
        (ValueError("bad"), False),
        (KeyError("column"), False),
        (pa.ArrowInvalid("Index not in dictionary bounds"), False),
        (InputError("x.tsv:3: bad"), False),
        (ModelError("no model"), False),
        (RuntimeError("bug"), False),
    ],
)
def test_is_transient_allows_io_timeouts_and_memory_only(error, transient):
    from flows.engine.transient import is_transient

    assert is_transient(error) is transient


def flaky(table: pa.Table, *, calls: str, error: str, fail_at: int) -> pa.Table:
    """Identity, except that the shard holding row ``fail_at`` raises ``error``; every call there is counted."""
    if fail_at in table["x"].to_pylist():
        with open(calls, "a") as f:
            f.write("call\n")
        raise {"ValueError": ValueError, "TimeoutError": TimeoutError}[error](f"boom at row {fail_at}")
    return table


def same(table: pa.Table, **_params) -> pa.Table:
    return table


def rows(n: int, size: int):
    """A reader of ``n`` rows in shards of ``size``."""

    def produce():
        for i in range(0, n, size):
            yield i // size, {"part": pa.table({"x": list(range(i, min(n, i + size)))})}

    return produce


@functools.cache
def tiny_flow():
    """A flow over generated shards (imported when a test asks: Prefect is not imported at collection).

    ``flaky-<Error>``: src[x] (4 shards), `same` twice (two fingerprints), `flaky` failing on shard 3.
    ``lineage``: src[x], src[y]; score over each (siblings); bins over score[x] and over src[y]."""
    from prefect import flow

    from flows.engine.driver import Run, run_source_stage, run_stage
    from tasks.runtime.stage import Stage

    def source(run: Run, dataset: str, n: int = 8, size: int = 2):
        return run_source_stage(
            run,
            name="src",
            version="1",
            produce=rows(n, size),
            params={"n": n, "size": size},
            input_fingerprint=f"input-{dataset}",
            dataset=dataset,
        )

    @flow(name="failures_test")
    def tiny(cache: str, mode: str, calls: str = "") -> dict:
        conf = AugdagConf(cache=Path(cache), orchestration={"retries": 2, "retry_delay_s": 0})
        with Run.started(conf, pipeline="tiny", profile="test", config={}) as run:
            if mode.startswith("flaky-"):
                x = source(run, "x")
                for k in (1, 2):
                    run_stage(run, Stage("same", "1", same), inputs=[x], params={"k": k})
                run_stage(
                    run,
                    Stage("flaky", "1", flaky),
                    inputs=[x],
                    params={"calls": calls, "error": mode.removeprefix("flaky-"), "fail_at": 6},
                )
            else:
                x, y = source(run, "x"), source(run, "y", n=4)
                score = {d: run_stage(run, Stage("score", "1", same), inputs=[ref], params={}) for d, ref in (("x", x), ("y", y))}
                run_stage(run, Stage("bins", "1", same), inputs=[score["x"]], params={})
                run_stage(run, Stage("bins", "1", same), inputs=[y], params={})
        return run.finish()

    return tiny


@pytest.mark.parametrize(
    "error, attempts, why",
    [
        ("ValueError", 1, "ValueError: boom at row 6"),
        ("TimeoutError", 3, "TimeoutError: boom at row 6 (still failing after 2 retries)"),
    ],
)
def test_a_deterministic_error_fails_at_once_a_transient_one_is_retried_twice(prefect_harness, tmp_path, error, attempts, why):
    calls = tmp_path / "calls.txt"
    with pytest.raises(StageError) as failed:
        tiny_flow()(str(tmp_path), f"flaky-{error}", str(calls))
    assert len(calls.read_text().splitlines()) == attempts
    e = failed.value
    src = next((tmp_path / "artifacts" / "src").iterdir())
    assert str(e) == (
        f"stage 'flaky' (dataset x) failed on shard 3 of 4, input {src}/part-00003.parquet: {why}. 3 written shard(s) are kept."
    )
    assert (e.exit_code, e.run_id, e.cache) == (1, load_run(Catalog(tmp_path), e.run_id)["run_id"], tmp_path)
    assert e.log == tmp_path / "logs" / f"{e.run_id}.log"
    log = e.log.read_text()
    assert "flaky[x] shard 3 failed:\nTraceback (most recent call last):" in log and f"{error}: boom at row 6" in log

    # defect 7: `augdag runs` shows the error and counts the failed stage's written shards, one line per fingerprint
    shown = runner.invoke(app, ["runs", "--stages", "--cache", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    lines = [line.split() for line in shown.output.splitlines()[1:]]
    assert [" ".join(w if w[0] == "error:" else w[:2] + w[3:-2]) for w in lines] == [
        f"error: {e}",
        "src x shards 4 of 4 written (4 computed, 0 cached) rows out 8",
        "same x shards 4 of 4 written (4 computed, 0 cached) rows out 8",
        "same x shards 4 of 4 written (4 computed, 0 cached) rows out 8",  # another fingerprint: not merged
        "flaky x shards 3 of 4 written (3 computed, 0 cached), 1 failed rows out 6",
    ]
    stages = load_run(Catalog(tmp_path), e.run_id)["summary"]["stages"]
    assert [w[2] for w in lines[1:]] == [s["fingerprint"][:12] for s in stages]


# -- defect 6, 7, 12: the CLI's last line, the run's log, `augdag runs`, the retry chain --------------------


def corrupt_parquet(path: Path) -> None:
    """100 rows in row groups of 20; a byte of row group 3's dictionary indices overwritten:
    pyarrow reads rows 61-80 as ArrowInvalid: Index not in dictionary bounds."""
    pq.write_table(
        pa.table({"text": [f"sentence number {i % 7} here" for i in range(100)]}),
        path,
        row_group_size=20,
        use_dictionary=True,
        compression="none",
    )
    column = pq.ParquetFile(path).metadata.row_group(3).column(0)
    data = bytearray(path.read_bytes())
    data[column.dictionary_page_offset + column.total_compressed_size - 8] = 0xFF
    path.write_bytes(data)


def augdag(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = subprocess_env(tmp_path, COLUMNS="300", PREFECT_API_URL=harness_url())
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_corrupt_input_ends_with_one_line_naming_shard_file_and_retry_command(prefect_harness, tmp_path):
    data, cache = tmp_path / "mono.parquet", tmp_path / "cache"
    corrupt_parquet(data)
    profile = tmp_path / "p.yaml"
    profile.write_text(f"shard_size: 20\ndatasets:\n  m: {{kind: mono, format: parquet, path: {data}}}\n")
    first = augdag(tmp_path, "run", "ingest", "--config", str(profile), "--cache", str(cache))
    catalog = Catalog(cache)
    run_id = catalog.query("SELECT run_id FROM runs").column(0)[0].as_py()
    failed = (
        f"stage 'read' (dataset m) failed on shard 3 (of at least 4): {data}: rows 61-80 of 100 cannot be "
        "decoded (ArrowInvalid: Index not in dictionary bounds). Hint: the file is corrupt or truncated: write "
        "it again from its source. 3 written shard(s) are kept."
    )
    assert first.returncode == 2  # bad input, not retried
    assert first.stderr.splitlines() == [
        f"reporting to the Prefect server at {harness_url()}",
        (
            f"error: {failed} Once the input is fixed: augdag retry {run_id} --cache {cache}  "
            f"(log: {cache}/logs/{run_id}.log; -v shows it here)"
        ),
    ]
    assert first.stdout == ""
    log = (cache / "logs" / f"{run_id}.log").read_text()
    assert "Traceback (most recent call last)" in log and "pyarrow.lib.ArrowInvalid: Index not in dictionary bounds" in log

    # -v: the tracebacks on the terminal too; a retry prints "reporting to" once and records what it retried
    again = augdag(tmp_path, "-v", "retry", run_id, "--cache", str(cache))
    assert again.returncode == 2 and again.stderr.count("reporting to the Prefect server") == 1
    assert "Traceback (most recent call last)" in again.stderr
    second = catalog.query("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1").column(0)[0].as_py()
    assert again.stderr.splitlines()[-1].startswith(
        f"error: {failed} Once the input is fixed: augdag retry {second} --cache {cache}"
    )

    pq.write_table(pa.table({"text": [f"sentence number {i % 7} here" for i in range(100)]}), data)  # fixed
    fixed = augdag(tmp_path, "retry", second, "--cache", str(cache))
    assert fixed.returncode == 0, fixed.stderr
    third = catalog.query("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1").column(0)[0].as_py()

    shown = runner.invoke(app, ["runs", "--stages", "--cache", str(cache)])
    lines = [line.split() for line in shown.output.splitlines()]
    chain = {w[0]: (w[3], " ".join(w[w.index("->") + 3 :])) for w in lines if w[0].startswith("ingest-")}
    assert chain == {
        third: ("completed", f"retry of {second}"),
        second: ("failed", f"retry of {run_id} retried by {third}"),
        run_id: ("failed", f"retried by {second}"),
    }
    assert [" ".join(w if w[0] == "error:" else w[:2] + w[3:-2]) for w in lines if w[0] in ("read", "error:")] == [
        "read m shards 5 of 5 written (5 computed, 0 cached) rows out 100",  # third
        f"error: {failed}",  # second: the first's 3 shards are there
        "read m shards 3 of at least 4 written (0 computed, 3 cached), 1 failed rows out 60",
        f"error: {failed}",  # first
        "read m shards 3 of at least 4 written (3 computed, 0 cached), 1 failed rows out 60",
    ]


# -- defect 8: the nightly totals count each artifact once --------------------------------------------------


def test_totals_count_an_artifact_read_again_by_another_pipeline_once(prefect_harness, tmp_path):
    from flows.engine.nightly import totals
    from flows.pipelines.ingest import ingest_flow

    (tmp_path / "a.de").write_text("".join(f"hallo welt {i}\n" for i in range(40)))
    (tmp_path / "a.en").write_text("".join("\n" if i in (4, 17, 30) else f"hello world {i}\n" for i in range(40)))
    conf = AugdagConf.model_validate(
        {
            "cache": str(tmp_path / "cache"),
            "shard_size": 20,
            "datasets": {"a": {"kind": "bitext", "format": "text", "src": str(tmp_path / "a.en"), "tgt": str(tmp_path / "a.de")}},
        }
    )
    first, again = ingest_flow(conf, profile="t"), ingest_flow(conf, profile="t")  # again: all cached, as a re-read
    night = totals([{**first, "pipeline": "ingest"}, {**again, "pipeline": "self_training"}], 1.0)
    assert night["rejects"] == 3  # 3 empty source lines, counted once (was 6)
    assert night["rows_out"] == 37 + 0 + 37  # read kept 37, no duplicates, clean kept 37 (was twice that)
    assert night["stages"] == {"computed": 3}
    assert (night["shards"], night["shards_computed"], night["shards_cached"]) == (2 + 1 + 2, 5, 0)
    assert totals([again], 1.0)["stages"] == {"cached": 3}


# -- defect 9: --from recomputes exactly the stage's descendants ---------------------------------------------


def test_retry_from_a_stage_with_siblings_recomputes_its_descendants_only(prefect_harness, tmp_path):
    first = tiny_flow()(str(tmp_path), "lineage")
    catalog = Catalog(tmp_path)
    run = load_run(catalog, first["run_id"])
    assert list(forced_artifacts(catalog, run, stage=None, start="score").values()) == ["score[x]", "score[y]", "bins[x]"]
    assert list(forced_artifacts(catalog, run, stage=None, start="score[y]").values()) == ["score[y]"]
    assert list(forced_artifacts(catalog, run, stage="bins", start=None).values()) == ["bins[x]", "bins[y]"]
    forced = forced_artifacts(catalog, run, stage=None, start="score[x]")
    assert list(forced.values()) == ["score[x]", "bins[x]"]
    with forcing(list(forced)):
        again = tiny_flow()(str(tmp_path), "lineage")
    assert [(s["stage"], s["dataset"], s["status"], s["shards_computed"]) for s in again["stages"]] == [
        ("src", "x", "cached", 0),
        ("src", "y", "cached", 0),
        ("score", "x", "computed", 4),
        ("score", "y", "cached", 0),
        ("bins", "x", "computed", 4),
        ("bins", "y", "cached", 0),
    ]
