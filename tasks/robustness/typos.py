"""OpusTrainer's ``Typos`` (``opustrainer/modifiers/typos.py`` over typo 0.1.5's ``StrErrer``), source side only.

    Typos: p, [char_swap: 0.1, missing_char: 0.1, …]
    for a row with uniform(row, 0) < p, for each kind k in the configured order:
        if uniform(row, 1 + KINDS.index(k)) < p_k:  src ↦ k(src)     (kinds compose, each at most once)

The kinds and their defaults are OpusTrainer's: all nine at 0.1 when none is named; naming any selects only those
(``{Typos: 0.05, char_swap: 0.1}`` makes only character swaps). Each kind is typo's rule, ported: a position drawn
uniformly from its candidates (``\\w`` characters, pairs of them, spaces, non-spaces, doubled characters) and, for
extra/nearby/similar characters, a replacement from typo's keyboard tables (``keyboard.py``). Where the row has an
alignment, ``random_space``, ``skipped_space`` and ``missing_char`` are OpusTrainer's alignment-keeping variants
(their own candidates, links moved when a word splits, joins or disappears), ported too. One deliberate
difference: when ``missing_char`` deletes a one-character last word, OpusTrainer moves its links to the left or
right neighbour, and "right" is past the end (an out-of-range link); here they always go left.

Vectorised: the row's decision and the nine kind decisions for the whole table (``draws.uniform``); the string
work, for the rows with at least one kind, is per row in Python with ``re`` as typo does it (no package applies
typo's rules over a column). A row whose source comes out unchanged (say, ``unichar`` with no doubled character)
is not emitted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa

from tasks.robustness.draws import Stream, lane, row_states, uniform
from tasks.robustness.keyboard import neighbour, similar
from tasks.robustness.rows import Pairs, emit, format_pairs, parse_pairs, require_bitext, taken

KINDS = (
    "char_swap", "missing_char", "extra_char", "nearby_char", "similar_char",
    "skipped_space", "random_space", "repeated_char", "unichar",
)  # fmt: skip
DEFAULT = 0.1  # each kind's probability when none is named
_DOUBLE = re.compile(r"(.)\1")


def _at(pattern: re.Pattern[str], s: str) -> list[int]:
    return [m.start() for m in pattern.finditer(s)]


def _words(s: str) -> list[int]:
    """The positions ``re`` matches ``\\w`` at (``str.isalnum()`` or "_", the same set; 3x faster than finditer)."""
    return [i for i, c in enumerate(s) if c.isalnum() or c == "_"]


def _pairs(s: str) -> list[int]:
    """The positions of ``(?=\\w{2})``: a word character followed by another."""
    word = [c.isalnum() or c == "_" for c in s]
    return [i for i in range(len(s) - 1) if word[i] and word[i + 1]]


def _non_space(s: str) -> list[int]:
    """The positions ``re`` matches ``\\S`` at (``not str.isspace()``, the same set)."""
    return [i for i, c in enumerate(s) if not c.isspace()]


def char_swap(s: str, r: Stream) -> str:
    """Two consecutive word characters swapped, each taking the other's case."""
    if not (at := _pairs(s)):
        return s
    i = r.choice(at)
    first = s[i].upper() if s[i + 1].isupper() else s[i].lower()
    second = s[i + 1].upper() if s[i].isupper() else s[i + 1].lower()
    return s[:i] + second + first + s[i + 2 :]


def missing_char(s: str, r: Stream) -> str:
    """A word character deleted (not the only one)."""
    at = _words(s)
    if len(at) <= 1:
        return s
    i = r.choice(at)
    return s[:i] + s[i + 1 :]


def extra_char(s: str, r: Stream) -> str:
    """A keyboard neighbour of a word character inserted before it."""
    if not (at := _words(s)):
        return s
    i = r.choice(at)
    return s[:i] + neighbour(s[i], r) + s[i:]


def nearby_char(s: str, r: Stream) -> str:
    """A word character replaced by a keyboard neighbour, in its case."""
    if not (at := _words(s)):
        return s
    i = r.choice(at)
    near = neighbour(s[i], r)
    return s[:i] + (near.upper() if s[i].isupper() else near.lower()) + s[i + 1 :]


def similar_char(s: str, r: Stream) -> str:
    """A word character replaced by a look-alike."""
    if not (at := _words(s)):
        return s
    i = r.choice(at)
    return s[:i] + similar(s[i], r) + s[i + 1 :]


def skipped_space(s: str, r: Stream) -> str:
    """A space (U+0020) deleted."""
    if not (at := [i for i, c in enumerate(s) if c == " "]):
        return s
    i = r.choice(at)
    return s[:i] + s[i + 1 :]


def random_space(s: str, r: Stream) -> str:
    """A space inserted before a non-space character."""
    if not (at := _non_space(s)):
        return s
    i = r.choice(at)
    return s[:i] + " " + s[i:]


def repeated_char(s: str, r: Stream) -> str:
    """A word character doubled."""
    if not (at := _words(s)):
        return s
    i = r.choice(at)
    return s[:i] + s[i] + s[i:]


def unichar(s: str, r: Stream) -> str:
    """One character of a doubled pair deleted (pairs found left to right, not overlapping)."""
    if not (at := _at(_DOUBLE, s)):
        return s
    i = r.choice(at)
    return s[:i] + s[i + 1 :]


