"""Real corpora as users bring them (issue 18, items 1 and 2): compressed files, other encodings, cut archives."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import random
import re
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard

from conf.errors import InputError, StageError
from conf.loader import load_profile
from conf.schema import DatasetConf
from storage.catalog import Catalog
from storage.readers.compressed import codec_of
from storage.readers.dataset import read_dataset
from tests.storage.test_readers import md5, read, write

CODECS = ["plain", "gzip", "bzip2", "xz", "zstd"]
TOOL = {"gzip": "gzip", "bzip2": "bzip2", "xz": "xz", "zstd": "zstd"}


def compress(codec: str, data: bytes) -> bytes:
    return {
        "plain": lambda d: d,
        "gzip": gzip.compress,
        "bzip2": bz2.compress,
        "xz": lzma.compress,
        "zstd": zstandard.ZstdCompressor().compress,
    }[codec](data)


def decompressed_prefix(codec: str, cut: bytes) -> bytes:
    """What a one-shot decoder gets out of a cut stream: the reference for the line a reader reaches."""
    return {
        "gzip": lambda d: zlib.decompressobj(31).decompress(d),
        "bzip2": bz2.BZ2Decompressor().decompress,
        "xz": lzma.LZMADecompressor().decompress,
        "zstd": zstandard.ZstdDecompressor().decompressobj().decompress,
    }[codec](cut)


def corpus(n: int, seed: int = 0) -> bytes:
    """``n`` distinct lines of made-up words (about 60 bytes each: compresses like text, not like a pattern)."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(500)]
    return "".join(f"{i} {' '.join(rng.choices(words, k=8))}\n" for i in range(n)).encode()


# mono text with a bad line, an empty line, CRLF and an unended last line
TEXT = b"Hello world\r\nbad \xff byte\n\n  spaced  \nsecond line\nHello world\nno newline"
TSV = b"label\ttext\npos\tgood film\nneg\tbad \xfe film\nthree\tfields\there\n\tempty label\nneg\tawful\n"
JSONL = (
    b'{"text": "good", "label": "pos"}\n{"text": "x", "label": 3}\nnot json\n'
    b'{"text": "bad \xff", "label": "neg"}\n{"label": "neg"}\n'
)


def rows_and_rejects(ds: DatasetConf, **kwargs) -> tuple[list[dict], list[dict], list[int]]:
    """(rows with uid, rejects without their file, input rows per batch)."""
    batches = list(read_dataset("d", ds, **kwargs))
    rows = [r for b in batches for r in b.rows.to_pylist()]
    rejects = [{k: v for k, v in r.items() if k != "file"} for b in batches for r in b.rejects.to_pylist()]
    return rows, rejects, [b.n_input for b in batches]


# --- compression: the same rows, lines, uids and shards as the plain file ---------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "fmt, data, extra", [("text", TEXT, {}), ("tsv", TSV, {"header": True, "columns": ["label", "text"]}), ("jsonl", JSONL, {})]
)
def test_compressed_file_reads_to_the_plain_files_rows_lines_uids_and_batches(tmp_path, codec, fmt, data, extra):
    kind = "mono" if fmt == "text" else "labeled"
    plain = DatasetConf(kind=kind, format=fmt, path=write(tmp_path, "plain", data), **extra)
    packed = plain.model_copy(update={"path": write(tmp_path, f"c.{codec}", compress(codec, data))})
    kwargs = {"batch_rows": 2, "block_bytes": 5}  # blocks and batches cut lines and streams
    expect = rows_and_rejects(plain, **kwargs)
    assert rows_and_rejects(packed, **kwargs) == expect
    assert len(expect[0]) >= 2 and len(expect[1]) >= 2  # the reference has rows and rejects of several reasons
    assert {r["file"] for b in read_dataset("d", packed) for r in b.rejects.to_pylist()} == {packed.path.name}


@pytest.mark.parametrize("codec", CODECS[1:])
def test_bitext_one_side_compressed_other_plain_reads_as_both_plain(tmp_path, codec):
    src, tgt = b"Hallo\nWelt\n\xff\nzwei\n", b"Hello\nworld\nbad\ntwo\n"
    both_plain = DatasetConf(kind="bitext", format="text", src=write(tmp_path, "a.de", src), tgt=write(tmp_path, "a.en", tgt))
    mixed = both_plain.model_copy(update={"src": write(tmp_path, "a.de.x", compress(codec, src))})
    rows, rejects, batches = rows_and_rejects(mixed, batch_rows=3)
    assert (rows, rejects, batches) == rows_and_rejects(both_plain, batch_rows=3)
    assert [(r["src"], r["tgt"], r["line"], r["uid"]) for r in rows] == [
        ("Hallo", "Hello", 1, md5("d", "Hallo", "Hello")),
        ("Welt", "world", 2, md5("d", "Welt", "world")),
        ("zwei", "two", 4, md5("d", "zwei", "two")),
    ]
    assert [(r["line"], r["reason"]) for r in rejects] == [(3, "invalid_utf8")] and batches == [3, 1]


