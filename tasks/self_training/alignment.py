"""Word alignment of the bitext (thesis ch. 6, step 1): the `alignments` rows and the one-process aligner.

The pipeline aligns over shards (tasks/self_training/em.py: the EM as map + reduce rounds, issue 51); this module
keeps what those rounds share with it and the aligner they are measured against. ``alignment_rows`` builds the
`alignments` rows (``ALIGNMENT``: links as Pharaoh text and as position lists, coverage = share of source words
linked) from both directions' links, symmetrised with grow-diag-final-and. ``align_bitext`` is the one-process
aligner the `align` stage was until issue 51 (fast_align forward and reverse over the whole bitext in one process,
the text encoded to word ids one part at a time, so only the ids, 4 bytes a token, are held): the baseline of
tests/pipelines/self_training/test_align_rounds.py and bench/align_scale.py. Its side roles are the model: both
translation tables (`e, f, log_prob`, exportable in fast_align's `-p` format) and the tensions and length
multipliers, which force-alignment needs later. The lexicon, word uncertainty and force alignment that use it are
in tasks/self_training/lexicon.py.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from models.aligner import Alignment, align_encoded, encode_stream, grow_diag_final_and
from models.aligner.encoding import Side
from storage.parts import Parts

ROWS_PER_CHUNK = 100_000  # sentences symmetrised and turned into rows at a time
ALIGNMENT = pa.schema(
    [
        ("uid", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("links", pa.string()),
        ("src_pos", pa.list_(pa.int32())),
        ("tgt_pos", pa.list_(pa.int32())),
        ("src_tokens", pa.int32()),
        ("tgt_tokens", pa.int32()),
        ("aligned_src", pa.int32()),
        ("coverage", pa.float64()),
    ]
)


def _positions(alignment: Alignment, values: np.ndarray) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(alignment.offsets.astype(np.int32)), pa.array(values.astype(np.int32)))


def aligned_source_words(alignment: Alignment, src_lengths: np.ndarray) -> np.ndarray:
    """Per pair, how many source positions have at least one link."""
    n = len(src_lengths)
    sentence = np.repeat(np.arange(n), np.diff(alignment.offsets))
    width = int(src_lengths.max(initial=0)) + 1
    unique = np.unique(sentence.astype(np.int64) * width + alignment.src)
    return np.bincount(unique // width, minlength=n)


def alignment_rows(
    uid: pa.Array | pa.ChunkedArray, rows: pa.Table, src_len: np.ndarray, tgt_len: np.ndarray, fwd: Alignment, rev: Alignment
) -> pa.Table:
    """The `alignments` rows of a bitext: grow-diag-final-and of both directions, positions, coverage; built
    ``ROWS_PER_CHUNK`` sentences at a time (each sentence is symmetrised alone), so the temporaries of the
    symmetrisation and of the Pharaoh text are a chunk's, not the whole bitext's."""
    n = len(src_len)
    if n <= ROWS_PER_CHUNK:
        return _rows_of(uid, rows, src_len, tgt_len, fwd, rev)
    return pa.concat_tables(
        _rows_of(uid.slice(a, b - a), rows.slice(a, b - a), src_len[a:b], tgt_len[a:b], fwd.slice(a, b), rev.slice(a, b))
        for a, b in ((a, min(a + ROWS_PER_CHUNK, n)) for a in range(0, n, ROWS_PER_CHUNK))
    )


def _rows_of(
    uid: pa.Array | pa.ChunkedArray, rows: pa.Table, src_len: np.ndarray, tgt_len: np.ndarray, fwd: Alignment, rev: Alignment
) -> pa.Table:
    src_len, tgt_len = src_len.astype(np.int64), tgt_len.astype(np.int64)
    links = grow_diag_final_and(fwd, rev, src_len, tgt_len)
    aligned = aligned_source_words(links, src_len)
    coverage = np.divide(aligned, src_len, out=np.zeros(len(src_len)), where=src_len > 0)
    return pa.table(
        {
            "uid": uid,
            "source": rows["source"],
            "line": rows["line"],
            "links": links.pharaoh_array(),
            "src_pos": _positions(links, links.src),
            "tgt_pos": _positions(links, links.tgt),
            "src_tokens": src_len.astype(np.int32),
            "tgt_tokens": tgt_len.astype(np.int32),
            "aligned_src": aligned.astype(np.int32),
            "coverage": coverage,
        },
        schema=ALIGNMENT,
    )


def align_bitext(
    parts: Parts,
    *,
    lowercase: bool = False,
    iterations: int = 5,
    p0: float = 0.08,
    alpha: float = 0.01,
    tension: float = 4.0,
    optimize_tension: bool = True,
) -> dict[str, pa.Table]:
    """fast_align both ways over the bitext, grow-diag-final-and; the links per pair and the two models."""

    def words(column: str) -> Side:  # the aligner splits on whitespace as models.lexicon.tokenize does
        return encode_stream(pc.utf8_lower(t[column]) if lowercase else t[column] for t in parts.tables([column]))

    src, tgt = words("src"), words("tgt")
    src_len, tgt_len = src.lengths, tgt.lengths
    fwd_model, rev_model, fwd, rev = align_encoded(
        src, tgt, iterations=iterations, p0=p0, alpha=alpha, tension=tension, optimize_tension=optimize_tension
    )
    del src, tgt  # the word ids (4 bytes a token) are not needed for the rows
    rows = parts.table(["uid", "source", "line"])
    part = alignment_rows(rows["uid"], rows, src_len, tgt_len, fwd, rev)
    models = pa.table(
        {
            "direction": ["forward", "reverse"],
            "tension": [fwd_model.tension, rev_model.tension],
            "mean_srclen_multiplier": [fwd_model.mean_srclen_multiplier, rev_model.mean_srclen_multiplier],
            "p0": [p0, p0],
        }
    )
    return {"part": part, "fwd_table": fwd_model.table(), "rev_table": rev_model.table(), "aligner": models}
