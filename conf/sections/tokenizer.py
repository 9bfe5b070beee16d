"""How self-training splits words for the aligner, the lexicon, word uncertainty and the n-gram LMs.

``moses`` (the default for a new profile) is sacremoses' port of the Moses tokenizer, with a language
per side, both required: its rules differ by language (German keeps the ordinal "3." whole, English splits it
off), so a default would tokenise one side with the other's rules without a word (issue 26); ``regex`` keeps
the matches of one pattern; ``whitespace`` takes the text as already tokenised
(the thesis aligned tokenised text: on raw text "dog." and "dog" are two words).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from conf.base import ConfModel

# numbers with their inner separators (3.50, 1,000), words with inner hyphens and apostrophes
# (well-known, don't, l'homme), else any one character that is neither a word character nor space
DEFAULT_PATTERN = r"\d+(?:[.,]\d+)*|\w+(?:[-'’]\w+)*|[^\w\s]"
LANG = r"^[a-z]{2,3}$"


class TokenizerConf(ConfModel):
    """The word tokeniser of ``self_training``. Languages are ISO 639-1 codes (``en``, ``de``); the
    monolingual data is in the source language. Tokens are joined by one space; the views keep the text."""

    kind: Literal["whitespace", "moses", "regex"] = "moses"
    src_lang: str | None = Field(None, pattern=LANG)  # moses: the bitext's source language (also the mono data's)
    tgt_lang: str | None = Field(None, pattern=LANG)  # moses: the bitext's target language
    aggressive_dash_splits: bool = False  # moses -a: "well-known" -> "well @-@ known"
    pattern: str = DEFAULT_PATTERN  # regex: every match is a token, the rest is dropped

    def languages(self) -> dict[str, str]:
        """``{"src": src_lang, "tgt": tgt_lang}``; ValueError (the dotted key first) when moses lacks one. Another
        kind ignores them: en where unset, as they were before they became required (its fingerprints stand)."""
        missing = [k for k in ("src_lang", "tgt_lang") if getattr(self, k) is None]
        if self.kind == "moses" and missing:
            raise ValueError(
                f"self_training.tokenizer.{missing[0]}: kind moses needs the language of each side "
                "(its rules differ per language); expected e.g. {kind: moses, src_lang: en, tgt_lang: de}"
            )
        return {"src": self.src_lang or "en", "tgt": self.tgt_lang or "en"}

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            compiled = re.compile(pattern)
        except re.error as e:
            raise ValueError(f"not a Python regular expression: {e}") from None
        if compiled.match(""):
            raise ValueError("the pattern matches the empty string, so it would make empty tokens")
        return pattern
