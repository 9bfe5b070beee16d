"""Language identification filter with OpusFilter 3.3's definition (``LanguageIDFilter``, i.e. ``LangidFilter`` and
``LinguaFilter`` of ``opusfilter/lid.py``), over a whole Arrow column.

A segment's score is the identifier's confidence in the language it detects when that is the expected ``language``,
0 when it detects another; an empty segment scores 1.0 and is not classified ("prevent filtering empty lines"). A
segment is kept iff score > ``threshold`` (strictly: with the default 0 a segment is dropped when another language is
detected, or when the expected one is detected with a confidence that rounds to 0). As in OpusFilter:

- ``py3langid``: the normalised probability (``norm_probs=True``) of the top language, rounded to 2 decimals;
  ``langid_languages`` restricts the candidates (py3langid's ``set_languages``, as OpusFilter's option of that name).
- ``lingua`` (``lingua-language-detector``): the first of ``compute_language_confidence_values``, not rounded;
  ``lingua_mode`` "low" (low-accuracy mode) or "high"; ``langid_languages`` restricts the candidates here too.

What is hand-written, and why: py3langid's ``classify`` walks its byte n-gram automaton in a Python loop over every
byte of every sentence (about 6,000 sentences/s). Here the same model, loaded by py3langid (its arrays, its
``set_languages``), is walked over all the rows of a column at once, one numpy step per byte position, and the naive
Bayes scores are one sparse-matrix product; then the same temperature (1/√bytes), softmax, alias folding and argmax
as ``LanguageIdentifier._decide`` (tests compare the result with ``classify`` row for row). Lingua is called per
row as it is (its ``_in_parallel`` variant runs its own thread pool of every core, which a stage does not own).
Identifiers are built once per process per language set (``functools.cache``); nothing process-global is changed
(py3langid's module-level identifier is never used).
"""

from __future__ import annotations

import functools
import threading
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ConfError
from tasks.ingest.filters import Scored

IDENTIFIERS = ("py3langid", "lingua")
# py3langid over {de, en} on prefixes of WMT21 news and Multi30k sentences (bench/filter_quality.py --short):
# wrong on 12 % of 5-9 characters, 4.9 % of 10-14, 1.8 % of 15-19, 1.1 % of 20-24, 0.7 % of 25-29, 0.3 % of 30-39
SHORT_CHARS = 25  # the recommended `min_chars`: below it a side is never dropped on its language alone
CONFIDENT = 0.9  # a decision the swapped-languages check counts: at least this confident, on a side >= SHORT_CHARS
SWAPPED_SHARE = 0.5  # more than this share of a side's confident decisions the other side's language: refused
SWAPPED_MIN_ROWS = 10  # ... when there are at least this many of them
LINGUA_MODES = ("low", "high")
CHUNK_BYTES = 1 << 22  # rows are walked in chunks of about this many UTF-8 bytes (bounds the feature arrays)


