"""How a dataset's bytes become text: ``encoding`` (a checked Python codec) and ``on_decode_error``, each one
value or one per side of a bitext (``{src: utf-8, tgt: latin-1}``: `SideEncodings`, `SideErrors`).

Their defaults (utf-8, reject) are left out of a dataset's dump (`InputConf`), so the read stage's
fingerprint, a hash of that dump, is what it was before the keys existed: a cache keeps its reads. So are
those of ``split_sentences`` and ``language`` (conf/sections/sentences.py), which the read leaves out in any case.
A per-side value whose sides agree is that one value (``{src: utf-8, tgt: utf-8}`` is ``utf-8``): one
setting, one fingerprint.

Per side applies to a bitext in ``text`` (two files), ``tsv`` (each column decoded with its side's codec:
fields are split on the tab byte first, which every accepted codec writes as the single byte 0x09),
``parquet`` and ``hf`` (binary columns). It is refused for ``jsonl``: a line there is one JSON document
holding both sides, decoded as a whole before it is parsed, so its bytes have one encoding; recode one
side with iconv instead. Other kinds have no sides.
"""

from __future__ import annotations

import codecs
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Discriminator,
    SerializerFunctionWrapHandler,
    Tag,
    model_serializer,
    model_validator,
)

from conf.base import ConfModel

DEFAULTS = {
    "encoding": "utf-8",
    "on_decode_error": "reject",
    "split_sentences": False,
    "language": "en",
    "clean": None,
    "src_lang": None,
    "tgt_lang": None,
}  # clean: conf/sections/cleaning.py; src_lang, tgt_lang: conf/sections/filters.py
SIDES = ("src", "tgt")


def canonical_encoding(name: str) -> str:
    """``name``'s canonical codec name (``UTF8`` is ``utf-8``, ``latin-1`` is ``iso8859-1``), if it writes tab, CR
    and LF as those ASCII bytes: lines are split on the byte 0x0A before they are decoded."""
    try:
        canonical = codecs.lookup(name).name
        ascii_controls = "\t\r\n".encode(canonical) == b"\t\r\n"
    except (LookupError, UnicodeError):
        raise ValueError("unknown encoding; expected a Python codec name (utf-8, latin-1, cp1252, ...)") from None
    if not ascii_controls:  # UTF-16/32, or a codec that writes a BOM first (utf-8-sig)
        raise ValueError(
            "expected an encoding that writes tab and newline as single ASCII bytes (lines are split on "
            "the byte 0x0A; recode UTF-16 or UTF-32 to UTF-8 with iconv)"
        )
    return canonical


Encoding = Annotated[str, AfterValidator(canonical_encoding)]
DecodeError = Literal["reject", "replace"]


class SideEncodings(ConfModel):
    """``encoding: {src: ..., tgt: ...}``: a bitext whose sides are in different encodings; a side left out is utf-8."""

    src: Encoding = "utf-8"
    tgt: Encoding = "utf-8"


class SideErrors(ConfModel):
    """``on_decode_error: {src: ..., tgt: ...}``; a side left out rejects."""

    src: DecodeError = "reject"
    tgt: DecodeError = "reject"


def _one_if_equal(value: Any) -> Any:
    """A per-side value whose sides agree, as that one value (one setting, one fingerprint)."""
    return value.src if isinstance(value, (SideEncodings, SideErrors)) and value.src == value.tgt else value


def _shape(value: Any) -> str:
    """Which form a value has: a mapping is per side (its errors then name ``src``/``tgt``), else one value."""
    return "[per side]" if isinstance(value, (dict, SideEncodings, SideErrors)) else "[one value]"


Encodings = Annotated[
    Annotated[Encoding, Tag("[one value]")] | Annotated[SideEncodings, Tag("[per side]")],
    Discriminator(_shape),
    AfterValidator(_one_if_equal),
]
DecodeErrors = Annotated[
    Annotated[DecodeError, Tag("[one value]")] | Annotated[SideErrors, Tag("[per side]")],
    Discriminator(_shape),
    AfterValidator(_one_if_equal),
]


class InputConf(ConfModel):
    """The base of a dataset's section: its dump leaves the keys of ``DEFAULTS`` out at their defaults; ``codec``
    and ``on_error`` give a side's setting. Its subclass declares ``kind``, ``format``, ``encoding`` and
    ``on_decode_error``."""

    def codec(self, side: str | None = None) -> str:
        """The encoding of ``side`` (src, tgt; another field or None: the source's, the one of a whole line)."""
        enc: Any = self.encoding
        return enc if isinstance(enc, str) else getattr(enc, side if side in SIDES else "src")

    def on_error(self, side: str | None = None) -> str:
        """``on_decode_error`` of ``side``, as ``codec``."""
        err: Any = self.on_decode_error
        return err if isinstance(err, str) else getattr(err, side if side in SIDES else "src")

    def per_side(self) -> bool:
        """Whether the sides are decoded differently (``encoding`` or ``on_decode_error`` given per side)."""
        return not isinstance(self.encoding, str) or not isinstance(self.on_decode_error, str)

    @model_validator(mode="after")
    def _sides_of_a_bitext(self) -> InputConf:
        kind, fmt = getattr(self, "kind", None), getattr(self, "format", None)
        for key in ("encoding", "on_decode_error"):
            if isinstance(getattr(self, key, None), str):
                continue
            if kind != "bitext":
                raise ValueError(
                    f"{key}: {{src: ..., tgt: ...}} is for a bitext's two sides; this dataset is kind {kind!r}: give one value"
                )
            if fmt == "jsonl":
                raise ValueError(
                    f"{key}: {{src: ..., tgt: ...}} cannot apply to jsonl, where a line is one JSON "
                    "document holding both sides, decoded as a whole. Hint: give one value, or recode "
                    "one side with iconv"
                )
        return self

    @model_serializer(mode="wrap")
    def _defaults_left_out(self, dump: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = dump(self)
        for key, default in DEFAULTS.items():
            if key in out and out[key] == default:  # (a dump may leave a key out itself: exclude=)
                del out[key]
        return out
