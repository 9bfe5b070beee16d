"""The `read` stage of ingest: stream a dataset into shards of validated rows plus their rejects.

A shard always covers the same ``shard_size`` input rows (kept + rejected), so a crashed read
resumes shard by shard and produces byte-identical parts. ``decode_warnings`` says, after a read, which
files had more than 5 % of their lines rejected `invalid_utf8`, with the encoding charset-normalizer
proposes for them (``storage.readers.encoding``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pyarrow.compute as pc

from conf.errors import InputError
from conf.schema import DatasetConf
from storage import objects
from storage.artifacts import ArtifactRef
from storage.readers.common import existing_path
from storage.readers.compressed import codec_of
from storage.readers.dataset import read_dataset
from storage.readers.encoding import WARN_SHARE, proposed_encoding, undecodable_sample
from storage.readers.row_checks import input_names
from tasks.runtime.stage import StageOutput

# 2: the fingerprint holds the input files' names and bytes, not their paths, and a reject's `file` the file's name
READ_VERSION = "2"
SPLIT_KEYS = ("split_sentences", "language")  # tasks/ingest/sentences.py's, not the read's
NOT_READ = (*SPLIT_KEYS, "clean", "src_lang", "tgt_lang")  # ... and the clean stage's (conf/sections/cleaning.py)
LOCATIONS = ("path", "src", "tgt")  # where the files are: hash_inputs fingerprints their names and content instead


def _produce(name: str, ds: DatasetConf, max_line_chars: int, shard_size: int) -> Iterator[tuple[int, StageOutput]]:
    for batch in read_dataset(name, ds, max_line_chars=max_line_chars, batch_rows=shard_size):
        yield batch.index, {"part": batch.rows, "rejects": batch.rejects}


def reader(name: str, ds: DatasetConf, *, max_line_chars: int, shard_size: int):
    """A picklable producer of ``(shard, {"part": rows, "rejects": rejects})`` for ``run_source``."""
    return functools.partial(_produce, name, ds, max_line_chars, shard_size)


def read_params(name: str, ds: DatasetConf, *, max_line_chars: int, shard_size: int) -> dict:
    """What the read's fingerprint depends on besides the input files' names and content (``hash_inputs``): not
    where the files are, so a data directory moved, copied or mounted elsewhere reads as cached, and no path (nor a
    secret in one) is stored in the manifest. The codecs of compressed text inputs join it (plain files add
    nothing): a `.gz` read before augdag decompressed inputs was read as bytes, and must not stay cached.
    ``split_sentences`` and ``language`` are left out: the split is a stage after the read, which both settings
    share."""
    dump = {k: v for k, v in ds.model_dump(mode="json").items() if k not in (*NOT_READ, *LOCATIONS)}
    params = {"dataset": name, "conf": dump, "max_line_chars": max_line_chars, "shard_size": shard_size}
    if ds.encoding != "utf-8":  # its undecodable rows became `invalid_encoding` rejects (were `invalid_utf8`)
        params["rejects"] = "invalid_encoding"
        params["utf8_check"] = 1  # read again: a read from before the check may be mojibake (storage.readers.encoding)
    if ds.format in ("text", "tsv", "jsonl"):
        paths = {f: existing_path(name, p) if objects.is_remote(p) else p for f, p in ds.paths().items()}  # no such object
        codecs = {f: codec_of(_head(p)) for f, p in paths.items() if objects.is_remote(p) or p.is_file()}
        if any(c != "plain" for c in codecs.values()):
            params["compression"] = codecs
    return params


def _head(path) -> bytes:
    try:
        with objects.open_binary(path) as f:
            return f.read(10)
    except PermissionError:
        raise InputError(
            f"{path}: permission denied: the file cannot be read. Hint: check its mode and owner (ls -l {path})"
        ) from None


def decode_warnings(name: str, ds: DatasetConf, read: ArtifactRef) -> list[str]:
    """One line per input file of ``ds`` (a text, tsv or jsonl file read as UTF-8) of which more than 5 % of the
    lines were rejected `invalid_utf8` by ``read``, with the encoding charset-normalizer proposes for a sample of
    those lines and the ``encoding`` to set if it is right. A bitext pair bad on both sides counts for its source
    file only (its reject names one file): the target's share is then a lower bound."""
    if ds.format not in ("text", "tsv", "jsonl"):
        return []
    present = objects.listing(read.dir, ".parquet")
    rejects = [p for p in read.paths("rejects") if objects.name(p) in present]
    if not rejects:
        return []
    from storage.parts import Parts

    table = Parts(tuple(rejects)).table(["file", "reason"])
    bad = table.filter(pc.equal(table["reason"], "invalid_utf8"))
    if not bad.num_rows:
        return []
    lines = read.parts().num_rows + table.num_rows  # every input line: kept or rejected
    names = input_names({None: "", **{f: str(p) for f, p in ds.paths().items()}})
    out = []
    for field, path in ds.paths().items():
        side = field if field in ("src", "tgt") else None
        n = pc.sum(pc.equal(bad["file"], names[field])).as_py() or 0
        if ds.codec(side) != "utf-8" or n <= WARN_SHARE * lines:
            continue
        proposed = proposed_encoding(undecodable_sample(path))
        if side:
            other = "tgt" if side == "src" else "src"
            sides = {side: proposed[0] if proposed else "?", other: ds.codec(other)}
            setting = f"encoding: {{src: {sides['src']}, tgt: {sides['tgt']}}}"
        else:
            setting = f"encoding: {proposed[0] if proposed else '?'}"
        what = "charset-normalizer proposes no encoding for them (binary data?)"
        if proposed:
            alternatives = f" (or {', '.join(proposed[1:4])})" if proposed[1:] else ""
            what = (
                f"charset-normalizer proposes {proposed[0]}{alternatives} for them. Hint: if that is right, set "
                f"{setting} in datasets.{name}"
            )
        out.append(
            f"{path}: {n:,} of {lines:,} lines ({n / lines:.0%}) of dataset {name!r}"
            f"{f' (side {side})' if side else ''} were rejected as invalid_utf8; {what}"
        )
    return out
