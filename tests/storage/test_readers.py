"""The input readers: exact rows per format, every reject reason at its line, batches, whole-file errors.

Compressed inputs and other encodings: tests/storage/test_compressed_inputs.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conf.errors import ConfError, InputError
from conf.schema import DatasetConf
from storage.readers.dataset import REASONS, ReadBatch, read_dataset
from storage.readers.lines import count_lines, iter_lines
from storage.schemas import BITEXT, LABELED, MONO, REJECTS, SLOTS


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def read(ds: DatasetConf, name: str = "d", **kwargs) -> tuple[list[dict], list[dict], list[ReadBatch]]:
    """(kept rows without uid, rejects, batches), each batch checked: input rows = kept + rejected."""
    batches = list(read_dataset(name, ds, **kwargs))
    for b in batches:
        assert b.n_input == b.rows.num_rows + b.rejects.num_rows and b.rejects.schema == REJECTS
    rows = [{k: v for k, v in r.items() if k != "uid"} for b in batches for r in b.rows.to_pylist()]
    rejects = [r for b in batches for r in b.rejects.to_pylist()]
    return rows, rejects, batches


def md5(*parts: str) -> str:
    return hashlib.md5("\x1f".join(parts).encode()).hexdigest()


def mono(path: Path) -> DatasetConf:
    return DatasetConf(kind="mono", format="text", path=path)


def pair(src: Path, tgt: Path) -> DatasetConf:
    return DatasetConf(kind="bitext", format="text", src=src, tgt=tgt)


def why(rejects: list[dict]) -> list[tuple[int, str]]:
    return [(r["line"], r["reason"]) for r in rejects]


# --- round trips ------------------------------------------------------------------------------------------------


def test_read_text_mono_rows_uid_source_line(tmp_path):
    batches = list(read_dataset("news", mono(write(tmp_path, "m.txt", "Hello world\nsecond line\n"))))
    assert len(batches) == 1 and batches[0].rows.schema == MONO
    assert batches[0].rows.to_pylist() == [
        {"uid": md5("news", "Hello world"), "text": "Hello world", "source": "news", "line": 1},
        {"uid": md5("news", "second line"), "text": "second line", "source": "news", "line": 2},
    ]


def test_read_text_bitext_reads_both_files_in_lockstep(tmp_path):
    ds = pair(write(tmp_path, "a.de", "Hallo\nWelt\n"), write(tmp_path, "a.en", "Hello\nworld\n"))
    batch = next(read_dataset("wmt", ds))
    assert batch.rows.schema == BITEXT
    assert batch.rows.to_pylist() == [
        {"uid": md5("wmt", "Hallo", "Hello"), "src": "Hallo", "tgt": "Hello", "source": "wmt", "line": 1},
        {"uid": md5("wmt", "Welt", "world"), "src": "Welt", "tgt": "world", "source": "wmt", "line": 2},
    ]


def test_read_tsv_bitext_and_labeled_with_column_order(tmp_path):
    rows, _, _ = read(DatasetConf(kind="bitext", format="tsv", path=write(tmp_path, "p.tsv", "a b\tA B\nc\tC\n")))
    assert rows == [{"src": "a b", "tgt": "A B", "source": "d", "line": 1}, {"src": "c", "tgt": "C", "source": "d", "line": 2}]
    ds = DatasetConf(
        kind="labeled", format="tsv", path=write(tmp_path, "l.tsv", "7\tpos\tgood film\n"), columns=["id", "label", "text"]
    )  # a column that is no field is skipped
    rows, rejects, batches = read(ds)
    assert rows == [{"text": "good film", "label": "pos", "source": "d", "line": 1}] and rejects == []
    assert batches[0].rows.schema == LABELED


def test_read_tsv_slots_splits_tokens_and_tags_on_spaces(tmp_path):
    ds = DatasetConf(kind="slots", format="tsv", path=write(tmp_path, "s.tsv", "book a  flight\tO O B-act\n"))
    batch = next(read_dataset("atis", ds))
    assert batch.rows.schema == SLOTS
    assert batch.rows.to_pylist() == [
        {
            "uid": md5("atis", "book\x1ea\x1eflight", "O\x1eO\x1eB-act"),
            "tokens": ["book", "a", "flight"],
            "tags": ["O", "O", "B-act"],
            "source": "atis",
            "line": 1,
        }
    ]


def test_read_jsonl_renames_fields_and_numeric_label_becomes_its_string(tmp_path):
    lines = [{"sentence": "fine", "y": 3}, {"sentence": "bad", "y": "neg"}, {"sentence": "ok", "y": 2.5, "extra": 1}]
    path = write(tmp_path, "l.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    ds = DatasetConf(kind="labeled", format="jsonl", path=path, rename={"text": "sentence", "label": "y"})
    rows, rejects, _ = read(ds)
    assert [(r["text"], r["label"], r["line"]) for r in rows] == [("fine", "3", 1), ("bad", "neg", 2), ("ok", "2.5", 3)]
    assert rejects == []


def test_read_jsonl_slots_lists(tmp_path):
    path = write(tmp_path, "s.jsonl", '{"tokens": ["to", "Paris"], "tags": ["O", "B-city"]}\n')
    rows, _, _ = read(DatasetConf(kind="slots", format="jsonl", path=path))
    assert rows == [{"tokens": ["to", "Paris"], "tags": ["O", "B-city"], "source": "d", "line": 1}]


def test_read_parquet_line_is_the_row_number_across_row_groups(tmp_path):
    path = tmp_path / "b.parquet"
    pq.write_table(
        pa.table({"de": ["a", "b", "c", "d", "e"], "en": ["A", "B", "C", "D", "E"], "x": [1] * 5}), path, row_group_size=2
    )
    rows, _, batches = read(
        DatasetConf(kind="bitext", format="parquet", path=path, rename={"src": "de", "tgt": "en"}), batch_rows=3
    )
    assert [(r["src"], r["tgt"], r["line"]) for r in rows] == [(c, c.upper(), i) for i, c in enumerate("abcde", 1)]
    assert [(b.first_line, b.n_input) for b in batches] == [(1, 3), (4, 2)]


def test_read_parquet_integer_label_and_null_field(tmp_path):
    path = tmp_path / "l.parquet"
    pq.write_table(pa.table({"text": ["good", None, "meh"], "label": [1, 0, 2]}), path)
    rows, rejects, _ = read(DatasetConf(kind="labeled", format="parquet", path=path))
    assert [(r["text"], r["label"], r["line"]) for r in rows] == [("good", "1", 1), ("meh", "2", 3)]
    assert [(r["line"], r["reason"], r["detail"]) for r in rejects] == [(2, "missing_field", "column 'text' is null")]


def test_read_parquet_binary_column_decoded_in_the_datasets_encoding(tmp_path):
    path = tmp_path / "b.parquet"
    pq.write_table(
        pa.table({"text": pa.array([b"caf\xe9", None, b"two\nlines \xe9"], pa.binary()), "label": ["a", "b", "c"]}), path
    )
    ds = DatasetConf(kind="labeled", format="parquet", path=path, encoding="latin-1")
    rows, rejects, _ = read(ds)
    assert [(r["text"], r["line"]) for r in rows] == [("café", 1), ("two\nlines é", 3)]  # a newline inside a value
    assert why(rejects) == [(2, "missing_field")]
    rows, rejects, _ = read(ds.model_copy(update={"encoding": "utf-8"}))
    assert rows == [] and [r["detail"] for r in rejects] == [
        "text: invalid UTF-8 at byte 3",
        "column 'text' is null",
        "text: invalid UTF-8 at byte 10",
    ]


def test_read_hf_dataset_dict_split_with_class_label_names(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner": datasets.Sequence(datasets.ClassLabel(names=["O", "B-loc"])),
        }
    )
    train = datasets.Dataset.from_dict(
        {"tokens": [["in", "Rome"], ["hi"], ["x"]], "ner": [[0, 1], [0], [0, 0]]}, features=features
    )
    datasets.DatasetDict({"train": train, "test": train.select([0])}).save_to_disk(str(tmp_path / "hf"))
    ds = DatasetConf(kind="slots", format="hf", path=tmp_path / "hf", split="train", rename={"tags": "ner"})
    rows, rejects, batches = read(ds, batch_rows=2)
    assert rows == [
        {"tokens": ["in", "Rome"], "tags": ["O", "B-loc"], "source": "d", "line": 1},
        {"tokens": ["hi"], "tags": ["O"], "source": "d", "line": 2},
    ]
    assert [(r["line"], r["reason"], r["detail"]) for r in rejects] == [(3, "tags_mismatch", "1 tokens but 2 tags")]
    assert [b.n_input for b in batches] == [2, 1]


# --- line handling ------------------------------------------------------------------------------------------------


def test_read_text_crlf_and_missing_final_newline(tmp_path):
    rows, rejects, _ = read(mono(write(tmp_path, "m.txt", "one\r\ntwo\r\nthree")))
    assert [(r["text"], r["line"]) for r in rows] == [("one", 1), ("two", 2), ("three", 3)] and rejects == []


def test_read_text_final_newline_makes_no_extra_row_but_blank_lines_are_rows(tmp_path):
    rows, rejects, _ = read(mono(write(tmp_path, "m.txt", "one\n\ntwo\n")))
    assert [r["line"] for r in rows] == [1, 3] and why(rejects) == [(2, "empty")]


def test_read_tsv_header_is_skipped_and_lines_stay_file_lines(tmp_path):
    path = write(tmp_path, "p.tsv", "src\ttgt\na\tA\nb\tB\nc\n")
    rows, rejects, batches = read(DatasetConf(kind="bitext", format="tsv", path=path, header=True), batch_rows=2)
    assert [(r["src"], r["line"]) for r in rows] == [("a", 2), ("b", 3)] and why(rejects) == [(4, "column_count")]
    assert [(b.first_line, b.n_input) for b in batches] == [(2, 2), (4, 1)]


@pytest.mark.parametrize("block_bytes", [1, 2, 3, 5, 7, 64])
def test_read_block_boundary_inside_a_line_keeps_every_line(tmp_path, block_bytes):
    text = "alpha beta\r\ngamma\n\ndelta epsilon zeta\nlast"
    rows, rejects, _ = read(mono(write(tmp_path, "m.txt", text)), block_bytes=block_bytes)
    assert [(r["text"], r["line"]) for r in rows] == [("alpha beta", 1), ("gamma", 2), ("delta epsilon zeta", 4), ("last", 5)]
    assert why(rejects) == [(3, "empty")]


def test_lines_agree_with_python_split_for_cr_and_long_lines(tmp_path):
    data = b"\r\n" + b"x" * 50 + b"\r\r\n\n\ry\rz\n"
    path = write(tmp_path, "m.txt", data)
    expect = [b"", b"x" * 50 + b"\r", b"", b"\ry\rz"]  # only a \r right before \n is stripped
    assert [x for a in iter_lines(path, block_bytes=4) for x in a.to_pylist()] == expect
    assert count_lines(path, block_bytes=4) == 4 and count_lines(write(tmp_path, "e.txt", b"")) == 0


# --- batches ----------------------------------------------------------------------------------------------------------


def test_read_batches_cover_batch_rows_input_rows_kept_plus_rejected(tmp_path):
    lines = [f"line {i}" if i not in (3, 6) else "" for i in range(1, 11)]  # lines 3 and 6 are rejected
    path = write(tmp_path, "m.txt", "\n".join(lines) + "\n")
    _, _, batches = read(mono(path), batch_rows=4)
    assert [(b.index, b.first_line, b.n_input, b.rows.num_rows, b.rejects.num_rows) for b in batches] == [
        (0, 1, 4, 3, 1),
        (1, 5, 4, 3, 1),
        (2, 9, 2, 2, 0),
    ]


@pytest.mark.parametrize("batch_rows", [1, 3, 4, 10, 1000])
def test_read_rows_are_identical_whatever_the_batch_size(tmp_path, batch_rows):
    src = write(tmp_path, "a.src", "".join(f"s{i}\n" if i != 5 else "\n" for i in range(10)))
    tgt = write(tmp_path, "a.tgt", "".join(f"t{i}\n" for i in range(10)))
    whole = [b.rows for b in read_dataset("d", pair(src, tgt), batch_rows=1000)]
    parts = list(read_dataset("d", pair(src, tgt), batch_rows=batch_rows, block_bytes=5))
    assert pa.concat_tables(b.rows for b in parts).equals(pa.concat_tables(whole))
    assert [r["line"] for b in parts for r in b.rejects.to_pylist()] == [6]


def test_read_empty_file_yields_no_batches(tmp_path):
    assert list(read_dataset("d", mono(write(tmp_path, "m.txt", "")))) == []


# --- rejects: one reason per bad row, at its line -------------------------------------------------------------------


def test_read_text_rejects_invalid_utf8_nul_too_long_empty(tmp_path):
    path = write(tmp_path, "m.txt", b"ok\nbad \xff byte\nnul\x00here\n" + b"y" * 11 + b"\n   \nfine\n")
    rows, rejects, batches = read(mono(path), max_line_chars=10)
    assert [r["line"] for r in rows] == [1, 6]
    assert [(r["line"], r["reason"], r["file"], r["content"]) for r in rejects] == [
        (2, "invalid_utf8", "m.txt", "bad \ufffd byte"),
        (3, "nul_byte", "m.txt", "nul\x00here"),
        (4, "too_long", "m.txt", "y" * 11),
        (5, "empty", "m.txt", "   "),
    ]
    assert rejects[2]["detail"] == "text: 11 characters, max_line_chars is 10"
    assert rejects[0]["detail"] == "text: invalid UTF-8 at byte 4"
    assert sum(b.n_input for b in batches) == 6


def test_read_too_long_counts_characters_not_bytes(tmp_path):
    rows, rejects, _ = read(mono(write(tmp_path, "m.txt", "ééééé\néééééé\n")), max_line_chars=5)  # 10 and 12 bytes
    assert [r["line"] for r in rows] == [1] and why(rejects) == [(2, "too_long")]


def test_read_bitext_pair_rejected_for_either_side_names_that_sides_file(tmp_path):
    src = write(tmp_path, "a.src", b"good\n\xfe\nalso good\nx\n")
    tgt = write(tmp_path, "a.tgt", b"gut\nschlecht\n \n\xfe\n")
    rows, rejects, _ = read(pair(src, tgt))
    assert [(r["src"], r["tgt"]) for r in rows] == [("good", "gut")]
    assert [(r["line"], r["reason"], r["file"], r["content"]) for r in rejects] == [
        (2, "invalid_utf8", "a.src", "\ufffd"),
        (3, "empty", "a.tgt", " "),
        (4, "invalid_utf8", "a.tgt", "\ufffd"),
    ]


def test_read_tsv_column_count_says_expected_and_found(tmp_path):
    path = write(tmp_path, "p.tsv", "a\tA\na\tb\tc\nsolo\n")
    rows, rejects, _ = read(DatasetConf(kind="bitext", format="tsv", path=path))
    assert len(rows) == 1
    assert [(r["line"], r["reason"], r["detail"], r["content"]) for r in rejects] == [
        (2, "column_count", "expected 2 tab-separated fields (src, tgt), found 3", "a\tb\tc"),
        (3, "column_count", "expected 2 tab-separated fields (src, tgt), found 1", "solo"),
    ]


def test_read_tsv_rejects_empty_fields_and_too_long_lines(tmp_path):
    path = write(tmp_path, "p.tsv", "a\t \nabcdef\tb\nabc\tabc\n")
    rows, rejects, _ = read(DatasetConf(kind="bitext", format="tsv", path=path), max_line_chars=7)
    assert [r["line"] for r in rows] == [3]  # 7 characters: at the limit, kept
    assert [(r["line"], r["reason"], r["detail"]) for r in rejects] == [
        (1, "empty", "tgt: empty or whitespace-only"),
        (2, "too_long", "line: 8 characters, max_line_chars is 7"),
    ]


def test_read_jsonl_rejects_a_line_over_the_limit_even_when_each_field_fits(tmp_path):
    path = write(tmp_path, "s.jsonl", '{"tokens": ["a", "b"], "tags": ["O", "O"]}\n{"tokens": ["a"], "tags": ["O"]}\n')
    rows, rejects, _ = read(DatasetConf(kind="slots", format="jsonl", path=path), max_line_chars=40)
    assert [r["line"] for r in rows] == [2]
    assert [(r["line"], r["reason"]) for r in rejects] == [(1, "too_long")]


def test_read_jsonl_rejects_bad_json_missing_field_bad_type(tmp_path):
    path = write(
        tmp_path,
        "l.jsonl",
        '{"text": "a", "label": 1}\n{"text": "a"\n{"text": "b"}\n'
        '["x"]\n{"text": 5, "label": "x"}\n{"text": "c", "label": true}\n'
        '{"text": "d", "label": null}\n\n{"text": "\\u0000", "label": "x"}\n',
    )
    rows, rejects, batches = read(DatasetConf(kind="labeled", format="jsonl", path=path), batch_rows=4)
    assert [r["line"] for r in rows] == [1]
    assert why(rejects) == [
        (2, "bad_json"),
        (3, "missing_field"),
        (4, "bad_type"),
        (5, "bad_type"),
        (6, "bad_type"),
        (7, "missing_field"),
        (8, "empty"),
        (9, "nul_byte"),
    ]
    assert rejects[1]["detail"] == "no key 'label'" and rejects[3]["detail"] == "'text' is int, expected a string"
    assert sum(b.n_input for b in batches) == 9


def test_read_slots_tags_mismatch_and_bad_type(tmp_path):
    path = write(
        tmp_path,
        "s.jsonl",
        '{"tokens": ["a", "b"], "tags": ["O"]}\n{"tokens": "a b", "tags": ["O", "O"]}\n{"tokens": [], "tags": []}\n',
    )
    rows, rejects, _ = read(DatasetConf(kind="slots", format="jsonl", path=path))
    assert rows == [] and why(rejects) == [(1, "tags_mismatch"), (2, "bad_type"), (3, "empty")]
    assert rejects[0]["detail"] == "2 tokens but 1 tags"


def test_read_reasons_are_the_fixed_vocabulary():
    assert set(REASONS) == {
        "invalid_utf8",
        "invalid_encoding",
        "nul_byte",
        "empty",
        "too_long",
        "column_count",
        "bad_json",
        "missing_field",
        "bad_type",
        "tags_mismatch",
    }


def test_read_reject_content_is_cut_to_200_characters(tmp_path):
    _, rejects, _ = read(mono(write(tmp_path, "m.txt", "z" * 300 + "\n")), max_line_chars=100)
    assert rejects[0]["content"] == "z" * 200


# --- whole-input errors ---------------------------------------------------------------------------------------------


def test_read_bitext_line_counts_differ_names_both_files_before_any_batch(tmp_path):
    src = write(tmp_path, "a.src", "1\n2\n3\n")
    tgt = write(tmp_path, "a.tgt", "1\n2")
    with pytest.raises(InputError) as info:
        read_dataset("d", pair(src, tgt))  # raised at the call, not at the first batch
    assert str(info.value).startswith(f"{src} and {tgt}: a bitext needs line-aligned files, found 3 and 2 lines.")


def test_read_missing_file_is_an_input_error_naming_it(tmp_path):
    with pytest.raises(InputError, match=f"^{tmp_path / 'nope.txt'}: no such file \\(dataset 'd'\\)"):
        read_dataset("d", mono(tmp_path / "nope.txt"))


def test_read_parquet_missing_column_lists_the_columns_present(tmp_path):
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"de": ["a"], "english": ["A"]}), path)
    with pytest.raises(InputError) as info:
        read_dataset("d", DatasetConf(kind="bitext", format="parquet", path=path, rename={"src": "de"}))
    assert str(info.value) == (
        f"{path}: no column 'tgt' for field 'tgt'; columns present: de, english. Hint: map it with `rename: {{tgt: <column>}}`"
    )


def test_read_parquet_column_of_the_wrong_type(tmp_path):
    path = tmp_path / "m.parquet"
    pq.write_table(pa.table({"text": [1.5]}), path)
    with pytest.raises(InputError, match="column 'text' is double, expected strings"):
        read_dataset("d", DatasetConf(kind="mono", format="parquet", path=path))


def test_read_hf_dataset_dict_without_split_lists_the_splits(tmp_path):
    datasets = pytest.importorskip("datasets")
    one = datasets.Dataset.from_dict({"text": ["a"]})
    datasets.DatasetDict({"train": one, "validation": one}).save_to_disk(str(tmp_path / "hf"))
    with pytest.raises(InputError) as info:
        read_dataset("d", DatasetConf(kind="mono", format="hf", path=tmp_path / "hf"))
    assert str(info.value) == (
        f"{tmp_path / 'hf'}: a DatasetDict with splits ['train', 'validation'], no `split` set. Hint: set `split: train`"
    )


def test_read_conf_mistakes_are_conf_errors(tmp_path):
    path = write(tmp_path, "p.tsv", "a\tb\n")
    with pytest.raises(ConfError, match=r"datasets\.d\.rename: 'txet' is not a field of kind mono"):
        read_dataset("d", DatasetConf(kind="mono", format="jsonl", path=path, rename={"txet": "sentence"}))
    with pytest.raises(ConfError, match=r"datasets\.d\.columns: \['src', 'x'\] lacks \['tgt'\]"):
        read_dataset("d", DatasetConf(kind="bitext", format="tsv", path=path, columns=["src", "x"]))


def test_lines_longer_than_max_line_bytes_is_an_input_error_at_its_line(tmp_path):
    path = write(tmp_path, "m.txt", "a\n" + "x" * 100 + "\nb\n")
    assert [len(x) for a in iter_lines(path, block_bytes=7) for x in a.to_pylist()] == [1, 100, 1]
    with pytest.raises(InputError, match=f"^{path}:2: a line of more than 50 bytes"):
        list(iter_lines(path, block_bytes=7, max_line_bytes=50))
