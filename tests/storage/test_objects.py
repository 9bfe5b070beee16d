"""Artifacts, models and the catalog on an object store (storage/objects/), against moto's S3 server on 127.0.0.1:
the same bytes as the cache directory, the commit rule without rename, and a user's SQL that reads the artifact prefix
and nothing else."""

import collections
import hashlib
import json
import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conf.errors import ArtifactError, CatalogError, ConfError
from storage import objects
from storage.artifacts import ArtifactRef, read_manifest, recorded_hashes, verify, write_manifest
from storage.catalog import Catalog, check_read_only
from storage.engines import scratch_duckdb
from storage.objects import models as model_store
from storage.objects.sql import duckdb_filesystem
from storage.schemas import REJECTS
from tasks.runtime.stage import commit_shard
from tests.conftest import bitext

ROWS = [bitext([("a b", "x y"), ("c", "z")]), bitext([("d e f", "u v w")])]


def _committed(ref: ArtifactRef, rejects: pa.Table | None = None) -> dict:
    for shard, rows in enumerate(ROWS):
        commit_shard(ref, shard, {"part": rows, **({"rejects": rejects} if rejects is not None and shard == 0 else {})})
    return write_manifest(ref, version="1", params={"k": 1})


def _pair(tmp_path, store: str, fp: str = "a" * 32, view: str | None = "bitext") -> tuple[ArtifactRef, ArtifactRef]:
    local = ArtifactRef(str(tmp_path / "local"), "clean", fp, view, "d", len(ROWS))
    return local, ArtifactRef(str(tmp_path / "cache"), "clean", fp, view, "d", len(ROWS), store)


def test_parts_and_manifest_on_s3_are_the_local_bytes_under_the_same_keys(tmp_path, s3_env):
    store = s3_env.bucket("aug-same") + "/night"
    local, remote = _pair(tmp_path, store)
    m_local, m_remote = _committed(local), _committed(remote)
    assert remote.dir == f"{store}/artifacts/clean/{'a' * 32}"
    strip = lambda m: {k: v for k, v in m.items() if k != "created_at"}  # noqa: E731
    assert strip(m_remote) == strip(m_local)
    stored = s3_env.objects(remote.dir)
    assert sorted(stored) == ["manifest.json", "part-00000.parquet", "part-00001.parquet"]
    for f in m_local["files"]:
        assert (
            hashlib.sha256(stored[f["file"]]).hexdigest()
            == f["sha256"]
            == hashlib.sha256((local.dir / f["file"]).read_bytes()).hexdigest()
        )
    assert read_manifest(remote)["rows"] == 3 and verify(remote) == []
    # nothing of the artifact is written to the cache directory: only the memo of the parts' hashes by their stat keys
    # that lets a query check them without reading them (storage/integrity/)
    assert [p.relative_to(tmp_path / "cache").as_posix() for p in (tmp_path / "cache").rglob("*") if p.is_file()] == [
        f"integrity/clean-{'a' * 32}.json"
    ]
    # a reduce stage's view of it: every way of reading gives the local rows
    lp, rp = local.parts(), remote.parts()
    assert rp.num_rows == 3 and rp.table().equals(lp.table())
    assert rp.filtered(pc.field("src") == "c", ["tgt"]).to_pylist() == [{"tgt": "z"}]
    objects.use(store)
    with scratch_duckdb() as con:
        assert con.sql(f"SELECT count(*), string_agg(src, '|' ORDER BY src) FROM {rp.sql()}").fetchall() == [(3, "a b|c|d e f")]


def test_a_manifest_from_what_the_shard_tasks_put_equals_one_read_back_from_the_store(tmp_path, s3_env):
    store = s3_env.bucket("aug-known")
    _, ref = _pair(tmp_path, store)
    said: dict = {}
    for shard, rows in enumerate(ROWS):
        commit_shard(ref, shard, {"part": rows, "dropped": rows.slice(0, 1)}, said)
    assert sorted(said) == ["dropped-00000.parquet", "dropped-00001.parquet", "part-00000.parquet", "part-00001.parquet"]
    known = write_manifest(ref, version="1", params={}, known=said)
    read_back = write_manifest(ref, version="1", params={})
    assert {k: v for k, v in known.items() if k != "created_at"} == {k: v for k, v in read_back.items() if k != "created_at"}
    wrong = {**said, "part-00000.parquet": {**said["part-00000.parquet"], "bytes": 1}}  # a size that disagrees: read back
    assert write_manifest(ref, version="1", params={}, known=wrong)["files"] == read_back["files"]


