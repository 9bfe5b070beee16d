"""Word tokenisation of a text column: Moses (sacremoses), a regular expression, or whitespace.

    word_tokenize(texts, kind="moses", lang="en") -> the tokens of each row joined by one space

The output is what ``models.lexicon.tokenize`` splits on whitespace, so the aligner, the lexicon, word
uncertainty and the LMs see exactly these tokens. ``moses`` is sacremoses' ``MosesTokenizer`` with
``escape=False`` (a token stays the text's characters: "&" is not "&amp;", so a token can be found in
the sentence again); it is pure Python, so it scales by running per shard in worker processes (a mapped
stage on a process task runner). Only the column loop is written here; the tokenisers are the packages'.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)

Kind = Literal["whitespace", "moses", "regex"]


@functools.cache
def moses(lang: str):
    """One ``MosesTokenizer`` per language and process (loading its prefix lists is the slow part)."""
    from sacremoses import MosesTokenizer
    from sacremoses.corpus import NonbreakingPrefixes

    if lang not in NonbreakingPrefixes().available_langs:  # the Perl tokenizer warns the same way and goes on
        log.warning(
            "moses tokenizer: no non-breaking prefixes for language %r; abbreviations such as 'Mr.' "
            "lose their full stop as a token of their own",
            lang,
        )
    return MosesTokenizer(lang=lang)


def word_tokenize(
    texts: pa.Array | pa.ChunkedArray,
    *,
    kind: Kind = "moses",
    lang: str = "en",
    aggressive_dash_splits: bool = False,
    pattern: str | None = None,
) -> pa.Array:
    """The tokens of every row joined by single spaces (a null row stays null, an empty row is "")."""
    arr = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    if kind == "whitespace":
        return pc.binary_join(pc.utf8_split_whitespace(pc.utf8_trim_whitespace(arr)), " ")
    if kind == "moses":
        tok = moses(lang)

        def one(text: str) -> str:
            return tok.tokenize(text, escape=False, aggressive_dash_splits=aggressive_dash_splits, return_str=True)
    elif kind == "regex":
        if pattern is None:
            raise ValueError("word_tokenize: kind 'regex' needs a pattern")
        compiled = re.compile(pattern)

        def one(text: str) -> str:
            return " ".join(m.group(0) for m in compiled.finditer(text))  # whole matches, groups or not
    else:
        raise ValueError(f"word_tokenize: unknown kind {kind!r} (whitespace, moses or regex)")
    return pa.array([None if t is None else one(t) for t in arr.to_pylist()], pa.string())
