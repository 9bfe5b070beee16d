"""The bilingual lexicon, word uncertainty and force alignment as map + reduce (thesis ch. 6, step 2; issue 51).

`link_counts` is mapped over the bitext's parts: part i of the bitext against part i of the `align` artifact (the
same pairs, in order, their uids checked), one table of count[x][y] (the linked word pairs, models.lexicon) per
part. `lexicon` is the reduce: it adds the parts' counts up, a batch of parts at a time into a running total, so
it holds the lexical table and a batch of counts, never the corpus, and builds the table ``build_lexicon``
builds over every link at once (the same rows, order and p). `word_uncertainty` adds the source words'
frequencies up the same way. `force_align` is mapped over the new pairs' parts with the aligner's tables and
tensions (the `align` artifact's side roles) read once per task: its part i is the pairs' part i aligned, in order.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError
from models.aligner import FastAlign
from models.lexicon import build_lexicon, link_counts, linked_words, tokenize, word_frequencies, word_uncertainty
from storage.parts import Parts
from tasks.runtime.stage import Stage
from tasks.self_training.alignment import alignment_rows

COUNTS = pa.schema([("src", pa.string()), ("tgt", pa.string()), ("count", pa.int64())])  # a part's linked word pairs
FREQUENCIES = pa.schema([("src", pa.string()), ("count_all", pa.int64())])  # a part's source words
FOLD_ROWS = 1_000_000  # counts rows gathered before they are added into the running total (at least)


def link_counts_of(bitext: pa.Table, alignment: pa.Table, *, lowercase: bool = False) -> pa.Table:
    """count per (src word, tgt word) over the links of one bitext part; ``alignment``: the `align` rows of the
    same pairs, in the same order (columns uid, src_pos, tgt_pos). Columns src, tgt, count (``COUNTS``)."""
    if bitext.num_rows != alignment.num_rows or not bitext["uid"].equals(alignment["uid"]):
        raise InputError(_mismatch(bitext, alignment))
    src_pos, tgt_pos = alignment["src_pos"].combine_chunks(), alignment["tgt_pos"].combine_chunks()
    offsets = np.asarray(src_pos.offsets, dtype=np.int64)
    links = linked_words(
        tokenize(bitext["src"], lowercase=lowercase),
        tokenize(bitext["tgt"], lowercase=lowercase),
        offsets - offsets[0],
        src_pos.flatten().to_numpy(),
        tgt_pos.flatten().to_numpy(),
    )
    return link_counts(links).cast(COUNTS)


def _mismatch(bitext: pa.Table, alignment: pa.Table) -> str:
    """The first row where the alignment's pairs are not the bitext's, in one line."""
    where = f"{bitext.num_rows:,} bitext rows vs {alignment.num_rows:,} aligned"
    if bitext.num_rows == alignment.num_rows:
        differ = pc.not_equal(bitext["uid"].combine_chunks(), alignment["uid"].combine_chunks())
        row = pc.index(pc.fill_null(differ, True), True).as_py()
        where = f"row {row} (0-based) of the part: uid {bitext['uid'][row]} in the bitext, {alignment['uid'][row]} aligned"
    return (
        f"link_counts: the alignment's rows are not the bitext's rows, in order ({where}). "
        "Hint: a stale `align` artifact? `augdag retry RUN --from align` computes it again and what follows"
    )


def summed_counts(tables: Iterable[pa.Table]) -> pa.Table:
    """``link_counts`` tables added up per (src, tgt) (``summed``)."""
    return summed(tables, COUNTS)


def summed(tables: Iterable[pa.Table], schema: pa.Schema) -> pa.Table:
    """Count tables (``schema``: the key columns, then the count) added up per key: the tables are gathered until
    they have as many rows as the running total (at least ``FOLD_ROWS``), then added into it, so memory is the
    total (the lexical table) and one batch, never every part's table at once."""
    total, pending, rows = schema.empty_table(), [], 0
    for table in tables:
        pending.append(table.cast(schema))
        rows += table.num_rows
        if rows >= max(total.num_rows, FOLD_ROWS):
            total, pending, rows = _fold([total, *pending], schema), [], 0
    return _fold([total, *pending], schema)


def _fold(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    *keys, count = schema.names
    summed = pa.concat_tables(tables).group_by(keys, use_threads=False).aggregate([(count, "sum")])
    return summed.rename_columns(schema.names).cast(schema)


def lexicon(counts: Parts) -> pa.Table:
    """count[x][y] and p(y | x) over the symmetrised links of the whole bitext (models.lexicon.build_lexicon):
    the `link_counts` parts added up (``summed_counts``)."""
    return build_lexicon(summed_counts(counts.tables()), counted=True)


def source_word_uncertainty(lexicon_parts: Parts, bitext_parts: Parts, *, lowercase: bool = False) -> pa.Table:
    """H, links and frequency of every source word of the bitext (the `word_uncertainty` view); the
    frequencies counted one part at a time and added up (``summed``)."""
    lex = lexicon_parts.table(["src", "tgt", "count", "p"])
    parts = (word_frequencies(tokenize(t["src"], lowercase=lowercase)) for t in bitext_parts.tables(["src"]))
    return word_uncertainty(lex, freq=summed(parts, FREQUENCIES))


def aligners(alignment: Parts) -> tuple[FastAlign, FastAlign]:
    """The forward and reverse fast_align models the `align` artifact keeps (its side roles fwd_table, rev_table
    and aligner: the tensions, length multipliers and p0)."""
    params = {r["direction"]: r for r in alignment.side("aligner").to_pylist()}
    fwd, rev = (
        FastAlign.from_table(
            alignment.side(name),
            reverse=name == "rev_table",
            tension=params[d]["tension"],
            p0=params[d]["p0"],
            mean_srclen_multiplier=params[d]["mean_srclen_multiplier"],
        )
        for name, d in (("fwd_table", "forward"), ("rev_table", "reverse"))
    )
    return fwd, rev


def force_align(pairs: pa.Table, *, alignment: Parts, lowercase: bool = False, key: str = "uid") -> pa.Table:
    """New pairs (the teacher's synthetic ones, one part) aligned with the bitext's fast_align models, no training:
    force alignment both ways (``aligners`` of the `align` artifact), grow-diag-final-and; the rows in the pairs'
    order. ``key`` names the column that becomes ``uid`` (``parent_uid``: the monolingual sentence's, for its bins)."""
    fwd_model, rev_model = aligners(alignment)
    src = tokenize(pairs["src"], lowercase=lowercase)
    tgt = tokenize(pairs["tgt"], lowercase=lowercase)
    src_text, tgt_text = pc.binary_join(src, " "), pc.binary_join(tgt, " ")
    return alignment_rows(
        pairs[key],
        pairs,
        _lengths(src),
        _lengths(tgt),
        fwd_model.align(src_text, tgt_text)[0],
        rev_model.align(src_text, tgt_text)[0],
    )


def _lengths(tokens: pa.ListArray) -> np.ndarray:
    return pc.list_value_length(tokens).to_numpy(zero_copy_only=False)


LINK_COUNTS = Stage("link_counts", "1", link_counts_of)
LEXICON = Stage("lexicon", "2", lexicon, view="lexicon", reduce=True)
WORD_UNCERTAINTY = Stage("word_uncertainty", "1", source_word_uncertainty, view="word_uncertainty", reduce=True)
FORCE_ALIGN = Stage("force_align", "2", force_align, lazy_side=("alignment",))
