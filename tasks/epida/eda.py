"""EDA (Wei & Zou 2019) as an EPiDA candidate source: synonym replacement, random insertion, random swap,
random deletion.

For a sentence of l words and ``alpha`` a (default 0.1), an operation changes n = max(1, ⌊a·l⌋) words:
- **sr**: n distinct non-stop words that have WordNet synonyms, in a seeded random order, each replaced
  (every occurrence) by one of its synonyms;
- **ri**: n times, a synonym of a random non-stop word inserted at a random position;
- **rs**: n times, two random positions swapped;
- **rd**: each word deleted with probability a (one random word is kept if all would go).

``eda_candidates`` makes ``n_aug`` candidates per labelled row, cycling sr, ri, rs, rd, each drawn from a
generator seeded by (seed, row uid, candidate index): a row's candidates do not depend on its shard or on
the other rows. The label is kept; ``alpha`` 0 leaves an operation a no-op (n = 0 for sr/ri/rs). Words are
whitespace tokens, compared lower-cased with the stop words and WordNet. Hand-written: nlpaug's EDA
augmenters need nltk's downloaded data and draw from a global random state (no per-row seeding).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from storage.schemas import with_uid

OPERATIONS = ("sr", "ri", "rs", "rd")
# English function words that synonym replacement and insertion never touch
STOP_WORDS = frozenset(
    """
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers
herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
once only or other our ours ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves
""".split()  # noqa: SIM905 — a word list reads better as text
)

Synonyms = Callable[[str], Sequence[str]]


def _changes(alpha: float, n_words: int) -> int:
    return max(1, int(alpha * n_words)) if alpha > 0 else 0


def synonym_replacement(words: list[str], alpha: float, rng: np.random.Generator, synonyms: Synonyms) -> list[str]:
    """**sr**: up to n distinct non-stop words with synonyms, in a seeded random order, each replaced (every
    occurrence) by one of its synonyms."""
    n = _changes(alpha, len(words))
    candidates = sorted({w.lower() for w in words if w.lower() not in STOP_WORDS})
    out, replaced = list(words), 0
    for i in rng.permutation(len(candidates)):
        if replaced >= n:
            break
        options = synonyms(candidates[i])
        if options:
            new = options[int(rng.integers(len(options)))]
            out = [new if w.lower() == candidates[i] else w for w in out]
            replaced += 1
    return out


def random_insertion(words: list[str], alpha: float, rng: np.random.Generator, synonyms: Synonyms) -> list[str]:
    """**ri**: n times, a synonym of a random non-stop word inserted at a random position (skipped when ten
    draws find no word with synonyms)."""
    out = list(words)
    content = [w for w in words if w.lower() not in STOP_WORDS]
    for _ in range(_changes(alpha, len(words))):
        for _try in range(10):  # a word with synonyms, within ten draws (else this insertion is skipped)
            options = synonyms(content[int(rng.integers(len(content)))].lower()) if content else []
            if options:
                out.insert(int(rng.integers(len(out) + 1)), options[int(rng.integers(len(options)))])
                break
    return out


def random_swap(words: list[str], alpha: float, rng: np.random.Generator, synonyms: Synonyms) -> list[str]:
    """**rs**: n times, two random positions swapped (nothing for a single word); ``synonyms`` is unused."""
    out = list(words)
    for _ in range(_changes(alpha, len(words)) if len(words) > 1 else 0):
        i, j = (int(k) for k in rng.choice(len(out), size=2, replace=False))
        out[i], out[j] = out[j], out[i]
    return out


def random_deletion(words: list[str], alpha: float, rng: np.random.Generator, synonyms: Synonyms) -> list[str]:
    """**rd**: each word deleted with probability ``alpha``, one random word kept if all would go (a single
    word stays); ``synonyms`` is unused."""
    if len(words) <= 1:
        return list(words)
    keep = rng.random(len(words)) >= alpha
    return [w for w, k in zip(words, keep) if k] or [words[int(rng.integers(len(words)))]]


APPLY = {"sr": synonym_replacement, "ri": random_insertion, "rs": random_swap, "rd": random_deletion}


def row_rng(seed: int, uid: str, index: int) -> np.random.Generator:
    """The generator of candidate ``index`` of row ``uid``: a function of (seed, uid, index) only."""
    return np.random.default_rng([seed, int(uid[:16], 16), int(uid[16:32], 16), index])


def eda_candidates(
    rows: pa.Table, *, n_aug: int = 9, alpha: float = 0.1, seed: int = 0, round: int = 0, synonyms: Synonyms
) -> pa.Table:
    """``n_aug`` EDA candidates per labelled row (``uid``, ``text``, ``label``, ``source``, ``line``):
    candidate j applies ``OPERATIONS[j % 4]`` with the generator ``row_rng(seed, uid, round · n_aug + j)`` (an
    online round draws new candidates; round 0 is the one-time augmentation). Columns: uid (of the new text), text,
    label, source, line, parent_uid, method (eda_sr, eda_ri, eda_rs, eda_rd), candidate (j)."""
    texts, labels = rows["text"].to_pylist(), rows["label"].to_pylist()
    uids, sources, lines = rows["uid"].to_pylist(), rows["source"].to_pylist(), rows["line"].to_pylist()
    out: dict[str, list] = {k: [] for k in ("text", "label", "source", "line", "parent_uid", "method", "candidate")}
    for text, label, uid, source, line in zip(texts, labels, uids, sources, lines):
        words = text.split()
        for j in range(n_aug):
            op = OPERATIONS[j % len(OPERATIONS)]
            new = APPLY[op](words, alpha, row_rng(seed, uid, round * n_aug + j), synonyms)
            for key, value in (
                ("text", " ".join(new)),
                ("label", label),
                ("source", source),
                ("line", line),
                ("parent_uid", uid),
                ("method", f"eda_{op}"),
                ("candidate", j),
            ):
                out[key].append(value)
    table = pa.table(
        {
            "text": pa.array(out["text"], pa.string()),
            "label": pa.array(out["label"], pa.string()),
            "source": pa.array(out["source"], pa.string()),
            "line": pa.array(out["line"], pa.int64()),
        }
    )
    table = with_uid(table, "labeled")
    for name, kind in (("parent_uid", pa.string()), ("method", pa.string()), ("candidate", pa.int32())):
        table = table.append_column(name, pa.array(out[name], kind))
    return table
