"""Word alignment of the bitext and the bilingual lexicon built from it (thesis ch. 6, step 1–2).

`align` is a reduce step (the aligner's EM needs every pair each iteration): fast_align forward and
reverse over the whole cleaned bitext, symmetrised with grow-diag-final-and. The text is read and
encoded to word ids one part at a time (``encode_stream``), so only the ids (4 bytes a token) are held. Its main part is one row
per pair (links as Pharaoh text and as position lists, coverage = share of source words linked); the
side roles keep the model: both translation tables (`e, f, log_prob`, exportable in fast_align's `-p`
format) and the tensions and length multipliers, which force-alignment needs later. `lexicon` counts
the linked word pairs; `word_uncertainty` adds H (Eq. 6.4) and the source-word frequencies.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError
from models.aligner import Alignment, FastAlign, align_encoded, encode_stream, grow_diag_final_and
from models.aligner.encoding import Side
from models.lexicon import build_lexicon, link_counts, linked_words, tokenize, word_frequencies, word_uncertainty
from storage.parts import Parts
from tasks.runtime.stage import Stage

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


def _alignment_rows(
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
    part = _alignment_rows(rows["uid"], rows, src_len, tgt_len, fwd, rev)
    models = pa.table(
        {
            "direction": ["forward", "reverse"],
            "tension": [fwd_model.tension, rev_model.tension],
            "mean_srclen_multiplier": [fwd_model.mean_srclen_multiplier, rev_model.mean_srclen_multiplier],
            "p0": [p0, p0],
        }
    )
    return {"part": part, "fwd_table": fwd_model.table(), "rev_table": rev_model.table(), "aligner": models}


def lexicon(bitext_parts: Parts, alignment_parts: Parts, *, lowercase: bool = False) -> pa.Table:
    """count[x][y] and p(y | x) over the symmetrised links of the whole bitext (models.lexicon), counted
    one bitext part at a time (its text and linked words) and added up."""
    links = alignment_parts.table(["uid", "src_pos", "tgt_pos"])
    uids, src_pos, tgt_pos = (links[c].combine_chunks() for c in ("uid", "src_pos", "tgt_pos"))
    counts, start = [], 0
    for rows in bitext_parts.tables(["uid", "src", "tgt"]):
        n = rows.num_rows
        if not rows["uid"].combine_chunks().equals(uids.slice(start, n)):
            raise InputError("lexicon: the alignment's rows are not the bitext's rows, in order (a stale artifact?)")
        sp, tp = src_pos.slice(start, n), tgt_pos.slice(start, n)
        offsets = np.asarray(sp.offsets, dtype=np.int64)
        counts.append(
            link_counts(
                linked_words(
                    tokenize(rows["src"], lowercase=lowercase),
                    tokenize(rows["tgt"], lowercase=lowercase),
                    offsets - offsets[0],
                    sp.flatten().to_numpy(),
                    tp.flatten().to_numpy(),
                )
            )
        )
        start += n
    if start != len(uids):
        raise InputError("lexicon: the alignment's rows are not the bitext's rows, in order (a stale artifact?)")
    return build_lexicon(pa.concat_tables(counts) if counts else pa.table({"src": [], "tgt": [], "count": []}), counted=True)


def source_word_uncertainty(lexicon_parts: Parts, bitext_parts: Parts, *, lowercase: bool = False) -> pa.Table:
    """H, links and frequency of every source word of the bitext (the `word_uncertainty` view); the
    frequencies counted one part at a time."""
    lex = lexicon_parts.table(["src", "tgt", "count", "p"])
    freq = [word_frequencies(tokenize(t["src"], lowercase=lowercase)) for t in bitext_parts.tables(["src"])]
    total = pa.concat_tables(freq).group_by("src", use_threads=False).aggregate([("count_all", "sum")])
    return word_uncertainty(lex, freq=total.rename_columns(["src", "count_all"]))


def force_align(*inputs: Parts, lowercase: bool = False, key: str = "uid") -> pa.Table:
    """New pairs (the teacher's synthetic ones) aligned with the bitext's fast_align models, no training:
    force alignment both ways (the tables and tensions of the `align` artifact), grow-diag-final-and.
    ``inputs``: the pairs' parts (one or more artifacts), then the `align` artifact's parts. ``key`` names
    the column that becomes ``uid`` (``parent_uid``: the monolingual sentence's, for its bins)."""
    *pairs, alignment_parts = inputs
    parts = Parts(tuple(p for ps in pairs for p in ps.paths))
    params = {r["direction"]: r for r in alignment_parts.side("aligner").to_pylist()}
    fwd_model, rev_model = (
        FastAlign.from_table(
            alignment_parts.side(name),
            reverse=name == "rev_table",
            tension=params[d]["tension"],
            p0=params[d]["p0"],
            mean_srclen_multiplier=params[d]["mean_srclen_multiplier"],
        )
        for name, d in (("fwd_table", "forward"), ("rev_table", "reverse"))
    )
    rows = parts.table([key, "source", "line", "src", "tgt"])
    src = tokenize(rows["src"], lowercase=lowercase)
    tgt = tokenize(rows["tgt"], lowercase=lowercase)
    src_text, tgt_text = pc.binary_join(src, " "), pc.binary_join(tgt, " ")
    return _alignment_rows(
        rows[key],
        rows,
        _lengths(src),
        _lengths(tgt),
        fwd_model.align(src_text, tgt_text)[0],
        rev_model.align(src_text, tgt_text)[0],
    )


def _lengths(tokens: pa.ListArray) -> np.ndarray:
    return pc.list_value_length(tokens).to_numpy(zero_copy_only=False)


ALIGN = Stage("align", "1", align_bitext, view="alignments", reduce=True)
LEXICON = Stage("lexicon", "1", lexicon, view="lexicon", reduce=True)
WORD_UNCERTAINTY = Stage("word_uncertainty", "1", source_word_uncertainty, view="word_uncertainty", reduce=True)
FORCE_ALIGN = Stage("force_align", "1", force_align, reduce=True)
