"""Bytes are proven, not trusted (issue 48, defect 1): a part that differs from its manifest is never read, served or
counted as cached; storage/integrity/'s rule, on artifacts built by hand."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import duckdb
import pytest

from conf.errors import CatalogError
from storage.artifacts import ArtifactRef, write_manifest, write_part
from storage.catalog import Catalog
from storage.integrity import MEMO, IntegrityError, check_artifact, missing_part, verify_artifact
from tests.conftest import bitext

FP = "c" * 32


def artifact(root: Path, n: int = 2) -> tuple[ArtifactRef, dict]:
    """A `clean` artifact of ``n`` shards, two pairs each, in the bitext view, with its manifest."""
    ref = ArtifactRef(str(root), "clean", FP, "bitext", "d", n)
    for i in range(n):
        write_part(bitext([(f"a{i}", f"x{i}"), (f"b{i}", f"y{i}")], first_line=2 * i + 1), ref.path(i))
    return ref, write_manifest(ref, version="1", params={})


def flip(path: Path, *, keep_mtime: bool = False) -> tuple[str, str]:
    """Flip one bit in the middle of ``path``; its sha256 before and after (``keep_mtime``: mtime set back)."""
    st, data = path.stat(), bytearray(path.read_bytes())
    before = hashlib.sha256(data).hexdigest()
    data[len(data) // 2] ^= 1
    with open(path, "r+b") as f:  # in place, as a disk or a careless `dd` does: same inode, same size
        f.write(data)
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return before, hashlib.sha256(data).hexdigest()


def mismatch(root: Path, file: str, before: str, after: str) -> str:
    return (
        f"artifact clean/{FP}: {file} differs from its manifest: recorded sha256 {before}, found {after}. "
        f"Hint: augdag verify --repair --cache {root}"
    )


def test_a_stage_reading_a_flipped_part_fails_naming_artifact_part_both_hashes_and_the_repair_issue_48(tmp_path):
    ref, _ = artifact(tmp_path)
    assert ref.read(1)["src"].to_pylist() == ["a1", "b1"]
    before, after = flip(Path(ref.path(1)))
    for read in (lambda: ref.read(1), lambda: ref.parts().table(["src"]), lambda: ref.parts().sql()):
        with pytest.raises(IntegrityError) as e:
            read()
        assert str(e.value) == mismatch(tmp_path, "part-00001.parquet", before, after)
    assert ref.read(0)["src"].to_pylist() == ["a0", "b0"]  # the other shard reads as it is


def test_a_cached_artifact_is_rehashed_once_its_stat_key_moves_even_with_its_mtime_set_back_issue_48(tmp_path):
    ref, manifest = artifact(tmp_path)
    files = {f["file"]: f["sha256"] for f in manifest["files"]}
    memo = json.loads((tmp_path / MEMO / f"clean-{FP}.json").read_text())  # the writer hashed them: remembered
    assert {f: entry.split(" ")[1] for f, entry in memo.items()} == files
    check_artifact(tmp_path, ref.dir, files)  # as recorded
    before, after = flip(Path(ref.path(0)), keep_mtime=True)  # size and mtime as they were; ctime moved
    with pytest.raises(IntegrityError) as e:
        check_artifact(tmp_path, ref.dir, files)
    assert str(e.value) == mismatch(tmp_path, "part-00000.parquet", before, after)
    found = verify_artifact(tmp_path, ref.dir, files, memo=False)
    assert [(f.file, f.recorded, f.found) for f in found] == [("part-00000.parquet", before, after)]
    Path(ref.path(1)).unlink()
    assert [(f.file, f.found) for f in verify_artifact(tmp_path, ref.dir, files)] == [
        ("part-00000.parquet", after),
        ("part-00001.parquet", None),
    ]


def test_a_query_over_a_view_with_a_flipped_part_fails_and_one_without_reads_issue_48(tmp_path):
    ref, manifest = artifact(tmp_path)
    cat = Catalog(tmp_path)
    cat.register(ref, manifest, run_id="r1")
    assert cat.query("SELECT count(*) AS n FROM bitext", sandbox=True).to_pylist() == [{"n": 4}]
    before, after = flip(Path(ref.path(1)))
    with pytest.raises(IntegrityError) as e:
        cat.query("SELECT count(*) AS n FROM bitext", sandbox=True)
    assert str(e.value) == mismatch(tmp_path, "part-00001.parquet", before, after)


def test_a_file_its_manifest_does_not_list_is_refused_issue_48(tmp_path):
    ref, _ = artifact(tmp_path, n=1)
    write_part(bitext([("s", "t")]), ref.path(0, "dropped"))
    with pytest.raises(IntegrityError) as e:
        ref.read(0, "dropped")
    assert str(e.value) == (
        f"artifact clean/{FP}: dropped-00000.parquet is not in its manifest (a file nobody recorded). "
        f"Hint: augdag verify --repair --cache {tmp_path}"
    )


def test_duckdbs_error_about_a_deleted_part_is_one_catalog_error_naming_it_issue_48(tmp_path):
    ref, _ = artifact(tmp_path, n=1)
    Path(ref.path(0)).unlink()
    with pytest.raises(duckdb.IOException) as e:
        duckdb.connect().sql(f"SELECT * FROM read_parquet('{ref.path(0)}')").fetchall()
    error = missing_part(e.value)
    assert isinstance(error, CatalogError)
    assert str(error) == (
        f"artifact clean/{FP}: part-00000.parquet is missing ({ref.path(0)}). Hint: augdag verify --repair --cache {tmp_path}"
    )
    assert missing_part(ValueError("No such file")) is None
