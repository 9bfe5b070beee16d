"""C2C-GenDA's delexicalisation and relexicalisation of slot-filling rows (``slots``: tokens + BIO tags).

    delexicalise: every BIO span (``B-x`` and its ``I-x`` tokens) → one token ``<x>``; the row's semantic
                  frame is its set of slot types (sorted, duplicates collapsed), its values the spans'
                  words per slot type, in order
    relexicalise: every ``<x>`` token of a known slot type → a value of x (its tokens tagged B-x, I-x, …),
                  every other token → O

A row whose tags are not BIO (a tag other than ``O``, ``B-x``, ``I-x``; an ``I-x`` that does not
continue a ``B-x``/``I-x`` span) is rejected with reason ``malformed_bio`` and the position at fault,
never dropped silently; a row without any slot is dropped with reason ``no_slots`` (the authors drop
them: it has no frame to pair in). Hand-written: no maintained package delexicalises BIO rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from storage.schemas import DROPPED_EXTRA, REJECTS, SLOTS
from tasks.runtime.stage import Stage

_TAG = re.compile(r"^(?:O|([BI])-(\S+))$")
_SLOT_TOKEN = re.compile(r"^<(\S+)>$")
VALUE = pa.struct([("slot", pa.string()), ("value", pa.string())])
DELEX = pa.schema(
    [*SLOTS, ("delex", pa.list_(pa.string())), ("text", pa.string()), ("frame", pa.string()), ("slot_values", pa.list_(VALUE))]
)
DROPPED = pa.schema([*SLOTS, *DROPPED_EXTRA])


class MalformedBio(ValueError):
    """A tag sequence that is not BIO; ``position`` is the 0-based token at fault."""

    def __init__(self, position: int, message: str):
        super().__init__(message)
        self.position = position


def slot_token(slot: str) -> str:
    """The token ``<slot>`` that stands for a value of ``slot`` in a delexicalised utterance."""
    return f"<{slot}>"


def slot_of(token: str) -> str | None:
    """``x`` of a slot token ``<x>``, else None."""
    m = _SLOT_TOKEN.match(token)
    return m.group(1) if m else None


def delexicalise_row(tokens: Sequence[str], tags: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(delexicalised tokens, [(slot type, value words joined by spaces)] in order). Raises MalformedBio."""
    delex: list[str] = []
    values: list[tuple[str, str]] = []
    open_slot: str | None = None
    for i, (token, tag) in enumerate(zip(tokens, tags, strict=True)):
        m = _TAG.match(tag)
        if m is None:
            raise MalformedBio(i, f"tags[{i}] = {tag!r} is not O, B-<slot> or I-<slot>")
        bi, slot = m.groups()
        if bi == "I":
            if open_slot != slot:
                before = f"follows {tags[i - 1]!r}" if i else "starts the row"
                raise MalformedBio(i, f"tags[{i}] = {tag!r} {before}: an I- tag must continue a B-/I- span of type {slot!r}")
            values[-1] = (slot, values[-1][1] + " " + token)
            continue
        open_slot = slot
        if slot is None:
            delex.append(token)
        else:
            delex.append(slot_token(slot))
            values.append((slot, token))
    return delex, values


def frame_of(values: Sequence[tuple[str, str]]) -> str:
    """The semantic frame: the row's slot types, sorted, each once, space-separated."""
    return " ".join(sorted({slot for slot, _ in values}))


def relexicalise_row(
    delex: Sequence[str], values: Sequence[str | Sequence[str]], slots: Mapping[str, object] | None = None
) -> tuple[list[str], list[str]]:
    """(tokens, BIO tags) of ``delex`` with its slot tokens filled by ``values`` in order (a value: its words,
    as a string or a list). ``slots``: the known slot types (a token ``<x>`` of another type stays a word)."""
    tokens: list[str] = []
    tags: list[str] = []
    filled = iter(values)
    for token in delex:
        slot = slot_of(token)
        if slot is None or (slots is not None and slot not in slots):
            tokens.append(token)
            tags.append("O")
            continue
        words = next(filled)
        words = words.split() if isinstance(words, str) else list(words)
        tokens += words
        tags += [f"B-{slot}"] + [f"I-{slot}"] * (len(words) - 1)
    return tokens, tags


def delexicalise(rows: pa.Table, *, file: str = "") -> dict[str, pa.Table]:
    """Delexicalise a shard of ``slots`` rows: ``part`` in ``DELEX`` (the row, its delexicalised tokens and
    text, frame and slot values), ``rejects`` (malformed BIO, naming the position; ``file`` is the input
    file, a resource) and ``dropped`` (rows without slots, reason ``no_slots``), each in input order."""
    out: dict[str, list] = {name: [] for name in DELEX.names}
    rejects: dict[str, list] = {name: [] for name in REJECTS.names}
    dropped: list[int] = []
    for i, row in enumerate(rows.select(["uid", "tokens", "tags", "source", "line"]).to_pylist()):
        try:
            delex, values = delexicalise_row(row["tokens"], row["tags"])
        except MalformedBio as e:
            content = " ".join(f"{t}/{g}" for t, g in zip(row["tokens"], row["tags"]))
            for name, value in zip(
                REJECTS.names,
                (row["source"], file, row["line"], "malformed_bio", f"{row['source']}:{row['line']}: {e}", content[:200]),
            ):
                rejects[name].append(value)
            continue
        if not values:
            dropped.append(i)
            continue
        for name in SLOTS.names:
            out[name].append(row[name])
        out["delex"].append(delex)
        out["text"].append(" ".join(delex))
        out["frame"].append(frame_of(values))
        out["slot_values"].append([{"slot": s, "value": v} for s, v in values])
    drops = rows.select(SLOTS.names).take(pa.array(dropped, pa.int64()))
    drops = drops.append_column("reason", pa.array(["no_slots"] * len(dropped), pa.string()))
    return {"part": pa.table(out, schema=DELEX), "rejects": pa.table(rejects, schema=REJECTS), "dropped": drops.cast(DROPPED)}


def value_pool(delexicalised: pa.Table) -> dict[str, list[str]]:
    """The training value pool: per slot type, every value of the rows, sorted (repeats kept: a draw is
    as frequent as the value is in the training set)."""
    pool: dict[str, list[str]] = {}
    for values in delexicalised["slot_values"].to_pylist():
        for v in values:
            pool.setdefault(v["slot"], []).append(v["value"])
    return {slot: sorted(vs) for slot, vs in sorted(pool.items())}


def draw_values(delex: Sequence[str], pool: Mapping[str, Sequence[str]], rng: np.random.Generator) -> list[str]:
    """A value for each known slot token of ``delex``, drawn uniformly from the pool's list of its type."""
    return [pool[s][int(rng.integers(len(pool[s])))] for t in delex if (s := slot_of(t)) is not None and s in pool]


DELEXICALISE = Stage("delexicalise", "1", delexicalise, view="delexicalised")
