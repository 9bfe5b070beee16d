"""Input readers: a configured dataset as batches of typed rows plus the rows refused, with a reason.

``read_dataset`` reads one ``DatasetConf`` (text, tsv, jsonl, parquet or a saved Hugging Face
dataset) into `ReadBatch`es of exactly ``batch_rows`` input rows each, the last one shorter: batch
*i* is always the same input rows, so a crashed read resumes batch by batch. A file that cannot be
read as configured raises ``InputError`` before any batch (a Parquet file whose rows cannot be decoded:
at that batch, naming the rows); a bad row becomes a reject (`REASONS`), never an exception and never
silently dropped, so input rows = kept + rejected. A text, tsv or jsonl file may be compressed (gzip,
bzip2, xz, zstd, told by its first bytes: ``storage.readers.compressed``) and in another encoding than UTF-8
(``encoding``, one or per side of a bitext; ``on_decode_error`` keeps a line that does not decode, with U+FFFD,
instead of rejecting it). A codec other than UTF-8 on a file (or side) that is valid UTF-8 with non-ASCII text
is an ``InputError`` before any batch (``storage.readers.encoding``): it would be mojibake without a reject.

Hand-written because no package reads line-aligned pairs with per-line rejects: ``pyarrow.csv``
stops at (or skips) a bad row and cannot read two files in lockstep, ``datasets`` and pandas
raise on bad rows. The format parsers live in ``storage.readers.text`` (text, tsv, jsonl: through
``storage.readers.lines``, byte blocks split with numpy; only jsonl is parsed line by line in Python) and
``storage.readers.tables`` (parquet, hf); the vectorised checks of ``storage.readers.row_checks`` turn what they
parse into kept rows and rejects.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from conf.errors import ConfError
from conf.schema import DatasetConf
from storage.readers.lines import BLOCK_BYTES
from storage.readers.row_checks import REASONS, Parsed, split_rows
from storage.readers.tables import parse_hf, parse_parquet
from storage.readers.text import parse_jsonl, parse_text, parse_tsv
from storage.schemas import FIELDS

__all__ = ["REASONS", "ReadBatch", "read_dataset"]


@dataclass(frozen=True)
class ReadBatch:
    """One shard of input: the rows kept and the rows refused, which together are ``n_input`` input rows."""

    index: int  # 0-based batch (= shard) number
    rows: pa.Table  # the kind's schema, uid/source/line filled, in input order
    rejects: pa.Table  # REJECTS schema: source, file, line, reason, detail, content
    first_line: int  # 1-based input line of the batch's first row
    n_input: int  # input rows this batch covers == rows.num_rows + rejects.num_rows


def read_dataset(
    name: str, ds: DatasetConf, *, max_line_chars: int = 4096, batch_rows: int = 100_000, block_bytes: int = BLOCK_BYTES
) -> Iterator[ReadBatch]:
    """Batches of ``batch_rows`` input rows of dataset ``name``; whole-input problems raise here, at the call.

    Args:
        name: the dataset's name, written to ``source``.
        ds: its configuration.
        max_line_chars: a longer input line (text, tsv, jsonl) or field (also parquet, hf) is rejected ``too_long``.
        batch_rows: input rows per batch, kept and rejected together.
        block_bytes: bytes read per block from a text file (tests make it tiny).

    Raises:
        InputError: a file is missing or unreadable (or a directory), a bitext's files differ in line count, a
            non-UTF-8 ``encoding`` on valid UTF-8 text with non-ASCII bytes, a parquet / hf input
            lacks a needed column or has one of the wrong type, a DatasetDict without its `split`. A compressed
            file that breaks off (cut or corrupt) raises while iterating, after a batch of the rows before it.
        ConfError: ``rename`` names no field of the kind, or tsv ``columns`` lacks one.
    """
    for key in ds.rename:
        if key not in FIELDS[ds.kind]:
            raise ConfError(f"datasets.{name}.rename: {key!r} is not a field of kind {ds.kind} {FIELDS[ds.kind]}")
    parse = _PARSERS[ds.format]
    parsed = parse(name, ds, batch_rows=batch_rows, block_bytes=block_bytes, max_chars=max_line_chars)  # eager checks
    return _batches(name, ds.kind, parsed, max_line_chars)


_PARSERS = {"text": parse_text, "tsv": parse_tsv, "jsonl": parse_jsonl, "parquet": parse_parquet, "hf": parse_hf}


def _batches(name: str, kind: str, parsed: Iterator[Parsed], max_chars: int) -> Iterator[ReadBatch]:
    for index, p in enumerate(parsed):
        rows, rejects = split_rows(name, kind, p, max_chars=max_chars)
        yield ReadBatch(index, rows, rejects, p.first_line, len(p.line))
