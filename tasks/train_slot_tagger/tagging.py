"""The slot tagger's stages: its training set per arm, its predictions on a held-out set and their span F1.

    arm original:      the training rows with valid BIO tags
    arm original+c2c:  those plus C2C-GenDA's `c2c_generated` rows of the same dataset
      → train (models.tagger: Bi-LSTM (+CRF) or a Hugging Face token classifier), per arm and seed
      → tag_slots: the tagger's tags for every test row → span precision, recall and F1 (seqeval, the
        conlleval convention) in `evaluations`

Hand-written: the arms and the stage glue; training, tagging and F1 are models.tagger's (torch,
transformers, seqeval).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from conf.errors import InputError
from models.runtime import loaded
from tasks.c2c.delex import MalformedBio, delexicalise_row
from tasks.runtime.stage import Stage

PREDICTIONS = pa.schema(
    [
        ("uid", pa.string()),
        ("tokens", pa.list_(pa.string())),
        ("tags", pa.list_(pa.string())),
        ("predicted", pa.list_(pa.string())),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("arm", pa.string()),
        ("seed", pa.int64()),
        ("model", pa.string()),
    ]
)


def valid_bio(rows: pa.Table) -> tuple[pa.Table, list[str]]:
    """(the rows whose tags are BIO, ["source:line: why"] of the others)."""
    keep, bad = [], []
    for i, (tokens, tags, source, line) in enumerate(zip(*(rows[c].to_pylist() for c in ("tokens", "tags", "source", "line")))):
        try:
            delexicalise_row(tokens, tags)
            keep.append(i)
        except MalformedBio as e:
            bad.append(f"{source}:{line}: {e}")
    return rows.take(pa.array(keep, pa.int64())), bad


def pairs_of(rows: pa.Table) -> list[tuple[list[str], list[str]]]:
    """(tokens, tags) of each row, in order: what the tagger trains on."""
    return list(zip(rows["tokens"].to_pylist(), rows["tags"].to_pylist()))


def tagger_trainer(
    train: Sequence[tuple[list[str], list[str]]],
    dev: Sequence[tuple[list[str], list[str]]] | None,
    *,
    settings: Mapping[str, Any],
    device: str = "auto",
    threads: int = 0,
    fork: bool = False,
) -> Callable[[Path], None]:
    """``build(path)`` for the flow driver's model stage: models.tagger.train_tagger on ``train`` (torch is imported
    when it trains, not for a cached model); with ``fork``, in a process of its own (the same tagger, trained beside
    others: ``models.nmt.fairseq_zygote.in_fork``)."""
    if not train:
        raise InputError("train_slot_tagger: no training rows with valid BIO tags")

    def build(path: Path) -> None:
        from models.nmt.fairseq_zygote import in_fork
        from models.tagger import TaggerSettings, train_tagger

        args = (list(train), path, TaggerSettings(**settings))
        kwargs = {"dev": list(dev) if dev else None, "device": device, "threads": threads}
        if fork:
            in_fork(train_tagger, *args, **kwargs)
        else:
            train_tagger(*args, **kwargs)

    return build


def _load_tagger(model_path: str, device: str, threads: int):
    from models.tagger import SlotTagger

    return SlotTagger.load(model_path, device=device, threads=threads)


_tagger = loaded(_load_tagger)


def tag_slots(
    rows: pa.Table,
    *,
    taggers: list[dict[str, Any]],
    paths: Mapping[str, str] | None = None,
    device: str = "auto",
    threads: int = 0,
    batch_size: int = 128,
) -> pa.Table:
    """Every tagger's tags for a shard of slots rows: ``taggers`` lists {arm, seed, model} (``model`` the
    fingerprint), ``paths`` (a resource) maps each fingerprint to its directory. Rows by tagger, then input."""
    out = []
    n = rows.num_rows
    for t in taggers:
        tagger = _tagger(str((paths or {})[t["model"]]), device, threads)
        predicted = tagger.predict(rows["tokens"].to_pylist(), batch_size=batch_size) if n else []
        out.append(
            pa.table(
                {
                    "uid": rows["uid"],
                    "tokens": rows["tokens"],
                    "tags": rows["tags"],
                    "predicted": pa.array(predicted, pa.list_(pa.string())),
                    "source": rows["source"],
                    "line": rows["line"],
                    "arm": pa.array([t["arm"]] * n, pa.string()),
                    "seed": pa.array([t["seed"]] * n, pa.int64()),
                    "model": pa.array([t["model"]] * n, pa.string()),
                },
                schema=PREDICTIONS,
            )
        )
    return pa.concat_tables(out) if out else PREDICTIONS.empty_table()


def score_tags(predictions: Any) -> pa.Table:
    """Span precision, recall and F1 (conlleval's convention, seqeval) per arm and seed, as `evaluations`
    rows (arm, seed, model, metric, score, signature, sentences)."""
    from models.tagger import span_scores

    table = predictions.table(["arm", "seed", "model", "tags", "predicted"])
    groups: dict[tuple[str, int, str], tuple[list, list]] = {}
    for arm, seed, model, tags, pred in zip(*(table[c].to_pylist() for c in table.column_names)):
        g = groups.setdefault((arm, seed, model), ([], []))
        g[0].append(tags)
        g[1].append(pred)
    rows = []
    for (arm, seed, model), (gold, pred) in groups.items():
        s = span_scores(gold, pred)
        sig = f"seqeval|conlleval|spans:{s['gold_spans']}|predicted:{s['pred_spans']}|correct:{s['correct']}"
        rows += [
            {
                "arm": arm,
                "seed": seed,
                "model": model,
                "metric": m,
                "score": float(s[m]),
                "signature": sig,
                "sentences": len(gold),
            }
            for m in ("f1", "precision", "recall")
        ]
    return pa.Table.from_pylist(rows)


TAG_SLOTS = Stage("tag_slots", "1", tag_slots, view="slot_predictions", tags=("gpu",))
SCORE_TAGS = Stage("score_tags", "1", score_tags, reduce=True)