def test_a_part_without_its_manifest_is_not_finished_and_a_changed_size_unfinishes_it(tmp_path, s3_env):
    store = s3_env.bucket("aug-commit")
    _, ref = _pair(tmp_path, store)
    commit_shard(ref, 0, ROWS[0])
    commit_shard(ref, 1, ROWS[1])
    assert read_manifest(ref) is None  # parts under their final keys, no manifest: an unfinished stage
    _committed(ref)
    assert read_manifest(ref) is not None
    objects.put_bytes(b"not the part", str(ref.path(1)))  # another writer's object of another size
    assert read_manifest(ref) is None


def test_a_part_computed_again_with_other_bytes_fails_and_the_recorded_object_stays(tmp_path, s3_env):
    store = s3_env.bucket("aug-again")
    _, ref = _pair(tmp_path, store)
    _committed(ref)
    before = s3_env.objects(ref.dir)["part-00000.parquet"]
    commit_shard(ref, 0, ROWS[0])  # the same bytes again: fine
    with pytest.raises(ArtifactError, match=r"shard 0 of 2: part-00000.parquet was computed again .* recorded sha256 "):
        commit_shard(ref, 0, bitext([("other", "rows")]))
    assert s3_env.objects(ref.dir)["part-00000.parquet"] == before
    assert recorded_hashes(ref)["part-00000.parquet"] == hashlib.sha256(before).hexdigest()


def test_a_model_is_published_manifest_last_and_fetched_once_checked_by_sha256(tmp_path, s3_env):
    remote = s3_env.bucket("aug-models") + "/models/fairseq/" + "f" * 32
    model = tmp_path / "trained" / "model"
    (model / "sub").mkdir(parents=True)
    (model / "checkpoint.pt").write_bytes(b"\x00weights" * 100)
    (model / "sub" / "dict.txt").write_text("a 1\nb 2\n")
    assert model_store.published(remote) is None
    manifest = model_store.publish(model, remote)
    assert [f["file"] for f in manifest["files"]] == ["model/checkpoint.pt", "model/sub/dict.txt"]
    assert json.loads(s3_env.objects(remote)["manifest.json"]) == manifest
    fetched = tmp_path / "other-host" / "model"
    model_store.fetch(remote, fetched)
    assert (fetched / "checkpoint.pt").read_bytes() == b"\x00weights" * 100
    assert (fetched / "sub" / "dict.txt").read_text() == "a 1\nb 2\n"
    objects.put_bytes(b"\x00weightX" * 100, f"{remote}/model/checkpoint.pt")  # same size, other bytes
    with pytest.raises(ArtifactError, match="checkpoint.pt: its sha256 differs from the model's manifest"):
        model_store.fetch(remote, tmp_path / "third-host" / "model")
    assert not (tmp_path / "third-host" / "model").exists()  # a half-fetched model is never in place
    objects.remove(f"{remote}/model/sub/dict.txt")
    assert model_store.published(remote) is None


