"""The corpus filters (tasks/ingest/filters.py) against OpusFilter 3.3 on the same pairs: keep/drop agreement per
filter, every disagreement with an example, and pairs/s of each side with the ratio.

    .venv/bin/python bench/filters.py [--data ../shared/data/multi30k_en_de] [--pairs 100000] [--repeat 3]

Needs the `bench` extra (OpusFilter, through its Python API: each filter's ``score`` then ``accept``, as its
``filter`` step runs them). The pairs: Multi30k's training set (29,000 real en-de pairs, with its warts) and, up to
``--pairs``, noisy copies of them made here, seeded: sides swapped, numbers that disagree, HTML around a side, a
repeated word, a 50-character token, a Cyrillic target. Both sides score the same pairs with the same thresholds
(OpusFilter's defaults; character_score with Latin on both sides; language_id: ``LanguageIDFilter`` with the langid
method, en and de, threshold 0); time is the best of ``--repeat`` runs, per filter. OpusFilter 3.3.1 loads py3langid's
model with ``from_pickled_model``, which py3langid 0.4 renamed ``from_model_file``: the alias is put back here, in
this process only (``langid_compat``).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.common import best_of
from tasks.ingest import filters as F
from tasks.ingest import language_id as L

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k_en_de"
CYRILLIC = ["Это дом.", "Мальчик играет в парке.", "Две собаки бегут по снегу."]


def noisy_pairs(src: list[str], tgt: list[str], n: int, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """The real pairs, then noisy copies up to ``n``: (src, tgt, what each pair is)."""
    rng = random.Random(seed)
    out_s, out_t, kinds = list(src), list(tgt), ["real"] * len(src)
    noises: list[tuple[str, Callable[[str, str], tuple[str, str]]]] = [
        ("swapped", lambda s, t: (t, s)),
        ("numbers", lambda s, t: (f"{s} {rng.randint(1, 999)}", f"{t} {rng.randint(1, 999)}")),
        ("html", lambda s, t: (f'<div class="c">{s}</div>', f"<p>{t}</p>")),
        ("repeated", lambda s, t: (s + " " + " ".join([s.split()[0]] * rng.randint(2, 5)), t)),
        ("long_token", lambda s, t: (s + " " + "x" * 50, t)),
        ("cyrillic", lambda s, t: (s, rng.choice(CYRILLIC))),
        ("punctuation", lambda s, t: (s.rstrip(".") + "?!...", t)),
    ]
    while len(out_s) < n:
        i = rng.randrange(len(src))
        kind, make = rng.choice(noises)
        s, t = make(src[i], tgt[i])
        out_s.append(s)
        out_t.append(t)
        kinds.append(kind)
    return out_s[:n], out_t[:n], kinds[:n]


def langid_compat() -> None:
    """OpusFilter 3.3.1's langid method calls ``LanguageIdentifier.from_pickled_model``, py3langid < 0.4's name."""
    from py3langid.langid import LanguageIdentifier

    if not hasattr(LanguageIdentifier, "from_pickled_model"):
        LanguageIdentifier.from_pickled_model = LanguageIdentifier.from_model_file


def opus_filters() -> dict[str, object]:
    from opusfilter.filters import (
        AlphabetRatioFilter,
        CharacterScoreFilter,
        HtmlTagFilter,
        LanguageIDFilter,
        LengthRatioFilter,
        LongWordFilter,
        NonZeroNumeralsFilter,
        RepetitionFilter,
        TerminalPunctuationFilter,
    )

    langid_compat()

    return {
        "character_score": CharacterScoreFilter(scripts=["Latin", "Latin"], thresholds=[1, 1]),
        "alphabet_ratio": AlphabetRatioFilter(threshold=0.75),
        "long_word": LongWordFilter(threshold=40),
        "html_tags": HtmlTagFilter(),
        "terminal_punctuation": TerminalPunctuationFilter(threshold=-2),
        "non_zero_numerals": NonZeroNumeralsFilter(threshold=0.5),
        "repetition": RepetitionFilter(threshold=2, min_length=3, max_length=100),
        "length_ratio": LengthRatioFilter(threshold=3, unit="word"),
        "language_id": LanguageIDFilter(languages=["en", "de"], id_method="langid", thresholds=[0, 0]),
    }


def ours(name: str, s: pa.Array, t: pa.Array) -> tuple[np.ndarray, list[str]]:
    """augdag's keep mask for a pair filter (both sides where the filter is per side) and a detail per row."""

    def both(one: Callable[[pa.Array], F.Scored]) -> tuple[np.ndarray, list[str]]:
        a, b = one(s), one(t)
        return a.keep & b.keep, [f"{x} | {y}" for x, y in zip(a.detail, b.detail, strict=True)]

    if name == "character_score":
        return both(lambda c: F.character_score(c, script="Latin", threshold=1))
    if name == "alphabet_ratio":
        return both(lambda c: F.alphabet_ratio(c, threshold=0.75))
    if name == "long_word":
        return both(lambda c: F.long_word(c, threshold=40))
    scored = {
        "html_tags": lambda: F.html_tags([s, t]),
        "terminal_punctuation": lambda: F.terminal_punctuation(s, t, threshold=-2),
        "non_zero_numerals": lambda: F.non_zero_numerals(s, t, threshold=0.5),
        "repetition": lambda: F.repetition([s, t], threshold=2, min_length=3, max_length=100),
        "length_ratio": lambda: F.length_ratio(s, t, threshold=3, unit="word"),
        "language_id": lambda: L.both_sides(L.language_id(s, language="en"), L.language_id(t, language="de")),
    }[name]()
    return scored.keep, scored.detail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--pairs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not (args.data / "train.en").is_file():
        sys.exit(f"no Multi30k at {args.data} (train.en, train.de): give --data")
    try:
        reference = opus_filters()
    except ImportError:
        sys.exit("OpusFilter is not installed: pip install -e '.[bench]'")
    src = (args.data / "train.en").read_text(encoding="utf-8").splitlines()
    tgt = (args.data / "train.de").read_text(encoding="utf-8").splitlines()
    src, tgt, kinds = noisy_pairs(src, tgt, args.pairs)
    pairs = list(zip(src, tgt, strict=True))
    s, t = pa.array(src), pa.array(tgt)
    F.property_table(r"\p{Alphabetic=Yes}"), F.property_table(r"\p{Script=Latin}")  # built once per process: not timed
    F.word_lengths(F.Codepoints.of(pa.array(["a"])))
    L.language_id(pa.array(["a"]), language="en")  # py3langid's model, loaded once per process like OpusFilter's
    print(f"{len(pairs):,} pairs ({kinds.count('real'):,} Multi30k en-de, the rest noisy copies); best of {args.repeat}")
    print(f"{'filter':22} {'agree':>9} {'dropped (opus / ours)':>22} {'opus pairs/s':>13} {'ours pairs/s':>13} {'ratio':>7}")
    total_opus = total_ours = 0.0
    for name, f in reference.items():
        t_opus, opus_keep = best_of(args.repeat, lambda f=f: np.array([f.accept(x) for x in f.score(pairs)]))
        t_ours, (keep, detail) = best_of(args.repeat, lambda name=name: ours(name, s, t))
        total_opus, total_ours = total_opus + t_opus, total_ours + t_ours
        same = opus_keep == keep
        print(
            f"{name:22} {100 * same.mean():8.3f}% {(~opus_keep).sum():>10,} / {(~keep).sum():<10,} "
            f"{len(pairs) / t_opus:>13,.0f} {len(pairs) / t_ours:>13,.0f} {t_opus / t_ours:>6.1f}x"
        )
        for i in np.flatnonzero(~same)[:3]:
            print(f"    differs ({kinds[i]}): opus keeps={bool(opus_keep[i])} ours: {detail[i]} | {src[i]!r} ||| {tgt[i]!r}")
    print(
        f"{'all nine':22} {'':9} {'':22} {len(pairs) / total_opus:>13,.0f} {len(pairs) / total_ours:>13,.0f} "
        f"{total_opus / total_ours:>6.1f}x"
    )


if __name__ == "__main__":
    main()
