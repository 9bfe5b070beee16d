"""OpusTrainer's ``Tags`` (``PlaceholderTagModifier``, ``opustrainer/modifiers/placeholders.py``): inline tags around
word pairs that the alignment links one to one.

    Tags: p, augment: 0, replace: 0, tag: 1, template: "__source__ {src} __target__ {trg} __done__"
    for each candidate c = (i, j) of the row, in order: if uniform(row, c) < p, with a mode drawn by weight
        tag:     source word i ↦ template(src = source[i], trg = target[j]); the target is unchanged
        replace: the same with a random string R for trg, and target word j ↦ R
        augment: R inserted after source word i and after target word j (no tags)

Candidates are OpusTrainer's: scanning the row's links (sorted by source then target position) from an offset that
starts at 0, the next candidate is the first link whose source and target positions appear in no other link at or
after the offset and whose two words differ (numbers and names copied as they are are not tagged); the offset
then moves past it, tagged or not. A link sharing a word only with links before the offset counts as one to one:
OpusTrainer's rule, kept. The tags are the template's whitespace tokens around whole tokens: never inside a word;
each tagged span is one source word and the target word(s) it is aligned to one to one; the target side carries no
tag (OpusTrainer's template puts them on the source only), so both sides are balanced. R is
``get_random_unicode_words()`` (noise.py). The output keeps the alignment, updated (OpusTrainer drops it unless
given a SentencePiece vocabulary): the tag's source word and the words inside ``{trg}`` are linked to the target
word(s). Links move by position; OpusTrainer shifts the links after the candidate in list order (and in
``replace`` mode not on the target side), which misplaces crossing links after a replace or an augment, and
those then pick later candidates from the wrong words. ``custom_detok_*`` and ``spm_vocab_*`` are not supported:
tokens are whitespace-separated and rejoined with single spaces (its ``SpaceDetokenizer``).

Vectorised: link parsing (rows.FlatLinks), the one-to-one tests (each link's previous and next link sharing its
source or its target word, from two sorts), the word comparisons, and one draw per candidate for the whole table.
The candidate scan is per row in Python only for rows where a link shares a word with an earlier one, and the
rows with a tag are rebuilt in Python. Written by hand: nothing else places OpusTrainer's tags over a column.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError
from tasks.robustness.draws import Stream, lane, row_states, uniform
from tasks.robustness.noise import unicode_words
from tasks.robustness.rows import FlatLinks, column, emit, format_pairs, require_bitext, tokens

TEMPLATE = "__source__ {src} __target__ {trg} __done__"


def modes_of(augment: float, replace: float, tag: float) -> list[tuple[str, float]]:
    """OpusTrainer's modes with their weights, in its order (augment, replace, tag), those above 0."""
    if augment + replace > 1.0:
        raise ValueError("Tags: augment + replace must not exceed 1.0")
    modes = [(name, w) for name, w in (("augment", augment), ("replace", replace), ("tag", tag)) if w > 0]
    if not modes:
        raise ValueError("Tags: augment, replace and tag are all 0: no mode to apply")
    if len(modes) > 1 and sum(w for _, w in modes) < 1.0:
        raise ValueError("Tags: augment + replace + tag must reach 1.0 (OpusTrainer drops a line whose draw falls past it)")
    return modes