def test_a_model_at_a_path_of_the_driver_is_shipped_once_and_a_worker_loads_its_own_copy(tmp_path, s3_env, monkeypatch):
    """A configured model (a local checkpoint the profile names) with artifacts on a store: the driver publishes it
    under models/<key>/<content hash>/ once; a shard task on a host that shares no disk gets the URI and loads a
    copy in its own scratch; what is no model on the store (a device, a Hugging Face name) reaches it as it is."""
    store = s3_env.bucket("aug-shipped") + "/night"
    model = tmp_path / "driver" / "my-model"
    (model / "sub").mkdir(parents=True)
    (model / "pytorch_model.bin").write_bytes(b"\x01w" * 500)
    (model / "sub" / "vocab.txt").write_text("a\nb\n")
    uri = model_store.shipped(model, store, "configured", "c" * 32)
    assert uri == f"{store}/models/configured/{'c' * 32}/my-model"
    assert sorted(s3_env.objects(f"{store}/models/configured/{'c' * 32}")) == [
        "manifest.json",
        "my-model/pytorch_model.bin",
        "my-model/sub/vocab.txt",
    ]
    # shipped again (the next stage, the next night): the manifest and a HEAD per file, nothing PUT
    again = s3_env.requests(lambda: model_store.shipped(model, store, "configured", "c" * 32))
    assert sorted(r.split()[0] for r in again) == ["GET", "HEAD", "HEAD", "HEAD"]
    monkeypatch.setenv("AUGDAG_SCRATCH", str(tmp_path / "worker-scratch"))
    resources = {"model_path": uri, "device": "cpu", "tokenizer": "facebook/bart-base", "runtime": {"threads": 1}}
    local = model_store.localized(resources)
    copy = tmp_path / "worker-scratch" / "models" / "configured" / ("c" * 32) / "my-model"
    assert local == {**resources, "model_path": str(copy)}
    assert (copy / "pytorch_model.bin").read_bytes() == b"\x01w" * 500 and (copy / "sub" / "vocab.txt").read_text() == "a\nb\n"
    assert s3_env.requests(lambda: model_store.localized(resources)) == []  # once per host


def test_views_rejects_and_a_users_sql_read_the_artifact_prefix_and_nothing_else(tmp_path, s3_env):
    store = s3_env.bucket("aug-views") + "/night"
    s3_env.bucket("aug-elsewhere")
    rejects = pa.table(
        {"source": ["d"], "file": ["x.en"], "line": pa.array([7], pa.int64()), "reason": ["nul_byte"], "detail": ["NUL"]}
        | {"content": ["a\\x00b"]},
        schema=REJECTS,
    )
    _, ref = _pair(tmp_path, store)
    cat = Catalog(tmp_path / "cache")
    objects.use(store)  # the driver's process works on the store
    cat.register(ref, _committed(ref, rejects), run_id="r1")
    objects.put_bytes(objects.parquet_bytes(ROWS[0], {}), f"{store}-sibling/x.parquet")
    objects.put_bytes(objects.parquet_bytes(ROWS[0], {}), "s3://aug-elsewhere/x.parquet")
    user = Catalog(tmp_path / "cache")  # another process: `augdag sql`
    assert user.query("SELECT path FROM artifacts", sandbox=True)["path"].to_pylist() == [str(ref.dir)]
    assert user.query("SELECT src FROM bitext ORDER BY src", sandbox=True)["src"].to_pylist() == ["a b", "c", "d e f"]
    assert user.query("SELECT reason FROM rejects", sandbox=True)["reason"].to_pylist() == ["nul_byte"]
    inside = f"SELECT count(*) AS n FROM read_parquet('{store}/artifacts/*/*/part-*.parquet')"
    assert user.query(inside, sandbox=True).to_pylist() == [{"n": 3}]
    for outside in ("s3://aug-elsewhere/x.parquet", f"{store}-sibling/x.parquet"):
        with pytest.raises(CatalogError, match=rf"reads only the catalog and files under the cache .* and {store}/: .*{outside}"):
            user.query(f"SELECT * FROM read_parquet('{outside}')", sandbox=True)
    with pytest.raises(CatalogError, match="read-only and this is a COPY statement"):
        check_read_only(f"COPY (SELECT 1) TO '{store}/artifacts/x.parquet'")  # what `augdag sql` asks first
    # past that check, the store's filesystem itself refuses: one line
    with pytest.raises(CatalogError, match=rf"^refused: {store}/artifacts/x.parquet: augdag's object store is read-only to SQL$"):
        user.query(f"COPY (SELECT 1) TO '{store}/artifacts/x.parquet'", sandbox=True)
    assert sorted(s3_env.objects(store)) == sorted(f"artifacts/clean/{'a' * 32}/{f}" for f in ("manifest.json", *_files()))


