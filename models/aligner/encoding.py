"""Token -> id encoding of one side of a bitext: words are ids in order of first appearance (Arrow
`dictionary_encode`), sentences CSR (int32 ids, int64 offsets).

Tokens are split on Unicode whitespace (the reference tool splits on space and tab only), and empty rows or
nulls become empty sentences. Encoding against a given vocabulary (force alignment) gives −1 to a word it lacks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError

Texts = Sequence[str] | pa.Array | pa.ChunkedArray


@dataclass(frozen=True)
class Side:
    """One side of a bitext as word ids in CSR."""

    ids: np.ndarray  # int32 word ids per token (−1: not in the vocabulary given)
    offsets: np.ndarray  # int64, n + 1
    vocab: pa.Array | None  # string per id; None: ids of a vocabulary not at hand (the EM rounds' parts)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def _strings(texts: Texts) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not isinstance(texts, pa.Array):
        texts = pa.array(list(texts), pa.string())
    return texts if texts.type == pa.string() else pc.cast(texts, pa.string())


def split_tokens(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Whitespace tokens of every row (flattened) and their CSR offsets; empty tokens ("" rows) dropped."""
    lists = pc.utf8_split_whitespace(arr)
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(lists)
    offsets = np.zeros(len(arr) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    empty = pc.equal(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
    if empty.any():
        kept = np.concatenate([[0], np.cumsum(~empty)])
        offsets = kept[offsets]
        flat = flat.filter(pa.array(~empty))
    return flat, offsets


def encode(texts: Texts, vocab: pa.Array | None = None) -> Side:
    """Token ids: a new vocabulary in order of first appearance, or ids in `vocab` (−1 when absent)."""
    toks, offsets = split_tokens(_strings(texts))
    if vocab is None:
        enc = pc.dictionary_encode(toks)
        return Side(enc.indices.to_numpy(zero_copy_only=False).astype(np.int32), offsets, enc.dictionary)
    ids = pc.fill_null(pc.index_in(toks, value_set=vocab), -1).to_numpy(zero_copy_only=False)
    return Side(ids.astype(np.int32), offsets, vocab)


def encode_stream(chunks: Iterable[Texts]) -> Side:
    """``encode`` of the chunks' concatenation, one chunk in memory at a time (a bitext side part by part):
    the same ids, words numbered in order of first appearance across the chunks."""
    ids, lengths = [], []
    vocab = pa.array([], pa.string())
    for chunk in chunks:
        toks, offsets = split_tokens(_strings(chunk))
        known = pc.index_in(toks, value_set=vocab)
        chunk_ids = pc.fill_null(known, -1).to_numpy(zero_copy_only=False).astype(np.int32)
        new = chunk_ids < 0
        if new.any():  # words first seen here, numbered after the vocabulary so far, in order of appearance
            fresh = pc.dictionary_encode(toks.filter(pa.array(new)))
            chunk_ids[new] = fresh.indices.to_numpy(zero_copy_only=False) + len(vocab)
            vocab = pa.concat_arrays([vocab, fresh.dictionary])
        ids.append(chunk_ids)
        lengths.append(np.diff(offsets))
    offsets = np.zeros(sum(len(x) for x in lengths) + 1, np.int64)
    np.cumsum(np.concatenate(lengths) if lengths else np.zeros(0, np.int64), out=offsets[1:])
    return Side(np.concatenate(ids) if ids else np.zeros(0, np.int32), offsets, vocab)


def paired(src: Texts, tgt: Texts) -> tuple[pa.Array, pa.Array]:
    """Both sides as Arrow string arrays, checked to hold the same number of sentences."""
    s, t = _strings(src), _strings(tgt)
    if len(s) != len(t):
        raise InputError(
            f"aligner: src has {len(s)} sentences, tgt has {len(t)}; expected the same count. "
            "Hint: pass the two sides of one bitext, row by row"
        )
    return s, t
