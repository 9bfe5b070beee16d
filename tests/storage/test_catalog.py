import multiprocessing as mp

import duckdb
import pyarrow as pa
import pytest

from conf.errors import CatalogError
from storage.artifacts import ArtifactRef, write_manifest, write_part
from storage.catalog import Catalog, check_read_only
from storage.schemas import REJECTS
from tests.conftest import bitext


def _artifact(root, fp, rows, *, view="bitext", rejects=None):
    ref = ArtifactRef(str(root), "clean", fp, view, "d", 1)
    write_part(rows, ref.path(0))
    if rejects is not None:
        write_part(rejects, ref.path(0, "rejects"))
    return ref, write_manifest(ref, version="1", params={})


def test_register_new_then_cached_adds_no_artifact_and_moves_the_view(tmp_path):
    cat = Catalog(tmp_path)
    ref, m = _artifact(tmp_path, "a" * 32, bitext([("a b", "x y"), ("c", "z")]))
    assert cat.register(ref, m, run_id="r1", parents=["p" * 32]) is True
    assert cat.register(ref, m, run_id="r2", parents=["p" * 32]) is False
    assert cat.query("SELECT count(*) AS n, max(last_run) AS last FROM artifacts").to_pylist() == [{"n": 1, "last": "r2"}]
    assert cat.query("SELECT count(*) AS n FROM lineage").to_pylist() == [{"n": 1}]
    assert cat.query("SELECT src FROM bitext ORDER BY line")["src"].to_pylist() == ["a b", "c"]
    # a newer artifact of the same stage and dataset replaces it in the view
    ref2, m2 = _artifact(tmp_path, "b" * 32, bitext([("e f", "u v")]))
    cat.register(ref2, m2, run_id="r3")
    assert cat.query("SELECT src FROM bitext")["src"].to_pylist() == ["e f"]


@pytest.mark.parametrize("deferred", [False, True])
def test_a_dataset_is_in_its_kinds_view_or_its_heldout_view_as_its_last_registration_chose_issue_47(tmp_path, deferred):
    """A training set later held out leaves `bitext` for `heldout_bitext` (arms reading `bitext` cannot reach it), and
    comes back when it trains again (its known artifact re-registered), one by one or as a replay's batch."""
    cat = Catalog(tmp_path)
    train, mt = _artifact(tmp_path, "a" * 32, bitext([("a b", "x y")]))
    held, mh = _artifact(tmp_path, "b" * 32, bitext([("a b", "x y")]), view="heldout_bitext")
    where = "SELECT (SELECT count(*) FROM bitext) AS bitext, (SELECT count(*) FROM heldout_bitext) AS heldout"
    cat.register(train, mt, run_id="r1")
    assert cat.query(where).to_pylist() == [{"bitext": 1, "heldout": 0}]
    cat.register(held, mh, run_id="r2")
    assert cat.query(where).to_pylist() == [{"bitext": 0, "heldout": 1}]
    cat.deferred = [] if deferred else None
    cat.register(train, mt, run_id="r3")  # trains again: back in bitext
    if deferred:
        cat.flush()
        cat.deferred = None
    assert cat.query(where).to_pylist() == [{"bitext": 1, "heldout": 0}]


def test_deferred_registrations_of_known_artifacts_move_the_views_as_one_by_one(tmp_path):
    """A replay's registrations (deferred, then one batch: storage/registration.py) leave the catalog as the same
    registrations one at a time: every artifact used by its run, the view on the last registered one of its stage
    and dataset, one stage_runs row per shard run, and nothing written before the flush."""
    cat = Catalog(tmp_path)
    a, ma = _artifact(tmp_path, "a" * 32, bitext([("a b", "x y")]))
    b, mb = _artifact(tmp_path, "b" * 32, bitext([("c d", "z")]))
    cat.register(a, ma, run_id="r1")
    cat.register(b, mb, run_id="r2")  # the view is on b
    shard = {"stage": "read", "dataset": None, "shard": 0, "status": "cached", "seconds": 0.0, "rows_in": 0}
    cat.deferred = []
    cat.register(a, ma, run_id="r3", stage_runs=[{**shard, "run_id": "r3", "fingerprint": "a" * 32}])
    cat.register(b, mb, run_id="r3", stage_runs=[{**shard, "run_id": "r3", "fingerprint": "b" * 32}])
    cat.register(a, ma, run_id="r4", stage_runs=[{**shard, "run_id": "r4", "fingerprint": "a" * 32}])
    assert len(cat.deferred) == 3
    with cat.read() as con:  # nothing written yet
        assert con.execute("SELECT count(*) FROM stage_runs").fetchone() == (0,)
    cat.flush()
    cat.deferred = None
    assert cat.query("SELECT src FROM bitext")["src"].to_pylist() == ["a b"]  # a, registered last, is current
    assert cat.query("SELECT fingerprint, last_run FROM artifacts ORDER BY ALL").to_pylist() == [
        {"fingerprint": "a" * 32, "last_run": "r4"},
        {"fingerprint": "b" * 32, "last_run": "r3"},
    ]
    assert cat.query("SELECT run_id, fingerprint FROM stage_runs ORDER BY ALL").to_pylist() == [
        {"run_id": "r3", "fingerprint": "a" * 32},
        {"run_id": "r3", "fingerprint": "b" * 32},
        {"run_id": "r4", "fingerprint": "a" * 32},
    ]