def test_a_view_binds_from_one_footer_per_artifact_whose_parts_share_a_schema_and_reads_the_others_by_name(tmp_path, s3_env):
    """Every query on a view binds it: DuckDB reads the first part's footer of a list, or every part's with
    union_by_name (a HEAD and a ranged GET each on a store: ~1,000 a query at a 100M night's ~1,000 parts a view).
    An artifact whose manifest says its parts share one schema is read without it; one whose parts differ (a column
    only some have) by name, and its rows keep every column."""
    store = s3_env.bucket("aug-bind") + "/night"
    same = ArtifactRef(str(tmp_path / "cache"), "clean", "a" * 32, "bitext", "d", 6, store)
    for shard in range(6):
        commit_shard(same, shard, {"part": bitext([(f"s{shard}", f"t{shard}")], first_line=shard + 1)})
    differ = ArtifactRef(str(tmp_path / "cache"), "clean", "b" * 32, "bitext", "e", 2, store)
    commit_shard(differ, 0, {"part": bitext([("e0", "f0")])})
    noted = bitext([("e1", "f1")], first_line=2)
    commit_shard(differ, 1, {"part": noted.append_column("note", pa.array(["kept"]))})
    manifests = [write_manifest(ref, version="1", params={}) for ref in (same, differ)]
    assert [m["uniform"] for m in manifests] == [{"part": True}, {"part": False}]
    cat = Catalog(tmp_path / "cache")
    objects.use(store)
    for ref, manifest in zip((same, differ), manifests, strict=True):
        cat.register(ref, manifest, run_id="r1")
    objects.reset()  # another process: `augdag sql`, nothing of the store known yet
    user = Catalog(tmp_path / "cache")
    bound = s3_env.requests(lambda: user.query("SELECT count(*) AS n FROM bitext WHERE false", sandbox=True))
    # the parts' stat keys for the integrity check (storage/integrity/): one LIST per artifact, their hashes memoised
    assert [r for r in bound if "/artifacts/" not in r] == ["GET /aug-bind"] * 2
    touched = {r.split()[0] + " " + r.split("/artifacts/clean/")[1][:1] + r[-10:-8] for r in bound if "/artifacts/" in r}
    # the uniform artifact: the first part's footer (and a HEAD of the second, DuckDB's look at the list), not its
    # other 4 parts; the other artifact: each part's footer
    assert touched == {"HEAD a00", "GET a00", "HEAD a01", "HEAD b00", "GET b00", "HEAD b01", "GET b01"}
    rows = user.query("SELECT src, note FROM bitext ORDER BY src", sandbox=True).to_pylist()
    assert rows == [{"src": "e0", "note": None}, {"src": "e1", "note": "kept"}] + [
        {"src": f"s{i}", "note": None} for i in range(6)
    ]


def _files() -> list[str]:
    return ["part-00000.parquet", "part-00001.parquet", "rejects-00000.parquet"]


def test_the_duckdb_filesystem_refuses_every_write(s3_env):
    store = s3_env.bucket("aug-readonly")
    fs = duckdb_filesystem("s3")
    for write in (
        lambda: fs.open(f"{store}/x", "wb"),
        lambda: fs.rm(f"{store}/x"),
        lambda: fs.mkdir(f"{store}/d"),
        lambda: fs.mv(f"{store}/a", f"{store}/b"),
    ):
        with pytest.raises(PermissionError, match="read-only to SQL"):
            write()
    assert s3_env.objects(store) == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("http://host/bucket", "is not an object-store URI: write s3://BUCKET/PREFIX"),
        ("/data/artifacts", "is not an object-store URI"),
        ("s3:///prefix", "names no bucket: write s3://BUCKET/PREFIX"),
        ("s3://bucket/p?x=1", "a prefix has no ?query or #fragment"),
    ],
)
def test_storage_artifacts_that_is_not_an_object_store_is_one_line_naming_the_key(tmp_path, value, message):
    from conf.loader import load_profile

    profile = tmp_path / "p.yaml"
    profile.write_text(f"storage:\n  artifacts: {value!r}\n")
    with pytest.raises(ConfError, match="storage.artifacts") as e:
        load_profile(profile, environ={})
    assert message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfError, match=r"^\$AUGDAG_ARTIFACTS: .*" + re.escape(message)):
        load_profile(tmp_path / "p.yaml", ["storage.artifacts=null"], environ={"AUGDAG_ARTIFACTS": value})


