"""The demo slot-filling set (ATIS-like): flight, restaurant and weather requests with BIO tags, JSONL.

Each row is `{"tokens": [...], "tags": [...]}` from one of 12 templates (one semantic frame each, some
sharing one), drawn uniformly. A template is a sequence of units: `(a|b|c)` one of its alternatives,
`[a]` present or not, `{slot}` a value drawn uniformly from the slot's list (`_` joins a multi-word
value: its first word is tagged `B-<slot>`, the others `I-<slot>`), a word as it is (tag O). The
alternatives give each frame dozens of distinct delexicalised phrasings, so that C2C-GenDA's clusters
(tasks/c2c/pairing.py) have something to pair. Every choice is one uniform of the row's draws.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from demo.draws import uniforms

_CITY = """boston denver dallas atlanta chicago seattle berlin paris munich rome tokyo new_york san_francisco
    los_angeles las_vegas salt_lake_city washington miami toronto london"""  # `_` joins a multi-word value
_DATE = "today tomorrow monday friday next_tuesday next_week this_weekend july_third may_fifth december_twenty_first"
_SLOT_VALUES = {
    "fromloc.city_name": _CITY,
    "toloc.city_name": _CITY,
    "city_name": _CITY,
    "depart_date": _DATE,
    "date": _DATE,
    "depart_time": "noon midnight 7_pm 8_am 6_30_pm half_past_nine ten_am",
    "time": "noon 7_pm 8_am 6_30_pm nine_am",
    "airline_name": "delta united lufthansa american_airlines air_france british_airways klm",
    "cuisine": "italian thai mexican chinese indian french japanese greek vegetarian korean",
    "party_size": "two three four five six eight ten",
}
_SLOT_TEMPLATES = [
    "(show me|list|give me|i need|find|what are) [all] [the] (flights|flight options|connections) "
    "from {fromloc.city_name} to {toloc.city_name} [please]",
    "(i need|i want|i would like|please find) (a flight|a ticket|a seat|something) (leaving|departing|going) "
    "from {fromloc.city_name} to {toloc.city_name} {depart_date}",
    "(are there any|do you have|is there a|list) {airline_name} (flights|flight|connections) (to|into|arriving in) "
    "{toloc.city_name} {depart_date}",
    "(book|reserve|get me|find me) (a flight|a seat|a ticket) to {toloc.city_name} {depart_date} "
    "(at|around|before|after) {depart_time}",
    "(what is|tell me|show me|how much is) the (cheapest|lowest|least expensive|best) fare from {fromloc.city_name} "
    "to {toloc.city_name} (on|with) {airline_name}",
    "(book|reserve|get me|find) a table for {party_size} at a {cuisine} (restaurant|place|spot) in {city_name}",
    "(find me|show me|i want|look for) a {cuisine} (restaurant|place|spot) in {city_name} {date} (at|around) {time}",
    "(i want|i am craving|looking for|get me) {cuisine} (food|dishes|cuisine) (near|in|around) {city_name}",
    "(reserve|book|hold) a table for {party_size} [people] {date} [please]",
    "(what is|how is|tell me|give me) the (weather|forecast|temperature) (in|for) {city_name} {date}",
    "will it (rain|snow|be sunny|be windy|be cold) in {city_name} {date}",
    "(do i need|should i take|will i need) (an umbrella|a coat|a jacket) {date} [in {city_name}]",
]
_UNIT = re.compile(r"\(([^)]*)\)|\[([^\]]*)\]|\{([^}]*)\}|(\S+)")


def parse_units(template: str) -> list[tuple[str, object]]:
    """("alt", [words lists]) | ("opt", units) | ("slot", name) | ("word", word), in order."""
    out: list[tuple[str, object]] = []
    for alt, opt, slot, word in _UNIT.findall(template):
        if alt:
            out.append(("alt", [a.split() for a in alt.split("|")]))
        elif opt:
            out.append(("opt", parse_units(opt)))
        elif slot:
            out.append(("slot", slot))
        else:
            out.append(("word", word))
    return out


_TEMPLATES = [parse_units(t) for t in _SLOT_TEMPLATES]
_VALUES = {slot: values.split() for slot, values in _SLOT_VALUES.items()}


def draws_of(units: list[tuple[str, object]]) -> int:
    """The uniforms a row of ``units`` draws: one per alternative, option and slot (an option's own as well)."""
    return sum(1 + draws_of(u) if kind == "opt" else kind != "word" for kind, u in units)


_WIDTH = 1 + max(draws_of(t) for t in _TEMPLATES)


def uniform_value(slot: str, x: float) -> str:
    """The value of ``slot`` that uniform ``x`` picks, each of its values equally likely."""
    return _VALUES[slot][int(x * len(_VALUES[slot]))]


def fill(units, u, at: int, tokens: list[str], tags: list[str], pick=uniform_value) -> int:
    """Append the units' words and tags drawing from ``u[at:]``; returns the next unused draw. ``pick(slot, x)`` is
    the value of ``slot`` for the uniform ``x`` (default: uniformly among this grammar's values)."""
    for kind, unit in units:
        if kind == "word":
            tokens.append(unit)
            tags.append("O")
            continue
        x, at = u[at], at + 1
        if kind == "alt":
            words = unit[int(x * len(unit))]
            tokens += words
            tags += ["O"] * len(words)
        elif kind == "opt":
            sub: tuple[list[str], list[str]] = ([], [])
            at = fill(unit, u, at, *sub, pick=pick)
            if x < 0.5:
                tokens += sub[0]
                tags += sub[1]
        else:
            words = pick(unit, x).split("_")
            tokens += words
            tags += [f"B-{unit}"] + [f"I-{unit}"] * (len(words) - 1)
    return at


def slots_chunks(n: int, seed: int, stream: str = "slots") -> Iterator[list[str]]:
    """The JSON lines of `n` slot rows, one list per chunk."""
    for u in uniforms(seed, stream, n, _WIDTH):
        lines = []
        for row in u:
            tokens: list[str] = []
            tags: list[str] = []
            fill(_TEMPLATES[int(row[0] * len(_TEMPLATES))], row, 1, tokens, tags)
            lines.append(json.dumps({"tokens": tokens, "tags": tags}, ensure_ascii=False))
        yield lines


def iter_slots(n: int, *, seed: int = 0, stream: str = "slots") -> Iterator[tuple[list[str], list[str]]]:
    """`n` (tokens, BIO tags) rows."""
    for chunk in slots_chunks(n, seed, stream):
        for line in chunk:
            row = json.loads(line)
            yield row["tokens"], row["tags"]