def random_space_aligned(s: str, links: Pairs, r: Stream) -> tuple[str, Pairs]:
    """``add_random_space_with_alignment``: a space before any non-space but the first; a split word's links go to
    both halves, later words' move up one."""
    at = _non_space(s)[1:]
    if not at:
        return s, links
    i = r.choice(at)
    keep = [m.end() for m in re.finditer(r"^\s*|\s+|$", s[: i + 1])]
    word = len(keep) - 2
    if i not in keep:
        links = [(a, b) for a, b in links if a <= word] + [(a + 1, b) for a, b in links if a >= word]
    return s[:i] + " " + s[i:], links


def skipped_space_aligned(s: str, links: Pairs, r: Stream) -> tuple[str, Pairs]:
    """``skip_random_space_with_alignment``: a whitespace character deleted (not first or last); where it was the
    only space between two words, they join and later words' links move down one."""
    if not (at := _at(re.compile(r"(?<!^)\s(?!$)"), s)):
        return s, links
    i = r.choice(at)
    joins = [m.start() for m in re.finditer(r"(?<=\S)\s\S", s)]
    if i in joins:
        word = joins.index(i)
        links = [(a if a <= word else a - 1, b) for a, b in links]
    return s[:i] + s[i + 1 :], links


def missing_char_aligned(s: str, links: Pairs, r: Stream) -> tuple[str, Pairs]:
    """``missing_char_with_alignment``: a non-space character deleted (not the only one); a one-character word that
    disappears hands its links to a neighbour (the left one for the last word, see the module docstring)."""
    at = _non_space(s)
    if len(at) <= 1:
        return s, links
    i = r.choice(at)
    spans = [m.span() for m in re.finditer(r"\S+", s)]
    word = next((w for w, (a, b) in enumerate(spans) if a <= i < b and b - a == 1), None)
    if word is not None:
        options = ([-1] if word != 0 else []) + ([0] if word != len(spans) - 1 or word == 0 else [])
        shift = r.choice(options)
        links = [(a + shift if a == word else a - (a > word), b) for a, b in links]
    return s[:i] + s[i + 1 :], links


APPLY: dict[str, Callable[[str, Stream], str]] = {
    "char_swap": char_swap, "missing_char": missing_char, "extra_char": extra_char, "nearby_char": nearby_char,
    "similar_char": similar_char, "skipped_space": skipped_space, "random_space": random_space,
    "repeated_char": repeated_char, "unichar": unichar,
}  # fmt: skip
ALIGNED = {"random_space": random_space_aligned, "skipped_space": skipped_space_aligned, "missing_char": missing_char_aligned}


def typo_kinds(kinds: Mapping[str, float] | None) -> dict[str, float]:
    """The kinds OpusTrainer applies, in order: those named, else all nine at ``DEFAULT``."""
    return dict(kinds) if kinds else dict.fromkeys(KINDS, DEFAULT)


def decisions(states: np.ndarray, p: float, kinds: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """(the rows with uniform(row, 0) < p, and for those a bool matrix: row × kind applied, kinds in ``kinds`` order)."""
    chosen = np.flatnonzero(uniform(states, 0) < p)
    column_of = np.array([1 + KINDS.index(k) for k in kinds], dtype=np.uint64)
    draws = uniform(states[chosen][:, None], column_of[None, :])
    return chosen, draws < np.array(list(kinds.values()))[None, :]


def typo_row(s: str, links: Pairs | None, applied: list[str], stream: Stream) -> tuple[str, Pairs | None]:
    """Apply ``applied`` kinds in order to one source (and its links, if it has them)."""
    for kind in applied:
        if links is not None and kind in ALIGNED:
            s, links = ALIGNED[kind](s, links, stream)
        else:
            s = APPLY[kind](s, stream)
    return s, links


def typos(rows: pa.Table, *, p: float, seed: int = 0, kinds: Mapping[str, float] | None = None) -> pa.Table:
    """``Typos``: typo kinds applied to the source of the rows with uniform(row, 0) < p (needs uid, src, tgt; keeps
    and moves ``links`` if the table has them). ``kinds``: {kind: probability} in order; None: all nine at 0.1."""
    require_bitext(rows, modifier="Typos")
    use = typo_kinds(kinds)
    unknown = [k for k in use if k not in KINDS]
    if unknown:
        raise ValueError(f"Typos: unknown kind {unknown[0]!r}, expected one of {', '.join(KINDS)}")
    states = row_states(rows["uid"], seed=seed, modifier="Typos")
    chosen, applied = decisions(states, p, use)
    some = applied.any(axis=1)
    index, applied = chosen[some], applied[some]
    take = pa.array(index, pa.int64())
    sources = taken(rows, "src", take).to_pylist()
    old_links = taken(rows, "links", take).to_pylist() if "links" in rows.column_names else [None] * len(index)
    names = list(use)
    new_src, new_links = [], []
    for i, s, text, row_applied in zip(index.tolist(), sources, old_links, applied.tolist(), strict=True):
        here = [k for k, a in zip(names, row_applied, strict=True) if a]
        pairs = parse_pairs(text) if text is not None and any(k in ALIGNED for k in here) else None  # else: not read
        out, moved = typo_row(s, pairs, here, Stream(int(states[i]), lane(1)))
        new_src.append(out)
        new_links.append(text if moved == pairs else format_pairs(moved))
    tgt = taken(rows, "tgt", take)
    params = {"p": p, **use}
    return emit(
        rows,
        index,
        src=new_src,
        tgt=tgt,
        links=new_links if "links" in rows.column_names else None,
        modifier="Typos",
        params=params,
    )
