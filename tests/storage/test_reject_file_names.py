"""A reject names its input file by name, not by directory (issue 48, defect 5): a moved data directory reads the
same bytes, as the read's fingerprint (the files' names and content) says; the two sides of a bitext that share a
name are told apart by their side."""

from __future__ import annotations

from pathlib import Path

from conf.schema import DatasetConf
from storage.artifacts import hash_inputs
from storage.readers.dataset import read_dataset


def _pair(root: Path, src: bytes, tgt: bytes) -> DatasetConf:
    for side, data in (("en", src), ("de", tgt)):
        (root / side).mkdir(parents=True)
        (root / side / "train.txt").write_bytes(data)
    return DatasetConf(kind="bitext", format="text", src=root / "en" / "train.txt", tgt=root / "de" / "train.txt")


def _rejects(ds: DatasetConf) -> list[tuple[str, int, str]]:
    return [(r["file"], r["line"], r["reason"]) for b in read_dataset("d", ds) for r in b.rejects.to_pylist()]


def test_sides_of_one_name_are_told_apart_and_a_moved_directory_reads_the_same(tmp_path):
    here = _pair(tmp_path / "a", b"good\n\xff\nfine\n", b"gut\nschlecht\n \n")
    moved = _pair(tmp_path / "elsewhere" / "b", b"good\n\xff\nfine\n", b"gut\nschlecht\n \n")
    assert _rejects(here) == [("train.txt (src)", 2, "invalid_utf8"), ("train.txt (tgt)", 3, "empty")]
    assert _rejects(moved) == _rejects(here)
    assert hash_inputs(moved.files()) == hash_inputs(here.files())
