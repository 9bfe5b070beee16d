"""How a dataset's bytes become text: ``encoding`` (a checked Python codec) and ``on_decode_error``.

Their defaults (utf-8, reject) are left out of a dataset's dump (`InputConf`), so the read stage's
fingerprint, a hash of that dump, is what it was before the keys existed: a cache keeps its reads. So are
those of ``split_sentences`` and ``language`` (conf/sentences.py), which the read leaves out in any case.
"""

from __future__ import annotations

import codecs
from typing import Annotated, Any

from pydantic import AfterValidator, SerializerFunctionWrapHandler, model_serializer

from conf.base import ConfModel

DEFAULTS = {"encoding": "utf-8", "on_decode_error": "reject", "split_sentences": False, "language": "en"}


def canonical_encoding(name: str) -> str:
    """``name``'s canonical codec name (``UTF8`` is ``utf-8``, ``latin-1`` is ``iso8859-1``), if it writes tab, CR
    and LF as those ASCII bytes: lines are split on the byte 0x0A before they are decoded."""
    try:
        canonical = codecs.lookup(name).name
        ascii_controls = "\t\r\n".encode(canonical) == b"\t\r\n"
    except (LookupError, UnicodeError):
        raise ValueError("unknown encoding; expected a Python codec name (utf-8, latin-1, cp1252, ...)") from None
    if not ascii_controls:  # UTF-16/32, or a codec that writes a BOM first (utf-8-sig)
        raise ValueError("expected an encoding that writes tab and newline as single ASCII bytes (lines are split on "
                         "the byte 0x0A; recode UTF-16 or UTF-32 to UTF-8 with iconv)")
    return canonical


Encoding = Annotated[str, AfterValidator(canonical_encoding)]


class InputConf(ConfModel):
    """The base of a dataset's section: its dump leaves the keys of ``DEFAULTS`` out at their defaults."""

    @model_serializer(mode="wrap")
    def _defaults_left_out(self, dump: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = dump(self)
        for key, default in DEFAULTS.items():
            if out.get(key) == default:
                del out[key]
        return out
