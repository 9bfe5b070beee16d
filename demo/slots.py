"""The demo slot-filling set (ATIS-like): flight, restaurant and weather requests with BIO tags, JSONL.

Each row is `{"tokens": [...], "tags": [...]}` from one of 13 templates of its own, drawn uniformly; a slot
takes a value uniformly from its list (`_` joins a multi-word value: its first word is tagged `B-<slot>`,
the others `I-<slot>`), every literal word is tagged `O`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np

from demo.draws import fragments, join_lines, uniforms

_CITY = """boston denver dallas atlanta chicago seattle berlin paris munich rome tokyo new_york san_francisco
    los_angeles las_vegas salt_lake_city washington miami toronto london"""  # `_` joins a multi-word value
_DATE = "today tomorrow monday friday next_tuesday next_week this_weekend july_third may_fifth december_twenty_first"
_SLOT_VALUES = {
    "fromloc.city_name": _CITY, "toloc.city_name": _CITY, "city_name": _CITY, "depart_date": _DATE, "date": _DATE,
    "depart_time": "noon midnight 7_pm 8_am 6_30_pm half_past_nine ten_am", "time": "noon 7_pm 8_am 6_30_pm nine_am",
    "airline_name": "delta united lufthansa american_airlines air_france british_airways klm",
    "cuisine": "italian thai mexican chinese indian french japanese greek vegetarian korean",
    "party_size": "two three four five six eight ten",
}
_SLOT_TEMPLATES = [
    "show me flights from {fromloc.city_name} to {toloc.city_name}",
    "i need a flight from {fromloc.city_name} to {toloc.city_name} {depart_date}",
    "are there any {airline_name} flights to {toloc.city_name} {depart_date}",
    "book a flight to {toloc.city_name} {depart_date} at {depart_time}",
    "what is the cheapest fare from {fromloc.city_name} to {toloc.city_name} on {airline_name}",
    "book a table for {party_size} at a {cuisine} restaurant in {city_name}",
    "find me a {cuisine} restaurant in {city_name} {date} at {time}",
    "i want {cuisine} food near {city_name}",
    "reserve a table for {party_size} people {date}",
    "what is the weather in {city_name} {date}",
    "will it rain in {city_name} {date}",
    "how cold will it be in {city_name} at {time}",
    "do i need an umbrella {date}",
]


def _slot_units():
    """Token and tag JSON fragments of every unit: a literal word (tag O) or a (slot, value) pair."""
    toks, tags, index = [""], [""], {}
    for word in sorted({w for t in _SLOT_TEMPLATES for w in t.split() if not w.startswith("{")}):
        index[word] = len(toks)
        toks.append(f'"{word}"'), tags.append('"O"')
    for slot, values in _SLOT_VALUES.items():
        index[slot] = len(toks)
        for value in values.split():
            words = value.split("_")
            toks.append(", ".join(f'"{w}"' for w in words))
            tags.append(", ".join(f'"{"B" if i == 0 else "I"}-{slot}"' for i in range(len(words))))
    return fragments(toks, ", "), fragments(tags, ", "), index


_SLOT_TOK, _SLOT_TAG, _SLOT_INDEX = _slot_units()
_SLOT_LMAX = max(len(t.split()) for t in _SLOT_TEMPLATES)


def slots_chunks(n: int, seed: int) -> Iterator[list[str]]:
    """The JSON lines of `n` slot rows, one list per chunk."""
    for u in uniforms(seed, "slots", n, 1 + _SLOT_LMAX):
        tpl = (u[:, 0] * len(_SLOT_TEMPLATES)).astype(int)
        ids = np.zeros((len(u), _SLOT_LMAX), dtype=np.int64)
        for t, template in enumerate(_SLOT_TEMPLATES):
            rows = np.flatnonzero(tpl == t)
            for j, w in enumerate(template.split()):
                slot = w.strip("{}")
                k = len(_SLOT_VALUES[slot].split()) if w.startswith("{") else 0
                ids[rows, j] = _SLOT_INDEX[slot] + (u[rows, 1 + j] * k).astype(int)
        tok, tag = (table[1][ids] for table in (_SLOT_TOK, _SLOT_TAG))
        tok[:, 0], tag[:, 0] = _SLOT_TOK[0][ids[:, 0]], _SLOT_TAG[0][ids[:, 0]]  # templates start with a literal
        yield join_lines('\n{"tokens": [', tok, '], "tags": [', tag, "]}")


def iter_slots(n: int, *, seed: int = 0) -> Iterator[tuple[list[str], list[str]]]:
    """`n` (tokens, BIO tags) rows."""
    for chunk in slots_chunks(n, seed):
        for line in chunk:
            row = json.loads(line)
            yield row["tokens"], row["tags"]