@pytest.mark.parametrize("codec", CODECS[1:])
def test_concatenated_streams_read_as_one_file(tmp_path, codec):
    path = write(tmp_path, "cat", compress(codec, b"one\ntwo") + compress(codec, b"\nthree\n"))  # `cat a.gz b.gz`
    rows, _, _ = read(DatasetConf(kind="mono", format="text", path=path))
    assert [(r["text"], r["line"]) for r in rows] == [("one", 1), ("two", 2), ("three", 3)]


def test_codec_is_read_from_the_magic_bytes_not_the_name(tmp_path):
    data = b"first\nsecond\n"
    gz_named_txt = write(tmp_path, "news.txt", gzip.compress(data))
    plain_named_gz = write(tmp_path, "news.gz", data)  # a decompressed download that kept its name: read as plain
    assert [codec_of(compress(c, data)[:10]) for c in CODECS] == CODECS
    assert codec_of(b"BZh9 is a line of text\n"[:10]) == "plain"  # bzip2's 3 letters alone do not make a bzip2 file
    assert codec_of(zstandard.ZstdCompressor().compress(b"")[:4]) == "zstd" and codec_of(b"") == "plain"
    for path in (gz_named_txt, plain_named_gz):
        rows, rejects, _ = read(DatasetConf(kind="mono", format="text", path=path))
        assert [r["text"] for r in rows] == ["first", "second"] and rejects == []


# --- a cut archive: an input error at the line reached, the rows before it kept --------------------------------


