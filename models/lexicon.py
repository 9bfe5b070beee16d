"""The bilingual lexicon of the thesis (ch. 6): translation probabilities and word entropy from word alignments.

    count[x][y] += 1 for every link (x, y) of the symmetrised alignment,
    p(y | x) = count[x][y] / Σ_y' count[x][y'],
    H(x) = − Σ_y p(y | x) · ln p(y | x)                                     (Eq. 6.4, natural log)

Tokens are whitespace-separated words, exactly as the aligner sees them (``tokenize``). The counting is
vectorised in Arrow (a group-by over the linked word pairs); nothing here loops over sentences in Python.
Word rarity (Eq. 6.5) needs the source-word frequencies of the same bitext, so ``word_uncertainty``
carries them beside H.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit, prange

from conf.errors import InputError

LEXICON = pa.schema([("src", pa.string()), ("tgt", pa.string()), ("count", pa.int64()), ("p", pa.float64())])
# H: entropy of p(· | src) (0 for a word never linked); links: its linked tokens; freq: its tokens in the bitext source
WORD_UNCERTAINTY = pa.schema([("src", pa.string()), ("H", pa.float64()), ("links", pa.int64()), ("freq", pa.int64())])


def tokenize(texts: pa.Array | pa.ChunkedArray, *, lowercase: bool = False) -> pa.ListArray:
    """Whitespace tokens per row: runs of whitespace separate once, leading/trailing whitespace is ignored."""
    arr = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    arr = pc.utf8_trim_whitespace(pc.utf8_lower(arr) if lowercase else arr)
    split = pc.utf8_split_whitespace(arr)
    # "" splits into [""]: an empty row has no tokens
    empty = pc.fill_null(pc.equal(pc.utf8_length(arr), 0), True)
    if pc.any(empty).as_py():
        split = pc.if_else(empty, pa.scalar([], split.type), split)
    return split


def joined_tokens(texts: pa.Array | pa.ChunkedArray, *, lowercase: bool = False) -> pa.Array:
    """The rows' tokens joined by one space: what the aligner and the LMs are given, so that they split
    (and count) words exactly as ``tokenize`` does."""
    return pc.binary_join(tokenize(texts, lowercase=lowercase), " ")


def linked_words(src: pa.ListArray, tgt: pa.ListArray, offsets: np.ndarray, i: np.ndarray, j: np.ndarray) -> pa.Table:
    """The (src word, tgt word) of every link; links of sentence s are ``i/j[offsets[s]:offsets[s+1]]``."""
    sentence = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    src_start = np.asarray(src.offsets)[:-1] if len(src) else np.zeros(0, np.int64)
    tgt_start = np.asarray(tgt.offsets)[:-1] if len(tgt) else np.zeros(0, np.int64)
    s = src_start[sentence] + i if len(i) else np.zeros(0, np.int64)
    t = tgt_start[sentence] + j if len(j) else np.zeros(0, np.int64)
    if len(s):
        src_len, tgt_len = np.diff(np.asarray(src.offsets)), np.diff(np.asarray(tgt.offsets))
        past = np.flatnonzero((i >= src_len[sentence]) | (j >= tgt_len[sentence]))
        if len(past):
            k, row = past[0], sentence[past[0]]
            raise InputError(
                f"row {row} (0-based) of the bitext: link {i[k]}-{j[k]} points past the end of its "
                f"sentence ({src_len[row]} source, {tgt_len[row]} target tokens): alignment and text "
                f"do not match ({len(past)} of {len(i)} links past their sentence). Hint: align this bitext again"
            )
    return pa.table({"src": src.flatten().take(pa.array(s)), "tgt": tgt.flatten().take(pa.array(t))})


def link_counts(links: pa.Table) -> pa.Table:
    """count per (src, tgt) word pair of linked word pairs: a part's counts, to add up with ``build_lexicon``."""
    counts = links.group_by(["src", "tgt"], use_threads=False).aggregate([([], "count_all")])
    return counts.rename_columns(["src", "tgt", "count"])


def build_lexicon(links: pa.Table, *, counted: bool = False) -> pa.Table:
    """count and p(tgt | src) from linked word pairs (columns src, tgt), or with ``counted`` from
    ``link_counts`` of several parts (columns src, tgt, count; summed); sorted by src, count desc, tgt."""
    if links.num_rows == 0:
        return LEXICON.empty_table()
    if counted:
        counts = links.group_by(["src", "tgt"], use_threads=False).aggregate([("count", "sum")])
        counts = counts.rename_columns(["src", "tgt", "count"])
    else:
        counts = link_counts(links)
    totals = counts.group_by("src", use_threads=False).aggregate([("count", "sum")])
    row_total = pc.take(totals["count_sum"], pc.index_in(counts["src"], value_set=totals["src"]))
    p = pc.divide(pc.cast(counts["count"], pa.float64()), pc.cast(row_total, pa.float64()))
    table = counts.append_column("p", p).cast(LEXICON)
    return table.sort_by([("src", "ascending"), ("count", "descending"), ("tgt", "ascending")])


