"""The corpus filters of ``clean``, chained: each row gets the first filter that drops it, cheapest first.

    length → long_word → alphabet_ratio → character_score → html_tags → terminal_punctuation → non_zero_numerals
    → repetition → language_id        (after clean's own duplicate, too_few_tokens, too_many_tokens, length_ratio)

Each filter scores only the rows every earlier one kept (the later ones are dearer: BeautifulSoup, difflib, the
repetition regex, the language identifier), so a row's ``reason`` is the first that applies and the chain is one
pass per shard. The filters are OpusFilter's, over whole columns (tasks/ingest/filters.py, language_id.py).

Sides. A bitext runs a per-side filter (length, long_word, alphabet_ratio, character_score, html_tags,
language_id) on both sides and keeps a pair iff both pass; the detail names the sides that failed, as
OpusFilter's per-side scores do: ``tgt:character_score=0``, ``src:language_id=de:1 tgt:language_id=de:1``. The
pair filters (terminal_punctuation, non_zero_numerals) and repetition (the most repeats on any side) score the pair:
``non_zero_numerals=0.8571 (1214 vs 124)``. Mono and labeled rows run the filters on their ``text`` and name no
side; slots rows run only ``length``, over their tokens joined by spaces (conf/sections/filters.py ``APPLIES``).
``length``'s detail gives the unit: ``length=312 words``, ``src:length=0 chars``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.sections.filters import APPLIES, ROW_FILTERS
from storage.schemas import TEXT_FIELDS
from tasks.ingest import filters as F
from tasks.ingest.language_id import both_sides, check_languages, language_id

Score = Callable[[list[pa.Array], Any], F.Scored]  # (the sides' columns, the filter's section) -> verdict


def sides(rows: pa.Table, kind: str) -> list[pa.Array]:
    """The text a filter reads, one column per side: src and tgt, text, or a slots row's tokens joined by spaces."""
    if kind == "slots":
        return [_plain(pc.binary_join(rows["tokens"], " "))]
    return [_plain(rows[f]) for f in TEXT_FIELDS[kind]]


def _plain(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    column = pc.fill_null(column, "")
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _per_side(score: Callable[[pa.Array, int, Any], F.Scored]) -> Score:
    """A per-side filter: one side as it is, two as ``both_sides`` (kept iff both are, the failed sides named)."""

    def run(columns: list[pa.Array], section: Any) -> F.Scored:
        verdicts = [score(column, i, section) for i, column in enumerate(columns)]
        return verdicts[0] if len(verdicts) == 1 else both_sides(*verdicts)

    return run


def _length(column: pa.Array, i: int, s: Any) -> F.Scored:
    size, keep = F.length(column, min_length=s.min_length, max_length=s.max_length, unit=s.unit)
    return F.scored("length", keep, size, {int(j): f" {s.unit}s" for j in np.flatnonzero(~keep)})


SCORES: dict[str, Score] = {
    "length": _per_side(_length),
    "long_word": _per_side(lambda c, i, s: F.long_word(c, threshold=s.threshold)),
    "alphabet_ratio": _per_side(
        lambda c, i, s: F.alphabet_ratio(c, threshold=s.threshold, exclude_whitespace=s.exclude_whitespace)
    ),
    "character_score": _per_side(lambda c, i, s: F.character_score(c, script=s.scripts[i], threshold=s.threshold)),
    "html_tags": _per_side(lambda c, i, s: F.html_tags([c])),
    "terminal_punctuation": lambda cs, s: F.terminal_punctuation(cs[0], cs[1], threshold=s.threshold),
    "non_zero_numerals": lambda cs, s: F.non_zero_numerals(
        cs[0], cs[1], threshold=s.threshold, ordered=s.ordered, skip_one_sided=s.skip_one_sided
    ),
    "repetition": lambda cs, s: (F.word_repetition if s.unit == "word" else F.repetition)(
        cs, threshold=s.threshold, min_length=s.min_length, max_length=s.max_length
    ),
    "language_id": _per_side(
        lambda c, i, s: language_id(
            c,
            language=s.languages[i],
            threshold=s.threshold,
            identifier=s.identifier,
            langid_languages=None if s.langid_languages == "all" else s.langid_languages,
            lingua_mode=s.lingua_mode,
            min_chars=s.min_chars,
        )
    ),
}


def _dataset(rows: pa.Table) -> str:
    return str(rows["source"][0]) if "source" in rows.column_names and rows.num_rows else "?"


def filter_chain(rows: pa.Table, kept: np.ndarray, *, kind: str, filters: Mapping[str, Any]) -> dict[int, tuple[str, str]]:
    """The rows of ``kept`` (indices into ``rows``, in order) that the filters drop, each with its (reason, detail):
    the first of ``ROW_FILTERS`` that is on (``filters[name]`` not None), applies to ``kind`` and drops it. Each
    filter scores only the rows all earlier ones kept."""
    columns = sides(rows, kind)
    drops: dict[int, tuple[str, str]] = {}
    for name in ROW_FILTERS:
        section = filters.get(name)
        if section is None or name not in APPLIES[kind] or not len(kept):
            continue
        at = pa.array(kept, pa.int64())
        verdict = SCORES[name]([pc.take(c, at) for c in columns], section)
        if name == "language_id" and verdict.sides:  # a bitext whose languages look swapped is refused
            check_languages(verdict.sides, section.languages, _dataset(rows))
        for j in np.flatnonzero(~verdict.keep).tolist():
            drops[int(kept[j])] = (name, str(verdict.detail[j]))
        kept = kept[verdict.keep]
    return drops
