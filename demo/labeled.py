"""The demo labelled set: bitext-grammar sentences over six topics, TSV `label<TAB>text`.

Every labelled sentence is one the bitext grammar can generate, so the demo NMT models can translate it
and back: a bitext template that has a noun slot, its non-noun slots drawn exactly as in the bitext (names,
verbs, adjectives, ... shared by all topics). A noun slot takes one of the topic's nouns, or with
probability `_LAB_SHARE` (30 %) one of the nouns of no topic (shared by all); "a cup of tea" (the M and F
classes) is a food template only. A sentence whose nouns are all shared carries no topic, so no classifier
reaches 100 % (~8 % of the rows).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from demo.bitext import COMPILED
from demo.draws import cumulative, join_lines, pick, uniforms
from demo.grammar import CLASS_WORDS, LMAX, PAD_WORD, TEMPLATES, WORD_ID, WORDS

LABELS = ["animals", "food", "travel", "family", "nature", "buildings"]
LABEL_NOUNS = {  # topic -> nouns of the N class, each in one topic; the other N nouns are the shared pool
    "animals": "dog bird horse fish mouse cow pig sheep wolf bear fox duck goat",
    "food": "apple egg cook baker kitchen market farm farmer",
    "travel": "car train bus ship plane station airport harbour ticket map boat bicycle driver pilot hotel road",
    "family": "man woman child friend brother sister mother father girl boy guest neighbour",
    "nature": "tree garden river mountain lake sea forest field flower stone island sun moon star cloud snow wind storm",
    "buildings": "house city village school church hospital office museum library factory castle tower shop door "
    "window wall roof room",
}
_LAB_FOOD_ONLY = "K V D M of F"  # its M and F slots are food words
_LAB_SHARE = 0.3  # the probability that a noun slot takes a noun shared by all topics


def _labeled_tables():
    """Per topic: (template ids, cumulative weights) and (noun word ids, cumulative weights), padded with 2."""
    nouns = CLASS_WORDS["N"]
    topical = [w for c in LABELS for w in LABEL_NOUNS[c].split()]
    if len(set(topical)) != len(topical) or not set(topical) <= set(nouns):
        raise AssertionError("demo labelled set: topic nouns must be distinct N-class words")
    shared = [w for w in nouns if w not in topical]

    def table(per_label: list[tuple[list[int], list[float]]]) -> tuple[np.ndarray, np.ndarray]:
        width = max(len(ids) for ids, _ in per_label)
        ids, cum = np.zeros((len(LABELS), width), dtype=np.int64), np.full((len(LABELS), width), 2.0)
        for c, (i, p) in enumerate(per_label):
            ids[c, : len(i)], cum[c, : len(i)] = i, cumulative(np.array(p) / sum(p))
        return ids, cum

    templates = []
    for c in LABELS:
        ts = [
            t
            for t, (_, classes, _) in enumerate(TEMPLATES)
            if "N" in classes.split() or (c == "food" and classes == _LAB_FOOD_ONLY)
        ]
        templates.append((ts, [TEMPLATES[t][0] for t in ts]))
    noun = []
    for c in LABELS:
        own = LABEL_NOUNS[c].split()
        noun.append(
            (
                [WORD_ID[w] for w in own + shared],
                [(1 - _LAB_SHARE) / len(own)] * len(own) + [_LAB_SHARE / len(shared)] * len(shared),
            )
        )
    return table(templates), table(noun)


(_LAB_TPL_ID, _LAB_TPL_CUM), (_LAB_NOUN_ID, _LAB_NOUN_CUM) = _labeled_tables()
_LAB_NOUN_SLOTS = [[c == "N" for c in classes.split()] for _, classes, _ in TEMPLATES]
_LAB_HEAD = np.array(["\n" + c + "\t" for c in LABELS], dtype=object)


def labeled_chunks(n: int, seed: int, stream: str = "labeled") -> Iterator[list[str]]:
    """The `label<TAB>text` lines of `n` rows of `stream` ("labeled" or the held-out "labeled_test"), per chunk."""
    for u in uniforms(seed, stream, n, 2 + LMAX):
        cls = (u[:, 0] * len(LABELS)).astype(int)
        tpl = _LAB_TPL_ID[cls, pick(_LAB_TPL_CUM[cls], u[:, 1])]
        ids = np.full((len(u), LMAX), PAD_WORD)
        for t, (slots, _, _) in enumerate(COMPILED):
            rows = np.flatnonzero(tpl == t)
            if len(rows) == 0:
                continue
            for j, (words, cum, _) in enumerate(slots):
                if _LAB_NOUN_SLOTS[t][j]:
                    c = cls[rows]
                    ids[rows, j] = _LAB_NOUN_ID[c, pick(_LAB_NOUN_CUM[c], u[rows, 2 + j])]
                else:
                    ids[rows, j] = words[np.searchsorted(cum, u[rows, 2 + j], side="right")]
        yield join_lines(_LAB_HEAD[cls], WORDS[0][ids[:, 0]], WORDS[1][ids[:, 1:]])


def iter_labeled(n: int, *, seed: int = 0) -> Iterator[tuple[str, str]]:
    """`n` (label, text) rows over six topics."""
    for chunk in labeled_chunks(n, seed):
        yield from (tuple(line.split("\t")) for line in chunk)
