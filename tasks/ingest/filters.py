"""Corpus filters with OpusFilter's definitions, computed over whole Arrow columns.

Each function scores every row of a shard at once and returns ``Scored``: the score OpusFilter computes for a row
(per side where it has one per side), whether the row passes, and the ``detail`` a dropped row records. The
definitions, parameter names, defaults and accept rules are OpusFilter 3.3's (``opusfilter/filters.py``, named in
each docstring); what differs is how they are computed. OpusFilter calls Python (and the ``regex`` module) once per
sentence; here a column's text is decoded once into one numpy array of code points, per-character properties are
table lookups (``Alphabetic``, ``Script=…`` and ``White_Space`` from the ``regex`` module, built once per process),
and per-row counts are ``bincount``s over row ids. Written by hand because no maintained package filters Arrow
columns by these definitions (datatrove's and NeMo Curator's filters are per document, in Python).

Where a definition cannot be vectorised exactly the work is narrowed first and the rest done as OpusFilter does:
``html_tags`` parses with BeautifulSoup only the rows holding a ``<``; ``non_zero_numerals`` runs difflib only on
pairs whose digit strings differ; ``repetition`` runs its backreference regex only on rows with a character
repeated often enough to form a match.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import regex

TERMINAL = ".?!…"  # TerminalPunctuationFilter's marks
MAX_CODEPOINT = 0x110000


@dataclass(frozen=True)
class Scored:
    """A filter's verdict on every row: ``keep`` (bool), ``value`` (the score OpusFilter computes, per row) and
    ``detail``: for each dropped row the value it was cut on, as its `dropped` row records it (None when kept)."""

    keep: np.ndarray
    value: np.ndarray
    detail: list[str | None]
    # keyword-only (a subclass adds positional fields): language_id's language found in each row ("-": none), its
    # confidence (nan where not classified or shorter than SHORT_CHARS), and a pair verdict's per-side verdicts
    detected: list[str] | None = field(default=None, kw_only=True)
    confidence: np.ndarray | None = field(default=None, kw_only=True)
    sides: tuple[Scored, ...] = field(default=(), kw_only=True)


def scored(name: str, keep: np.ndarray, value: np.ndarray, extra: dict[int, str] | None = None) -> Scored:
    """``Scored`` with ``name=value`` (4 decimals; and ``extra[i]``) as the detail of each dropped row i."""
    detail: list[str | None] = [None] * len(keep)
    for i in np.flatnonzero(~keep):
        detail[i] = f"{name}={round(float(value[i]), 4) + 0.0:g}" + (extra or {}).get(int(i), "")  # + 0.0: no "-0"
    return Scored(keep, value, detail)


@dataclass(frozen=True)
class Codepoints:
    """A text column as code points: ``cps`` (uint32, every row's characters end to end), ``lengths`` (characters
    per row) and ``rows`` (the row of each character)."""

    cps: np.ndarray
    lengths: np.ndarray
    rows: np.ndarray

    @classmethod
    def of(cls, column: pa.Array | pa.ChunkedArray) -> Codepoints:
        """Decode ``column`` (strings, no nulls) once: UTF-8 to UTF-32 in one call for the whole column."""
        strings = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        lengths = pc.utf8_length(strings).to_numpy(zero_copy_only=False).astype(np.int64)
        wide = np.int64 if pa.types.is_large_string(strings.type) else np.int32
        offsets = np.frombuffer(strings.buffers()[1], dtype=wide)[strings.offset : strings.offset + len(strings) + 1]
        data = strings.buffers()[2]
        text = b"" if data is None else data.to_pybytes()[offsets[0] : offsets[-1]]
        cps = np.frombuffer(text.decode("utf-8").encode("utf-32-le"), dtype=np.uint32)
        return cls(cps, lengths, np.repeat(np.arange(len(lengths)), lengths))

    def count(self, table: np.ndarray) -> np.ndarray:
        """Per row, the characters for which the boolean code-point ``table`` is true."""
        return np.bincount(self.rows, weights=table[self.cps], minlength=len(self.lengths)).astype(np.int64)


@functools.cache
def _all_characters() -> str:
    return "".join(chr(c) for c in range(MAX_CODEPOINT) if not 0xD800 <= c <= 0xDFFF)


@functools.cache
def property_table(pattern: str) -> np.ndarray:
    """A boolean table over every code point: true where the one-character ``regex`` pattern matches (e.g.
    ``\\p{Alphabetic=Yes}``, ``\\p{Script=Latin}``, ``\\s``), as the ``regex`` module decides it."""
    table = np.zeros(MAX_CODEPOINT, dtype=bool)
    found = regex.findall(pattern, _all_characters())
    table[np.frombuffer("".join(found).encode("utf-32-le"), dtype=np.uint32)] = True
    return table


@functools.cache
def _python_space() -> np.ndarray:
    """``str.split()``'s separators (``str.isspace``), which OpusFilter's word counts use."""
    return np.array([chr(c).isspace() for c in range(MAX_CODEPOINT)], dtype=bool)


def _word_begins(text: Codepoints) -> tuple[np.ndarray, np.ndarray]:
    """(whether each character is inside a ``str.split()`` word, whether a word begins there)."""
    word = ~_python_space()[text.cps]
    after_space = np.concatenate(([True], ~word[:-1]))
    after_space[(np.cumsum(text.lengths) - text.lengths)[text.lengths > 0]] = True  # a row's first character
    return word, word & after_space


def word_counts(text: Codepoints) -> np.ndarray:
    """Per row, the number of ``str.split()`` words."""
    if not len(text.cps):
        return np.zeros(len(text.lengths), np.int64)
    _, begins = _word_begins(text)
    return np.bincount(text.rows[begins], minlength=len(text.lengths))


def word_lengths(text: Codepoints) -> tuple[np.ndarray, np.ndarray]:
    """Per row, (the number of ``str.split()`` words, the length of the longest one; 0 for none)."""
    n = len(text.lengths)
    if not len(text.cps):
        return np.zeros(n, np.int64), np.zeros(n, np.int64)
    word, begins = _word_begins(text)
    sizes = np.bincount(np.cumsum(begins)[word] - 1, minlength=int(begins.sum()))  # words in order
    owner = text.rows[begins]  # sorted: rows in order
    counts = np.bincount(owner, minlength=n)
    longest = np.zeros(n, np.int64)
    if len(sizes):
        first = np.flatnonzero(np.concatenate(([True], owner[1:] != owner[:-1])))
        longest[owner[first]] = np.maximum.reduceat(sizes, first)
    return counts, longest


def alphabet_ratio(column: pa.Array, *, threshold: float = 0.75, exclude_whitespace: bool = False) -> Scored:
    """``AlphabetRatioFilter``: the share of ``\\p{Alphabetic}`` characters (after removing ``\\s`` if
    ``exclude_whitespace``); 1.0 for an empty segment; kept iff ratio >= ``threshold``."""
    text = Codepoints.of(column)
    size = text.lengths - (text.count(property_table(r"\s")) if exclude_whitespace else 0)
    alphas = text.count(property_table(r"\p{Alphabetic=Yes}"))
    ratio = np.where(size > 0, alphas / np.maximum(size, 1), 1.0)
    return scored("alphabet_ratio", ratio >= threshold, ratio)


def character_score(column: pa.Array, *, script: str, threshold: float = 1.0) -> Scored:
    """``CharacterScoreFilter``: of the alphabetic characters, the share in ``script`` (``\\p{Script=…}``,
    e.g. Latin, Cyrillic); 1.0 when there is none; kept iff ratio >= ``threshold``."""
    text = Codepoints.of(column)
    alphabetic = property_table(r"\p{Alphabetic=Yes}")
    alphas = text.count(alphabetic)
    in_script = text.count(alphabetic & property_table(rf"\p{{Script={script}}}"))
    ratio = np.where(alphas > 0, in_script / np.maximum(alphas, 1), 1.0)
    return scored("character_score", ratio >= threshold, ratio)


def long_word(column: pa.Array, *, threshold: int = 40) -> Scored:
    """``LongWordFilter``: the longest ``str.split()`` word; kept iff shorter than ``threshold``."""
    _, longest = word_lengths(Codepoints.of(column))
    return scored("longest_word", longest < threshold, longest)


def length(column: pa.Array, *, min_length: int = 1, max_length: int = 100, unit: str = "word") -> tuple[np.ndarray, np.ndarray]:
    """``LengthFilter`` on one side: (its length in words or characters, whether min <= length <= max)."""
    text = Codepoints.of(column)
    size = word_counts(text) if unit == "word" else text.lengths
    return size, (min_length <= size) & (size <= max_length)


def length_ratio(src: pa.Array, tgt: pa.Array, *, threshold: float = 3, unit: str = "word") -> Scored:
    """``LengthRatioFilter``: longer / shorter side in words or characters (inf if only one side is empty, 0 if
    both are); kept iff ratio < ``threshold``."""
    a, b = (length(side, min_length=0, max_length=2**62, unit=unit)[0] for side in (src, tgt))
    low, high = np.minimum(a, b), np.maximum(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(low > 0, high / np.maximum(low, 1), np.where(high > 0, np.inf, 0.0))
    return scored("length_ratio", ratio < threshold, ratio)


def terminal_punctuation(src: pa.Array, tgt: pa.Array, *, threshold: float = -2) -> Scored:
    """``TerminalPunctuationFilter``: with s, t the counts of . ? ! … per side, the penalty
    -log(|s − t| + max(s − 1, 0) + max(t − 1, 0) + 1); kept iff penalty >= ``threshold``."""
    pattern = "[" + regex.escape(TERMINAL) + "]"
    s, t = (pc.count_substring_regex(side, pattern).to_numpy(zero_copy_only=False).astype(np.int64) for side in (src, tgt))
    score = -np.log(np.abs(s - t) + np.maximum(s - 1, 0) + np.maximum(t - 1, 0) + 1.0)
    return scored("terminal_punctuation", score >= threshold, score)


def non_zero_numerals(
    src: pa.Array, tgt: pa.Array, *, threshold: float = 0.5, ordered: bool = True, skip_one_sided: bool = False
) -> Scored:
    """``NonZeroNumeralsFilter``: difflib's ratio between the sequences of the digits 1-9 of the two sides (1.0
    when both have none); kept iff ratio >= ``threshold``. Only pairs whose sequences differ go through difflib.
    Beyond OpusFilter: ``ordered=False`` sorts each row's digits first (numbers change places in translation);
    ``skip_one_sided`` scores 1.0 a pair where only one side has a digit 1-9 (the other wrote it as a word)."""
    (ds, rs, ns), (dt, rt, nt) = (_digits(Codepoints.of(side)) for side in (src, tgt))
    if not ordered:  # each row's digits in ascending order (rows stay in order: sort by row, then digit)
        ds, dt = ds[np.lexsort((ds, rs))], dt[np.lexsort((dt, rt))]
    same_count = ns == nt
    ms, mt = same_count[rs], same_count[rt]
    mismatch = np.bincount(rs[ms], weights=ds[ms] != dt[mt], minlength=len(ns)) > 0  # aligned where counts agree
    ratio = np.ones(len(ns))
    start_s, start_t = np.cumsum(ns) - ns, np.cumsum(nt) - nt
    digits = {
        int(i): (_text(ds[start_s[i] : start_s[i] + ns[i]]), _text(dt[start_t[i] : start_t[i] + nt[i]]))
        for i in np.flatnonzero(~same_count | mismatch)
    }
    for i, (a, b) in digits.items():
        ratio[i] = 1.0 if skip_one_sided and not (a and b) else difflib.SequenceMatcher(None, a, b).ratio()
    keep = ratio >= threshold
    extra = {int(i): f" ({digits[i][0] or '-'} vs {digits[i][1] or '-'})" for i in np.flatnonzero(~keep)}
    return scored("non_zero_numerals", keep, ratio, extra)


def _digits(text: Codepoints) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ASCII digits 1-9 of every row in order (as code points), their rows, and how many each row has."""
    digit = (text.cps >= ord("1")) & (text.cps <= ord("9"))
    return text.cps[digit], text.rows[digit], np.bincount(text.rows[digit], minlength=len(text.lengths))