def test_augdag_artifacts_beats_the_profile_and_a_slash_at_the_end_is_dropped(tmp_path):
    from conf.loader import load_profile

    profile = tmp_path / "p.yaml"
    profile.write_text("storage:\n  artifacts: s3://team/nightly/\n")
    assert load_profile(profile, environ={}).storage.artifacts == "s3://team/nightly"
    assert load_profile(profile, environ={"AUGDAG_ARTIFACTS": "s3://other/x"}).storage.artifacts == "s3://other/x"


def test_a_small_part_is_one_put_a_missing_one_one_head_a_whole_read_one_get(s3_env):
    """What each operation costs in requests (an S3 request costs ~20-50 ms and is billed): pyarrow's default for a
    write is a multipart upload (POST, PUT, POST), its file info of a missing key a HEAD and a LIST, its read of a
    Parquet file a HEAD, the footer and each column chunk, and DuckDB's through fsspec a HEAD at every open."""
    import duckdb

    store = s3_env.bucket("aug-requests")
    table = pa.table({"uid": [f"u{i}" for i in range(1000)], "x": list(range(1000))})
    part = f"{store}/a/part-00000.parquet"
    data = objects.parquet_bytes(table, {})
    size = len(data)
    assert s3_env.requests(lambda: objects.put_bytes(data, part)) == ["PUT /aug-requests/a/part-00000.parquet"]
    assert s3_env.requests(lambda: objects.exists(f"{store}/a/part-00001.parquet")) == ["HEAD /aug-requests/a/part-00001.parquet"]
    # a whole part: its size (pyarrow opens every object with a HEAD) and one GET; read again in this process: none
    assert s3_env.requests(lambda: objects.read_table(part)) == [
        f"{m} /aug-requests/a/part-00000.parquet" for m in ("HEAD", "GET")
    ]
    assert s3_env.requests(lambda: objects.read_table(part)) == []
    assert (objects.exists(part), objects.exists(f"{store}/a/part-00001.parquet"), objects.size(part)) == (True, False, size)
    assert objects.read_table(part) == table and objects.read_table(part, ["x"]) == table.select(["x"])
    other = f"{store}/a/part-00002.parquet"
    objects.put_bytes(objects.parquet_bytes(table, {}), other)

    def query() -> None:
        with duckdb.connect() as con:
            objects.register(con, {"s3"})
            assert con.sql(f"SELECT sum(x), count(DISTINCT uid) FROM read_parquet('{other}')").fetchall() == [(499500, 1000)]

    # DuckDB opens a file several times in one query (and asks its size and time at each): each is asked once per
    # process (a HEAD for its info from each of DuckDB's threads that asks before the first answer, a HEAD for the
    # handle), then only ranged GETs; a second query makes no HEAD
    first = collections.Counter(r.split()[0] for r in s3_env.requests(query))
    assert 2 <= first["HEAD"] <= 3 and first["GET"] >= 1 and set(first) == {"GET", "HEAD"}
    assert {r.split()[0] for r in s3_env.requests(query)} == {"GET"}


def test_duckdb_threads_sharing_one_large_part_on_the_store_each_read_their_own_bytes(s3_env):
    """DuckDB reads a Parquet file's row groups on several threads through one handle, "seek, then read": with one
    shared position another thread's seek landed in between and a read returned other bytes (a Thrift error, or
    wrong sums). Each thread has its own position now (``_PositionalFile``) over the process's one handle."""
    import duckdb
    import numpy as np

    store = s3_env.bucket("aug-threads")
    n = 1_500_000
    x = pa.array(np.arange(n, dtype=np.int64))
    table = pa.table({"x": x, "s": pc.binary_join_element_wise("row ", pc.cast(x, pa.string()), "")})
    objects.put_bytes(objects.parquet_bytes(table, {"row_group_size": 20_000}), f"{store}/big.parquet")
    for _ in range(4):
        with duckdb.connect(config={"threads": 4}) as con:
            objects.register(con, {"s3"})
            got = con.sql(f"SELECT sum(x), count(*), sum(length(s)) FROM read_parquet('{store}/big.parquet')").fetchall()
        assert got == [(n * (n - 1) // 2, n, pc.sum(pc.utf8_length(table["s"])).as_py())]
