"""OpusTrainer's ``Merge`` (``opustrainer/modifiers/merge.py``): consecutive pairs joined into one.

    Merge: p, min_lines: 2, max_lines: 4
    for a row r with uniform(r, 0) < p: k = randint(min_lines, max_lines) from uniform(r, 1);
        the rows r … r + k − 1 (in the table's order) ↦ (" ".join(their src words), " ".join(their tgt words)),
        links: part q's links + (source words, target words) of parts 0 … q − 1     (``merge_sents``)

Merged links come only where every part has an alignment, as in ``merge_sents``. Lineage: ``parent_uid`` is the
first part (the row whose draw started the merge), ``parents`` lists all k parts in order; ``source`` and ``line`` are
the first part's. Two differences from OpusTrainer, both so that a row's output does not depend on its shard:
OpusTrainer merges inside each chunk of its batch and skips the merged lines (a merged line never starts another
merge) and truncates a merge at the chunk's end; here each row decides for itself, with its own draw, so a row
may be a part of an earlier row's merge and start its own, and a merge that would run past the end of the table
is not made (never across a shard boundary). Per row the rate is OpusTrainer's per considered line, p.
Vectorised: the parts' words and links are gathered with Arrow list kernels and numpy, no Python per row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.robustness.draws import integers, row_states, uniform
from tasks.robustness.rows import FlatLinks, emit, pharaoh, require_bitext, taken, tokens


def plan(states: np.ndarray, p: float, min_lines: int, max_lines: int) -> tuple[np.ndarray, np.ndarray]:
    """(the rows that start a merge, the number of rows each merges), merges past the last row left out."""
    starts = np.flatnonzero(uniform(states, 0) < p)
    k = integers(states[starts], 1, min_lines, max_lines)
    fits = starts + k <= len(states)
    return starts[fits], k[fits]


def _joined(words: pa.ListArray, group_offsets: np.ndarray) -> pa.Array:
    """Each group's words end to end, joined by single spaces (``words`` holds the groups' parts in order)."""
    flat_offsets = words.offsets.to_numpy()
    return pc.binary_join(pa.ListArray.from_arrays(pa.array(flat_offsets[group_offsets].astype(np.int32)), words.flatten()), " ")


def _within_group(lengths: np.ndarray, firsts: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Per part, the words of the parts before it in its group."""
    before = np.cumsum(lengths) - lengths
    return before - np.repeat(before[firsts], k)


def merge(rows: pa.Table, *, p: float, seed: int = 0, min_lines: int = 2, max_lines: int = 4) -> pa.Table:
    """``Merge``: rows r … r + k − 1 joined into one pair for the rows r with uniform(r, 0) < p (needs uid, src, tgt;
    merges ``links`` where every part has them)."""
    require_bitext(rows, modifier="Merge")
    states = row_states(rows["uid"], seed=seed, modifier="Merge")
    starts, k = plan(states, p, min_lines, max_lines)
    parts = np.repeat(starts, k) + (np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k))
    take = pa.array(parts, pa.int64())
    group_offsets = np.concatenate(([0], np.cumsum(k)))
    src_words, tgt_words = tokens(taken(rows, "src", take)), tokens(taken(rows, "tgt", take))
    links = None
    if "links" in rows.column_names:
        part_links = taken(rows, "links", take)
        flat = FlatLinks.of(part_links, taken(rows, "uid", take))
        group = np.repeat(np.arange(len(starts)), k)
        src_len = pc.list_value_length(src_words).to_numpy(zero_copy_only=False).astype(np.int64)
        tgt_len = pc.list_value_length(tgt_words).to_numpy(zero_copy_only=False).astype(np.int64)
        before_src, before_tgt = (_within_group(lengths, group_offsets[:-1], k) for lengths in (src_len, tgt_len))
        every = np.logical_and.reduceat(flat.has, group_offsets[:-1]) if len(starts) else np.zeros(0, bool)
        links = pharaoh(group[flat.row], flat.src + before_src[flat.row], flat.tgt + before_tgt[flat.row], every)
    parents = pa.ListArray.from_arrays(pa.array(group_offsets.astype(np.int32)), taken(rows, "uid", take))
    params = {"p": p, "min_lines": min_lines, "max_lines": max_lines}
    return emit(
        rows,
        starts,
        src=_joined(src_words, group_offsets),
        tgt=_joined(tgt_words, group_offsets),
        links=links,
        modifier="Merge",
        params=params,
        parents=parents,
        changed_only=False,
    )
