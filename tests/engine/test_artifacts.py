import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conf.errors import ArtifactError
from storage.artifacts import (
    ArtifactRef,
    canonical,
    fingerprint,
    hash_file,
    hash_inputs,
    read_manifest,
    sweep_temp,
    temp_path,
    verify,
    write_manifest,
    write_part,
)

BASE = {"stage": "clean", "version": "1", "params": {"min_tokens": 1, "max_ratio": 1.5}, "inputs": ["a" * 32], "models": ["m1"]}


def test_fingerprint_same_inputs_same_config_same_fingerprint():
    assert fingerprint(**BASE) == fingerprint(**BASE)
    reordered = dict(BASE, params={"max_ratio": 1.5, "min_tokens": 1})
    assert fingerprint(**reordered) == fingerprint(**BASE)


@pytest.mark.parametrize(
    "change",
    [
        {"stage": "dedup"},
        {"version": "2"},
        {"params": {"min_tokens": 2, "max_ratio": 1.5}},
        {"params": {"min_tokens": 1, "max_ratio": 1.5, "extra": None}},
        {"inputs": ["b" * 32]},
        {"inputs": ["a" * 32, "b" * 32]},
        {"models": ["m2"]},
        {"models": []},
    ],
)
def test_fingerprint_any_change_gives_a_new_one(change):
    assert fingerprint(**{**BASE, **change}) != fingerprint(**BASE)


def test_canonical_is_sorted_compact_and_handles_paths_and_models():
    from pathlib import Path

    from conf.schema import CleanConf

    assert canonical({"b": 1, "a": [Path("x/y"), {"d": 1.5, "c": None}]}) == '{"a":["x/y",{"c":null,"d":1.5}],"b":1}'
    assert canonical(CleanConf()) == '{"dedup":true,"max_ratio":1.5,"max_tokens":250,"min_tokens":1}'


def test_hash_inputs_depends_on_content_not_mtime(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("hello\n")
    h = hash_inputs([f])
    f.write_text("hello\n")
    assert hash_inputs([f]) == h
    f.write_text("hullo\n")
    assert hash_inputs([f]) != h


def _ref(tmp_path, n=2):
    return ArtifactRef(str(tmp_path), "clean", "f" * 32, "bitext", "d", n)


def test_write_part_leaves_no_temporary_file(tmp_path):
    ref = _ref(tmp_path)
    write_part(pa.table({"x": [1, 2, 3]}), ref.path(0))
    assert [p.name for p in ref.dir.iterdir()] == ["part-00000.parquet"]
    assert pq.read_table(ref.path(0))["x"].to_pylist() == [1, 2, 3]


def test_sweep_removes_what_a_dead_writer_left_and_keeps_a_live_ones(tmp_path):
    """A killed run's half-written part (its pid gone) is removed before the stage computes again; a part a live
    process is writing (this one's) stays, and so does the data."""
    ref = _ref(tmp_path)
    write_part(pa.table({"x": [1]}), ref.path(0))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    dead = ref.path(1).with_name(temp_path(ref.path(1)).name.replace(f".{os.getpid()}.", f".{dead_pid}."))
    dead.write_bytes(b"half a part")
    dead_model = ref.dir / f".model.{dead_pid}.abcdef12.tmp"
    (dead_model / "sub").mkdir(parents=True)
    live = temp_path(ref.path(2))
    live.write_bytes(b"being written")
    assert sorted(sweep_temp(ref.dir)) == sorted([dead, dead_model])
    assert sorted(p.name for p in ref.dir.iterdir()) == sorted([live.name, "part-00000.parquet"])
    assert sweep_temp(tmp_path / "missing") == []


def test_manifest_records_rows_bytes_sha256_and_params(tmp_path):
    ref = _ref(tmp_path)
    write_part(pa.table({"x": [1, 2, 3]}), ref.path(0))
    write_part(pa.table({"x": [4]}), ref.path(1))
    write_part(pa.table({"x": [9, 9]}), ref.path(0, "dropped"))
    m = write_manifest(ref, version="1", params={"k": 2}, inputs=["i"])
    assert (m["rows"], m["n_shards"], m["params"], m["inputs"]) == (4, 2, {"k": 2}, ["i"])
    files = {f["file"]: f for f in m["files"]}
    assert {k: (f["role"], f["shard"], f["rows"]) for k, f in files.items()} == {
        "dropped-00000.parquet": ("dropped", 0, 2),
        "part-00000.parquet": ("part", 0, 3),
        "part-00001.parquet": ("part", 1, 1),
    }
    assert files["part-00001.parquet"]["sha256"] == hash_file(ref.path(1))
    assert files["part-00001.parquet"]["bytes"] == ref.path(1).stat().st_size
    assert json.loads((ref.dir / "manifest.json").read_text()) == m
    assert read_manifest(ref) == m and verify(ref) == []


def test_manifest_refuses_missing_main_shard(tmp_path):
    ref = _ref(tmp_path, n=3)
    write_part(pa.table({"x": [1]}), ref.path(0))
    with pytest.raises(ArtifactError, match=r"expected 3 main parts, found shards \[0\]"):
        write_manifest(ref, version="1", params={})


def test_deleted_or_truncated_part_makes_the_artifact_incomplete(tmp_path):
    ref = _ref(tmp_path)
    for i in range(2):
        write_part(pa.table({"x": [i]}), ref.path(i))
    write_manifest(ref, version="1", params={})
    ref.path(1).write_bytes(ref.path(1).read_bytes()[:-3])
    assert read_manifest(ref) is None
    ref.path(1).unlink()
    assert read_manifest(ref) is None


def test_verify_names_a_corrupted_file_of_the_same_size(tmp_path):
    ref = _ref(tmp_path, n=1)
    write_part(pa.table({"x": [1]}), ref.path(0))
    write_manifest(ref, version="1", params={})
    data = bytearray(ref.path(0).read_bytes())
    data[10] ^= 0xFF
    ref.path(0).write_bytes(bytes(data))
    assert verify(ref) == ["part-00000.parquet"]


def test_missing_shard_read_names_the_path(tmp_path):
    with pytest.raises(ArtifactError, match="shard 0 of stage 'clean' is missing"):
        _ref(tmp_path).read(0)


def test_hash_inputs_memo_gives_the_same_fingerprint_and_notices_a_rewrite(tmp_path):
    f, memo = tmp_path / "a.txt", tmp_path / "memo"
    f.write_text("hello\n")
    plain = hash_inputs([f])
    assert hash_inputs([f], memo=memo) == plain == hash_inputs([f], memo=memo)
    assert len(list(memo.iterdir())) == 1
    f.write_text("hullo, world\n")  # size and mtime change: the memo entry no longer applies
    assert hash_inputs([f], memo=memo) == hash_inputs([f]) != plain
