"""The `tokenize` stage: text columns replaced by their word tokens, per shard (``models.word_tokenizer``).

Its artifact is what self-training's aligner, lexicon, word uncertainty and LMs read: the same rows,
``uid``, ``source`` and ``line`` as its input, each configured column tokenised and joined by one space.
The views keep the original text (``sampled_mono`` and ``synthetic`` are taken from the untokenised
artifacts); a row's tokens are found by its uid in this artifact. Mapped, so a process task runner runs
the pure-Python Moses tokeniser on every core.
"""

from __future__ import annotations

import pyarrow as pa

from conf.errors import InputError
from conf.sections.tokenizer import DEFAULT_PATTERN
from models.word_tokenizer import Kind, word_tokenize
from tasks.runtime.stage import Stage


def tokenize_columns(
    rows: pa.Table,
    *,
    langs: dict[str, str],
    kind: Kind = "moses",
    aggressive_dash_splits: bool = False,
    pattern: str = DEFAULT_PATTERN,
) -> pa.Table:
    """``rows`` with each column of ``langs`` (column -> language) tokenised; every other column as it was."""
    for column, lang in langs.items():
        if column not in rows.column_names:
            raise InputError(f"tokenize: no column {column!r} to tokenise (the rows have {rows.column_names})")
        tokens = word_tokenize(rows[column], kind=kind, lang=lang, aggressive_dash_splits=aggressive_dash_splits, pattern=pattern)
        rows = rows.set_column(rows.column_names.index(column), column, tokens)
    return rows


TOKENIZE = Stage("tokenize", "1", tokenize_columns)
