"""The robustness modifiers (tasks/robustness/) against OpusTrainer 0.5's on the same pairs: rows changed by each and
pairs/s of each side, per modifier and for all eight, with the ratio (goal: at least 3x).

    .venv/bin/python bench/modifiers.py [--data ../shared/data/multi30k_en_de] [--pairs 1000000] [--repeat 1]

Needs OpusTrainer 0.5, which is not in the ``bench`` extra: it pins sentencepiece 0.1.99, which this project's
sentencepiece (>= 0.2) excludes, and its modifiers run with 0.2. Install it beside, without its pins:

    uv pip install --python .venv/bin/python --no-deps opustrainer==0.5 typo==0.1.5

The pairs: Multi30k's training set (29,000 en-de pairs, a tab inside a line made a space), repeated up to ``--pairs``
(each copy its own ``source``, so its own uids), with a synthetic alignment: i-i up to the shorter side (what the Tags
and Merge modifiers read; OpusTrainer's third column). Without Multi30k, generated pairs of the same length. Each
modifier runs alone on the same lines on both sides, with the same probabilities (``MODIFIERS``): OpusTrainer's
modifier class called on the whole list in this process (what each of ``ModifierPool``'s workers does with its chunk;
OpusTrainer seeded with ``random.seed``), ours on the Arrow table (the shard a stage gets). Before timing, UpperCase
and TitleCase are checked equal to OpusTrainer's on every row we change. Time is the best of ``--repeat`` runs. Then
the eight chained through OpusTrainer's ``ModifierPool`` as its trainer runs them (one worker process, chunks of 16
lines), against the sum of ours (``--no-pool`` skips it). OpusTrainer's Tags rescans the alignment after each
candidate (~0.3 ms a line), so its time dominates the totals: the total without Tags is printed too.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from bench.common import best_of
from storage.schemas import BITEXT, with_uid
from tasks.robustness.casing import python_only
from tasks.robustness.spec import parse_modifiers

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k_en_de"
WORDS = ("a", "man", "woman", "dog", "girl", "boy", "runs", "plays", "sits", "in", "on", "the", "park", "street", "ball")
MODIFIERS = [
    {"UpperCase": 0.05},
    {"TitleCase": 0.05},
    {"Typos": 0.05},
    {"Tags": 0.02, "augment": 0.0},
    {"Noise": 0.01},
    {"Merge": 0.01},
    {"Prefix": 0.02},
    {"RemoveEndPunct": 0.05},
]


def pairs(data: Path, n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n`` pairs: Multi30k's training set repeated, or generated lines of its length (5-20 words)."""
    if (data / "train.en").is_file():
        src = (data / "train.en").read_text(encoding="utf-8").replace("\t", " ").splitlines()
        tgt = (data / "train.de").read_text(encoding="utf-8").replace("\t", " ").splitlines()
    else:
        rng = random.Random(seed)
        words = WORDS
        src = [" ".join(rng.choices(words, k=rng.randint(5, 20))).capitalize() + " ." for _ in range(29_000)]
        tgt = [" ".join(rng.choices(words, k=rng.randint(5, 20))) + " ." for _ in range(29_000)]
    copies = -(-n // len(src))
    return (src * copies)[:n], (tgt * copies)[:n]


def diagonal(src: list[str], tgt: list[str]) -> list[str]:
    return [" ".join(f"{i}-{i}" for i in range(min(len(s.split()), len(t.split())))) for s, t in zip(src, tgt, strict=True)]


def table(src: list[str], tgt: list[str], links: list[str], copy: int) -> pa.Table:
    """The pairs as a bitext table with md5 uids (``source`` = the copy of Multi30k a row is in)."""
    n = len(src)
    source = [f"multi30k-{i // copy}" for i in range(n)]
    rows = pa.table(
        {"uid": pa.nulls(n, pa.string()), "src": src, "tgt": tgt, "source": source, "line": range(1, n + 1)}, schema=BITEXT
    )
    return with_uid(rows, "bitext").append_column("links", pa.array(links, pa.string())).combine_chunks()


def opus_modifiers() -> dict[str, Callable[[list[str]], list[str]]]:
    """OpusTrainer's modifier objects for ``MODIFIERS``, made as its curriculum loader makes them."""
    from opustrainer.trainer import MODIFIERS as CLASSES

    made = {}
    for entry in MODIFIERS:
        (name, p), *rest = entry.items()
        made[name] = CLASSES[name](probability=float(p), **dict(rest))
    return made


def run_pool(opus: dict[str, Callable[[list[str]], list[str]]], lines: list[str], seed: int) -> list[str]:
    """All eight chained through OpusTrainer's ``ModifierPool`` as its trainer runs it (chunks of 16 lines), with one
    worker process; Tags last, as OpusTrainer asks."""
    from opustrainer.modifiers.pool import ModifierPool

    chain = [m for name, m in opus.items() if name != "Tags"] + [opus["Tags"]]
    random.seed(seed)
    with ModifierPool(chain, processes=1) as pool:
        return pool.map(lines, 16)


def changed(name: str, lines: list[str], out: list[str]) -> int:
    """The lines OpusTrainer's modifier changed (Noise: the lines it added; Merge: its merged lines)."""
    if name == "Noise":
        return len(out) - len(lines)
    if name == "Merge":
        seen = set(lines)
        return sum(line not in seen for line in out)
    if name == "Tags":  # its output drops the alignment column and rejoins the words with single spaces
        return sum(o.split("\t")[0] != " ".join(i.split("\t")[0].split()) for i, o in zip(lines, out, strict=True))
    return sum(i != o for i, o in zip(lines, out, strict=True))


def check_casing(rows: pa.Table, lines: list[str], opus: dict[str, Callable[[list[str]], list[str]]], n: int = 20_000) -> None:
    """UpperCase and TitleCase at p = 1 on the first ``n`` rows: ours equal OpusTrainer's on every row we change."""
    from opustrainer.modifiers.surface import TitleCaseModifier, UpperCaseModifier

    sample, plain = rows.slice(0, n), [line.rsplit("\t", 1)[0] for line in lines[:n]]
    for spec, theirs in (
        (parse_modifiers([{"UpperCase": 1.0}])[0], UpperCaseModifier(1.0)),
        (parse_modifiers([{"TitleCase": 1.0}])[0], TitleCaseModifier(1.0)),
    ):
        out = spec.apply(sample)
        expected = list(theirs([plain[i - 1] for i in out["line"].to_pylist()]))
        got = [f"{s}\t{t}" for s, t in zip(out["src"].to_pylist(), out["tgt"].to_pylist(), strict=True)]
        assert got == expected, f"{spec.name} differs from OpusTrainer's"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-pool", action="store_true", help="skip the run through OpusTrainer's ModifierPool")
    args = ap.parse_args()
    try:
        opus = opus_modifiers()
    except ImportError:
        sys.exit("OpusTrainer is not installed: pip install -e '.[bench]'")
    src, tgt = pairs(args.data, args.pairs, args.seed)
    links = diagonal(src, tgt)
    rows = table(src, tgt, links, 29_000)
    lines = [f"{s}\t{t}\t{a}" for s, t, a in zip(src, tgt, links, strict=True)]
    specs = parse_modifiers(MODIFIERS)
    python_only(), specs[0].apply(rows.slice(0, 100))  # once per process (a code point table, a DuckDB connection)
    check_casing(rows, lines, opus)
    kind = "Multi30k en-de" if (args.data / "train.en").is_file() else "generated"
    print(f"{len(lines):,} pairs ({kind}), i-i links; best of {args.repeat}")
    print(f"{'modifier':16} {'p':>5} {'rows (opus / ours)':>22} {'opus pairs/s':>13} {'ours pairs/s':>13} {'ratio':>7}")
    totals = {"opus": 0.0, "ours": 0.0, "opus_no_tags": 0.0, "ours_no_tags": 0.0}
    for spec in specs:
        theirs = opus[spec.name]

        def run_opus(theirs=theirs) -> list[str]:
            random.seed(args.seed)
            return list(theirs(lines))

        t_opus, out_opus = best_of(args.repeat, run_opus)
        t_ours, out_ours = best_of(args.repeat, lambda spec=spec: spec.apply(rows, seed=args.seed))
        totals["opus"] += t_opus
        totals["ours"] += t_ours
        if spec.name != "Tags":
            totals["opus_no_tags"] += t_opus
            totals["ours_no_tags"] += t_ours
        rows_opus = changed(spec.name, lines, out_opus)
        print(
            f"{spec.name:16} {spec.p:5.2f} {rows_opus:>10,} / {out_ours.num_rows:<10,} {len(lines) / t_opus:>13,.0f} "
            f"{len(lines) / t_ours:>13,.0f} {t_opus / t_ours:>6.1f}x"
        )
    if not args.no_pool:
        t_pool, _ = best_of(args.repeat, lambda: run_pool(opus, lines, args.seed))
        print(
            f"{'ModifierPool':16} {'':5} {'(1 worker, chained)':>22} {len(lines) / t_pool:>13,.0f} "
            f"{len(lines) / totals['ours']:>13,.0f} {t_pool / totals['ours']:>6.1f}x"
        )
    for label, opus_t, ours_t in (
        ("all eight", totals["opus"], totals["ours"]),
        ("all but Tags", totals["opus_no_tags"], totals["ours_no_tags"]),
    ):
        print(f"{label:16} {'':5} {'':22} {len(lines) / opus_t:>13,.0f} {len(lines) / ours_t:>13,.0f} {opus_t / ours_t:>6.1f}x")


if __name__ == "__main__":
    main()