@pytest.mark.parametrize("codec", CODECS[1:])
def test_truncated_stream_is_an_input_error_at_the_line_reached_after_its_rows(tmp_path, codec):
    data = corpus(20_000)  # 1.2 MB: more than one bzip2 block at level 1
    whole = bz2.compress(data, 1) if codec == "bzip2" else compress(codec, data)
    cut = whole[: len(whole) * 3 // 5]
    got = decompressed_prefix(codec, cut)
    n, unfinished = got.count(b"\n"), len(got) - got.rfind(b"\n") - 1
    assert 0 < n < 20_000 and unfinished > 0
    path = write(tmp_path, f"train.{codec}", cut)
    batches = []
    with pytest.raises(InputError) as err:
        for b in read_dataset("d", DatasetConf(kind="mono", format="text", path=path), batch_rows=1000):
            batches.append(b)
    assert str(err.value) == (
        f"{path}: truncated {codec} stream after line {n:,} (the {unfinished:,} bytes read of line {n + 1:,} are "
        f"dropped). Hint: the file was cut short or damaged (an interrupted download or copy?): fetch or compress it "
        f"again; `{TOOL[codec]} -t {path}` tests it"
    )
    assert [b.n_input for b in batches] == [1000] * (n // 1000) + [n % 1000]  # the rows before the break, all of them
    assert [t for b in batches for t in b.rows.column("text").to_pylist()] == data.decode().splitlines()[:n]


def test_corrupt_gzip_names_the_check_that_failed_after_every_line_it_decoded(tmp_path):
    whole = bytearray(gzip.compress(b"a\nb\nc\n"))
    whole[-8] ^= 0xFF  # the CRC-32 of the trailer
    path = write(tmp_path, "bad.gz", bytes(whole))
    batches = []
    with pytest.raises(
        InputError,
        match=rf"^{re.escape(str(path))}: corrupt gzip stream \(CRC check failed .*\) "
        r"after line 3\. Hint: .*`gzip -t ",
    ):
        for b in read_dataset("d", DatasetConf(kind="mono", format="text", path=path)):
            batches.append(b)
    assert [r["text"] for b in batches for r in b.rows.to_pylist()] == ["a", "b", "c"]


def test_garbage_after_a_zstd_frame_is_a_corrupt_stream_after_the_frames_lines(tmp_path):
    path = write(tmp_path, "m.zst", zstandard.ZstdCompressor().compress(b"a\nb\n") + b"not a frame")
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: corrupt zstd stream \(.*\) after line 2\. Hint"):
        list(read_dataset("d", DatasetConf(kind="mono", format="text", path=path)))


def test_truncated_side_of_a_bitext_fails_before_any_batch(tmp_path):
    data = corpus(3000)
    src = write(tmp_path, "a.de.gz", gzip.compress(data)[:-3000])
    tgt = write(tmp_path, "a.en", data)
    with pytest.raises(InputError, match=rf"^{re.escape(str(src))}: truncated gzip stream after line [\d,]+ "):
        read_dataset("d", DatasetConf(kind="bitext", format="text", src=src, tgt=tgt))


# --- encodings -----------------------------------------------------------------------------------------------------


NEWS = "Café crème\nplain line\nnaïve Straße\n"


def test_latin1_lines_rejected_as_utf8_read_exactly_as_latin1_kept_with_ufffd_on_replace(tmp_path):
    path = write(tmp_path, "news.txt", NEWS.encode("latin-1"))
    ds = DatasetConf(kind="mono", format="text", path=path)
    rows, rejects, _ = read(ds)  # the default: utf-8, reject
    assert [(r["text"], r["line"]) for r in rows] == [("plain line", 2)]
    assert [(r["line"], r["reason"], r["detail"], r["content"]) for r in rejects] == [
        (1, "invalid_utf8", "text: invalid UTF-8 at byte 3", "Caf\ufffd cr\ufffdme"),
        (3, "invalid_utf8", "text: invalid UTF-8 at byte 2", "na\ufffdve Stra\ufffde"),
    ]
    rows, rejects, _ = read(ds.model_copy(update={"encoding": "iso8859-1"}))
    assert [r["text"] for r in rows] == NEWS.splitlines() and rejects == []
    rows, rejects, _ = read(ds.model_copy(update={"on_decode_error": "replace"}))
    assert [(r["text"], r["line"]) for r in rows] == [
        ("Caf\ufffd cr\ufffdme", 1),
        ("plain line", 2),
        ("na\ufffdve Stra\ufffde", 3),
    ] and rejects == []


def test_cp1252_undefined_byte_is_rejected_naming_the_encoding(tmp_path):
    path = write(tmp_path, "m.txt", "€ 5\n".encode("cp1252") + b"odd \x81\n")
    rows, rejects, _ = read(DatasetConf(kind="mono", format="text", path=path, encoding="cp1252"))
    assert [r["text"] for r in rows] == ["€ 5"]
    assert [(r["line"], r["reason"], r["detail"]) for r in rejects] == [(2, "invalid_encoding", "text: invalid cp1252 at byte 4")]


UTF8_CORPUS = {  # read with max_line_chars=40: a line of 41 accented characters is too long in any encoding
    "text": ("Café crème\n\nœuvre à 5 €\n" + "é" * 41 + "\nStraße\n", {}),
    "tsv": ("pos\tCafé crème\nneg\tœuvre à 5 €\tx\nneg\tStraße\n", {"columns": ["label", "text"]}),
    "jsonl": (
        '{"text": "Café crème", "label": "pos"}\n{"text": "œuvre", "label": "é"}\nnot json é\n'
        '{"text": "ééééééééééééééééééééééééééééé", "label": "x"}\n',
        {},
    ),
}


@pytest.mark.parametrize(
    "encoding, codec", [("iso8859-1", "plain"), ("cp1252", "plain"), ("cp1252", "gzip"), ("iso8859-15", "zstd")]
)
@pytest.mark.parametrize("fmt", ["text", "tsv", "jsonl"])
def test_other_encoding_reads_to_the_rows_of_the_utf8_file(tmp_path, encoding, codec, fmt):
    text, extra = UTF8_CORPUS[fmt]
    if encoding == "iso8859-1":
        text = text.replace("œ", "o").replace("€", "E")  # not in Latin-1
    kind = "mono" if fmt == "text" else "labeled"
    utf8 = DatasetConf(kind=kind, format=fmt, path=write(tmp_path, "u", text), **extra)
    other = utf8.model_copy(update={"path": write(tmp_path, "o", compress(codec, text.encode(encoding))), "encoding": encoding})
    expect = rows_and_rejects(utf8, max_line_chars=40, batch_rows=2)
    assert rows_and_rejects(other, max_line_chars=40, batch_rows=2) == expect
    assert expect[0] and expect[1]


def test_other_encoding_bitext_pair_reads_to_the_utf8_pair(tmp_path):
    src, tgt = "Straße\nœuvre\n", "street\nwork\n"
    utf8 = DatasetConf(kind="bitext", format="text", src=write(tmp_path, "s", src), tgt=write(tmp_path, "t", tgt))
    other = utf8.model_copy(update={"src": write(tmp_path, "s.gz", gzip.compress(src.encode("cp1252"))), "encoding": "cp1252"})
    assert rows_and_rejects(other) == rows_and_rejects(utf8)
    assert [r["src"] for r in rows_and_rejects(other)[0]] == ["Straße", "œuvre"]


def test_jsonl_in_latin1_by_default_is_rejected_per_line(tmp_path):
    path = write(tmp_path, "s.jsonl", '{"text": "né", "label": "x"}\n{"text": "ok", "label": "y"}\n'.encode("latin-1"))
    rows, rejects, _ = read(DatasetConf(kind="labeled", format="jsonl", path=path))
    assert [r["text"] for r in rows] == ["ok"]
    assert [(r["line"], r["reason"], r["detail"]) for r in rejects] == [(1, "invalid_utf8", "invalid UTF-8 at byte 11")]


def test_encoding_is_checked_and_named_canonically_and_defaults_stay_out_of_the_read_fingerprint(tmp_path):
    from storage.artifacts import fingerprint
    from tasks.ingest.read import READ_VERSION, read_params

    ds = DatasetConf(kind="mono", format="text", path=Path("m.txt"))
    assert ds.model_dump(mode="json") == {  # as before `encoding` existed: a cache's reads stay valid
        "kind": "mono",
        "format": "text",
        "path": "m.txt",
        "src": None,
        "tgt": None,
        "columns": None,
        "rename": {},
        "header": False,
        "split": None,
    }
    latin = ds.model_copy(update={"encoding": "iso8859-1"})
    assert DatasetConf(kind="mono", format="text", path=Path("m.txt"), encoding="Latin-1") == latin
    assert DatasetConf(kind="mono", format="text", path=Path("m.txt"), encoding="UTF8") == ds
    fps = {
        fingerprint("read", READ_VERSION, read_params("d", d, max_line_chars=9, shard_size=9), ["x"])
        for d in (ds, latin, ds.model_copy(update={"on_decode_error": "replace"}))
    }
    assert len(fps) == 3  # changing either setting reads again
    for bad, why in [("klingon", "unknown encoding; expected a Python codec"), ("utf-16", "tab and newline as single")]:
        with pytest.raises(ValueError, match=why):
            DatasetConf(kind="mono", format="text", path=Path("m.txt"), encoding=bad)


def test_a_compressed_input_joins_the_read_fingerprint_and_a_plain_one_adds_nothing(tmp_path):
    from tasks.ingest.read import read_params

    plain, packed = tmp_path / "a.txt", tmp_path / "b.txt"
    plain.write_bytes(b"one\ntwo\n")
    packed.write_bytes(gzip.compress(b"one\ntwo\n"))  # named .txt: the content decides
    params = lambda p: read_params(  # noqa: E731
        "d",
        DatasetConf(kind="mono", format="text", path=p),
        max_line_chars=9,
        shard_size=9,
    )
    assert "compression" not in params(plain)  # fingerprints of plain inputs are as before
    assert params(packed)["compression"] == {"path": "gzip"}  # a .gz read as bytes before is not reused


# --- through the ingest flow: the failed read keeps and records the shards before the break -------------------


@pytest.mark.slow
def test_ingest_of_a_truncated_gzip_records_the_rows_before_the_break(prefect_harness, tmp_path):
    from flows.pipelines.ingest import ingest_flow

    data = corpus(2000)
    whole = gzip.compress(data)
    cut = whole[: len(whole) // 2]
    got = decompressed_prefix("gzip", cut)
    n = got.count(b"\n")
    assert 800 < n < 1200  # three shards of 400 lines and a fourth short one before the break
    path = write(tmp_path, "train.en.gz", cut)
    profile = write(
        tmp_path,
        "p.yaml",
        json.dumps(
            {
                "shard_size": 400,
                "pipelines": ["ingest"],
                "datasets": {"news": {"kind": "mono", "format": "text", "path": str(path)}},
            }
        ),
    )
    with pytest.raises(StageError) as err:
        ingest_flow(load_profile(profile, cache=tmp_path / "cache", environ={}), profile="test")
    assert err.value.exit_code == 2
    assert f"failed on shard 3 (of at least 4): {path}: truncated gzip stream after line {n:,} (the " in str(err.value)
    assert str(err.value).endswith("3 written shard(s) are kept.")
    cat = Catalog(tmp_path / "cache")
    shards = cat.query(
        "SELECT shard, status, rows_out FROM stage_runs WHERE run_id = $r AND stage = 'read' ORDER BY shard",
        {"r": err.value.run_id},
    ).to_pylist()
    assert [(s["shard"], s["status"], s["rows_out"]) for s in shards] == [
        (0, "computed", 400),
        (1, "computed", 400),
        (2, "computed", n - 800),
        (3, "failed", None),
    ]
    parts = sorted((tmp_path / "cache" / "artifacts" / "read").glob("*/part-*.parquet"))
    texts = [t for p in parts for t in pq.read_table(p, columns=["text"]).column("text").to_pylist()]
    assert texts == data.decode().splitlines()[:n]