def _prev_next(row: np.ndarray, key: np.ndarray, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per link: the local index of the latest earlier link of its row with the same ``key`` (−1: none), and
    whether a later one exists."""
    order = np.lexsort((local, key, row))
    same = np.zeros(len(row), bool)
    same[1:] = (row[order][1:] == row[order][:-1]) & (key[order][1:] == key[order][:-1])
    prev, later = np.full(len(row), -1, np.int64), np.zeros(len(row), bool)
    prev[order[1:][same[1:]]] = local[order[:-1][same[1:]]]
    later[order[:-1][same[1:]]] = True
    return prev, later


def candidates(flat: FlatLinks, differ: np.ndarray, n_rows: int) -> np.ndarray:
    """A bool per link: whether OpusTrainer's scan makes it a candidate (module docstring)."""
    offsets = flat.offsets(n_rows)
    local = np.arange(len(flat.row)) - offsets[flat.row]
    prev_s, later_s = _prev_next(flat.row, flat.src, local)
    prev_t, later_t = _prev_next(flat.row, flat.tgt, local)
    eligible = differ & ~later_s & ~later_t
    last_shared = np.maximum(prev_s, prev_t)
    chosen = eligible & (last_shared < 0)
    for r in np.unique(flat.row[eligible & (last_shared >= 0)]).tolist():
        a, b = int(offsets[r]), int(offsets[r + 1])
        last = -1  # the latest candidate: the scan's offset is last + 1
        for k in range(b - a):
            if eligible[a + k] and last_shared[a + k] <= last:
                chosen[a + k], last = True, k
    return chosen


def _mode(v: float, modes: list[tuple[str, float]]) -> str:
    total = 0.0
    for name, weight in modes:
        total += weight
        if v < total:
            return name
    return modes[-1][0]


def tag_row(
    source: list[str],
    target: list[str],
    links: list[tuple[int, int]],
    tagged: list[tuple[int, str]],
    stream: Stream,
    template: str,
) -> tuple[str, str, str]:
    """Apply the tagged candidates (link index, mode), in order, to one row; (src, tgt, links) after."""
    pairs: list[tuple[int, int] | None] = list(links)
    added: list[tuple[int, int]] = []
    template_words = template.split()
    src_at = next(n for n, w in enumerate(template_words) if "{src}" in w)
    trg_at = next(n for n, w in enumerate(template_words) if "{trg}" in w)
    for index, mode in tagged:
        i, j = pairs[index]
        words = [target[j]] if mode == "tag" else unicode_words(stream)
        n = len(words)
        if mode == "augment":
            source[i + 1 : i + 1] = words
            target[j + 1 : j + 1] = words
            grow_s, grow_t, new = n, n, [(i + k, j + k) for k in range(1, n + 1)]
        else:
            tag_words = template.format(src=source[i], trg=" ".join(words)).split()
            source[i : i + 1] = tag_words
            target[j : j + 1] = words
            grow_s, grow_t = len(tag_words) - 1, n - 1
            new = [(i + src_at, j + k) for k in range(n)] + [(i + trg_at + k, j + k) for k in range(n)]
            pairs[index] = None
        pairs = [None if p is None else (p[0] + grow_s * (p[0] > i), p[1] + grow_t * (p[1] > j)) for p in pairs]
        added = [(a + grow_s * (a > i), b + grow_t * (b > j)) for a, b in added] + new
    return " ".join(source), " ".join(target), format_pairs([p for p in pairs if p is not None] + added)


def candidate_links(rows: pa.Table) -> tuple[FlatLinks, np.ndarray, pa.ListArray, pa.ListArray]:
    """(every row's links, the indices of the candidates among them, the source and target words per row)."""
    uids = column(rows, "uid")
    flat = FlatLinks.of(column(rows, "links"), uids)
    src_words, tgt_words = tokens(column(rows, "src")), tokens(column(rows, "tgt"))
    src_len = pc.list_value_length(src_words).to_numpy(zero_copy_only=False)
    tgt_len = pc.list_value_length(tgt_words).to_numpy(zero_copy_only=False)
    outside = (flat.src >= src_len[flat.row]) | (flat.tgt >= tgt_len[flat.row])
    if outside.any():
        r = int(flat.row[np.argmax(outside)])
        raise InputError(
            f"Tags: row {uids[r].as_py()}: links {column(rows, 'links')[r].as_py()!r} point past its "
            f"{src_len[r]} source / {tgt_len[r]} target words. Hint: the alignment of another version of the bitext?"
        )
    src_off = src_words.offsets.to_numpy()[flat.row] + flat.src
    tgt_off = tgt_words.offsets.to_numpy()[flat.row] + flat.tgt
    differ = pc.not_equal(src_words.flatten().take(pa.array(src_off)), tgt_words.flatten().take(pa.array(tgt_off)))
    chosen = np.flatnonzero(candidates(flat, differ.to_numpy(zero_copy_only=False), rows.num_rows))
    return flat, chosen, src_words, tgt_words


def tags(
    rows: pa.Table,
    *,
    p: float,
    seed: int = 0,
    augment: float = 0.0,
    replace: float = 0.0,
    tag: float = 1.0,
    template: str = TEMPLATE,
) -> pa.Table:
    """``Tags``: tags (or random strings) at the one-to-one links of every row, each candidate with probability p
    (needs uid, src, tgt, links)."""
    require_bitext(rows, modifier="Tags", links=True)
    modes = modes_of(augment, replace, tag)
    n = rows.num_rows
    flat, chosen, src_words, tgt_words = candidate_links(rows)
    row = flat.row[chosen]
    ordinal = np.arange(len(chosen)) - np.searchsorted(row, row)  # the candidate's rank in its row
    states = row_states(rows["uid"], seed=seed, modifier="Tags")
    hit = uniform(states[row], ordinal) < p
    mode_draw = uniform(states[row], lane(1) + ordinal) if len(modes) > 1 else np.zeros(len(chosen))
    offsets = flat.offsets(n)
    tagged_rows = np.unique(row[hit])
    taken = pa.array(tagged_rows, pa.int64())
    sources, targets = src_words.take(taken).to_pylist(), tgt_words.take(taken).to_pylist()
    first, stop = np.searchsorted(row, tagged_rows, "left"), np.searchsorted(row, tagged_rows, "right")
    new_src, new_tgt, new_links = [], [], []
    for r, source, target, lo, hi in zip(tagged_rows.tolist(), sources, targets, first.tolist(), stop.tolist(), strict=True):
        a, b = int(offsets[r]), int(offsets[r + 1])
        plan = [(int(chosen[k]) - a, _mode(float(mode_draw[k]), modes)) for k in range(lo, hi) if hit[k]]
        links = list(zip(flat.src[a:b].tolist(), flat.tgt[a:b].tolist(), strict=True))
        s, t, link_text = tag_row(source, target, links, plan, Stream(int(states[r]), lane(2)), template)
        new_src.append(s)
        new_tgt.append(t)
        new_links.append(link_text)
    params = {"p": p, "augment": augment, "replace": replace, "tag": tag, "template": template}
    return emit(rows, tagged_rows, src=new_src, tgt=new_tgt, links=new_links, modifier="Tags", params=params)