def test_a_registration_rebuilds_only_the_views_it_moves(tmp_path):
    """Binding a view reads the schema of each of its parts, so a write rebuilds its own view, not all of them:
    a view whose part vanished behind the catalog's back keeps naming it until a write moves that view."""
    cat = Catalog(tmp_path)
    ref, m = _artifact(tmp_path, "a" * 32, bitext([("a b", "x y")]))
    cat.register(ref, m, run_id="r1")
    other, m2 = _artifact(tmp_path, "b" * 32, bitext([("c d", "z")]), view="paraphrased_bitext")
    ref.path(0).unlink()
    cat.register(other, m2, run_id="r1")  # moves paraphrased_bitext only
    assert cat.query("SELECT src FROM paraphrased_bitext")["src"].to_pylist() == ["c d"]
    with pytest.raises(duckdb.IOException):
        cat.query("SELECT src FROM bitext")  # not rebuilt: still its (now missing) part
    cat.register(ref, m, run_id="r2")  # a cached re-registration of the current artifact moves nothing
    with pytest.raises(duckdb.IOException):
        cat.query("SELECT src FROM bitext")
    newer, m3 = _artifact(tmp_path, "c" * 32, bitext([("e f", "u v")]))
    cat.register(newer, m3, run_id="r3")  # moves bitext: rebuilt over the current artifact
    assert cat.query("SELECT src FROM bitext")["src"].to_pylist() == ["e f"]


def test_base_views_exist_and_are_empty_before_any_run(tmp_path):
    cat = Catalog(tmp_path)
    for view in ("bitext", "mono", "labeled", "slots"):
        assert cat.query(f"SELECT count(*) AS n FROM {view}").to_pylist() == [{"n": 0}]
    assert cat.query("SELECT * FROM bitext").column_names == ["uid", "src", "tgt", "source", "line"]


def test_rejects_are_copied_once_per_artifact(tmp_path):
    cat = Catalog(tmp_path)
    rej = pa.table(
        {
            "source": ["d"],
            "file": ["x.en"],
            "line": pa.array([7], pa.int64()),
            "reason": ["nul_byte"],
            "detail": ["NUL byte in src"],
            "content": ["a\\x00b"],
        },
        schema=REJECTS,
    )
    ref, m = _artifact(tmp_path, "c" * 32, bitext([("a", "b")]), rejects=rej)
    cat.register(ref, m, run_id="r1")
    cat.register(ref, m, run_id="r2")
    assert cat.query("SELECT file, line, reason FROM rejects").to_pylist() == [{"file": "x.en", "line": 7, "reason": "nul_byte"}]


def _writer(root, i, n):
    cat = Catalog(root)
    for k in range(n):
        cat.start_run(f"run-{i}-{k}", pipeline="ingest", profile="p", config={}, flow_run_id=None)
        cat.finish_run(f"run-{i}-{k}", status="completed", summary={"k": k})
        cat.query("SELECT count(*) FROM runs")


def test_two_processes_writing_and_reading_take_turns(tmp_path):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(tmp_path, i, 15)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert Catalog(tmp_path).query(
        "SELECT count(*) AS n, count(*) FILTER (status = 'completed') AS done FROM runs"
    ).to_pylist() == [{"n": 30, "done": 30}]


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE t (a INT)",
        "CREATE VIEW v AS SELECT 1",
        "DROP TABLE runs",
        "ALTER TABLE runs ADD COLUMN x INT",
        "INSERT INTO runs (run_id) VALUES ('x')",
        "UPDATE runs SET status = 'x'",
        "DELETE FROM runs",
        "ATTACH 'other.duckdb' AS o",
        "DETACH o",
        "COPY runs TO 'runs.csv'",
        "COPY (SELECT 1) TO 'x.parquet' (FORMAT parquet)",
        "COPY runs FROM 'runs.csv'",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET threads = 1",
        "PRAGMA enable_profiling",
        "CALL checkpoint()",
        "CHECKPOINT",
        "EXPORT DATABASE 'dump'",
        "VACUUM",
        "SELECT 1; DROP TABLE runs",
    ],
)
def test_read_only_guard_refuses_every_write_form(statement):
    with pytest.raises(CatalogError, match="refused: `augdag sql` is read-only"):
        check_read_only(statement)


@pytest.mark.parametrize(
    "query, column, head",
    [
        ("SELECT 1", "1", [1]),
        ("WITH a AS (SELECT 1 AS x) SELECT * FROM a", "x", [1]),
        ("FROM runs", "run_id", []),  # a fresh catalog: no run yet
        ("DESCRIBE runs", "column_name", ["run_id"]),
        ("EXPLAIN SELECT 1", "explain_key", ["physical_plan"]),
        ("SHOW TABLES", "name", ["artifacts"]),
        ("SUMMARIZE runs", "count", [0]),
    ],
)
def test_read_only_guard_lets_queries_through(tmp_path, query, column, head):
    assert check_read_only(query) == [query]  # its statements, to run one by one (issue 48, defect 9)
    got = Catalog(tmp_path).query(query, sandbox=True)  # what `augdag sql` runs once the guard let it through
    assert got[column].to_pylist()[:1] == head


def test_unparseable_sql_is_a_catalog_error():
    with pytest.raises(CatalogError, match="does not parse"):
        check_read_only("SELEC 1")
