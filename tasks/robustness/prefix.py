"""OpusTrainer's ``Prefix`` (``opustrainer/modifiers/prefix.py``): the source prefixed with a span of the target.

    Prefix: p, min_words: 2, max_words: 5, template: "__start__ {trg} __end__ "
    for a row with uniform(row, 0) < p: n = randint(min_words, max_words) from uniform(row, 1);
        if the target has m ≥ n words: start = ⌊uniform(row, 2)·(m − n + 1)⌋,
        src ↦ template.format(trg=" ".join(target words start … start + n − 1)) + src

As OpusTrainer does (a target shorter than n words leaves the row as it is; OpusTrainer applies at
``random() <= p``, here ``< p``: the same but for a draw of exactly p). Unlike OpusTrainer, which leaves the
alignment column as it was, the source positions of the links move by the number of words the prefix added.
Vectorised: the spans are cut from the flattened target words with numpy and joined with Arrow; the template is
filled by concatenation (``fill``) when its only field is ``{trg}``, else with ``str.format`` per row.
"""

from __future__ import annotations

import string

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.robustness.draws import integers, row_states, uniform
from tasks.robustness.rows import FlatLinks, emit, pharaoh, require_bitext, taken, tokens

TEMPLATE = "__start__ {trg} __end__ "


def fill(template: str, trg: pa.Array) -> pa.Array:
    """``template.format(trg=value)`` for every value of ``trg``."""
    parts = list(string.Formatter().parse(template))
    if all(field in (None, "trg") and not spec and not conversion for _, field, spec, conversion in parts):
        pieces: list[pa.Array | str] = []
        for literal, field, _, _ in parts:
            pieces += [literal] + ([trg] if field == "trg" else [])
        arrays = [pa.array([p] * len(trg), pa.string()) if isinstance(p, str) else p for p in pieces]
        return pc.binary_join_element_wise(*arrays, "")
    return pa.array([template.format(trg=value) for value in trg.to_pylist()], pa.string())


def prefix(
    rows: pa.Table, *, p: float, seed: int = 0, min_words: int = 2, max_words: int = 5, template: str = TEMPLATE
) -> pa.Table:
    """``Prefix``: n target words, from a random start, put before the source through ``template``, in the rows with
    uniform(row, 0) < p and at least n target words (needs uid, src, tgt; moves ``links`` if the table has them)."""
    require_bitext(rows, modifier="Prefix")
    states = row_states(rows["uid"], seed=seed, modifier="Prefix")
    chosen = np.flatnonzero(uniform(states, 0) < p)
    target = tokens(taken(rows, "tgt", pa.array(chosen, pa.int64())))
    size = pc.list_value_length(target).to_numpy(zero_copy_only=False).astype(np.int64)
    n = integers(states[chosen], 1, min_words, max_words)
    fits = size >= n
    index, target, size, n = chosen[fits], target.filter(pa.array(fits)), size[fits], n[fits]
    start = integers(states[index], 2, 0, size - n)
    first = target.offsets.to_numpy()[:-1] + start
    words = target.flatten().take(pa.array(np.repeat(first, n) + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)))
    span = pc.binary_join(pa.ListArray.from_arrays(pa.array(np.concatenate(([0], np.cumsum(n))).astype(np.int32)), words), " ")
    take = pa.array(index, pa.int64())
    old_src = taken(rows, "src", take)
    src = pc.binary_join_element_wise(fill(template, span), old_src, "")
    links = None
    if "links" in rows.column_names:
        added = pc.list_value_length(tokens(src)).to_numpy(zero_copy_only=False) - pc.list_value_length(tokens(old_src)).to_numpy(
            zero_copy_only=False
        )
        flat = FlatLinks.of(taken(rows, "links", take), taken(rows, "uid", take))
        links = pharaoh(flat.row, flat.src + added[flat.row], flat.tgt, flat.has)
    params = {"p": p, "min_words": min_words, "max_words": max_words, "template": template}
    return emit(rows, index, src=src, tgt=taken(rows, "tgt", take), links=links, modifier="Prefix", params=params)
