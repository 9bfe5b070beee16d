"""The CLI as people type it (issue 18, item 6): options before the command and after it, --version, -v and
-q, and `augdag logs`."""

from __future__ import annotations

import logging
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from flows.engine.run_log import QuietConsole, log_records, open_run_log, record_stages, stage_records
from storage.catalog import Catalog
from tests.conftest import REPO, augdag


def said(line: str) -> tuple[str, str, str]:
    """A log line as (logger, where, message), without its time and level; a flow run's name and fingerprints
    (they hash the input's path) left out."""
    logger, where, message = line.split(" | ", 2)[2].split(" - ", 2)
    return logger, "Flow run" if where.startswith("Flow run ") else where, re.sub(r"\b[0-9a-f]{12}\b", "<fp>", message)


@pytest.fixture(scope="module")
def caches(tmp_path_factory) -> tuple[str, str]:
    """Two caches: A with the run a-1, B with b-1 and b-2 ($AUGDAG_CACHE in these tests: an option that is
    not read shows B). Shared by the tests below, which only read them (`run` stops at its missing input)."""
    tmp_path = tmp_path_factory.mktemp("caches")
    for root, runs in ((tmp_path / "A", ["a-1"]), (tmp_path / "B", ["b-1", "b-2"])):
        catalog = Catalog(root)
        for run_id in runs:
            catalog.start_run(run_id, pipeline="ingest", profile="p", config={}, flow_run_id=None)
            catalog.finish_run(run_id, status="completed", summary={"run_id": run_id, "stages": []})
    return str(tmp_path / "A"), str(tmp_path / "B")


def positions(command: list[str], a: str, b: str) -> list[list[str]]:
    """A's --cache before the command, after it, and after B's before it (the command's own wins)."""
    return [["--cache", a, *command], [*command, "--cache", a], ["--cache", b, *command, "--cache", a]]


def test_sql_takes_cache_before_or_after_the_command_and_its_own_wins(tmp_path, caches):
    a, b = caches
    for args in positions(["sql", "SELECT run_id FROM runs ORDER BY run_id", "-f", "csv"], a, b):
        done = augdag(tmp_path, *args, AUGDAG_CACHE=b)
        assert (done.returncode, done.stdout.splitlines(), done.stderr) == (0, ['"run_id"', '"a-1"'], ""), args
    assert augdag(tmp_path, "sql", "SELECT count(*) AS n FROM runs", "-f", "csv", AUGDAG_CACHE=b).stdout == '"n"\n2\n'


def test_runs_and_views_take_cache_before_or_after_the_command(tmp_path, caches):
    a, b = caches
    for args in positions(["runs"], a, b):
        done = augdag(tmp_path, *args, AUGDAG_CACHE=b)
        assert done.returncode == 0, done.stderr
        assert [line.split()[:4] for line in done.stdout.splitlines()] == [
            ["run", "pipeline", "profile", "status"],
            ["a-1", "ingest", "p", "completed"],
        ]
    for args in positions(["views"], a, b):
        done = augdag(tmp_path, *args, AUGDAG_CACHE=b)
        rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in done.stdout.splitlines()]
        assert [r[:3] for r in rows if r and r[0] in ("runs", "rejects")] == [
            ["runs", "table", "1"],
            ["rejects", "view", "0"],  # a view over the parts since issue 51
        ], args


def test_run_takes_cache_before_or_after_the_command(tmp_path, caches):
    a, b = caches  # the demo profile reads <cache>/demo-data: its first missing file names the cache used
    for args in positions(["run", "ingest", "--config", "demo"], a, b):
        done = augdag(tmp_path, *args, AUGDAG_CACHE=b)
        assert (done.returncode, done.stdout) == (2, ""), args
        assert done.stderr == (f"error: datasets.demo_bitext: {a}/demo-data/train.en: no such file (and 9 more missing)\n"), args


