"""augdag's public API over a catalog written here as the flow driver writes it (no Prefect): pins, reads, errors.

The end-to-end story (two nights of `augdag run ingest`, a user's script in its own process) is
tests/e2e/test_api_pins.py.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest

import augdag
from storage.artifacts import ArtifactRef, read_manifest, write_manifest, write_part
from storage.catalog import Catalog
from tests.conftest import bitext


def use(cat: Catalog, run_id: str, stage: str, fp: str, *, dataset: str, rows: list[tuple[str, str]] | None = None) -> None:
    """Run ``run_id`` uses the ``bitext`` artifact ``fp`` of ``dataset`` (written first when ``rows`` are given)."""
    ref = ArtifactRef(str(cat.root), stage, fp, "bitext", dataset, 1)
    if rows is not None:
        write_part(bitext(rows, source=dataset), ref.path(0))
        manifest = write_manifest(ref, version="1", params={})
    else:  # a cached use: the catalog knows it already
        manifest = read_manifest(ref)
    shard = {"run_id": run_id, "stage": stage, "dataset": dataset, "fingerprint": fp, "shard": 0, "status": "cached"}
    cat.register(ref, manifest, run_id=run_id, stage_runs=[shard])


def run(cat: Catalog, run_id: str, pipeline: str = "ingest", *, finish: str | None = "completed", children=()) -> None:
    cat.start_run(run_id, pipeline=pipeline, profile="p", config={}, flow_run_id=None)
    if finish:
        pipes = [{"pipeline": "ingest", "run_id": c, "status": "completed"} for c in children]
        cat.finish_run(run_id, status=finish, summary={"pipelines": pipes} if children else {})


def srcs(view: augdag.View) -> list[str]:
    return view.to_arrow()["src"].to_pylist()


X, Y, Z = "a" * 32, "b" * 32, "c" * 32


@pytest.fixture
def nights(tmp_path) -> Catalog:
    """ingest-1 writes X (dataset d) and Z (dataset e); ingest-2 writes Y (d); ingest-3 uses X again (cached)."""
    cat = Catalog(tmp_path / "cache")
    run(cat, "ingest-1", finish=None)
    use(cat, "ingest-1", "clean", X, dataset="d", rows=[("x1", "u"), ("x2", "v")])
    use(cat, "ingest-1", "clean", Z, dataset="e", rows=[("z1", "w")])
    cat.finish_run("ingest-1", status="completed", summary={})
    run(cat, "ingest-2", finish=None)
    use(cat, "ingest-2", "clean", Y, dataset="d", rows=[("y1", "u")])
    cat.finish_run("ingest-2", status="completed", summary={})
    run(cat, "ingest-3", finish=None)
    use(cat, "ingest-3", "clean", X, dataset="d")
    cat.finish_run("ingest-3", status="completed", summary={})
    return cat


def test_a_pin_is_the_current_views_rule_cut_at_its_run_issue_49(nights):
    cache = augdag.open(nights.root)
    assert srcs(cache.view("bitext")) == ["x1", "x2", "z1"]  # X used last (by ingest-3), Z never replaced
    assert srcs(cache.run("ingest-1").view("bitext")) == ["x1", "x2", "z1"]
    assert srcs(cache.run("ingest-2").view("bitext")) == ["y1", "z1"]  # Z: current when ingest-2 ended, unused by it
    assert srcs(cache.run("ingest-3").view("bitext")) == ["x1", "x2", "z1"]
    assert cache.latest("ingest").run_id == "ingest-3"
    assert cache.run("ingest-2").views().to_pylist()[0] == {
        "name": "bitext",
        "rows": 2,
        "description": "the rows of every bitext dataset that trains (ingest: read, reject, clean); test sets: heldout_bitext",
    }
    pinned = cache.run("ingest-2").view("bitext")
    assert pinned.info() == {
        "run": "ingest-2",
        "pinned": True,
        "pipeline": "ingest",
        "view": "bitext",
        "cache": str(nights.root),
        "artifacts": {
            f"clean/{Y}": {"dataset": "d", "rows": 1, "used_by": "ingest-2"},
            f"clean/{Z}": {"dataset": "e", "rows": 1, "used_by": "ingest-1"},
        },
        "lineage_columns": ["uid", "source", "line"],
    }
    assert cache.view("bitext").info()["run"] == "ingest-3"  # unpinned: the run that used one of them last


def test_a_view_keeps_its_artifacts_while_a_later_run_registers_issue_49(nights):
    view = augdag.open(nights.root).view("bitext", columns=["src"], where="src <> 'x2'")
    run(nights, "ingest-4", finish=None)
    use(nights, "ingest-4", "clean", Y, dataset="d")
    assert view.to_arrow().to_pylist() == [{"src": "x1"}, {"src": "z1"}]
    assert srcs(augdag.open(nights.root).view("bitext")) == ["y1", "z1"]


def test_a_nightly_pin_covers_its_pipeline_runs_and_latest_skips_a_night_still_running_issue_49(tmp_path):
    cat = Catalog(tmp_path / "cache")
    run(cat, "nightly-1", "nightly", finish=None)
    run(cat, "ingest-1", finish=None)
    use(cat, "ingest-1", "clean", X, dataset="d", rows=[("x1", "u")])
    cat.finish_run("ingest-1", status="completed", summary={})
    cat.finish_run("nightly-1", status="completed", summary={"pipelines": [{"pipeline": "ingest", "run_id": "ingest-1"}]})
    run(cat, "nightly-2", "nightly", finish=None)  # the next night, still writing
    run(cat, "ingest-2", finish=None)
    use(cat, "ingest-2", "clean", Y, dataset="d", rows=[("y1", "u")])
    cache = augdag.open(cat.root)
    night = cache.latest("nightly")
    assert (night.run_id, srcs(night.view("bitext"))) == ("nightly-1", ["x1"])
    assert srcs(cache.view("bitext")) == ["y1"]
    with pytest.raises(augdag.CatalogError) as e:
        cache.run("nightly-2")
    assert str(e.value) == "run nightly-2: registered no artifact (no stage of it completed), so it pins nothing"
    with pytest.raises(augdag.CatalogError) as e:
        cache.latest("c2c")
    assert str(e.value) == (
        f"{cat.path}: no completed run of 'c2c'; pipelines with a completed run: ingest, nightly. Hint: `augdag runs` lists runs"
    )


def test_a_part_that_differs_from_its_manifest_fails_the_read_naming_the_run_issue_49(nights):
    view = augdag.open(nights.root).run("ingest-2").view("bitext")
    part = nights.root / "artifacts" / "clean" / Y / "part-00000.parquet"
    data = bytearray(part.read_bytes())
    recorded = hashlib.sha256(data).hexdigest()
    data[len(data) // 2] ^= 1
    part.write_bytes(bytes(data))
    with pytest.raises(augdag.IntegrityError) as e:
        view.to_arrow()
    assert str(e.value) == (
        f"run ingest-2: artifact clean/{Y}: part-00000.parquet differs from its manifest: recorded sha256 {recorded}, "
        f"found {hashlib.sha256(data).hexdigest()}. Hint: augdag verify --repair --cache {nights.root}"
    )


def test_columns_where_and_the_kinds_columns_issue_49(tmp_path):
    cat = Catalog(tmp_path / "cache")
    run(cat, "ingest-1", finish=None)
    ref = ArtifactRef(str(cat.root), "clean", X, "mono", "m", 1)
    write_part(pa.table({"uid": ["u1", "u2"], "text": ["hello", "bye"], "source": ["m", "m"], "line": [1, 2]}), ref.path(0))
    shard = {"run_id": "ingest-1", "stage": "clean", "dataset": "m", "fingerprint": X, "shard": 0, "status": "computed"}
    cat.register(ref, write_manifest(ref, version="1", params={}), run_id="ingest-1", stage_runs=[shard])
    mono = augdag.open(cat.root).view("mono", columns=["sentence", "text"], where="line = 2")
    table = mono.to_arrow()
    assert table.schema == pa.schema([("sentence", pa.int32()), ("text", pa.string())])  # sentence: the kind's, null here
    assert table.to_pylist() == [{"sentence": None, "text": "bye"}]
    assert augdag.open(cat.root).view("mono", columns=["text"]).dataset().to_table().to_pylist() == [
        {"text": "hello"},
        {"text": "bye"},
    ]
    assert augdag.open(cat.root).view("mono").to_pandas()["text"].tolist() == ["hello", "bye"]
    with pytest.raises(augdag.ConfError) as e:
        mono.dataset()
    assert str(e.value) == (
        "view mono: dataset() reads its Parquet parts as they are, so where= 'line = 2' cannot apply. "
        "Hint: to_arrow() applies it; or filter the rows yourself"
    )
    with pytest.raises(augdag.CatalogError) as e:
        augdag.open(cat.root).view("mono", columns=["txt"])
    assert str(e.value) == "columns=: no column 'txt' in view mono; its columns: uid, text, source, line, sentence"
    with pytest.raises(augdag.CatalogError) as e:
        augdag.open(cat.root).view("mono", where="txt = 'a'").to_arrow()
    assert str(e.value) == "where=: no column 'txt' in view mono; its columns: uid, text, source, line, sentence"
    with pytest.raises(augdag.CatalogError) as e:
        augdag.open(cat.root).view("mono", where="line IN (SELECT 1 FROM read_csv('/etc/passwd'))").to_arrow()
    assert str(e.value).startswith(f"refused: `augdag sql` reads only the catalog and files under the cache {cat.root}: ")
    with pytest.raises(augdag.CatalogError) as e:
        augdag.open(cat.root).view("curriculm")
    assert str(e.value) == (
        f"{cat.path}: no view 'curriculm'; its views: bitext, heldout_bitext, heldout_labeled, heldout_mono, "
        "heldout_slots, labeled, mono, slots"
    )
    with pytest.raises(augdag.CatalogError) as e:
        augdag.open(cat.root).run("ingest-1").view("curriculum")
    assert str(e.value) == (
        f"{cat.path}: no view 'curriculum' when run ingest-1 ended: its stage has not run (originals (level 0) and "
        "their kept paraphrases by difficulty level (Alg. 2 lines 7-8; stage curriculum))"
    )


def test_open_refuses_a_directory_without_a_catalog_and_an_object_store_uri_issue_49(tmp_path):
    with pytest.raises(augdag.CatalogError) as e:
        augdag.open(tmp_path / "nothing")
    assert str(e.value) == f"no catalog at {(tmp_path / 'nothing').absolute()} (runs write it; --cache or $AUGDAG_CACHE)"
    assert not (tmp_path / "nothing").exists()
    with pytest.raises(augdag.CatalogError) as e:
        augdag.open("s3://bucket/cache")
    assert str(e.value).startswith("s3://bucket/cache: a cache is a directory on this machine (its catalog.duckdb)")


def test_to_polars_names_the_missing_package_issue_49(nights):
    try:
        import polars  # noqa: F401
    except ImportError:
        with pytest.raises(augdag.ConfError) as e:
            augdag.open(nights.root).view("bitext").to_polars()
        assert str(e.value) == "to_polars() needs the package polars, which is not installed. Hint: pip install polars"
    else:
        assert augdag.open(nights.root).view("bitext").to_polars()["src"].to_list() == ["x1", "x2", "z1"]


def test_to_torch_streams_the_pinned_parts_issue_49(nights):
    pytest.importorskip("torch")
    view = augdag.open(nights.root).run("ingest-2").view("bitext", columns=["src", "tgt"])
    assert [b["src"] for b in view.to_torch(batch_size=10)] == [["y1", "z1"]]
    with pytest.raises(augdag.ConfError) as e:
        augdag.open(nights.root).view("bitext", where="line = 1").to_torch()
    assert str(e.value).startswith("view bitext: to_torch() reads its Parquet parts as they are, so where= 'line = 1' ")


def test_to_hf_maps_the_pinned_parts_and_names_the_run_issue_49(nights, tmp_path):
    from augdag.hf import augdag_info

    view = augdag.open(nights.root).run("ingest-2").view("bitext", columns=["src", "tgt"])

    ds = view.to_hf(cache_dir=tmp_path / "hf")
    assert (ds["src"], ds.column_names) == (["y1", "z1"], ["src", "tgt"])
    assert augdag_info(ds)["run"] == "ingest-2"
    assert sorted(augdag_info(ds)["artifacts"]) == [f"clean/{Y}", f"clean/{Z}"]


def test_a_cache_whose_artifacts_lie_on_an_object_store_reads_them_there_issue_49(tmp_path, s3_env):
    store = s3_env.bucket("aug-api") + "/night"
    cat = Catalog(tmp_path / "cache")
    run(cat, "ingest-1", finish=None)
    ref = ArtifactRef(str(cat.root), "clean", X, "bitext", "d", 1, store=store)
    write_part(bitext([("s1", "u"), ("s2", "v")], source="d"), ref.path(0))
    cat.register(ref, write_manifest(ref, version="1", params={}), run_id="ingest-1", stage_runs=[])
    run(cat, "ingest-2", finish=None)
    shard = {"run_id": "ingest-2", "stage": "clean", "dataset": "d", "fingerprint": X, "shard": 0, "status": "cached"}
    cat.register(ref, read_manifest(ref), run_id="ingest-2", stage_runs=[shard])
    cat.finish_run("ingest-2", status="completed", summary={})
    view = augdag.open(cat.root).latest("ingest").view("bitext", columns=["src", "line"], where="line = 2")
    assert view.to_arrow().to_pylist() == [{"src": "s2", "line": 2}]
    assert [str(p) for p in view.parts()] == [f"{store}/artifacts/clean/{X}/part-00000.parquet"]
    assert augdag.open(cat.root).view("bitext", columns=["src"]).dataset().to_table()["src"].to_pylist() == ["s1", "s2"]
