"""The `split_sentences` stage: a monolingual line that holds a paragraph becomes one row per sentence.

The splitter is the maintained `sentence-splitter` package (Moses' ``split-sentences.perl`` ported to Python,
with Moses' non-breaking prefixes per language: "Mr." and "p.m." followed by a lower-case word end no
sentence); its version is part of the stage's, so an upgrade that splits differently recomputes. Hand-written
here is only the bookkeeping around it: the rows out, and the lines that hold no sentence, dropped.

A dataset opts in with ``split_sentences: true`` (kind mono; ``language`` picks the prefixes). The ingest
flow runs this stage on the read's rows, and duplicates and `clean` on its output, so both work per sentence.
"""

from __future__ import annotations

import functools
from importlib.metadata import version

import numpy as np
import pyarrow as pa
from sentence_splitter import SentenceSplitter

from conf.errors import ConfError
from conf.sections.sentences import check_language
from storage.schemas import MONO, SENTENCE, with_uid
from tasks.runtime.stage import Stage

SENTENCES = pa.schema([*MONO, SENTENCE])  # SENTENCE: 1-based index of the sentence within its input line
NO_SENTENCE = "no_sentence"  # the drop reason of a line the splitter finds no sentence in


@functools.cache
def splitter(language: str) -> SentenceSplitter:
    """The splitter of ``language`` (one per process and language; ``split`` keeps no state, threads share it)."""
    try:
        return SentenceSplitter(language=check_language(language))
    except ValueError as e:
        raise ConfError(f"split_sentences: language {language!r}: {e}") from None


def split_sentences(rows: pa.Table, *, language: str = "en") -> dict[str, pa.Table]:
    """Each row's ``text`` split into sentences: one row per sentence, in order.

    Needs the mono columns (uid, text, source, line). A sentence row keeps ``source`` and ``line`` (the
    input line) and adds ``sentence`` (1-based within the line); its ``uid`` is that of its content, as any
    mono row's (``storage.schemas.with_uid``: md5 of source and text), so a sentence seen twice shares a uid
    and the duplicates stage finds it. A line without a sentence (whitespace only, to the splitter; the
    readers reject blank lines before, so in ingest this is a safeguard) is dropped with reason
    ``no_sentence``. Returns ``{"part": sentences, "dropped": lines + reason}``: every
    input line is in exactly one of them (distinct ``line`` of the part + dropped = rows).
    """
    split = splitter(language).split
    pieces = [[s for s in split(t) if s.strip()] if t else [] for t in rows["text"].to_pylist()]
    counts = np.fromiter(map(len, pieces), np.int64, len(pieces))
    starts = np.repeat(np.cumsum(counts) - counts, counts)  # the first output row of each row's sentences
    index = np.arange(1, int(counts.sum()) + 1, dtype=np.int64) - starts  # 1, 2, .. within each row
    text = pa.array([s for p in pieces for s in p], pa.string())
    taken = rows.take(pa.array(np.repeat(np.arange(rows.num_rows), counts)))
    part = with_uid(taken.set_column(taken.schema.get_field_index("text"), "text", text), "mono")
    part = part.append_column(SENTENCE, pa.array(index, pa.int32()))
    dropped = rows.filter(pa.array(counts == 0))
    reason = pa.array([NO_SENTENCE] * dropped.num_rows, pa.string())
    return {"part": part, "dropped": dropped.append_column("reason", reason)}


SPLIT_SENTENCES = Stage("split_sentences", f"1+sentence-splitter-{version('sentence-splitter')}", split_sentences)