def language_id(
    column: pa.Array | pa.ChunkedArray,
    *,
    language: str,
    threshold: float = 0.0,
    identifier: str = "py3langid",
    langid_languages: Sequence[str] | None = None,
    lingua_mode: str = "low",
    min_chars: int = 0,
) -> Scored:
    """``LanguageIDFilter`` on one side: score = confidence if the detected language is ``language`` (ISO 639-1,
    e.g. "de") else 0, 1.0 for an empty segment; kept iff score > ``threshold``.

    ``value`` is OpusFilter's score. The ``detail`` of a dropped row is ``language_id=<detected>:<confidence>``:
    the detected language and the identifier's confidence in it as the rule reads it (2 decimals for py3langid,
    printed with at most 4), e.g. ``language_id=ru:0.99`` for a Russian line on the German side,
    ``language_id=de:0`` for German at a confidence that rounds to 0. The detected language is ``-`` for an empty
    segment (only dropped with ``threshold`` >= 1) and for a segment lingua finds no language in. Nulls count as
    empty segments. Beyond OpusFilter: a segment of fewer than ``min_chars`` characters is classified but always
    kept. ``detected`` and ``confidence`` hold each row's decision (``check_languages`` reads them).
    """
    texts = _texts(column)
    restrict = tuple(sorted(set(langid_languages))) if langid_languages else None
    if identifier == "py3langid":
        known = langid_labels(None)
        if restrict and (unknown := [code for code in restrict if code not in known]):
            raise ConfError(f"language_id: parameter langid_languages: py3langid does not know {', '.join(unknown)}")
        _check_language(language, restrict or tuple(known), identifier)
    elif identifier == "lingua":
        if lingua_mode not in LINGUA_MODES:
            raise ConfError(
                f"language_id: parameter lingua_mode: expected one of {', '.join(LINGUA_MODES)}, found {lingua_mode!r}"
            )
        if restrict:
            _check_language(language, restrict, identifier)
    else:
        raise ConfError(f"language_id: parameter identifier: expected one of {', '.join(IDENTIFIERS)}, found {identifier!r}")
    full = [i for i, t in enumerate(texts) if t]
    if identifier == "py3langid":
        found, confidence = langid_classify([texts[i] for i in full], languages=restrict)
        confidence = np.array([round(float(c), 2) for c in confidence])  # OpusFilter: round(float(conf), 2)
    else:
        found, confidence = lingua_classify([texts[i] for i in full], mode=lingua_mode, languages=restrict)
    value, detected, conf = np.ones(len(texts)), ["-"] * len(texts), np.ones(len(texts))
    for i, lang, c in zip(full, found, confidence.tolist()):
        detected[i], conf[i], value[i] = lang, c, c if lang == language else 0.0
    keep = (value > threshold) | np.array([len(t) < min_chars for t in texts], dtype=bool)
    detail: list[str | None] = [None] * len(texts)
    for i in np.flatnonzero(~keep).tolist():
        detail[i] = f"language_id={detected[i]}:{round(conf[i], 4) + 0.0:g}"
    sure = np.where([len(t) >= max(min_chars, SHORT_CHARS) for t in texts], conf, np.nan)
    return Scored(keep, value, detail, detected=detected, confidence=np.where([bool(t) for t in texts], sure, np.nan))


def check_languages(sides: Sequence[Scored], languages: Sequence[str], dataset: str) -> None:
    """ConfError when a bitext's languages look swapped or wrong: of a side's confident decisions (at least
    ``CONFIDENT``, on a segment of at least ``SHORT_CHARS`` characters; ``SWAPPED_MIN_ROWS`` or more), more than
    ``SWAPPED_SHARE`` found the other side's language, e.g. ``datasets.news.src_lang`` is 'de' but 912 of 1,000
    confidently identified src rows are 'en', the tgt_lang."""
    keys = ("src_lang", "tgt_lang")
    if len(sides) != 2 or languages[0] == languages[1]:
        return
    for i, side in enumerate(sides):
        if side.detected is None or side.confidence is None:
            return
        sure = np.flatnonzero(side.confidence >= CONFIDENT)
        other = languages[1 - i]
        found = sum(side.detected[j] == other for j in sure.tolist())
        if len(sure) >= SWAPPED_MIN_ROWS and found > SWAPPED_SHARE * len(sure):
            side_name = keys[i].removesuffix("_lang")
            raise ConfError(
                f"datasets.{dataset}.{keys[i]} is {languages[i]!r}, but {found:,} of the {len(sure):,} confidently "
                f"identified {side_name} rows are {other!r}, its {keys[1 - i]}: are datasets.{dataset}.src_lang "
                f"and tgt_lang swapped (or wrong)?"
            )


def both_sides(src: Scored, tgt: Scored) -> Scored:
    """A pair's verdict from its two sides': kept iff both are; ``value`` is (n, 2), OpusFilter's per-side score; the
    detail names the sides that failed, e.g. ``src:language_id=ru:0.99 tgt:language_id=en:1``."""
    detail = [
        " ".join(f"{side}:{d}" for side, d in (("src", s), ("tgt", t)) if d is not None) or None
        for s, t in zip(src.detail, tgt.detail, strict=True)
    ]
    return Scored(src.keep & tgt.keep, np.stack([src.value, tgt.value], axis=1), detail, sides=(src, tgt))


