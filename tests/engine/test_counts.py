"""Issue 26, defect 8 (counts that mislead) and 12 (Prefect's "Still processing items" on stderr).

Through the CLI as a subprocess, on a constructed ingest of 8 lines: two groups of duplicates (3 + 2 copies), a
length-ratio outlier and a line of bad UTF-8. Every stage's rows in / kept / dropped are rows, never groups, computed
or cached, on Prefect or replayed; the totals line (the rows of the views the run filled, each once; rejects;
dropped) prints in the default mode, with -q and with -v; `dropped.detail` holds the value each row was cut on;
`augdag why` prints the row's text.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.artifacts import ArtifactRef
from storage.catalog import Catalog
from storage.parts import Parts
from storage.schemas import with_uid
from tests.conftest import REPO, augdag, bitext, subprocess_env

NOTICE = "Still processing items"
# line: (src, tgt). 1, 2 kept; 3 and 5 copies of 1; 4 a ratio of 6; 6 a copy of 2; 7 to 9 kept; 10 over max_line_chars
LINES = [
    (b"the cat sat", b"die katze sass"),
    (b"a dog ran", b"ein hund lief"),
    (b"the cat sat", b"die katze sass"),
    (b"one two three four five six", b"eins"),
    (b"the cat sat", b"die katze sass"),
    (b"a dog ran", b"ein hund lief"),
    (b"good day", b"guten tag"),
    (b"see you soon", b"bis bald"),
    (b"thank you", b"danke dir"),
    (b"far " * 12, b"weit"),
]
# stage: (rows in, kept, rejected, dropped). duplicates: 2 groups, 3 copies after the first of each (not "kept 2");
# clean drops those 3 copies (its dropped part says "duplicate") but counts each row once: 6 in, 1 dropped by ratio
TABLE = {"read": ("10", "9", "1", "0"), "duplicates": ("9", "6", "0", "3"), "clean": ("6", "5", "0", "1")}
TOTALS = "rows in the views it filled: bitext 5; rejects 1; dropped 4"


def write(path: Path, table: pa.Table) -> Path:
    pq.write_table(table, path)
    return path


def stage_rows(stdout: str) -> dict[str, tuple[str, ...]]:
    """The printed stage table: stage -> (status, rows in, kept, rejected, dropped)."""
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in stdout.splitlines()]
    return {c[0]: (c[2], *c[4:8]) for c in cells if c}


@pytest.fixture(scope="module")
def ingested(prefect_harness, tmp_path_factory):
    """The profile, the cache and the Prefect server's URL (the session harness: no temporary server per run)."""
    from prefect.settings import PREFECT_API_URL

    tmp = tmp_path_factory.mktemp("counts")
    (tmp / "x.en").write_bytes(b"".join(s + b"\n" for s, _ in LINES))
    (tmp / "x.de").write_bytes(b"".join(t + b"\n" for _, t in LINES))
    (tmp / "p.yaml").write_text(
        f"ingest: {{max_line_chars: 40}}\ndatasets:\n  pair: {{kind: bitext, format: text, src: {tmp}/x.en, tgt: {tmp}/x.de}}\n"
    )
    return tmp, str(tmp / "cache"), PREFECT_API_URL.value()


