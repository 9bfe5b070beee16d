"""OpusTrainer's ``RemoveEndPunct`` (``RemoveEndPunctuationModifier``, ``opustrainer/modifiers/punctuation.py``).

    RemoveEndPunct: p
    for a row with uniform(row, 0) < p whose two sides end with a mark of one kind (period, exclamation,
        question, comma, colon, semicolon, ellipsis; ASCII, CJK and other scripts' marks: ``PUNCT_BY_TYPE``) and
        neither side ends with two marks ("Hello!?", "Hello . . ."): each side ↦ side[:-1].rstrip()

OpusTrainer's mark tables and rules. The issue calls it ``RemoveEndPunctuation``; OpusTrainer's curriculum key is
``RemoveEndPunct`` (spec.py takes both, rows say ``RemoveEndPunct``). An empty side makes OpusTrainer raise; here
such a row is left as it is. Links: OpusTrainer drops every link of the last word of each side, found by
``split(' ')``, even when the mark was glued to the word ("house." → "house"); here a side's last word loses its
links only when it disappears (a mark on its own, "house ."). Vectorised with ``pyarrow.compute`` (last characters,
set membership, slices, trims); the links with numpy.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.robustness.draws import row_states, uniform
from tasks.robustness.rows import FlatLinks, emit, pharaoh, require_bitext, taken, tokens

PUNCT_BY_TYPE = {
    "period": ".．｡。﹒︒।॥۔။።։",
    "exclamation": "!！﹗︕‼❢❣՜",
    "question": "?？﹖︖؟;՞፧⁇⁈⁉",  # noqa: RUF001 — U+037E, the Greek question mark
    "comma": ",，､﹐︐、﹑︑،၊՝",  # noqa: RUF001
    "colon": ":：﹕︓፥፦·",  # noqa: RUF001 — U+0387, the Greek ano teleia
    "semicolon": ";；﹔︔؛፤",  # noqa: RUF001
    "ellipsis": "…⋯︙",
}
ALL_PUNCT = "".join(PUNCT_BY_TYPE.values())


def _char(text: pa.Array, start: int, stop: int | None) -> pa.Array:
    return pc.utf8_slice_codeunits(text, start, stop) if stop is not None else pc.utf8_slice_codeunits(text, start)


def _in(chars: pa.Array, marks: str) -> np.ndarray:
    return pc.is_in(chars, value_set=pa.array(list(marks))).to_numpy(zero_copy_only=False)


def _one_mark(text: pa.Array) -> np.ndarray:
    """OpusTrainer's check per side: not two marks at the end, glued (".!") or spaced (". .")."""
    size = pc.utf8_length(text).to_numpy(zero_copy_only=False)
    second, third = _char(text, -2, -1), _char(text, -3, -2)
    glued = (size > 1) & _in(second, ALL_PUNCT)
    spaced = (size > 2) & pc.equal(second, " ").to_numpy(zero_copy_only=False) & _in(third, ALL_PUNCT)
    return ~glued & ~spaced


def ends_with_punctuation(src: pa.Array, tgt: pa.Array) -> np.ndarray:
    """Per row: both sides end with a mark of one kind and neither with two (``ends_with_punct``)."""
    last_s, last_t = _char(src, -1, None), _char(tgt, -1, None)
    same_kind = np.zeros(len(src), bool)
    for marks in PUNCT_BY_TYPE.values():
        same_kind |= _in(last_s, marks) & _in(last_t, marks)
    return same_kind & _one_mark(src) & _one_mark(tgt)


def _drop_last_links(flat: FlatLinks, gone_s: np.ndarray, last_s: np.ndarray, gone_t: np.ndarray, last_t: np.ndarray) -> pa.Array:
    keep = ~((gone_s[flat.row] & (flat.src == last_s[flat.row])) | (gone_t[flat.row] & (flat.tgt == last_t[flat.row])))
    return pharaoh(flat.row[keep], flat.src[keep], flat.tgt[keep], flat.has)


def remove_end_punctuation(rows: pa.Table, *, p: float, seed: int = 0) -> pa.Table:
    """``RemoveEndPunct``: the final mark of both sides removed in the rows with uniform(row, 0) < p that end with
    one mark of the same kind (needs uid, src, tgt; updates ``links`` if the table has them)."""
    require_bitext(rows, modifier="RemoveEndPunct")
    states = row_states(rows["uid"], seed=seed, modifier="RemoveEndPunct")
    chosen = np.flatnonzero(uniform(states, 0) < p)
    take = pa.array(chosen, pa.int64())
    src, tgt = taken(rows, "src", take), taken(rows, "tgt", take)
    fits = ends_with_punctuation(src, tgt)
    index, src, tgt = chosen[fits], src.filter(pa.array(fits)), tgt.filter(pa.array(fits))
    new_src = pc.utf8_rtrim_whitespace(pc.utf8_slice_codeunits(src, 0, -1))
    new_tgt = pc.utf8_rtrim_whitespace(pc.utf8_slice_codeunits(tgt, 0, -1))
    links = None
    if "links" in rows.column_names:
        take = pa.array(index, pa.int64())
        counts = [pc.list_value_length(tokens(a)).to_numpy(zero_copy_only=False) for a in (src, new_src, tgt, new_tgt)]
        flat = FlatLinks.of(taken(rows, "links", take), taken(rows, "uid", take))
        links = _drop_last_links(flat, counts[1] < counts[0], counts[0] - 1, counts[3] < counts[2], counts[2] - 1)
    return emit(rows, index, src=new_src, tgt=new_tgt, links=links, modifier="RemoveEndPunct", params={"p": p})
