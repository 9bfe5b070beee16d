"""`augdag run ingest` on a new cache directory made 0700 (issue 48, "Also: permissions"): nothing it creates under
it (artifacts, manifests, the catalog and its lock, logs, input hashes, Prefect's results) is readable, writable or
searchable by the group or others; it used to make them 0644 and 0755."""

from __future__ import annotations

import stat

from tests.conftest import augdag

PROFILE = "datasets:\n  train: {kind: bitext, format: text, src: data/train.en, tgt: data/train.de}\n"


def test_a_cache_made_0700_stays_private(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data/train.en").write_text("a b\nc d\ne f\n", encoding="utf-8")
    (tmp_path / "data/train.de").write_text("x y\nz w\nu v\n", encoding="utf-8")
    (tmp_path / "p.yaml").write_text(PROFILE, encoding="utf-8")
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o700)
    done = augdag(tmp_path, "run", "ingest", "--config", "p.yaml", "--cache", str(cache))
    assert done.returncode == 0, done.stderr
    made = {p.relative_to(cache).as_posix(): stat.S_IMODE(p.lstat().st_mode) for p in cache.rglob("*")}
    names = {n.split("/")[0] for n in made}
    assert {"catalog.duckdb", "catalog.lock", "artifacts", "logs", "input-hashes", "prefect-results"} <= names
    assert sum(n.endswith("/part-00000.parquet") for n in made) == 3 and sum(n.endswith("/manifest.json") for n in made) == 3
    assert {n: oct(m) for n, m in made.items() if m & 0o077} == {}
