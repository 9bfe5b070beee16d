"""The demo bitext: grammar sentences, their word-by-word reordered translation and the gold alignment.

The target is the source translated word by word through the table of demo/grammar.py and reordered per
template: verb-final after "that"/"because", verb-second after a fronted preposition phrase, the time
adverb before the object, the infinitive last. The one template with null translations ("really", "to")
has a length ratio of 5:3, so the `clean` stage drops it; the gold alignment (Pharaoh `i-j`, 0-based, in
source order, unlinked words left out) is therefore not the identity, and no frequent word is linked to
nothing (grow-diag-final-and would link it to its neighbours and give it an entropy above the planted
words'). Short templates repeat, so exact duplicate pairs occur (~2.5 % of 3,000).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import numpy as np

from demo.draws import cumulative, fragments, join_lines, uniforms, zipf_weights
from demo.grammar import (
    AMBIGUOUS,
    CLASS_WORDS,
    LMAX,
    PAD_WORD,
    SOURCE_WORDS,
    TABLE,
    TEMPLATES,
    WORD_ID,
    WORDS,
)

_PHRASES = sorted({p for t in TABLE.values() for p in t})  # target phrases; "" is the null / padding one
_PID = {p: i for i, p in enumerate(_PHRASES)}
_PAD_PHRASE = _PID[""]
_PH_STR = fragments(_PHRASES)
_PH_NTOK = np.array([len(p.split()) for p in _PHRASES])
_KMAX = int(_PH_NTOK.max())  # the longest translation in words (1 here; longer ones would be aligned right too)
_TMAX = _KMAX * LMAX
# per source word: its options (phrase ids) and their cumulative probabilities, padded with 2 (never drawn)
_OPT_ID = np.full((len(SOURCE_WORDS) + 1, 4), _PAD_PHRASE)
_OPT_CUM = np.full((len(SOURCE_WORDS) + 1, 4), 2.0)
for _i, _w in enumerate(SOURCE_WORDS):
    _OPT_ID[_i, : len(TABLE[_w])] = [_PID[p] for p in TABLE[_w]]
    _OPT_CUM[_i, : len(TABLE[_w])] = cumulative(list(TABLE[_w].values()))
# Pharaoh fragments by (target token count, source index, target start)
_LINK = fragments(
    [" ".join(f"{i}-{j + r}" for r in range(k)) for k in range(_KMAX + 1) for i in range(LMAX) for j in range(_TMAX)]
)


def compile_template(classes: str, order: list[int] | None):
    """Per slot (word ids, cumulative weights, has an ambiguous word); the target order; the linked slots."""
    slots, null = [], []
    for c in classes.split():
        words = CLASS_WORDS[c]
        ambiguous = any(w in AMBIGUOUS for w in words)
        slots.append((np.array([WORD_ID[w] for w in words]), cumulative(zipf_weights(len(words))), ambiguous))
        null.append({"": 1.0} in [TABLE[w] for w in words])
        if null[-1] and len(words) > 1:
            raise AssertionError(f"demo grammar: class {c} mixes null and real translations")
    order = list(range(len(slots))) if order is None else order
    if null[order[0]]:  # a line's first fragment is written without a leading space, so it must not be empty
        raise AssertionError(f"demo grammar: template {classes!r} starts its target with a null word")
    return slots, np.array(order), [j for j in range(len(slots)) if not null[j]]


COMPILED = [compile_template(c, o) for _, c, o in TEMPLATES]  # one per TEMPLATES entry
TEMPLATE_CUM = cumulative([w for w, _, _ in TEMPLATES])


def sentence_ids(u: np.ndarray):
    """Word, phrase and link ids of one grammar sentence per row of uniforms `u` (m, 1 + 2 · LMAX).

    Returns:
        (source word ids, target phrase ids in target order, alignment fragment ids of the linked source
        slots in source order), each (m, LMAX) and padded: the padding word, the "" phrase, the "" fragment.
    """
    m = len(u)
    tpl = np.searchsorted(TEMPLATE_CUM, u[:, 0], side="right")
    src = np.full((m, LMAX), PAD_WORD)
    tgt = np.full((m, LMAX), _PAD_PHRASE)
    link = np.zeros((m, LMAX), dtype=np.int64)
    for t, (slots, order, linked) in enumerate(COMPILED):
        rows = np.flatnonzero(tpl == t)
        words, phrases = [], []
        for j, (ids, cum, ambiguous) in enumerate(slots):
            w = ids[np.searchsorted(cum, u[rows, 1 + j], side="right")]
            choice = sum(u[rows, 1 + LMAX + j] >= _OPT_CUM[w, k] for k in range(3)) if ambiguous else 0
            words.append(w), phrases.append(_OPT_ID[w, choice])
        words, phr = np.stack(words, axis=1), np.stack(phrases, axis=1)[:, order]
        ntok = _PH_NTOK[phr]
        start = np.cumsum(ntok, axis=1) - ntok  # target index of each target slot's first word
        inv = np.argsort(order)
        frag = (ntok[:, inv] * LMAX + np.arange(len(slots))) * _TMAX + start[:, inv]
        src[rows, : len(slots)], tgt[rows, : len(slots)], link[rows, : len(linked)] = words, phr, frag[:, linked]
    return src, tgt, link


def bitext_chunks(n: int, seed: int, split: str) -> Iterator[tuple[list[str], list[str], list[str]]]:
    """(source lines, target lines, alignment lines) per chunk of `n` pairs of the `split` stream."""
    for u in uniforms(seed, split, n, 1 + 2 * LMAX):
        src, tgt, link = sentence_ids(u)
        yield tuple(
            join_lines("\n", table[0][ids[:, 0]], table[1][ids[:, 1:]])
            for table, ids in [(WORDS, src), (_PH_STR, tgt), (_LINK, link)]
        )


def iter_bitext(n: int, *, seed: int = 0, split: Literal["train", "test"] = "train") -> Iterator[tuple[str, str, str]]:
    """`n` pairs (src, tgt, Pharaoh alignment); `split="test"` is the held-out stream of the same grammar."""
    for chunk in bitext_chunks(n, seed, split):
        yield from zip(*chunk)
