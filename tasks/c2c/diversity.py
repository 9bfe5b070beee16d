"""C2C-GenDA's diversity of generated utterances (Table 5), with MED (the minimum token edit distance):

    Inter ratio = |{u′ ∈ G : u′ ∉ T}| / |G|              (generated not in the training set T)
    Inter MED   = mean over u′ ∈ G of MED(u′, T),        MED(u′, C) = min over u ∈ C of EditDistance(u, u′)
    Intra ratio = |distinct G| / |G|                     (unique among the generated)
    Intra MED   = mean over u′ ∈ G of MED(u′, G − {u′})  (to the other generated; an equal one counts 0)

each on the delexicalised text (slot tokens ``<x>``) and on the relexicalised one (against the original
training utterances). The MED histogram is the paper's Fig. 4. Hand-written: these four means (the
distances are rapidfuzz's, ``tasks.c2c.edit_distance``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from tasks.c2c.edit_distance import TokenCodes, min_distances

DIVERSITY = pa.schema(
    [
        ("level", pa.string()),
        ("generated", pa.int64()),
        ("training", pa.int64()),
        ("inter_ratio", pa.float64()),
        ("inter_med", pa.float64()),
        ("intra_ratio", pa.float64()),
        ("intra_med", pa.float64()),
    ]
)
MED_BINS = ((0, 0), (1, 1), (2, 2), (3, 3), (4, 5), (6, 10), (11, 15), (16, 20), (21, None))


def diversity(generated: Sequence[Sequence[str]], training: Sequence[Sequence[str]]) -> dict[str, float | int]:
    """The four Table 5 figures of ``generated`` (token lists) against ``training`` (NaN when G is empty)."""
    codes = TokenCodes()
    g, t = codes.encode_all(generated), codes.encode_all(training)
    if not g:
        nan = float("nan")
        return {"generated": 0, "training": len(t), "inter_ratio": nan, "inter_med": nan, "intra_ratio": nan, "intra_med": nan}
    known = set(t)
    intra = min_distances(g, g, exclude_self=True)
    return {
        "generated": len(g),
        "training": len(t),
        "inter_ratio": sum(u not in known for u in g) / len(g),
        "inter_med": float(np.mean(min_distances(g, t))) if t else float("nan"),
        "intra_ratio": len(set(g)) / len(g),
        "intra_med": float(np.mean(intra)) if len(g) > 1 else float("nan"),
    }


def med_to_training(generated: Sequence[Sequence[str]], training: Sequence[Sequence[str]]) -> np.ndarray:
    """MED(u′, T) of every generated utterance (Fig. 4's values)."""
    codes = TokenCodes()
    return min_distances(codes.encode_all(generated), codes.encode_all(training))


def med_histogram(meds: np.ndarray) -> list[tuple[str, float]]:
    """The share of utterances per MED bin of Fig. 4 (0, 1, 2, 3, 4–5, 6–10, 11–15, 16–20, > 20)."""
    n = max(len(meds), 1)
    out = []
    for lo, hi in MED_BINS:
        inside = (meds >= lo) & (meds <= hi) if hi is not None else meds >= lo
        label = str(lo) if lo == hi else f"{lo}-{hi}" if hi is not None else f">{lo - 1}"
        out.append((label, float(inside.sum()) / n))
    return out


def diversity_table(
    delex_generated: Sequence[Sequence[str]],
    delex_training: Sequence[Sequence[str]],
    relex_generated: Sequence[Sequence[str]],
    relex_training: Sequence[Sequence[str]],
) -> pa.Table:
    """Table 5's row for the delexicalised and the relexicalised generation."""
    rows = [
        {"level": "delexicalised", **diversity(delex_generated, delex_training)},
        {"level": "relexicalised", **diversity(relex_generated, relex_training)},
    ]
    return pa.Table.from_pylist(rows, schema=DIVERSITY)