def _texts(column: pa.Array | pa.ChunkedArray) -> list[str]:
    return pc.fill_null(column, "").to_pylist()


def _check_language(language: str, known: Sequence[str], identifier: str) -> None:
    if language not in known:
        raise ConfError(
            f"language_id: parameter language: expected an ISO 639-1 code that {identifier} identifies here "
            f"({', '.join(known)}), found {language!r}"
        )


# -- py3langid, over a whole column ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Langid:
    """py3langid's model as arrays: the byte automaton (``nextmove``, ``rowbase``, ``output``: the feature a state
    emits, -1 for none) and the naive Bayes tables (``ptc``: features × classes, ``pc``: class priors)."""

    nextmove: np.ndarray
    rowbase: np.ndarray
    output: np.ndarray
    ptc: np.ndarray
    pc: np.ndarray
    classes: tuple[str, ...]
    aliases: tuple[tuple[int, int], ...]  # (first, duplicate) columns of a label that occurs twice (srl -> sr)


# The nightly runs pipelines in threads: the first to ask loads a model, the others wait for it (unlocked, each thread
# that found the cache empty loaded its own copy: ~6 s of the demo's cold `filter_chain`)
_LOADING = threading.Lock()


def _langid(languages: tuple[str, ...] | None) -> _Langid:
    """py3langid's tables for ``languages`` (None: all of its model's), built once per process."""
    with _LOADING:
        return _langid_tables(languages)


@functools.cache
def _identifier():  # -> py3langid.langid.LanguageIdentifier
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


@functools.cache
def _langid_tables(languages: tuple[str, ...] | None) -> _Langid:
    model = _identifier()  # one model file read per process: a restriction selects from its full tables
    model.set_languages(languages)  # reassigns the tables it selects (the full ones are kept): none is changed
    try:
        first: dict[str, int] = {}
        aliases = tuple((first.setdefault(c, i), i) for i, c in enumerate(model.nb_classes) if first.setdefault(c, i) != i)
        return _Langid(
            nextmove=np.asarray(model.tk_nextmove, dtype=np.uint32),
            rowbase=np.asarray(model.tk_row, dtype=np.int64) << 8,
            output=np.asarray(model.tk_output, dtype=np.int32),
            ptc=np.ascontiguousarray(model.nb_ptc, dtype=np.float32),
            pc=np.asarray(model.nb_pc, dtype=np.float32),
            classes=tuple(model.nb_classes),
            aliases=aliases,
        )
    finally:
        model.set_languages(None)


def langid_labels(languages: tuple[str, ...] | None) -> list[str]:
    """The languages py3langid can answer (all of its model's, or those of ``languages``)."""
    return list(dict.fromkeys(_langid(languages).classes))


def _langid_bytes(text: str) -> bytes:
    """The bytes py3langid classifies (``LanguageIdentifier._encode``): an all-uppercase text lowercased, NFC."""
    if text.isupper():
        text = text.lower()
    return unicodedata.normalize("NFC", text).encode("utf8", errors="surrogatepass")


def langid_classify(texts: Sequence[str], *, languages: tuple[str, ...] | None = None) -> tuple[list[str], np.ndarray]:
    """py3langid's ``classify`` with normalised probabilities for every text: (language, confidence as float32)."""
    model = _langid(languages)
    encoded = [_langid_bytes(t) for t in texts]
    sizes = np.fromiter(map(len, encoded), np.int64, len(encoded))
    ends = np.cumsum(sizes)
    found: list[str] = []
    confidence: list[np.ndarray] = []
    start = 0
    while start < len(encoded):
        stop = max(int(np.searchsorted(ends, (ends[start - 1] if start else 0) + CHUNK_BYTES, side="right")), start + 1)
        probs = _langid_probs(model, encoded[start:stop], sizes[start:stop])
        best = probs.argmax(axis=1)
        found += [model.classes[i] for i in best.tolist()]
        confidence.append(probs[np.arange(len(best)), best])
        start = stop
    return found, np.concatenate(confidence) if confidence else np.zeros(0, np.float32)