def test_version_prints_the_package_version_and_exits_0(tmp_path):
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    done = augdag(tmp_path, "--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"augdag {version}\n", "")


def test_verbose_and_quiet_are_global_options_on_every_command(tmp_path):
    top = augdag(tmp_path, "--help")
    assert [line.split()[1:3] for line in top.stdout.splitlines() if "--verbose" in line or "--quiet" in line] == [
        ["--verbose", "-v"],
        ["--quiet", "-q"],
    ]
    sql = augdag(tmp_path, "sql", "--help")
    assert [line.split()[1:3] for line in sql.stdout.splitlines() if "--verbose" in line or "--quiet" in line] == [
        ["--verbose", "-v"],
        ["--quiet", "-q"],
    ]
    with Catalog(tmp_path / "c").write():  # a read command needs a catalog (issue 26, defect 6)
        pass
    both = augdag(tmp_path, "-v", "sql", "SELECT 1 AS a", "-f", "csv", "-q", "--cache", str(tmp_path / "c"))
    assert (both.returncode, both.stdout) == (0, '"a"\n1\n')


def test_log_records_group_tracebacks_and_name_their_stage():
    t = "2026-11-25 02:03:01.970 | INFO    | "
    lines = [
        f"{t}prefect.task_runs - Task run 'clean-00003' - Finished in state Completed()",
        f"{t}prefect.flow_runs - Flow run 'x' - clean[pair] 27c002798868: 1/1 shards computed, rows 4 -> {{}}",
        f"{t}augdag.fairseq - Task run 'fairseq' (student) - INFO:fairseq_cli.train:epoch 001 | loss 9.1",
        f"{t}prefect.flow_runs - Flow run 'x' - student 3b2a1c0d9e8f: trained (/c/models/fairseq/3b2a/model)",
        f"{t.replace('INFO   ', 'ERROR  ')}prefect.flow_runs - Flow run 'x' - read[m] shard 3 failed:",
        "Traceback (most recent call last):",
        "ValueError: boom",
        f"{t}prefect.flow_runs - Flow run 'x' - stage 'read' (dataset m) failed on shard 3 of 5: boom",
        f"{t}prefect.flow_runs - Flow run 'x' - model 'teacher' (fairseq 3b2a1c0d9e8f) failed to train: x",
        f"{t}prefect.flow_runs - Flow run 'x' - Finished in state Completed()",
    ]
    records = list(log_records(lines))
    assert [len(r) for r in records] == [1, 1, 1, 1, 3, 1, 1, 1]
    assert [sorted(record_stages(r[0])) for r in records] == [
        ["clean"],
        ["clean"],
        ["fairseq", "student"],
        ["student"],
        ["read"],
        ["read"],
        ["teacher"],
        [],
    ]
    assert [line for r in stage_records(lines, "read") for line in r] == lines[4:8]


@pytest.mark.slow
def test_fairseq_training_log_goes_to_the_run_log_as_its_model_not_to_prefects_api(prefect_harness, tmp_path):
    from prefect import flow, task
    from prefect.context import FlowRunContext

    from tasks.common.nmt import training_log

    @task(name="model", task_run_name="fairseq")
    def train() -> None:
        training_log()("INFO:fairseq_cli.train:epoch 001 | loss 9.1 | num_updates 6")

    @flow
    def night() -> Path:
        path = open_run_log(tmp_path, "night-1", FlowRunContext.get())
        train.with_options(name="student")()
        return path

    lines = night().read_text().splitlines()
    assert [r[0].split(" | ", 2)[2] for r in stage_records(lines, "student")] == [
        "augdag.fairseq - Task run 'fairseq' (student) - INFO:fairseq_cli.train:epoch 001 | loss 9.1 | num_updates 6",
        "prefect.task_runs - Task run 'fairseq' (student) - Finished in state Completed()",
    ]
    chain = [logging.getLogger(name) for name in ("augdag.fairseq", "augdag", "")]
    assert [type(h).__name__ for lg in chain for h in lg.handlers if "API" in type(h).__name__] == []  # not to the UI
    record = logging.LogRecord("augdag.fairseq", logging.INFO, __file__, 1, "epoch 001", None, None)
    assert not QuietConsole().filter(record)  # the terminal shows it only with -v (no QuietConsole then)


@pytest.mark.slow
def test_quiet_default_and_verbose_output_of_a_run_and_its_log(prefect_harness, tmp_path):
    from prefect.settings import PREFECT_API_URL

    (tmp_path / "x.en").write_text("a b\nc d\na b\ne f\n")
    (tmp_path / "x.de").write_text("u v\nw x\nu v\ny z\n")
    profile, cache = tmp_path / "p.yaml", str(tmp_path / "cache")
    profile.write_text(
        f"datasets:\n  pair:\n    kind: bitext\n    format: text\n    src: {tmp_path}/x.en\n    tgt: {tmp_path}/x.de\n"
    )
    url = PREFECT_API_URL.value()  # the session harness's server: no temporary one per subprocess
    catalog = Catalog(Path(cache))

    def run(*args: str) -> tuple[subprocess.CompletedProcess, str]:
        done = augdag(tmp_path, *args, PREFECT_API_URL=url)
        assert done.returncode == 0, done.stdout + done.stderr
        return done, catalog.query("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1")["run_id"][0].as_py()

    default, first = run("--cache", cache, "run", "ingest", "--config", str(profile))
    table = [[cell.strip() for cell in line.split("│")[1:-1]] for line in default.stdout.splitlines()]
    assert default.stdout.splitlines()[0].strip() == f"run {first}"
    assert [r[:4] for r in table if r] == [
        ["read", "pair", "computed", "1/1 computed"],
        ["duplicates", "pair", "computed", "1/1 computed"],
        ["clean", "pair", "computed", "1/1 computed"],
    ]
    assert " | INFO " not in default.stdout + default.stderr
    assert default.stderr == f"reporting to the Prefect server at {url}\n"

    quiet, second = run("-q", "run", "ingest", "--config", str(profile), "--cache", cache)
    totals = "shards: 0 computed, 3 cached of 3; rows in the views it filled: bitext 3; rejects 0; dropped 1"
    assert (quiet.stdout, quiet.stderr) == (f"run {second} completed: {totals}\n", "")

    verbose, third = run("run", "ingest", "--config", str(profile), "--cache", cache, "-v")
    assert verbose.stdout.splitlines()[0].strip() == f"run {third}"
    assert [said(line) for line in verbose.stderr.splitlines() if "[pair]" in line] == [
        ("prefect.flow_runs", "Flow run", "read[pair] <fp>: cached (1 shards)"),
        ("prefect.flow_runs", "Flow run", "duplicates[pair] <fp>: cached (1 shards)"),
        ("prefect.flow_runs", "Flow run", "clean[pair] <fp>: cached (1 shards)"),
    ]
    assert " | INFO    | prefect.flow_runs - Flow run " in verbose.stderr.splitlines()[-2]  # "Finished in state ..."

    # every run's log has the detail, whatever the terminal showed; `augdag logs` prints it, --stage filters
    for run_id, detail in ((first, "1/1 shards computed"), (second, "cached (1 shards)"), (third, "cached (1 shards)")):
        log = (Path(cache) / "logs" / f"{run_id}.log").read_text()
        assert [said(line)[2].split(":")[0] for line in log.splitlines() if " - Flow run " in line and detail in line] == [
            "read[pair] <fp>",
            "duplicates[pair] <fp>",
            "clean[pair] <fp>",
        ]
    shown = augdag(tmp_path, "logs", first, "--cache", cache)
    assert (shown.returncode, shown.stdout) == (0, (Path(cache) / "logs" / f"{first}.log").read_text())
    clean = augdag(tmp_path, "--cache", cache, "logs", first, "--stage", "clean")
    assert clean.returncode == 0 and [said(line) for line in clean.stdout.splitlines()] == [
        ("prefect.task_runs", "Task run 'clean-00000'", "Finished in state Completed()"),
        ("prefect.flow_runs", "Flow run", ("clean[pair] <fp>: 1/1 shards computed, rows 4 -> {'dropped': 1, 'part': 3}")),
    ]
    none = augdag(tmp_path, "logs", first, "--stage", "student", "--cache", cache)
    assert (none.returncode, none.stderr) == (
        2,
        (f"error: {cache}/logs/{first}.log: no line of stage 'student'; the stages in it: clean, duplicates, read\n"),
    )
    unknown = augdag(tmp_path, "logs", "nope", "--cache", cache)
    assert unknown.returncode == 2 and f"no run 'nope'; the most recent runs: {third}, {second}, {first}." in unknown.stderr
