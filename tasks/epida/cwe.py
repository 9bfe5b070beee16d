"""CWE (contextual word substitution, Kobayashi 2018) as an EPiDA candidate source: words replaced by a
masked LM's predictions in their context.

For a sentence of l words and ``alpha`` a, candidate j masks n = max(1, ⌊a·l⌋) distinct words (non-stop
words first, ``tasks.epida.eda.STOP_WORDS``; any word when there are too few) and replaces each by a word drawn
from the masked LM's distribution at its mask (``models.masked_lm``: whole words only, temperature T, the
``top_k`` most probable, never the word itself, case-insensitive). All draws come from the generator
``row_rng(seed, uid, round · n_aug + j)`` (as EDA's), so a candidate depends on its row, round and index
and on the model only, not on the shard or the batch. Without the label-conditional fine-tuning of
Kobayashi's paper (the LM is used as given). ``alpha`` 0 leaves the text as it is.

Hand-written: the position choice and the seeded draw (no maintained package samples a masked LM's
substitutions per row deterministically); the LM is transformers'.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from models.runtime import loaded
from storage.schemas import with_uid
from tasks.epida.eda import STOP_WORDS, row_rng


def _load_masked_lm(model_path: str, device: str, threads: int):
    from models.masked_lm import MaskedLM

    return MaskedLM.load(model_path, device=device, threads=threads)


# once per process and argument tuple, under the process-wide loading lock (models.runtime)
masked_lm = loaded(_load_masked_lm, maxsize=2)


def changed_words(alpha: float, n_words: int) -> int:
    """n = max(1, ⌊alpha · words⌋), 0 for alpha 0 or an empty sentence."""
    return min(n_words, max(1, int(alpha * n_words))) if alpha > 0 and n_words else 0


def pick_positions(words: list[str], n: int, rng: np.random.Generator) -> list[int]:
    """``n`` distinct positions, non-stop words first (each group in a seeded random order), sorted."""
    content = [i for i, w in enumerate(words) if w.lower() not in STOP_WORDS]
    rest = [i for i, w in enumerate(words) if w.lower() in STOP_WORDS]
    order = [content[k] for k in rng.permutation(len(content))] + [rest[k] for k in rng.permutation(len(rest))]
    return sorted(order[:n])


def draw(p: np.ndarray, words: list[str], original: str, top_k: int, rng: np.random.Generator) -> str:
    """A word from ``p`` over ``words``: the ``top_k`` most probable (0: all) but ``original``, renormalised."""
    p = p.copy()
    p[[i for i, w in enumerate(words) if w.lower() == original.lower()]] = 0.0
    if top_k and top_k < len(p):
        p[np.argsort(-p, kind="stable")[top_k:]] = 0.0
    total = p.sum()
    if total <= 0:
        return original
    return words[int(np.searchsorted(np.cumsum(p / total), rng.random() * (1 - 1e-12), side="right"))]


def cwe_candidates(
    rows: pa.Table,
    *,
    n_aug: int = 9,
    alpha: float = 0.1,
    seed: int = 0,
    round: int = 0,
    temperature: float = 1.0,
    top_k: int = 50,
    model_path: str,
    device: str = "auto",
    threads: int = 0,
    batch_size: int = 64,
) -> pa.Table:
    """``n_aug`` CWE candidates per labelled row (uid, text, label, source, line): the columns of
    ``tasks.epida.eda.eda_candidates`` with method ``cwe``. ``model_path``, ``device``, ``threads`` and
    ``batch_size`` are resources (the model's fingerprint is the flow's)."""
    lm = masked_lm(model_path, device, threads)
    texts, uids = rows["text"].to_pylist(), rows["uid"].to_pylist()
    sentences, positions, rngs, parents = [], [], [], []
    for r, (text, uid) in enumerate(zip(texts, uids)):
        words = text.split()
        for j in range(n_aug):
            rng = row_rng(seed, uid, round * n_aug + j)
            sentences.append(words)
            positions.append(pick_positions(words, changed_words(alpha, len(words)), rng))
            rngs.append(rng)
            parents.append(r)
    dists = lm.substitutions(sentences, positions, temperature=temperature, batch_size=batch_size)
    out_texts = []
    for words, where, p, rng in zip(sentences, positions, dists, rngs):
        new = list(words)
        for k, i in enumerate(where[: len(p)]):
            new[i] = draw(p[k], lm.words, words[i], top_k, rng)
        out_texts.append(" ".join(new))
    take = pa.array(parents, pa.int64())
    table = pa.table(
        {
            "text": pa.array(out_texts, pa.string()),
            "label": rows["label"].take(take),
            "source": rows["source"].take(take),
            "line": rows["line"].take(take),
        }
    )
    table = with_uid(table, "labeled")
    return (
        table.append_column("parent_uid", rows["uid"].take(take))
        .append_column("method", pa.array(["cwe"] * len(parents), pa.string()))
        .append_column("candidate", pa.array([j for _ in texts for j in range(n_aug)], pa.int32()))
    )
