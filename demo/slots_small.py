"""The demo's small slot-filling set (ATIS-small-like), for C2C-GenDA and the slot taggers: few utterances per frame.

C2C (Hou et al.) gains most where the tagger sees little: ATIS small (129 utterances) +7.99 F1, medium +5.10. The
demo's other slot set (demo/slots.py: 12 frames, 1,200 rows, a handful of values per slot) is learnt perfectly with
and without C2C (F1 1.0000). This one is designed so that what C2C adds can matter, without tuning anything to it:

- 16 flight templates in 15 frames (a frame is the set of slot types; two templates share one), each with
  alternative phrasings, ~150 training rows: ~10 per frame, which the demo's c2c pairs in clusters of 2 (the
  authors' c for their small set);
- 15 slot types, several of which share their values and differ only by their context, as in ATIS: a city is
  ``fromloc``, ``toloc``, ``stoploc`` or a ground-service ``city_name``; a weekday ``depart_date``, ``return_date``
  or ``arrive_date``; a time of day departing or arriving;
- values drawn with Zipf-like weights (p ∝ 1/rank), 30 cities among them: in 150 rows many values occur once or
  never, in one frame only, while the test set (the same grammar, another stream) has them in other frames.

C2C's relexicalisation fills the generated utterances from each slot type's pool uniformly, so a value seen once
appears in the other frames' combinations; the original rows show it in one context. Whether a tagger gains from
that is what the demo measures: nothing here knows the answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np

from demo.draws import cumulative, uniforms, zipf_weights
from demo.slots import draws_of, fill, parse_units

SMALL_SLOTS_ROWS = 150  # training utterances (ATIS small: 129), or the profile's demo.slots_rows when fewer

_CITY = """boston denver dallas atlanta chicago seattle pittsburgh baltimore philadelphia oakland san_francisco
    new_york los_angeles las_vegas salt_lake_city washington miami toronto montreal houston phoenix detroit
    minneapolis st_louis kansas_city cleveland charlotte orlando tampa nashville"""
_DAY = "monday tuesday wednesday thursday friday saturday sunday"
_PERIOD = "morning afternoon evening night early_morning late_evening"
_TIME = "noon midnight 7_pm 8_am 6_30_pm ten_am five_pm nine_thirty_am 11_pm 2_pm"
_SMALL_VALUES = {
    "fromloc.city_name": _CITY,
    "toloc.city_name": _CITY,
    "stoploc.city_name": _CITY,
    "city_name": _CITY,
    "depart_date.day_name": _DAY,
    "return_date.day_name": _DAY,
    "arrive_date.day_name": _DAY,
    "depart_time.period_of_day": _PERIOD,
    "arrive_time.period_of_day": _PERIOD,
    "depart_time.time": _TIME,
    "arrive_time.time": _TIME,
    "airline_name": "delta united american continental us_air northwest air_canada alaska_airlines twa lufthansa",
    "class_type": "first_class business_class coach economy",
    "cost_relative": "cheapest lowest least_expensive most_expensive",
    "meal": "breakfast lunch dinner snack",
}
_SHOW = "(show me|list|what are|give me|i would like to see|can you show me|please list|find)"
_WANT = "(i need|i want|i would like|please find|get me|can i get|is there)"
_FLIGHTS = "(flights|flight options|connections|a flight|nonstop flights|the flights)"
_SMALL_TEMPLATES = [
    f"{_SHOW} [all] {_FLIGHTS} from {{fromloc.city_name}} to {{toloc.city_name}} [please]",
    f"{_SHOW} [all] {_FLIGHTS} to {{toloc.city_name}} from {{fromloc.city_name}} [please]",
    f"{_WANT} {_FLIGHTS} from {{fromloc.city_name}} to {{toloc.city_name}} (on|for|this|next) {{depart_date.day_name}}",
    f"{_SHOW} {{airline_name}} {_FLIGHTS} (from|leaving) {{fromloc.city_name}} (to|for|going to) {{toloc.city_name}}",
    "(what is|show me|tell me|how much is|give me) the {cost_relative} (fare|ticket|price|one way fare) "
    "from {fromloc.city_name} to {toloc.city_name} [please]",
    f"{_WANT} a {{class_type}} (ticket|seat|fare) (to|for|going to) {{toloc.city_name}} (on|for|this|next) "
    "{depart_date.day_name}",
    f"{_SHOW} {_FLIGHTS} from {{fromloc.city_name}} to {{toloc.city_name}} (arriving|that arrive|getting there|landing) "
    "in the {arrive_time.period_of_day}",
    f"{_SHOW} {_FLIGHTS} (leaving|out of|departing) {{fromloc.city_name}} in the {{depart_time.period_of_day}} "
    "(to|for|going to) {toloc.city_name}",
    f"{_WANT} a round trip (ticket|fare|flight) to {{toloc.city_name}} (leaving|departing|going) {{depart_date.day_name}} "
    "and (returning|coming back|back) {return_date.day_name}",
    f"{_SHOW} {_FLIGHTS} from {{fromloc.city_name}} to {{toloc.city_name}} (with a stop in|stopping in|that stop in|"
    "via) {stoploc.city_name}",
    "(which|what|are there|show me) (flights|planes|connections) (leave|depart|go out of|fly out of) "
    "{fromloc.city_name} on {depart_date.day_name} (after|before|at|around) {depart_time.time}",
    "(does|do|will) {airline_name} (serve|have|offer|provide) {meal} on (flights|the flight|its flights) "
    "(to|into|going to) {toloc.city_name}",
    "(what|which|is there any|show me the) ground (transportation|transport|service) is (there|available|offered) "
    "in {city_name} [please]",
    f"{_SHOW} {_FLIGHTS} (into|arriving in|getting into|landing in) {{toloc.city_name}} (before|after|by|around) "
    "{arrive_time.time} on {arrive_date.day_name}",
    "(i want to|i need to|i would like to|can i|i have to) fly to {toloc.city_name} on {airline_name} "
    "(on|this|next) {depart_date.day_name} [please]",
    f"{_SHOW} the {{cost_relative}} {{class_type}} (fare|ticket|seat|price) (from|out of|leaving) {{fromloc.city_name}} [please]",
]
_UNITS = [parse_units(t) for t in _SMALL_TEMPLATES]
_VALUES = {slot: values.split() for slot, values in _SMALL_VALUES.items()}
_CUM = {slot: cumulative(zipf_weights(len(v), 1.0)) for slot, v in _VALUES.items()}
_WIDTH = 1 + max(draws_of(t) for t in _UNITS)


def zipf_value(slot: str, x: float) -> str:
    """The value of ``slot`` that uniform ``x`` picks, p ∝ 1/rank (its list's order is the rank)."""
    return _VALUES[slot][int(np.searchsorted(_CUM[slot], x, side="right"))]


def small_slots_chunks(n: int, seed: int, stream: str = "slots_small") -> Iterator[list[str]]:
    """The JSON lines of `n` rows of the small set (`stream`: ``slots_small`` or ``slots_small_test``), per chunk."""
    for u in uniforms(seed, stream, n, _WIDTH):
        lines = []
        for row in u:
            tokens: list[str] = []
            tags: list[str] = []
            fill(_UNITS[int(row[0] * len(_UNITS))], row, 1, tokens, tags, pick=zipf_value)
            lines.append(json.dumps({"tokens": tokens, "tags": tags}, ensure_ascii=False))
        yield lines


def iter_small_slots(n: int, *, seed: int = 0, stream: str = "slots_small") -> Iterator[tuple[list[str], list[str]]]:
    """`n` (tokens, BIO tags) rows of the small set."""
    for chunk in small_slots_chunks(n, seed, stream):
        for line in chunk:
            row = json.loads(line)
            yield row["tokens"], row["tags"]
