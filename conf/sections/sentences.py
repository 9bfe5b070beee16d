"""A dataset's ``split_sentences`` and ``language`` (the stage: tasks/ingest/sentences.py), checked when the profile loads.

``split_sentences: true`` is for kind ``mono`` only; ``language`` must be one the splitter (the
`sentence-splitter` package, Moses' split-sentences) has non-breaking prefixes for, and is checked only then.
"""

from __future__ import annotations

import functools
from importlib.resources import files
from typing import Annotated

from pydantic import AfterValidator, ValidationInfo


@functools.cache
def splitter_languages() -> tuple[str, ...]:
    """The languages the splitter knows: its ``non_breaking_prefixes/<language>.txt`` files."""
    prefixes = files("sentence_splitter") / "non_breaking_prefixes"
    return tuple(sorted(p.name.removesuffix(".txt") for p in prefixes.iterdir() if p.name.endswith(".txt")))


@functools.cache
def check_language(language: str) -> str:
    """``language`` if the splitter accepts it (it is the judge: it raises SentenceSplitterException), else
    ValueError listing the languages it has."""
    from sentence_splitter import SentenceSplitter, SentenceSplitterException

    try:
        SentenceSplitter(language=language)
    except SentenceSplitterException:
        raise ValueError(
            f"the sentence splitter has no non-breaking prefixes for this language; expected one of "
            f"{', '.join(splitter_languages())}"
        ) from None
    return language


def _mono_only(split: bool, info: ValidationInfo) -> bool:
    kind = info.data.get("kind")  # absent when `kind` itself is wrong: that error is reported
    if split and kind is not None and kind != "mono":
        raise ValueError(f"splits the lines of a `mono` dataset into sentences; this one is kind {kind!r}")
    return split


def _language_when_split(language: str, info: ValidationInfo) -> str:
    return check_language(language) if info.data.get("split_sentences") else language


SplitSentences = Annotated[bool, AfterValidator(_mono_only)]
Language = Annotated[str, AfterValidator(_language_when_split)]