def word_entropy(lexicon: pa.Table) -> pa.Table:
    """H(x) = −Σ p ln p per source word of the lexicon (Eq. 6.4); columns src, H, links.

    The terms of a word are added in a fixed order (count descending, then tgt), so H is the same bits
    whatever order the lexicon rows came in.
    """
    lexicon = lexicon.sort_by([("src", "ascending"), ("count", "descending"), ("tgt", "ascending")])
    words = lexicon["src"].combine_chunks()
    if len(words) == 0:
        return pa.table({"src": words, "H": pa.array([], pa.float64()), "links": pa.array([], pa.int64())})
    p = lexicon["p"].to_numpy()
    starts = np.flatnonzero(np.r_[True, np.asarray(pc.not_equal(words[1:], words[:-1]))])
    H = np.add.reduceat(-p * np.log(p), starts)
    H[np.abs(H) < 1e-15] = 0.0  # one translation: H = 0 exactly, not -0.0 or 1e-17
    links = np.add.reduceat(lexicon["count"].to_numpy(), starts)
    return pa.table({"src": words.take(pa.array(starts)), "H": pa.array(H), "links": pa.array(links)})


def word_frequencies(src_tokens: pa.ListArray | pa.Array) -> pa.Table:
    """count_all per word of tokenised sentences (or their flattened tokens); parts' counts add up."""
    flat = src_tokens.flatten() if pa.types.is_list(src_tokens.type) else src_tokens
    return pa.table({"src": flat}).group_by("src", use_threads=False).aggregate([([], "count_all")])


def word_uncertainty(
    lexicon: pa.Table, src_tokens: pa.ListArray | pa.Array | None = None, *, freq: pa.Table | None = None
) -> pa.Table:
    """Every source word of the bitext with its entropy H (0 if never linked), links and frequency.

    ``src_tokens`` are the tokenised source sentences (or their flattened tokens); or ``freq``, the
    ``word_frequencies`` of every part added up (columns src, count_all).
    """
    if freq is None:
        freq = word_frequencies(src_tokens)
    entropy = word_entropy(lexicon)
    idx = pc.index_in(freq["src"], value_set=entropy["src"])
    H = pc.fill_null(pc.take(entropy["H"], idx), 0.0)
    links = pc.fill_null(pc.take(entropy["links"], idx), 0)
    table = pa.table({"src": freq["src"], "H": H, "links": links, "freq": freq["count_all"]}, schema=WORD_UNCERTAINTY)
    return table.sort_by([("H", "descending"), ("src", "ascending")])


# ---- scoring sentences against the word table: one pass over the UTF-8 bytes (numba) ---------------------------
# Arrow's split + hash lookup builds a string per token; these kernels hash each token in place (FNV-1a),
# confirm the match byte for byte, and add H and −ln p as they go. Whitespace is exactly what
# `tokenize` (Arrow's utf8_split_whitespace, = Python's str.isspace) splits on. Written by hand: no
# maintained package scores tokens of an Arrow string buffer against a dictionary without materialising them.

# byte classes: 0 part of a word, 1 an ASCII space, 2 the lead byte of a possible multi-byte space
_BYTE_CLASS = np.zeros(256, np.uint8)
_BYTE_CLASS[[0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20]] = 1
_BYTE_CLASS[[0xC2, 0xE1, 0xE2, 0xE3]] = 2


@njit(cache=True, nogil=True)
def _wide_space_len(data, k, end):
    """Bytes of the multi-byte whitespace character at ``data[k]`` (U+0085, U+00A0, U+1680, U+2000–U+200A,
    U+2028, U+2029, U+202F, U+205F, U+3000), or 0."""
    b = data[k]
    if b == 0xC2 and k + 1 < end:
        return 2 if data[k + 1] == 0x85 or data[k + 1] == 0xA0 else 0
    if k + 2 >= end:
        return 0
    c, d = data[k + 1], data[k + 2]
    if b == 0xE1:
        return 3 if c == 0x9A and d == 0x80 else 0
    if b == 0xE2:
        if c == 0x80 and (0x80 <= d <= 0x8A or d == 0xA8 or d == 0xA9 or d == 0xAF):
            return 3
        return 3 if c == 0x81 and d == 0x9F else 0
    if b == 0xE3:
        return 3 if c == 0x80 and d == 0x80 else 0
    return 0


@njit(inline="always")  # numba does not inline small callees by itself: many times slower without
def _space_len(data, k, end, classes):
    """Bytes of the whitespace character at ``data[k]``, or 0; the rare multi-byte case out of line."""
    c = classes[data[k]]
    if c == 0:
        return 0
    if c == 1:
        return 1
    return _wide_space_len(data, k, end)


_FNV_OFFSET = np.int64(0xCBF29CE484222325 - 2**64)  # FNV-1a 64 in wrapping int64 arithmetic
_FNV_PRIME = np.int64(0x100000001B3)


@njit(inline="always")  # numba does not inline small callees by itself: 40x slower without
def _fnv1a(data, a, b):
    h = _FNV_OFFSET
    for k in range(a, b):
        h = (h ^ np.int64(data[k])) * _FNV_PRIME
    return h


