"""The built-in demo corpora: a synthetic English→German-like bitext with known translation uncertainty.

Hand-written: no package generates a corpus whose word translations, alignments and ambiguity are known
exactly, which the aligner, lexicon, uncertainty and NMT stages are tested and benchmarked against.

Grammar. A source sentence is one of 13 templates over word classes (DET ADJ NOUN VERB ...: a subordinate
clause, a preposition phrase, a time adverb, "a cup of tea", names with intransitive verbs, questions, a
future); words are drawn per class with Zipf-like weights (p ∝ 1/rank^0.7). The target is the source
translated word by word through `translation_table()` (~350 words) and reordered per template: verb-final
after "that"/"because", verb-second after a fronted preposition phrase, the time adverb before the object,
the infinitive last. Two words translate to nothing ("really", "to"), only in one template (1.5 % of
pairs), whose length ratio of 5:3 makes the `clean` stage drop it; so the gold alignment (Pharaoh `i-j`,
0-based, in source order, unlinked words left out) is not the identity, and no frequent word is linked
to nothing (grow-diag-final-and would link it to its neighbours and give it an entropy above the planted
words'). Eight planted ambiguous words draw
their translation at the table's probabilities (2- to 4-way); every other word has exactly one. There are
no one-to-two translations on purpose: a lexicon that counts links would give such a word H = ln 2, as high
as the planted words. Short templates repeat, so exact duplicate pairs occur (~2.5 % of 3,000).
The mono corpus is the source side of its own stream plus ~10 % out-of-grammar lines (pseudo-words and
table words in random order). The labelled set (6 topics, TSV `label<TAB>text`) is sentences of the bitext
grammar, so the demo NMT models can translate it and back: the templates with a noun slot, nouns from the
topic's own (30 % from a pool shared by all topics), every other word drawn as in the bitext. The slot set
(ATIS-like BIO tags, JSONL `{"tokens": [...], "tags": [...]}`) comes from a small template set of its own.

Rows are a pure function of (seed, stream, row index): chunk k of `_CHUNK` rows draws one uniform
matrix from `default_rng([seed, stream, k])` (row-major, so fewer rows are a prefix of more), and every
choice is an inverse-CDF lookup into it. `write_demo` streams chunk by chunk to `<name>.tmp` + rename.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

_CHUNK = 50_000
_STREAMS = {"train": 1, "test": 2, "mono": 3, "labeled": 4, "slots": 5, "labeled_test": 6}
_BAD_STREAM = 99
MAX_LINE_CHARS = 4096  # a planted too-long line exceeds this (IngestConf.max_line_chars)

# ---- bitext grammar: class -> "en:de" items (no ":" keeps the word, an empty de is the null translation)
_AMBIGUOUS: dict[str, dict[str, float]] = {
    "bank": {"bank": 0.5, "ufer": 0.5}, "light": {"hell": 0.6, "leicht": 0.4},
    "spring": {"frühling": 0.5, "feder": 0.3, "quelle": 0.2}, "date": {"datum": 0.5, "termin": 0.3, "dattel": 0.2},
    "runs": {"läuft": 0.4, "rennt": 0.3, "leitet": 0.2, "betreibt": 0.1}, "ball": {"ball": 0.7, "fest": 0.3},
    "fair": {"gerecht": 0.7, "blond": 0.3}, "on": {"auf": 0.6, "am": 0.4},
}
_CLASSES = {
    "D": "the:die a:eine this:diese every:jede my:meine our:unsere his:seine her:ihre",
    "A": """old:alte young:junge light big:große small:kleine red:rote fair green:grüne new:neue good:gute
        bad:schlechte long:lange short:kurze happy:glückliche sad:traurige quiet:ruhige loud:laute cold:kalte
        warm:warme dark:dunkle bright:strahlende cheap:billige expensive:teure strong:starke weak:schwache
        fast:schnelle slow:langsame rich:reiche poor:arme clean:saubere dirty:schmutzige empty:leere full:volle
        heavy:schwere soft:weiche hard:harte sweet:süße wild:wilde strange:seltsame famous:berühmte
        friendly:freundliche tired:müde hungry:hungrige beautiful:schöne blue:blaue""",
    "N": """man:mann bank woman:frau child:kind spring dog:hund house:haus ball car:auto city:stadt date
        tree:baum garden:garten river:fluss book:buch table:tisch chair:stuhl door:tür window:fenster
        teacher:lehrer student:student doctor:arzt farmer:bauer king:könig queen:königin bird:vogel horse:pferd
        fish:fisch mountain:berg lake:see sea:meer street:straße school:schule church:kirche station:bahnhof
        train:zug bus:bus ship:schiff plane:flugzeug letter:brief picture:bild song:lied story:geschichte
        friend:freund brother:bruder sister:schwester mother:mutter father:vater baker:bäcker cook:koch
        girl:mädchen boy:knabe apple:apfel key:schlüssel bed:bett room:zimmer kitchen:küche shop:laden
        market:markt village:dorf forest:wald field:feld flower:blume stone:stein bridge:brücke road:weg
        island:insel castle:burg tower:turm wall:mauer roof:dach floor:boden clock:uhr phone:telefon
        computer:rechner lamp:lampe newspaper:zeitung film:film game:spiel team:mannschaft player:spieler
        guest:gast neighbour:nachbar soldier:soldat artist:künstler singer:sänger writer:autor painter:maler
        hunter:jäger driver:fahrer pilot:pilot nurse:pfleger judge:richter thief:dieb prince:prinz
        princess:prinzessin mouse:maus cow:kuh pig:schwein sheep:schaf wolf:wolf bear:bär fox:fuchs duck:ente
        goat:ziege egg:ei hat:hut coat:mantel shoe:schuh ring:ring gift:geschenk money:geld ticket:fahrkarte
        map:karte boat:boot bicycle:fahrrad engine:motor hospital:krankenhaus office:büro hotel:hotel
        museum:museum library:bibliothek park:park farm:hof factory:fabrik airport:flughafen harbour:hafen
        sun:sonne moon:mond star:stern cloud:wolke snow:schnee wind:wind storm:sturm""",
    "V": """sees:sieht likes:mag runs finds:findet buys:kauft calls:anruft sells:verkauft paints:malt
        builds:baut opens:öffnet closes:schließt reads:liest writes:schreibt visits:besucht helps:hilft
        knows:kennt loves:liebt hates:hasst carries:trägt needs:braucht takes:nimmt brings:bringt gives:gibt
        cleans:putzt watches:beobachtet meets:trifft forgets:vergisst catches:fängt throws:wirft breaks:bricht
        repairs:repariert draws:zeichnet hears:hört feeds:füttert pushes:schiebt pulls:zieht drives:lenkt
        chooses:wählt steals:stiehlt hides:versteckt misses:vermisst""",
    "B": """see:sehen like:mögen find:finden buy:kaufen sell:verkaufen paint:malen build:bauen open:öffnen
        read:lesen write:schreiben visit:besuchen help:helfen know:kennen love:lieben carry:tragen
        need:brauchen take:nehmen bring:bringen wash:waschen meet:treffen""",
    "I": """sleeps:schläft laughs:lacht arrives:ankommt cries:weint sings:singt departs:abfährt dances:tanzt
        waits:wartet works:arbeitet returns:zurückkehrt swims:schwimmt falls:fällt smiles:lächelt
        listens:lauscht jumps:springt walks:geht talks:redet travels:reist wins:gewinnt loses:verliert""",
    "J": """sleep:schlafen laugh:lachen sing:singen dance:tanzen wait:warten work:arbeiten swim:schwimmen
        travel:reisen win:gewinnen walk:gehen""",
    "T": """today:heute yesterday:gestern now:jetzt tonight:abends often:oft always:immer abroad:auswärts
        never:nie soon:bald again:wieder later:später upstairs:oben early:früh downstairs:unten
        everywhere:überall here:hier there:dort sometimes:manchmal slowly:langsam quickly:rasch""",
    "P": "in:in on with:mit near:nahe behind:hinter under:unter from:aus for:für without:ohne at:bei",
    "M": "cup:tasse glass:glas bottle:flasche piece:stück box:kiste bag:tüte bowl:schüssel plate:teller",
    "F": """tea:tee coffee:kaffee water:wasser milk:milch bread:brot cheese:käse rice:reis soup:suppe wine:wein
        juice:saft sugar:zucker cake:kuchen fruit:obst butter:butter honey:honig salt:salz""",
    "K": "anna peter maria thomas lukas sophie jonas lena paul clara felix emma david sarah tom",  # names: kept
    **{w.partition(":")[0]: w for w in "that:dass because:weil will:wird wants:will of:von does:tut really: to:".split()},
}
# (weight, source classes, target order as source slot indexes)
_TEMPLATES = [
    (0.17, "D A N V D N", None),
    (0.13, "D N V D A N P D N", None),
    (0.09, "D N V that D N V D N", [0, 1, 2, 3, 4, 5, 7, 8, 6]),  # verb-final subordinate clause
    (0.09, "D A N V D N T", [0, 1, 2, 3, 6, 4, 5]),  # time adverb before the object
    (0.07, "K V D M of F", None),  # "a cup of tea" -> "eine tasse tee"
    (0.07, "K I T", None),
    (0.09, "P D N D N V D N", [0, 1, 2, 5, 3, 4, 6, 7]),  # verb second after a fronted phrase
    (0.07, "D N I because D N V D A N", [0, 1, 2, 3, 4, 5, 7, 8, 9, 6]),
    (0.06, "D A A N I T", None),
    (0.05, "K I", None),
    (0.05, "does K B D N", [0, 1, 3, 4, 2]),  # question: "tut peter ein mädchen finden", infinitive last
    (0.045, "K will B D N T", [0, 1, 5, 3, 4, 2]),  # infinitive last
    (0.015, "K really wants to J", None),  # "really", "to" -> nothing: 5 -> 3 words, over a 1.5 length ratio
]


def _zipf(n: int, a: float = 0.7) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** a
    return w / w.sum()


def _cum(p) -> np.ndarray:
    """Cumulative probabilities ending in exactly 1.0, so an inverse-CDF draw u < 1 never runs past the end."""
    c = np.cumsum(p, dtype=float)
    c[-1] = 1.0
    return c


def _strings(words: list[str], sep: str = " ") -> np.ndarray:
    """(2, n) object array: row 0 the words as they are (a line's first), row 1 led by `sep` ("" stays "")."""
    return np.array([words, [sep + w if w else "" for w in words]], dtype=object)


def _build_grammar():
    table: dict[str, dict[str, float]] = {}
    classes: dict[str, list[str]] = {}
    for cls, spec in _CLASSES.items():
        classes[cls] = []
        for item in spec.split():
            en, _, de = item.partition(":")
            trans = _AMBIGUOUS.get(en) or {de if ":" in item else en: 1.0}
            if table.setdefault(en, trans) != trans:
                raise AssertionError(f"demo grammar: {en!r} has two translations")
            classes[cls].append(en)
    return table, classes


_TABLE, _CLASS_WORDS = _build_grammar()
_SRC = list(_TABLE)  # source word ids
_WID = {w: i for i, w in enumerate(_SRC)}
_PHRASES = sorted({p for t in _TABLE.values() for p in t})  # target phrases; "" is the null / padding one
_PID = {p: i for i, p in enumerate(_PHRASES)}
_PAD_PHRASE = _PID[""]
_PH_STR = _strings(_PHRASES)
_PH_NTOK = np.array([len(p.split()) for p in _PHRASES])
_LMAX = max(len(t[1].split()) for t in _TEMPLATES)
_KMAX = int(_PH_NTOK.max())  # the longest translation in words (1 here; longer ones would be aligned right too)
_TMAX = _KMAX * _LMAX
# per source word: its options (phrase ids) and their cumulative probabilities, padded with 2 (never drawn)
_OPT_ID = np.full((len(_SRC) + 1, 4), _PAD_PHRASE)
_OPT_CUM = np.full((len(_SRC) + 1, 4), 2.0)
for _i, _w in enumerate(_SRC):
    _OPT_ID[_i, : len(_TABLE[_w])] = [_PID[p] for p in _TABLE[_w]]
    _OPT_CUM[_i, : len(_TABLE[_w])] = _cum(list(_TABLE[_w].values()))
_PAD_WORD = len(_SRC)
# mono's out-of-grammar lines: pseudo-words (not in the table) and table words in random order
_SYL = "ka lo mi zu ri ta ven dor bli sna gru fex".split()
_PSEUDO = [a + b for a in _SYL for b in _SYL if a != b and a + b not in _TABLE]
_SRC_STR = _strings(_SRC + [""] + _PSEUDO)
_OOG_SHARE, _OOG_LEN = 0.1, (3, 12)
# Pharaoh fragments by (target token count, source index, target start)
_LINK = _strings(
    [" ".join(f"{i}-{j + r}" for r in range(k)) for k in range(_KMAX + 1) for i in range(_LMAX) for j in range(_TMAX)]
)


def _compile(classes: str, order: list[int] | None):
    """Per slot (word ids, cumulative weights, has an ambiguous word); the target order; the linked slots."""
    slots, null = [], []
    for c in classes.split():
        words = _CLASS_WORDS[c]
        ambiguous = any(w in _AMBIGUOUS for w in words)
        slots.append((np.array([_WID[w] for w in words]), _cum(_zipf(len(words))), ambiguous))
        null.append({"": 1.0} in [_TABLE[w] for w in words])
        if null[-1] and len(words) > 1:
            raise AssertionError(f"demo grammar: class {c} mixes null and real translations")
    order = list(range(len(slots))) if order is None else order
    if null[order[0]]:  # a line's first fragment is written without a leading space, so it must not be empty
        raise AssertionError(f"demo grammar: template {classes!r} starts its target with a null word")
    return slots, np.array(order), [j for j in range(len(slots)) if not null[j]]


_TPL = [_compile(c, o) for _, c, o in _TEMPLATES]
_TPL_CUM = _cum([w for w, _, _ in _TEMPLATES])


def translation_table() -> dict[str, dict[str, float]]:
    """The true table: source word -> {translation: probability}; "" is the null translation (no target word)."""
    return {w: dict(t) for w, t in _TABLE.items()}


def ambiguous_words() -> list[str]:
    """The planted source words with more than one translation."""
    return list(_AMBIGUOUS)


def word_entropy() -> dict[str, float]:
    """H(w) = −Σ_t p(t|w) ln p(t|w) of every source word (natural log, as the lexicon of thesis ch. 6)."""
    return {w: -sum(p * math.log(p) for p in t.values()) for w, t in _TABLE.items()}


def _pick(cum: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse CDF with one cumulative row per u (rows padded with 2): i with cum[i-1] <= u < cum[i]."""
    return (u[:, None] >= cum).sum(1)


def _lines(*cols: str | np.ndarray) -> list[str]:
    """m lines from columns of fragments (a str, an (m,) or an (m, k) object array) joined in one pass; the first
    column starts each line with a newline, the other fragments carry their own separators."""
    m = next(len(c) for c in cols if not isinstance(c, str))
    widths = [1 if isinstance(c, str) or c.ndim == 1 else c.shape[1] for c in cols]
    mat, at = np.empty((m, sum(widths)), dtype=object), 0
    for c, w in zip(cols, widths):
        mat[:, at : at + w] = c if isinstance(c, str) or c.ndim == 2 else c[:, None]
        at += w
    return "".join(mat.ravel().tolist()).split("\n")[1:]


def _grammar_ids(u: np.ndarray):
    """(source word ids, target phrase ids in target order, alignment fragment ids of the linked source slots in
    source order), each (m, _LMAX) and padded: the padding word, the "" phrase, the "" fragment."""
    m = len(u)
    tpl = np.searchsorted(_TPL_CUM, u[:, 0], side="right")
    src = np.full((m, _LMAX), _PAD_WORD)
    tgt = np.full((m, _LMAX), _PAD_PHRASE)
    link = np.zeros((m, _LMAX), dtype=np.int64)
    for t, (slots, order, linked) in enumerate(_TPL):
        rows = np.flatnonzero(tpl == t)
        words, phrases = [], []
        for j, (ids, cum, ambiguous) in enumerate(slots):
            w = ids[np.searchsorted(cum, u[rows, 1 + j], side="right")]
            choice = sum(u[rows, 1 + _LMAX + j] >= _OPT_CUM[w, k] for k in range(3)) if ambiguous else 0
            words.append(w), phrases.append(_OPT_ID[w, choice])
        words, phr = np.stack(words, axis=1), np.stack(phrases, axis=1)[:, order]
        ntok = _PH_NTOK[phr]
        start = np.cumsum(ntok, axis=1) - ntok  # target index of each target slot's first word
        inv = np.argsort(order)
        frag = (ntok[:, inv] * _LMAX + np.arange(len(slots))) * _TMAX + start[:, inv]
        src[rows, : len(slots)], tgt[rows, : len(slots)], link[rows, : len(linked)] = words, phr, frag[:, linked]
    return src, tgt, link


def _uniforms(seed: int, stream: str, n: int, k: int) -> Iterator[np.ndarray]:
    if n < 0 or seed < 0:
        msg = f"demo corpus: n = {n}, seed = {seed}; both must be >= 0"
        raise ValueError(msg)
    for c in range(math.ceil(n / _CHUNK)):
        yield np.random.default_rng([seed, _STREAMS[stream], c]).random((min(_CHUNK, n - c * _CHUNK), k))


def _bitext_chunks(n: int, seed: int, split: str) -> Iterator[tuple[list[str], list[str], list[str]]]:
    for u in _uniforms(seed, split, n, 1 + 2 * _LMAX):
        src, tgt, link = _grammar_ids(u)
        yield tuple(_lines("\n", table[0][ids[:, 0]], table[1][ids[:, 1:]]) for table, ids in
                    [(_SRC_STR, src), (_PH_STR, tgt), (_LINK, link)])


def _mono_chunks(n: int, seed: int) -> Iterator[list[str]]:
    width = max(_LMAX, _OOG_LEN[1])
    for u in _uniforms(seed, "mono", n, 1 + 2 * _LMAX + 2 + _OOG_LEN[1]):
        src = np.full((len(u), width), _PAD_WORD)
        src[:, :_LMAX] = _grammar_ids(u)[0]
        oog = np.flatnonzero(u[:, 1 + 2 * _LMAX] < _OOG_SHARE)
        v = u[oog, -_OOG_LEN[1] :]  # < 0.5: a pseudo-word, else a table word
        pseudo, known = _PAD_WORD + 1 + (v * 2 * len(_PSEUDO)).astype(int), ((v - 0.5) * 2 * _PAD_WORD).astype(int)
        words = np.where(v < 0.5, pseudo, known)
        length = _OOG_LEN[0] + (u[oog, 2 + 2 * _LMAX] * (_OOG_LEN[1] - _OOG_LEN[0] + 1)).astype(int)
        src[oog] = np.where(np.arange(width) < length[:, None], words, _PAD_WORD)
        yield _lines("\n", _SRC_STR[0][src[:, 0]], _SRC_STR[1][src[:, 1:]])


# ---- labelled topics: sentences of the bitext grammar (so the demo NMT models translate them), nouns by topic
# Every labelled sentence is one the bitext grammar can generate: a bitext template that has a noun slot, its
# non-noun slots drawn exactly as in the bitext (names, verbs, adjectives, ... shared by all topics). A noun slot
# takes one of the topic's nouns, or with probability _LAB_SHARE one of the nouns of no topic (shared by all);
# "a cup of tea" (the M and F classes) is a food template only. A sentence whose nouns are all shared carries no
# topic, so no classifier reaches 100 % (~8 % of the rows).
_LABELS = ["animals", "food", "travel", "family", "nature", "buildings"]
_LAB_NOUNS = {  # topic -> nouns of the N class, each in one topic; the other N nouns are the shared pool
    "animals": "dog bird horse fish mouse cow pig sheep wolf bear fox duck goat",
    "food": "apple egg cook baker kitchen market farm farmer",
    "travel": "car train bus ship plane station airport harbour ticket map boat bicycle driver pilot hotel road",
    "family": "man woman child friend brother sister mother father girl boy guest neighbour",
    "nature": "tree garden river mountain lake sea forest field flower stone island sun moon star cloud snow wind "
              "storm",
    "buildings": "house city village school church hospital office museum library factory castle tower shop door "
                 "window wall roof room",
}
_LAB_FOOD_ONLY = "K V D M of F"  # its M and F slots are food words
_LAB_SHARE = 0.3  # the probability that a noun slot takes a noun shared by all topics


def _labeled_tables():
    """Per topic: (template ids, cumulative weights) and (noun word ids, cumulative weights), padded with 2."""
    nouns = _CLASS_WORDS["N"]
    topical = [w for c in _LABELS for w in _LAB_NOUNS[c].split()]
    if len(set(topical)) != len(topical) or not set(topical) <= set(nouns):
        raise AssertionError("demo labelled set: topic nouns must be distinct N-class words")
    shared = [w for w in nouns if w not in topical]

    def table(per_label: list[tuple[list[int], list[float]]]) -> tuple[np.ndarray, np.ndarray]:
        width = max(len(ids) for ids, _ in per_label)
        ids, cum = np.zeros((len(_LABELS), width), dtype=np.int64), np.full((len(_LABELS), width), 2.0)
        for c, (i, p) in enumerate(per_label):
            ids[c, : len(i)], cum[c, : len(i)] = i, _cum(np.array(p) / sum(p))
        return ids, cum

    templates = []
    for c in _LABELS:
        ts = [t for t, (_, classes, _) in enumerate(_TEMPLATES)
              if "N" in classes.split() or (c == "food" and classes == _LAB_FOOD_ONLY)]
        templates.append((ts, [_TEMPLATES[t][0] for t in ts]))
    noun = []
    for c in _LABELS:
        own = _LAB_NOUNS[c].split()
        noun.append(([_WID[w] for w in own + shared],
                      [(1 - _LAB_SHARE) / len(own)] * len(own) + [_LAB_SHARE / len(shared)] * len(shared)))
    return table(templates), table(noun)


(_LAB_TPL_ID, _LAB_TPL_CUM), (_LAB_NOUN_ID, _LAB_NOUN_CUM) = _labeled_tables()
_LAB_NOUN_SLOTS = [[c == "N" for c in classes.split()] for _, classes, _ in _TEMPLATES]
_LAB_HEAD = np.array(["\n" + c + "\t" for c in _LABELS], dtype=object)


def _labeled_chunks(n: int, seed: int, stream: str = "labeled") -> Iterator[list[str]]:
    for u in _uniforms(seed, stream, n, 2 + _LMAX):
        cls = (u[:, 0] * len(_LABELS)).astype(int)
        tpl = _LAB_TPL_ID[cls, _pick(_LAB_TPL_CUM[cls], u[:, 1])]
        ids = np.full((len(u), _LMAX), _PAD_WORD)
        for t, (slots, _, _) in enumerate(_TPL):
            rows = np.flatnonzero(tpl == t)
            if len(rows) == 0:
                continue
            for j, (words, cum, _) in enumerate(slots):
                if _LAB_NOUN_SLOTS[t][j]:
                    c = cls[rows]
                    ids[rows, j] = _LAB_NOUN_ID[c, _pick(_LAB_NOUN_CUM[c], u[rows, 2 + j])]
                else:
                    ids[rows, j] = words[np.searchsorted(cum, u[rows, 2 + j], side="right")]
        yield _lines(_LAB_HEAD[cls], _SRC_STR[0][ids[:, 0]], _SRC_STR[1][ids[:, 1:]])


# ---- slot filling (ATIS-like): flight, restaurant and weather requests, BIO tags
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
    return _strings(toks, ", "), _strings(tags, ", "), index


_SLOT_TOK, _SLOT_TAG, _SLOT_INDEX = _slot_units()
_SLOT_LMAX = max(len(t.split()) for t in _SLOT_TEMPLATES)


def _slots_chunks(n: int, seed: int) -> Iterator[list[str]]:
    for u in _uniforms(seed, "slots", n, 1 + _SLOT_LMAX):
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
        yield _lines('\n{"tokens": [', tok, '], "tags": [', tag, "]}")


# ---- public iterators
def iter_bitext(
    n: int, *, seed: int = 0, split: Literal["train", "test"] = "train"
) -> Iterator[tuple[str, str, str]]:
    """`n` pairs (src, tgt, Pharaoh alignment); `split="test"` is the held-out stream of the same grammar."""
    for chunk in _bitext_chunks(n, seed, split):
        yield from zip(*chunk)


def iter_mono(n: int, *, seed: int = 0) -> Iterator[str]:
    """`n` English-like lines, ~10 % of them out of the grammar (words not in the translation table)."""
    for chunk in _mono_chunks(n, seed):
        yield from chunk


def iter_labeled(n: int, *, seed: int = 0) -> Iterator[tuple[str, str]]:
    """`n` (label, text) rows over six topics."""
    for chunk in _labeled_chunks(n, seed):
        yield from (tuple(line.split("\t")) for line in chunk)


def iter_slots(n: int, *, seed: int = 0) -> Iterator[tuple[list[str], list[str]]]:
    """`n` (tokens, BIO tags) rows."""
    for chunk in _slots_chunks(n, seed):
        for line in chunk:
            row = json.loads(line)
            yield row["tokens"], row["tags"]


# ---- bad rows: ~1 in 2,000 lines of the written files, at least one of each reason (files of >= 500 lines)
BAD_REASONS = {
    "bitext": ["empty_src", "empty_tgt", "nul_byte_src", "invalid_utf8_tgt", "too_long_src"],
    "mono": ["empty", "nul_byte", "invalid_utf8", "too_long"],
    "labeled": ["wrong_columns", "empty_text", "nul_byte", "invalid_utf8", "too_long"],
    "slots": ["malformed_json", "length_mismatch", "nul_byte", "invalid_utf8", "too_long"],
}


def bad_lines(kind: str, n: int, *, seed: int = 0) -> dict[int, str]:
    """{1-based line: reason} of the `k = min(max(#reasons, n // 2000), n // 100)` planted bad lines, one per
    stratum of n/k lines, reasons in turn."""
    reasons = BAD_REASONS[kind]
    k = min(max(len(reasons), n // 2000), n // 100)
    if k == 0:
        return {}
    offset = np.random.default_rng([seed, _BAD_STREAM, _STREAMS["train" if kind == "bitext" else kind]]).random(k)
    lines = (np.arange(k) * n) // k + (offset * (n // k)).astype(int) + 1
    return {int(line): reasons[i % len(reasons)] for i, line in enumerate(lines)}


def _corrupt(line: str, reason: str) -> str:
    """The planted bad version of a good line (surrogate escapes become raw invalid bytes on write)."""
    mid = len(line) // 2
    if reason.startswith("empty"):
        return line.split("\t")[0] + "\t" if reason == "empty_text" else ""
    if reason.startswith("nul_byte"):
        return line[:mid] + "\x00" + line[mid:]
    if reason.startswith("invalid_utf8"):
        return line[:mid] + "\udcff\udcfe" + line[mid:]
    if reason == "wrong_columns":
        return line.replace(" ", "\t", 1)
    if reason == "malformed_json":
        return line[:-1]
    if reason == "length_mismatch":
        row = json.loads(line)
        return json.dumps({"tokens": row["tokens"], "tags": row["tags"][:-1]}, ensure_ascii=False)
    if reason.startswith("too_long"):
        row = json.loads(line) if line.startswith("{") else None
        label, tab, text = line.rpartition("\t")
        reps = 1
        while len(line) <= MAX_LINE_CHARS:
            reps *= 2
            line = label + tab + " ".join([text] * reps) if row is None else json.dumps(
                {"tokens": row["tokens"] * reps, "tags": row["tags"] * reps}, ensure_ascii=False)
        return line
    raise AssertionError(reason)


@dataclass(frozen=True)
class DemoPaths:
    root: Path
    train_src: Path
    train_tgt: Path
    alignments: Path
    test_src: Path
    test_tgt: Path
    mono: Path
    labeled: Path
    slots: Path
    lexicon: Path  # TSV en, de, p of the true table; an empty de is the null translation
    labeled_test: Path  # held out: the classifier of train_classifier is evaluated on it

    @classmethod
    def at(cls, root: Path) -> "DemoPaths":
        names = ("train.en train.de train.align test.en test.de mono.en labeled.tsv slots.jsonl lexicon.tsv "
                 "labeled_test.tsv").split()
        return cls(Path(root), *(Path(root) / name for name in names))


def _write(paths: list[Path], chunks, bad: dict[int, str]) -> None:
    """Stream chunks of line lists (one list per file) to `<name>.tmp`, planting `bad`, then rename."""
    tmps = [p.with_name(p.name + ".tmp") for p in paths]
    files = [open(t, "wb") for t in tmps]
    ok = False
    try:
        done = 0
        for chunk in chunks:
            cols = [chunk] if isinstance(chunk, list) else list(chunk)
            for line, reason in bad.items():
                if done < line <= done + len(cols[0]):
                    i = line - done - 1
                    if len(cols) == 3:  # bitext: one side corrupted, no gold alignment
                        side = 0 if reason.endswith("_src") else 1
                        cols[side][i], cols[2][i] = _corrupt(cols[side][i], reason), ""
                    else:
                        cols[0][i] = _corrupt(cols[0][i], reason)
            done += len(cols[0])
            for f, lines in zip(files, cols):
                f.write(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
        ok = True
    finally:
        for f, tmp in zip(files, tmps):
            f.close()
            if not ok:
                tmp.unlink()
    for tmp, path in zip(tmps, paths):
        os.replace(tmp, path)


def write_demo(
    root: Path, *, seed: int = 0, bitext_rows: int = 3000, mono_rows: int = 5000, labeled_rows: int = 1200,
    slots_rows: int = 1200, test_rows: int = 300, bad_rows: bool = True,
) -> tuple[DemoPaths, dict[str, dict[int, str]]]:
    """Write every demo corpus under `root`; returns the paths and {file name: {1-based line: planted reason}}.

    A bad bitext pair corrupts one side and leaves its `train.align` line empty; the line count of the
    three bitext files stays equal. `test.*`, `labeled_test.tsv` (``test_rows`` rows) and `lexicon.tsv` are
    always clean.
    """
    paths = DemoPaths.at(root)
    paths.root.mkdir(parents=True, exist_ok=True)
    rows = {"bitext": bitext_rows, "mono": mono_rows, "labeled": labeled_rows, "slots": slots_rows}
    planted = {kind: bad_lines(kind, n, seed=seed) if bad_rows else {} for kind, n in rows.items()}
    train = [paths.train_src, paths.train_tgt, paths.alignments]
    _write(train, _bitext_chunks(bitext_rows, seed, "train"), planted["bitext"])
    _write([paths.test_src, paths.test_tgt], (c[:2] for c in _bitext_chunks(test_rows, seed, "test")), {})
    _write([paths.mono], _mono_chunks(mono_rows, seed), planted["mono"])
    _write([paths.labeled], _labeled_chunks(labeled_rows, seed), planted["labeled"])
    _write([paths.slots], _slots_chunks(slots_rows, seed), planted["slots"])
    _write([paths.labeled_test], _labeled_chunks(test_rows, seed, stream="labeled_test"), {})
    lexicon = [f"{en}\t{de}\t{p:g}" for en, t in sorted(_TABLE.items()) for de, p in sorted(t.items())]
    _write([paths.lexicon], iter([lexicon]), {})
    by_file = {p.name: planted["bitext"] for p in train}
    by_file |= {paths.mono.name: planted["mono"], paths.labeled.name: planted["labeled"]}
    by_file[paths.slots.name] = planted["slots"]
    return paths, by_file


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m storage.demo", description="Write the demo corpora under ROOT.")
    ap.add_argument("root", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    for name, default in [("bitext", 3000), ("mono", 5000), ("labeled", 1200), ("slots", 1200), ("test", 300)]:
        ap.add_argument(f"--{name}-rows", type=int, default=default)
    ap.add_argument("--no-bad-rows", dest="bad_rows", action="store_false")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    paths, bad = write_demo(
        a.root, seed=a.seed, bitext_rows=a.bitext_rows, mono_rows=a.mono_rows, labeled_rows=a.labeled_rows,
        slots_rows=a.slots_rows, test_rows=a.test_rows, bad_rows=a.bad_rows,
    )
    counts = ", ".join(f"{name} {len(lines)}" for name, lines in bad.items())
    print(f"demo corpora in {paths.root} ({time.perf_counter() - t0:.1f} s); planted bad lines: {counts}")


if __name__ == "__main__":
    main()