def _text(cps: np.ndarray) -> str:
    return cps.astype(np.uint32).tobytes().decode("utf-32-le")


@functools.cache
def _repetition_regex(threshold: int, min_length: int, max_length: int) -> regex.Pattern:
    return regex.compile(f"(\\S.{{{min_length - 1},{max_length}}}?)(?: *\\1){{{threshold},}}")


def repetitions(
    text: str, *, threshold: int = 2, min_length: int = 3, max_length: int = 100, pos: int = 0
) -> tuple[int, str | None]:
    """``RepetitionFilter.get_repetitions``: (repeats after the first, the repeated string) of the first match of
    a substring of ``min_length``..``max_length`` characters repeated ``threshold`` more times; (0, None) if none.
    The search starts at ``pos``: where no match can start before it, the first match is the same."""
    match = _repetition_regex(threshold, min_length, max_length).search(text, pos)
    if match is None:
        return 0, None
    return match.group(0).count(match.group(1)) - 1, match.group(1)


def periodic_runs(text: Codepoints, *, times: int, max_period: int) -> dict[int, int]:
    """The rows holding, once their spaces are removed, ``times`` copies in a row of some string of at most
    ``max_period`` characters (a substring equal to itself shifted by P over ``(times − 1)·P`` characters), each with
    the first character (its index in the row) where such a run begins."""
    keep = text.cps != ord(" ")
    at = np.flatnonzero(keep)
    cps, rows = text.cps[keep], text.rows[keep]
    room = np.cumsum(np.bincount(rows, minlength=len(text.lengths)))[rows] - np.arange(len(cps))  # to the row's end
    first_of_row = np.cumsum(text.lengths) - text.lengths
    size = np.bincount(rows, minlength=len(text.lengths))[rows]  # the row's characters, at each position
    begins: list[np.ndarray] = []
    for period in range(1, max_period + 1):
        if period % 8 == 1:  # rows too short for `times` copies of this period drop out (most do past ~30)
            long = size >= times * period
            at, cps, rows, room, size = at[long], cps[long], rows[long], room[long], size[long]
        if len(cps) <= period:
            break
        equal = cps[:-period] == cps[period:]
        equal &= room[:-period] > period  # the shifted character is in the same row
        edges = np.flatnonzero(np.diff(equal.view(np.int8), prepend=np.int8(0), append=np.int8(0)))
        starts, ends = edges[::2], edges[1::2]
        found = starts[ends - starts >= (times - 1) * period]
        begins.append(np.stack([rows[found], at[found]]))
    if not begins or not (found := np.concatenate(begins, axis=1)).size:
        return {}
    row, pos = found[0], found[1] - first_of_row[found[0]]
    order = np.lexsort((pos, row))
    first = order[np.concatenate(([True], row[order][1:] != row[order][:-1]))]
    return dict(zip(row[first].tolist(), pos[first].tolist(), strict=True))