@njit(cache=True, nogil=True)
def _build_slots(wdata, woff, mask):
    n = len(woff) - 1
    hashes = np.empty(n, np.int64)
    slots = np.full(mask + 1, -1, np.int64)
    for w in range(n):
        h = _fnv1a(wdata, woff[w], woff[w + 1])
        hashes[w] = h
        s = h & mask
        while slots[s] >= 0:
            s = (s + 1) & mask
        slots[s] = w
    return slots, hashes


@njit(inline="always")  # numba does not inline small callees by itself: 40x slower without
def _find(h, data, a, b, slots, hashes, wdata, woff, mask):
    """The word id of ``data[a:b]`` (FNV-1a hash ``h``), or -1; a hash match is confirmed byte for byte."""
    s = h & mask
    while True:
        w = slots[s]
        if w < 0:
            return -1
        if hashes[w] == h and woff[w + 1] - woff[w] == b - a:
            same = True
            for k in range(b - a):
                if wdata[woff[w] + k] != data[a + k]:
                    same = False
                    break
            if same:
                return w
        s = (s + 1) & mask


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")  # numpy's error model: no zero-division checks
def _score_rows(data, offsets, classes, slots, hashes, wdata, woff, mask, H, R, unknown_r, tokens, u, r):
    n_rows = len(offsets) - 1
    blocks = min(n_rows, 64)
    for blk in prange(blocks):  # rows are independent: contiguous blocks over the threads
        _score_block(
            data,
            offsets,
            classes,
            slots,
            hashes,
            wdata,
            woff,
            mask,
            H,
            R,
            unknown_r,
            tokens,
            u,
            r,
            blk * n_rows // blocks,
            (blk + 1) * n_rows // blocks,
        )


@njit(inline="always")
def _score_block(data, offsets, classes, slots, hashes, wdata, woff, mask, H, R, unknown_r, tokens, u, r, lo, hi):
    for row in range(lo, hi):
        k, end = offsets[row], offsets[row + 1]
        n, sh, sr = 0, 0.0, 0.0
        while k < end:
            sp = _space_len(data, k, end, classes)
            if sp:
                k += sp
                continue
            a, h = k, _FNV_OFFSET  # a word: hash it while finding its end (one pass over its bytes)
            while k < end and _space_len(data, k, end, classes) == 0:
                h = (h ^ np.int64(data[k])) * _FNV_PRIME
                k += 1
            w = _find(h, data, a, k, slots, hashes, wdata, woff, mask)
            n += 1
            if w >= 0:
                sh += H[w]
                sr += R[w]
            else:
                sr += unknown_r
        tokens[row] = n
        u[row] = sh / n if n else 0.0
        r[row] = sr / n if n else 0.0


def _utf8(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The data bytes and int64 row offsets of a string array (nulls read as empty strings)."""
    if arr.null_count:
        arr = pc.fill_null(arr, "")
    wide = pa.types.is_large_string(arr.type)
    offsets = np.frombuffer(arr.buffers()[1], np.int64 if wide else np.int32)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    return data, offsets.astype(np.int64)


class WordScores:
    """A word table (``word_uncertainty``: src, H, freq) ready to score sentences: per row the token count,
    U = mean H (Eq. 6.3, unknown word 0) and WR = mean −ln p(w) (Eq. 6.5, unknown word = seen once)."""

    def __init__(self, table: pa.Table) -> None:
        words = table["src"].combine_chunks().cast(pa.string())
        self._wdata, self._woff = _utf8(words)
        self._wdata = self._wdata[self._woff[0] : self._woff[-1]].copy()
        self._woff = self._woff - self._woff[0]
        self._mask = np.int64((1 << max(4, int(2 * max(len(words), 1)).bit_length())) - 1)
        self._slots, self._hashes = _build_slots(self._wdata, self._woff, self._mask)
        freq = table["freq"].to_numpy().astype(np.float64)
        total = max(float(freq.sum()), 1.0)
        self._H = table["H"].to_numpy().astype(np.float64)
        with np.errstate(divide="ignore"):
            self._R = np.log(total) - np.log(np.maximum(freq, 1.0))
        self.unknown_rarity = math.log(total)

    def score(self, texts: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tokens int32, U float64, WR float64) per row."""
        arrays = texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]
        outs = []
        for arr in arrays:
            data, offsets = _utf8(arr)
            n = len(offsets) - 1
            tokens, u, r = np.zeros(n, np.int32), np.zeros(n), np.zeros(n)
            _score_rows(
                data,
                offsets,
                _BYTE_CLASS,
                self._slots,
                self._hashes,
                self._wdata,
                self._woff,
                self._mask,
                self._H,
                self._R,
                self.unknown_rarity,
                tokens,
                u,
                r,
            )
            outs.append((tokens, u, r))
        if not outs:
            return np.zeros(0, np.int32), np.zeros(0), np.zeros(0)
        return tuple(np.concatenate(parts) for parts in zip(*outs))  # type: ignore[return-value]
