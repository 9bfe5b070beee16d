"""The `read` stage of ingest: stream a dataset into shards of validated rows plus their rejects.

A shard always covers the same ``shard_size`` input rows (kept + rejected), so a crashed read
resumes shard by shard and produces byte-identical parts.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from conf.schema import DatasetConf
from storage.compressed import codec_of
from storage.readers import read_dataset
from tasks.stage import StageOutput

READ_VERSION = "1"
SPLIT_KEYS = ("split_sentences", "language")  # tasks/sentences.py's, not the read's


def _produce(name: str, ds: DatasetConf, max_line_chars: int, shard_size: int) -> Iterator[tuple[int, StageOutput]]:
    for batch in read_dataset(name, ds, max_line_chars=max_line_chars, batch_rows=shard_size):
        yield batch.index, {"part": batch.rows, "rejects": batch.rejects}


def reader(name: str, ds: DatasetConf, *, max_line_chars: int, shard_size: int):
    """A picklable producer of ``(shard, {"part": rows, "rejects": rejects})`` for ``run_source``."""
    return functools.partial(_produce, name, ds, max_line_chars, shard_size)


def read_params(name: str, ds: DatasetConf, *, max_line_chars: int, shard_size: int) -> dict:
    """What the read's fingerprint depends on (besides the input files' content). The codecs of compressed
    text inputs join it (plain files add nothing, so earlier fingerprints stand): a `.gz` read before
    augdag decompressed inputs was read as bytes, and must not stay cached. ``split_sentences`` and
    ``language`` are left out: the split is a stage after the read, which both settings share."""
    dump = {k: v for k, v in ds.model_dump(mode="json").items() if k not in SPLIT_KEYS}
    params = {"dataset": name, "conf": dump, "max_line_chars": max_line_chars, "shard_size": shard_size}
    if ds.encoding != "utf-8":  # its undecodable rows became `invalid_encoding` rejects (were `invalid_utf8`)
        params["rejects"] = "invalid_encoding"
    if ds.format in ("text", "tsv", "jsonl"):
        codecs = {f: codec_of(_head(p)) for f, p in ds.paths().items() if p.is_file()}
        if any(c != "plain" for c in codecs.values()):
            params["compression"] = codecs
    return params


def _head(path) -> bytes:
    with open(path, "rb") as f:
        return f.read(10)