@functools.cache
def _word_repetition_regex(threshold: int, min_length: int, max_length: int) -> regex.Pattern:
    return regex.compile(f"(?<!\\S)(\\S+(?: \\S+){{{min_length - 1},{max_length - 1}}}?)(?: \\1(?!\\S)){{{threshold},}}")


def word_repetition(columns: list[pa.Array], *, threshold: int = 1, min_length: int = 1, max_length: int = 10) -> Scored:
    """``repetition`` over words (``unit: word``): a run of ``min_length``..``max_length`` whole words followed
    ``threshold`` or more times by itself (spaces normalised): "A man sits. A A" repeats "A" once. The score is the
    most repeats of the first such run on any side (kept iff fewer than ``threshold``); rows are searched one by one."""
    pattern = _word_repetition_regex(threshold, min_length, max_length)
    n = len(columns[0])
    score, repeated = np.zeros(n, np.int64), [None] * n
    for column in columns:
        for i, value in enumerate(pc.utf8_split_whitespace(column).to_pylist()):
            match = pattern.search(" ".join(value or ()))
            if match and (count := (len(match.group(0)) + 1) // (len(match.group(1)) + 1) - 1) > score[i]:
                score[i], repeated[i] = count, match.group(1)
    return scored("repetition", score < threshold, score, {i: f" ({w!r})" for i, w in enumerate(repeated) if w})


def repetition(columns: list[pa.Array], *, threshold: int = 2, min_length: int = 3, max_length: int = 100) -> Scored:
    """``RepetitionFilter``: the most repeats on any side (``repetitions``); kept iff fewer than ``threshold``.
    A match is a string X of ``min_length``..``max_length`` + 1 characters followed ``threshold`` times by spaces
    and X again: without its spaces, ``threshold`` + 1 copies of X minus its spaces. Only the rows that hold such
    a periodic run (``periodic_runs``, a few percent of real text) are searched with the regex."""
    n = len(columns[0])
    score, repeated = np.zeros(n, np.int64), [None] * n
    for column in columns:
        runs = periodic_runs(Codepoints.of(column), times=threshold + 1, max_period=max_length + 1)
        values = pc.take(column, pa.array(list(runs), pa.int64())).to_pylist()
        for (i, start), value in zip(runs.items(), values, strict=True):  # no match starts before the first run
            count, what = repetitions(value, threshold=threshold, min_length=min_length, max_length=max_length, pos=start)
            if count > score[i]:
                score[i], repeated[i] = count, what
    return scored("repetition", score < threshold, score, {i: f" ({w!r})" for i, w in enumerate(repeated) if w})


def has_html_tag(text: str) -> bool:
    """``HtmlTagFilter.check``: BeautifulSoup (html.parser) finds a tag; a segment it fails to parse has none."""
    import bs4

    try:
        return bool(bs4.BeautifulSoup(text, "html.parser").find())
    except (TypeError, UnboundLocalError, NotImplementedError, AssertionError, bs4.builder.ParserRejectedMarkup):
        return False


def html_tags(columns: list[pa.Array]) -> Scored:
    """``HtmlTagFilter``: kept iff no side holds an HTML tag. Only rows with a ``<`` are parsed: without one
    there is no tag."""
    n = len(columns[0])
    tagged = np.zeros(n, dtype=bool)
    for column in columns:
        maybe = np.flatnonzero(pc.match_substring(column, "<").to_numpy(zero_copy_only=False))
        values = pc.take(column, pa.array(maybe, pa.int64())).to_pylist()
        tagged[maybe[[has_html_tag(v) for v in values]] if len(maybe) else maybe] = True
    return scored("html_tags", ~tagged, tagged.astype(np.float64))