def _langid_probs(model: _Langid, encoded: list[bytes], sizes: np.ndarray) -> np.ndarray:
    """``LanguageIdentifier._decide`` for every row: (rows, classes) probabilities."""
    from scipy.sparse import csr_matrix

    n = len(encoded)
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    order = np.argsort(-sizes, kind="stable")  # longest first: the rows still walking are a prefix
    starts, longest_first = (np.cumsum(sizes) - sizes)[order], sizes[order]
    state = np.zeros(n, np.uint32)
    rows, features = [], []
    for t in range(int(sizes.max(initial=0))):
        k = int(np.searchsorted(-longest_first, -t, side="left"))  # rows with more than t bytes
        state[:k] = model.nextmove[model.rowbase[state[:k]] + data[starts[:k] + t]]
        rows.append(order[:k])
        features.append(model.output[state[:k]])
    row, feature = np.concatenate([np.zeros(0, np.int64), *rows]), np.concatenate([np.zeros(0, np.int32), *features])
    hit = feature >= 0
    counts = csr_matrix((np.ones(int(hit.sum()), np.float32), (row[hit], feature[hit])), shape=(n, model.ptc.shape[0]))
    counts.sum_duplicates()  # py3langid's Counter of the features visited
    visits = csr_matrix((np.log1p(counts.data), counts.indices, counts.indptr), shape=counts.shape)
    scores = np.asarray(visits @ model.ptc, dtype=np.float32)
    featured = np.diff(visits.indptr) > 0
    scores[featured] += model.pc  # a featureless row scores 0 everywhere: uniform
    scores *= (1.0 / np.sqrt(np.maximum(sizes, 1).astype(np.float64))).astype(np.float32)[:, None]
    np.exp(scores - scores.max(axis=1, keepdims=True), out=scores)
    scores /= scores.sum(axis=1, keepdims=True)
    for i, j in model.aliases:
        scores[:, i] += scores[:, j]
        scores[:, j] = 0.0
    return scores


# -- lingua ---------------------------------------------------------------------------------------------------


def _lingua(mode: str, languages: tuple[str, ...] | None):  # -> lingua.LanguageDetector
    """lingua's detector for ``mode`` and ``languages``, built once per process."""
    with _LOADING:
        return _lingua_detector(mode, languages)


@functools.cache
def _lingua_detector(mode: str, languages: tuple[str, ...] | None):  # -> lingua.LanguageDetector
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    if languages:
        unknown = [code for code in languages if not hasattr(IsoCode639_1, code.upper())]
        if unknown:
            raise ConfError(f"language_id: parameter langid_languages: lingua does not know {', '.join(unknown)}")
        builder = LanguageDetectorBuilder.from_iso_codes_639_1(*(getattr(IsoCode639_1, c.upper()) for c in languages))
    else:
        builder = LanguageDetectorBuilder.from_all_languages()
    if mode == "low":  # preloading the low-accuracy models is cheap (~0.6 s, ~30 MB) and spares each row a lookup
        return builder.with_low_accuracy_mode().with_preloaded_language_models().build()
    return builder.build()  # OpusFilter preloads here too: ~30 s and ~1.2 GB; loaded lazily, the values are the same


def lingua_classify(
    texts: Sequence[str], *, mode: str = "low", languages: tuple[str, ...] | None = None
) -> tuple[list[str], np.ndarray]:
    """lingua's top language and confidence for every text; ``-`` and 0 where it finds none."""
    detector = _lingua(mode, languages)
    found, confidence = [], np.zeros(len(texts))
    for i, text in enumerate(texts):
        top = detector.compute_language_confidence_values(text)[0]
        found.append(top.language.iso_code_639_1.name.lower() if top.value > 0 else "-")
        confidence[i] = top.value
    return found, confidence