@pytest.mark.slow
def test_stage_counts_are_rows_computed_or_cached_and_totals_print_in_every_mode(ingested):
    tmp, cache, url = ingested
    runs = Catalog(Path(cache))

    def run(*args: str, server: bool = True, **env: str) -> tuple[subprocess.CompletedProcess, str]:
        done = augdag(
            tmp,
            "--cache",
            cache,
            *args,
            "run",
            "ingest",
            "--config",
            str(tmp / "p.yaml"),
            **({"PREFECT_API_URL": url} if server else {}),
            **env,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done, runs.query("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1")["run_id"][0].as_py()

    computed, first = run()
    assert stage_rows(computed.stdout) == {s: ("computed", *n) for s, n in TABLE.items()}
    assert computed.stdout.splitlines()[-1] == f"run {first} completed: shards: 3 computed, 0 cached of 3; {TOTALS}"
    # cached, on Prefect (no replay) and replayed: the same rows in, kept and dropped, from the computing run's records.
    # A run reporting to a server is never replayed (flows/cli/run.py): the replayed one runs with none, as a user's
    on_prefect, second = run(AUGDAG_REPLAY="0")
    replayed, third = run(server=False)
    flow_runs = runs.query("SELECT run_id, flow_run_id FROM runs WHERE run_id IN ($s, $t)", {"s": second, "t": third})
    assert {r["run_id"]: r["flow_run_id"] is not None for r in flow_runs.to_pylist()} == {second: True, third: False}
    for done, run_id in ((on_prefect, second), (replayed, third)):
        assert stage_rows(done.stdout) == {s: ("cached", *n) for s, n in TABLE.items()}
        assert done.stdout.splitlines()[-1] == f"run {run_id} completed: shards: 0 computed, 3 cached of 3; {TOTALS}"
    for done in (computed, on_prefect, replayed):  # issue 26, 12: Prefect's events worker draining at exit
        assert NOTICE not in done.stderr and "Traceback" not in done.stderr
    quiet, fourth = run("-q")
    assert (quiet.stdout, quiet.stderr) == (f"run {fourth} completed: shards: 0 computed, 3 cached of 3; {TOTALS}\n", "")
    verbose, fifth = run("-v")
    assert f"run {fifth} completed: shards: 0 computed, 3 cached of 3; {TOTALS}" in verbose.stdout.splitlines()
    summary = json.loads(runs.query("SELECT summary FROM runs WHERE run_id = $r", {"r": fifth})["summary"][0].as_py())
    stages = {s["stage"]: s for s in summary["stages"]}
    assert {s: (r["rows_in"], r["kept"], r["dropped"], r["rows_out"]["part"]) for s, r in stages.items()} == {
        "read": (10, 9, 0, 9),
        "duplicates": (9, 6, 3, 2),
        "clean": (6, 5, 1, 5),
    }  # the artifact keeps its 2 groups


@pytest.mark.slow
def test_dropped_detail_is_the_value_cut_on_and_why_prints_the_row(ingested):
    tmp, cache, url = ingested
    if not (Path(cache) / "catalog.duckdb").exists():
        assert (
            augdag(tmp, "--cache", cache, "-q", "run", "ingest", "--config", str(tmp / "p.yaml"), PREFECT_API_URL=url).returncode
            == 0
        )
    done = augdag(tmp, "--cache", cache, "sql", "SELECT line, reason, detail FROM dropped ORDER BY line", "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        '"line","reason","detail"',
        '3,"duplicate","the same row as line 1, which is kept"',
        '4,"length_ratio","ratio=6 (src_tokens=6, tgt_tokens=1)"',
        '5,"duplicate","the same row as line 1, which is kept"',
        '6,"duplicate","the same row as line 2, which is kept"',
    ]
    run_id = Catalog(Path(cache)).query("SELECT created_run FROM artifacts WHERE stage = 'clean'")["created_run"][0]
    why = augdag(tmp, "--cache", cache, "why", "pair", "4")
    assert why.returncode == 0, why.stderr
    assert why.stdout.splitlines()[1:] == [
        "  src: one two three four five six",
        "  tgt: eins",
        f"  read: kept  (run {run_id})",
        f"  clean: dropped, length_ratio: ratio=6 (src_tokens=6, tgt_tokens=1)  (run {run_id})",
    ]
    kept = augdag(tmp, "--cache", cache, "why", "pair", "7")
    assert kept.stdout.splitlines()[1:3] == ["  src: good day", "  tgt: guten tag"]
    rejected = augdag(tmp, "--cache", cache, "why", "pair", "10")
    assert rejected.returncode == 0 and rejected.stdout.splitlines()[1].startswith("  content: far far far")


def test_clean_detail_is_the_value_each_row_was_cut_on(tmp_path):
    from tasks.ingest.clean import clean, find_duplicates

    rows = bitext([("a b", "x y"), ("a b", "x y"), ("", "leer"), ("a b c d e", "v w x y z"), ("a b c d", "w x")])
    out = clean(rows, find_duplicates(Parts((write(tmp_path / "r.parquet", rows),))), kind="bitext", max_tokens=4)
    assert out["dropped"].select(["line", "reason", "detail"]).to_pylist() == [
        {"line": 2, "reason": "duplicate", "detail": "the same row as line 1, which is kept"},
        {"line": 3, "reason": "too_few_tokens", "detail": "src_tokens=0, tgt_tokens=1"},
        {"line": 4, "reason": "too_many_tokens", "detail": "src_tokens=5, tgt_tokens=5"},
        {"line": 5, "reason": "length_ratio", "detail": "ratio=2 (src_tokens=4, tgt_tokens=2)"},
    ]
    # a line split into sentences: its second sentence repeats its first
    mono = with_uid(
        pa.table(
            {
                "uid": pa.nulls(3, pa.string()),
                "text": ["Hi there.", "Hi there.", "Yes."],
                "source": ["m"] * 3,
                "line": pa.array([1, 1, 2], pa.int64()),
                "sentence": pa.array([1, 2, 1], pa.int32()),
            }
        ),
        "mono",
    )
    out = clean(mono, find_duplicates(Parts((write(tmp_path / "m.parquet", mono),))), kind="mono", min_tokens=2)
    assert out["dropped"].select(["line", "sentence", "detail"]).to_pylist() == [
        {"line": 1, "sentence": 2, "detail": "the same sentence as line 1 sentence 1, which is kept"},
        {"line": 2, "sentence": 1, "detail": "tokens=1"},
    ]


def test_duplicates_stage_counts_rows_not_groups(tmp_path):
    from tasks.ingest.clean import DUPLICATES, find_duplicates

    rows = bitext([("a", "x"), ("b", "y"), ("a", "x"), ("c", "z"), ("a", "x"), ("b", "y"), ("d", "w")])
    ref = ArtifactRef(str(tmp_path), "duplicates", "f" * 64, None, "d", 1)
    ref.dir.mkdir(parents=True)
    write(ref.path(0), find_duplicates(Parts((write(tmp_path / "r.parquet", rows),))))
    assert ref.read(0).num_rows == 2 and DUPLICATES.counts(ref, rows.num_rows) == (7, 4, 3)  # 2 groups, 3 later


# a queue service that sends slowly: at exit 20 items wait, and Prefect's drain says so (deterministically)
DRAIN = """
import asyncio, sys
from flows.engine.run_log import configure_console
configure_console(verbose=False)  # the CLI's terminal without -v: warnings reach stderr
if sys.argv[1] == "cli":
    from flows.cli.run import quiet_prefect_exit
    quiet_prefect_exit()
from prefect.events.clients import EventsClient
from prefect.events.schemas.events import Event, Resource
from prefect.events.worker import EventsWorker

class Slow(EventsClient):
    async def _emit(self, event):
        await asyncio.sleep(0.02)

worker = EventsWorker.instance(Slow)
for i in range(20):
    worker.send(Event(event="x", resource=Resource({"prefect.resource.id": f"r{i}"})))
print("sent")
"""


@pytest.mark.parametrize("setup, shown", [("bare", True), ("cli", False)])
def test_events_worker_drain_notice_is_not_on_the_cli_stderr(tmp_path, setup, shown):
    """Prefect drains its events worker at interpreter exit and warns "Still processing items" while items
    wait; the CLI's processes (``prepare`` calls ``quiet_prefect_exit``) keep that off the terminal."""
    env = subprocess_env(tmp_path, PREFECT_API_URL="http://127.0.0.1:9/api")  # no server: the slow client sends
    done = subprocess.run(
        [sys.executable, "-c", DRAIN, setup], env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout == "sent\n", done.stderr
    assert (NOTICE in done.stderr) is shown and (done.stderr == "") is not shown
